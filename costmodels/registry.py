"""A small name -> entry registry, one per concept (collectives, environments, schedules, ...).

Entries are declarative objects with a ``name`` attribute. Lookup is case-insensitive; an
unknown name raises :class:`~costmodels.errors.UnknownNameError` listing the valid names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar


class _Named(Protocol):
    name: str


T = TypeVar("T", bound=_Named)


class Registry(Generic[T]):
    """Ordered registry of named entries of one kind (``kind`` appears in error messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, entry: T) -> T:
        key = entry.name.lower()
        if key in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} is registered twice")
        self._entries[key] = entry
        return entry

    def get(self, name: str) -> T:
        from .errors import CommscopeError, UnknownNameError

        if not isinstance(name, str):
            raise CommscopeError(f"{self.kind} name must be a string, got {name!r}")
        try:
            return self._entries[name.lower()]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self, where: Callable[[T], bool] | None = None) -> list[str]:
        return [e.name for e in self._entries.values() if where is None or where(e)]

    def entries(self, where: Callable[[T], bool] | None = None) -> list[T]:
        return [e for e in self._entries.values() if where is None or where(e)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._entries

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)
