"""Errors raised by commscope's math layers.

Every error names the bad value and what is allowed, so that the CLI can print it as one line.
"""

from __future__ import annotations

from collections.abc import Iterable


class CommscopeError(ValueError):
    """Base class of commscope's input errors (a ``ValueError``: bad input, not a bug)."""


class UnknownNameError(CommscopeError, LookupError):
    """A name that is not in a registry; the message lists the valid names."""

    def __init__(self, kind: str, name: object, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} {name!r}; valid names: {', '.join(self.valid)}")

    def __str__(self) -> str:  # LookupError would quote the message like a key
        return str(self.args[0])


class DomainError(CommscopeError):
    """A point (p, n, parameters) outside the domain of a formula, e.g. p not a power of two."""


class WriteError(CommscopeError, OSError):
    """A file that could not be written (full disk, read-only file system, ...): an ``OSError`` as well, and
    the message says whether the old file was kept."""
