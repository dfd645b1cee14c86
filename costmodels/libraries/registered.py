"""Libraries that choose among the registered collective algorithms: ``ideal``, ``gloo`` and ``mpich``.

Each prices the algorithm it picks with that algorithm's formula (:mod:`costmodels.collectives`); what
differs is the rule. ``ideal`` takes the cheapest of them all at every size (commscope's behaviour before
libraries were modelled; no real library does it). ``gloo`` runs one algorithm per primitive whatever the
size. ``mpich`` switches by message size and p at the thresholds MPICH 3.2 documents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..analysis import default_candidates
from ..collectives import PRIMITIVES, collective
from ..errors import CommscopeError
from .core import Library, Option, register, registered_option

# -------------------------------------------------------------------------------------------- ideal


def _ideal_options(primitive: str, p: Any, env: Any, params: Mapping[str, Any]) -> list[Option]:
    names = default_candidates(primitive)
    known = {q.name for x in names for q in collective(x).params}
    unknown = set(params) - known
    if unknown:
        raise CommscopeError(f"no candidate of {primitive} has parameter(s) {', '.join(sorted(unknown))}")
    return [registered_option(x, p, env, params) for x in names]


register(Library(
    name="ideal",
    description="the cheapest registered algorithm at every size (no real library chooses so)",
    source="commscope: min over costmodels.collectives of each primitive (lower bounds and algorithms needing "
           "extra nodes left out)",
    primitives=tuple(PRIMITIVES),
    options=_ideal_options,
))

# --------------------------------------------------------------------------------------------- gloo
GLOO = {
    "allreduce": "gloo_ring_allreduce",
    "allgather": "gloo_ring_allgather",
    "reduce_scatter": "allreduce_reduce_scatter",
    "broadcast": "binomial_broadcast",
    "reduce": "ring_reduce",
    "all_to_all": "pairwise_all_to_all",
    "sparse_allgather": "topk_sparse_allgather",
}


def _gloo_options(primitive: str, p: Any, env: Any, params: Mapping[str, Any]) -> list[Option]:
    return [registered_option(GLOO[primitive], p, env, params)]


register(Library(
    name="gloo",
    description="gloo, as PyTorch's gloo backend runs it: one algorithm per primitive, whatever the size",
    source="facebookincubator/gloo (cc441984): allreduce.cc 134-141 (ring unless another algorithm is asked "
           "for; PyTorch's ProcessGroupGloo never asks), allgather.cc 27-90 (ring; at p = 2 its "
           "halves cross one after another behind the tcp pair's recv notices, library_algorithms.py), "
           "broadcast.cc 44-80 (binomial tree), reduce.cc 61-82 (ring reduce-scatter, then blocks to the root); "
           "reduce_scatter measured as a whole-buffer allreduce with torch 2.13 (commscope validate, "
           "runners/reference/validation)",
    primitives=tuple(GLOO),
    options=_gloo_options,
))

# -------------------------------------------------------------------------------------------- mpich
ALLREDUCE_SHORT = 2048  # MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE (allreduce.c 14-17)
ALLGATHER_SHORT, ALLGATHER_LONG = 81920, 524288  # MPIR_CVAR_ALLGATHER_{SHORT,LONG}_MSG_SIZE (allgather.c 14-29)
BCAST_MIN_PROCS, BCAST_SHORT, BCAST_LONG = 8, 12288, 524288  # MPIR_CVAR_BCAST_* (bcast.c 15-58)
REDUCE_SHORT = 2048  # MPIR_CVAR_REDUCE_SHORT_MSG_SIZE
REDUCE_SCATTER_LONG = 524288  # MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE (red_scat.c 15-18)
ALLTOALL_SHORT, ALLTOALL_MIN_PROCS = 256, 8  # MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE, ..._BRUCK_MIN_PROCS
ELEMENT_BYTES = 4  # MPICH compares counts of elements with p: float32 assumed

MPICH = {  # the options of each primitive, in the order the rules below index them
    "allreduce": ("recursive_doubling_allreduce_general", "rabenseifner_allreduce_general"),
    "allgather": ("recursive_doubling_allgather", "bruck_allgather", "ring_allgather"),
    "broadcast": ("binomial_broadcast", "scatter_allgather_broadcast"),
    "reduce_scatter": ("recursive_halving_reduce_scatter", "ring_reduce_scatter"),
    "reduce": ("binomial_reduce", "rabenseifner_reduce"),
    "all_to_all": ("bruck_all_to_all", "pairwise_all_to_all"),
}


def _pow2(p: Any) -> np.ndarray:
    q = np.asarray(p, dtype=np.int64)
    return (q & (q - 1)) == 0


def _floor_pow2(p: Any) -> np.ndarray:
    return 2 ** np.floor(np.log2(np.asarray(p, dtype=np.float64)))


def _mpich_select(primitive: str, n: np.ndarray, p: Any, shape: tuple[int, ...]) -> np.ndarray:
    """MPICH 3.2's default choice (the files and lines are named at each threshold above)."""
    n = np.broadcast_to(n, shape)
    pow2 = np.broadcast_to(_pow2(p), shape)
    if primitive == "allreduce":  # recursive doubling if short or fewer elements than p' (allreduce.c 388-399)
        short = (n <= ALLREDUCE_SHORT) | (n / ELEMENT_BYTES < _floor_pow2(p))
        return np.where(short, 0, 1)
    if primitive == "allgather":  # allgather.c 157, 482: total bytes n
        return np.where((n < ALLGATHER_LONG) & pow2, 0, np.where(n < ALLGATHER_SHORT, 1, 2))
    if primitive == "broadcast":  # bcast.c 1281-1300 (both long-message variants: scatter + allgather)
        small = (n < BCAST_SHORT) | (np.broadcast_to(np.asarray(p), shape) < BCAST_MIN_PROCS)
        return np.where(small, 0, 1)
    if primitive == "reduce_scatter":  # red_scat.c 305, 528 (commutative ops); recursive halving needs p = 2^k
        return np.where((n < REDUCE_SCATTER_LONG) & pow2, 0, 1)
    if primitive == "reduce":  # reduce.c: binomial for short, reduce_scatter_gather for long with p = 2^k
        return np.where((n <= REDUCE_SHORT) | ~pow2, 0, 1)
    if primitive == "all_to_all":  # alltoall.c: Bruck for short blocks on >= 8 ranks, else pairwise
        block = n / np.broadcast_to(np.asarray(p, dtype=np.float64), shape)
        return np.where((block <= ALLTOALL_SHORT) & (np.broadcast_to(np.asarray(p), shape) >= ALLTOALL_MIN_PROCS),
                        0, 1)
    raise AssertionError(primitive)  # only primitives in MPICH are routed here


def _mpich_options(primitive: str, p: Any, env: Any, params: Mapping[str, Any]) -> list[Option]:
    return [registered_option(x, p, env, params) for x in MPICH[primitive]]


register(Library(
    name="mpich",
    description="MPICH 3.2's default selection: algorithms switched by message size and p",
    source="MPICH v3.2 (a4121ab1) src/mpi/coll/{allreduce,allgather,bcast,red_scat,reduce,alltoall}.c default "
           "thresholds, after Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005; MPICH 4.x keeps these CVARs but "
           "its blocking allreduce switches to recursive doubling only at <= 8 bytes (maint/tuning/coll/mpir/"
           "generic.json)",
    primitives=tuple(MPICH),
    options=_mpich_options,
    select=_mpich_select,
))
