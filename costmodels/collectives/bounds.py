"""Lower bounds of the primitives: no algorithm on p single-ported ranks can be faster.

Registered in :data:`COLLECTIVES` after the algorithms, as ``lower_bound_<primitive>``.
"""

from __future__ import annotations

from ..symbols import alpha, beta, clg, gamma, n, p
from .algorithms import _f
from .catalog import _add

# Lower bounds (Chan, Heimlich, Purkayastha, van de Geijn, 'Collective communication: theory,
# practice, and experience', CCPE 19(13), 2007, Sec. 2 / Table 1).
CHAN = "Chan, Heimlich, Purkayastha, van de Geijn, CCPE 19(13), 2007, Table 1"
_add(
    name="lower_bound_allreduce", primitive="allreduce", topology="bound",
    expr=clg(p) * alpha + 2 * _f * n * beta + _f * n * gamma,
    source=CHAN, description="no allreduce on p single-ported ranks can be faster",
)
_add(
    name="lower_bound_reduce_scatter", primitive="reduce_scatter", topology="bound",
    expr=clg(p) * alpha + _f * n * beta + _f * n * gamma,
    source=CHAN, description="no reduce-scatter on p single-ported ranks can be faster",
)
_add(
    name="lower_bound_allgather", primitive="allgather", topology="bound",
    expr=clg(p) * alpha + _f * n * beta,
    source=CHAN, description="no allgather on p single-ported ranks can be faster",
)
_add(
    name="lower_bound_all_to_all", primitive="all_to_all", topology="bound",
    expr=clg(p) * alpha + _f * n * beta,
    source=f"{CHAN} (latency: ceil(lg p) rounds; bandwidth: (p-1)/p n leaves every rank)",
    description="no all-to-all on p single-ported ranks can be faster",
)
