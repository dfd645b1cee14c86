"""Algorithms that a collective library runs and the textbook list lacks, registered after the others.

``ring_reduce``, ``gloo_ring_allgather`` and ``gloo_ring_allreduce`` are gloo's reduce, allgather and allreduce;
``recursive_doubling_allreduce_general`` and ``rabenseifner_reduce`` are MPICH's short-message allreduce for
any p and its long-message reduce (:mod:`costmodels.libraries` chooses among them by each library's rules).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import alpha, beta, flg, gamma, lg, n, p
from .algorithms import GLOO_RING_ALLREDUCE, POW2, THAKUR
from .catalog import _add
from .host_buffers import GLOO_ALLGATHER as GLOO_ALLGATHER_HOST

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
# gloo's allgather (allgather.cc 56-90) is a ring that sends each rank's block as two halves, posting
# send(h) then recv(h) for each half. Its tcp transport (transport/tcp/pair.cc: Pair::send, Pair::recv,
# sendAsyncMode, handleRemotePendingRecv) sends a half only after the peer's RECV_READY notice, and every
# message of a pair (notices and data) leaves through one FIFO queue and socket. At p >= 3 the ring's two pairs
# of a rank each carry data one way only, so the notices never wait. At p = 2 both neighbours are one pair:
# a rank B that starts after its peer A's notices have arrived (back-to-back calls: A always finishes first)
# writes [data h0][RR h0][data h1][RR h1] into the pair, so A's half h0 can leave only once B's h0 is through
# (h = n/4 bytes: t = alpha + h beta) and A's h1 once B's h1 is (alpha + 2 h beta); B has all of A's data at
# 2 alpha + 3 h beta, so 3/4 n beta, 1.5 times the ring's n/2 beta (derived here). Measured on two
# emulated 200 Mbit/s nodes, 16 MiB back to back: 522-526 ms against 351 ms for 8 MiB one way (1.49-1.50);
# after a barrier each call, 402-527 ms (the ranks start closer than one latency apart in some calls).
# The late rank's first half-block is the wait (``serial``): under a token bucket it leaves its idle link at
# the host's speed up to the bucket (token_bucket.py). The latency is kept at the ring's alpha: a call whose
# ranks start within one latency of each other (a barrier's release) has no wait, and the sweeps' sizes below
# 64 KiB cost alpha (two-rank validation: 0.20-0.29 ms from 16 B to 16 KiB at 200 Mbit/s, alpha 0.22 ms).
_pair = sp.Piecewise((1, sp.Eq(p, 2)), (0, True))
_add(
    name="gloo_ring_allgather", primitive="allgather",
    expr=(p - 1) * alpha + _f * n * beta + _pair * n * beta / 4,
    serial=_pair * n / 4,
    source="facebookincubator/gloo allgather.cc 56-90 (ring, each block in two halves, send posted before "
           "recv) and transport/tcp/pair.cc (a send waits for the peer's recv notice; one FIFO per pair): "
           "the ring, (p-1) alpha + (p-1)/p n beta (Thakur et al. 2005 Sec. 3), and at p = 2, where both "
           "directions share one pair, alpha + 3/4 n beta, n/4 of it a wait for the peer's half-block; derived "
           "here (library_algorithms.py comment); plus the copy of the result out of its own flat buffer "
           "(ProcessGroupGloo.cpp AsyncAllgatherWork; host_buffers.py)",
    description="gloo's ring allgather; at p = 2 a late rank's recv notices wait behind its own data, so "
                "three of the four half-blocks cross one after another",
    host=GLOO_ALLGATHER_HOST,
)
_add(
    name="gloo_ring_allreduce", primitive="allreduce",
    expr=GLOO_RING_ALLREDUCE,
    source="facebookincubator/gloo allreduce.cc (``ring``: at least 2p segments, two in flight, empty ones "
           "skipped): the ring allreduce, 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (Patarasuk & Yuan, "
           "JPDC 69(2), 2009), whose steps carry one segment message instead of two below 2p elements "
           "(8p bytes of float32): half the latency there; derived here (algorithms.py, GLOO_RING_SEGMENTS)",
    description="gloo's ring allreduce: the ring, with half the per-step latency below 2p elements, where "
                "each step carries one segment instead of two",
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
