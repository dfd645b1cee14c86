"""The algorithms a fit should price, as the records' backend runs them.

Validation and calibration name the textbook algorithms (``ring_allreduce,ring_allgather``); a backend may run
one of them differently. PyTorch's gloo backend runs gloo's ring allgather, whose two half-blocks cross one
after another at p = 2 (``costmodels`` ``gloo_ring_allgather``, derived in
``costmodels/collectives/library_algorithms.py``); NCCL runs the ring as written. A fit of gloo records with
the textbook ring would take p = 2's 1.5x for a slower link. Its ring allreduce sends one segment per step
instead of two below 2p elements (``gloo_ring_allreduce``): the textbook ring would pull alpha down by the
sweep's 16-byte calls (8-15% on the four-rank runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: backend -> {textbook algorithm: the algorithm that backend runs in its place}
RUN_BY: dict[str, dict[str, str]] = {"gloo": {"ring_allgather": "gloo_ring_allgather",
                                             "ring_allreduce": "gloo_ring_allreduce"}}


def records_backend(records: Iterable[Mapping[str, Any]]) -> str | None:
    """The one backend of the collective records (``run.backend``), or None when they name none or several."""
    found = {str((r.get("run") or {}).get("backend")) for r in records if r.get("kind") == "collective"}
    return found.pop() if len(found) == 1 and "None" not in found else None


def as_run_by(algorithm: str | None, backend: str | None) -> str | None:
    """``algorithm`` (comma-separated names, ``auto`` or None) with each textbook name the backend runs
    differently replaced by what it runs; unchanged for other backends."""
    swap = RUN_BY.get(backend or "", {})
    if algorithm is None or not swap:
        return algorithm
    return ",".join(swap.get(x.strip(), x.strip()) for x in algorithm.split(","))
