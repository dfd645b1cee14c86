"""Collective libraries: what NCCL, gloo and MPICH really run for each message, and what it costs
(``core``: the registry, :func:`choose` and the pricer schedules use; ``nccl`` with ``nccl_constants``;
``registered``: ``ideal``, ``gloo`` and ``mpich``, which choose among the registered algorithms)."""

from __future__ import annotations

from .core import LIBRARIES, Choice, Library, Option, Pricer, choice_bands, choose, libraries, library, resolve

# isort: split
from . import registered  # noqa: F401  (ideal, gloo, mpich)

# isort: split
from . import nccl  # noqa: F401

__all__ = ["LIBRARIES", "Choice", "Library", "Option", "Pricer", "choice_bands", "choose", "libraries", "library",
           "resolve"]
