"""Collective-communication algorithms and their alpha-beta-gamma cost models: the :class:`Collective` model
(``model``), its registry and lookups (``catalog``), and the registered entries (``algorithms``, ``bounds``,
then ``library_algorithms``: what a collective library runs that the textbook list lacks).
"""

from __future__ import annotations

from .algorithms import POW2, THAKUR
from .bounds import CHAN

# isort: split
from . import library_algorithms  # noqa: F401  (registers gloo's and MPICH's algorithms after the others)
from .catalog import COLLECTIVES, collective, collectives, lower_bound
from .model import PRIMITIVES, TOPOLOGIES, Collective, Domain, Param

__all__ = [
    "CHAN",
    "COLLECTIVES",
    "POW2",
    "PRIMITIVES",
    "THAKUR",
    "TOPOLOGIES",
    "Collective",
    "Domain",
    "Param",
    "collective",
    "collectives",
    "lower_bound",
]
