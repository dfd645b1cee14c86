"""Algorithms that a collective library runs and the textbook list lacks, registered after the others.

``ring_reduce`` is gloo's reduce; ``recursive_doubling_allreduce_general`` and ``rabenseifner_reduce``
are MPICH's short-message allreduce for any p and its long-message reduce (:mod:`costmodels.libraries`
chooses among them by each library's rules).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import alpha, beta, flg, gamma, lg, n, p
from .algorithms import POW2, THAKUR
from .catalog import _add

_f = (p - 1) / p
_not_pow2 = sp.Min(p - 2 ** flg(p), 1)  # 0 when p is a power of two, 1 otherwise

_add(
    name="ring_reduce", primitive="reduce",
    expr=2 * (p - 1) * alpha + 2 * _f * n * beta + _f * n * gamma,
    source="gloo reduce.cc (facebookincubator/gloo cc441984, reduce.cc 61-82): a ring reduce-scatter "
           "((p-1) alpha + (p-1)/p n (beta + gamma), Thakur et al. 2005 Sec. 4.3), then every rank sends its "
           "n/p block to the root, which receives the p-1 blocks over its one link ((p-1) (alpha + n/p beta)); "
           "derived here",
    description="ring reduce-scatter, then each rank sends its reduced n/p block to the root (gloo's reduce)",
)
_add(
    name="recursive_doubling_allreduce_general", primitive="allreduce",
    expr=flg(p) * (alpha + n * beta + n * gamma) + _not_pow2 * (2 * alpha + 2 * n * beta + n * gamma),
    source=f"MPICH 3.2 src/mpi/coll/allreduce.c (recursive doubling with the rem = p - p' extra ranks), after "
           f"{THAKUR}, Sec. 4.4: the extra ranks first send their vectors to a partner, which reduces them "
           "(alpha + n beta + n gamma), lg p' steps of recursive doubling on p' = 2^floor(lg p) ranks, then the "
           "partners send the result back (alpha + n beta); derived here",
    description="recursive doubling on the largest power of two p' <= p; the p-p' extra ranks fold in first "
                "and receive the result at the end (MPICH's short-message allreduce)",
)
_add(
    name="rabenseifner_reduce", primitive="reduce",
    expr=2 * lg(p) * alpha + 2 * _f * n * beta + _f * n * gamma,
    domain=POW2,
    source=f"{THAKUR}, Sec. 4.2 (Rabenseifner's reduce: reduce-scatter by recursive halving, "
           "lg p alpha + (p-1)/p n (beta + gamma), then a binomial gather to the root, lg p alpha + (p-1)/p n beta); "
           "MPICH 3.2 src/mpi/coll/reduce.c (reduce_scatter_gather) for long messages",
    description="reduce-scatter by recursive halving, then a binomial gather of the blocks to the root",
)
