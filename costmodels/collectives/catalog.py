"""Registry of collective-communication algorithms with their alpha-beta-gamma cost models.

Every entry is a :class:`~costmodels.collectives.model.Collective`; the entries themselves are
defined in ``algorithms`` (the algorithms) and ``bounds`` (the lower bounds), which register them
here through :func:`_add` when the package imports them.
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry
from .model import PRIMITIVES, Collective

COLLECTIVES: Registry[Collective] = Registry("collective algorithm")


def _add(**kwargs: Any) -> Collective:
    return COLLECTIVES.register(Collective(**kwargs))


def collectives(primitive: str | None = None, *, include_bounds: bool = True) -> list[str]:
    """Names of the registered collective algorithms (optionally of one primitive)."""
    if primitive is not None and primitive not in PRIMITIVES:
        from ..errors import UnknownNameError

        raise UnknownNameError("primitive", primitive, PRIMITIVES)
    return COLLECTIVES.names(
        lambda c: (primitive is None or c.primitive == primitive) and (include_bounds or not c.is_lower_bound)
    )


def collective(name: str) -> Collective:
    """The registered collective algorithm called ``name``."""
    return COLLECTIVES.get(name)


def lower_bound(primitive: str) -> Collective:
    """The lower-bound entry of a primitive (allreduce, reduce_scatter, allgather, all_to_all)."""
    bounds = {c.primitive: c for c in COLLECTIVES if c.is_lower_bound}
    if primitive not in bounds:
        from ..errors import UnknownNameError

        raise UnknownNameError("primitive with a lower bound", primitive, bounds)
    return bounds[primitive]
