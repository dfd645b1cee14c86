"""The collective primitives and what a message size ``n`` means for each (nccl-tests' conventions).

Kept apart from :mod:`costmodels.collectives` so that :mod:`costmodels.environment` can name them too.
"""

from __future__ import annotations

PRIMITIVES: dict[str, str] = {
    "allreduce": "n = bytes of the buffer every rank holds and receives reduced",
    "reduce_scatter": "n = bytes of the whole input buffer; each rank keeps n/p reduced",
    "allgather": "n = bytes of the whole output buffer; each rank contributes n/p",
    "broadcast": "n = bytes sent from the root to every rank",
    "reduce": "n = bytes every rank contributes, reduced at the root",
    "all_to_all": "n = bytes each rank sends in total (n/p to every rank)",
    "sparse_allgather": "n = dense gradient bytes; each rank sends rho*n value bytes plus indices",
    "gossip": "n = model bytes each rank exchanges with every neighbour",
}
"""The primitives, with what ``n`` means for each (nccl-tests' conventions)."""
