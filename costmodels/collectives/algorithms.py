"""The collective algorithms and their cost models, registered in :data:`COLLECTIVES` in this order.

Reduce-scatter, allgather and allreduce by rings, recursive halving/doubling and Bruck's
algorithm; broadcast and reduce by trees; tree allreduces (binary, NCCL's double binary tree);
the hierarchical allreduce and the parameter server; all-to-all; top-k sparse allgather; gossip.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import alpha, alpha_intra, beta, beta_intra, clg, flg, g, gamma, iota, k, lg, n, p, r, rho
from .catalog import _add
from .host_buffers import GLOO_REDUCE_SCATTER as GLOO_REDUCE_SCATTER_HOST
from .model import Domain, Param

_f = (p - 1) / p  # fraction of the data that crosses the network in ring/halving algorithms
THAKUR = ("Thakur, Rabenseifner, Gropp, 'Optimization of Collective Communication Operations in MPICH', "
          "IJHPCA 19(1), 2005")
POW2 = Domain(power_of_two=True)

# gloo's ring allreduce (gloo allreduce.cc, ``ring``) cuts the buffer into numSegments = roundUp(max(ceil(n /
# maxSegmentSize), 2p), p) segments, at least 2p, and keeps two in flight: every step of the ring (a hop of the
# reduce-scatter or the allgather) carries two segment messages per rank. A segment past the end of the buffer
# is skipped (its send and recv have length <= 0), so below 2p elements (8p bytes of float32) the segments are
# one element each and only the first n/4 carry data: each step carries one message, not two. Where the per-step
# latency is the per-message work of the ranks' threads (CPU ranks under gloo: the TCP loop's wakeups and
# syscalls), such a buffer pays half the latency: derived here. Measured on four ranks sharing 2 cores behind
# emulated links (three runs, bench/results/validation_4ranks_*): a 16 B all-reduce took 0.5-0.65 of the mean
# time of those from 64 B to 16 KiB.
GLOO_RING_SEGMENTS = sp.Piecewise((sp.Rational(1, 2), n < 8 * p), (1, True))
GLOO_RING_ALLREDUCE = 2 * (p - 1) * alpha * GLOO_RING_SEGMENTS + 2 * _f * n * beta + _f * n * gamma


_add(
    name="ring_reduce_scatter", primitive="reduce_scatter",
    expr=(p - 1) * alpha + _f * n * beta + _f * n * gamma,
    source=f"{THAKUR}, Sec. 4.3 (pairwise/ring reduce-scatter); Patarasuk & Yuan, JPDC 69(2), 2009",
    description="p-1 steps; each step sends n/p bytes to the next rank and reduces n/p received",
)
_add(
    name="allreduce_reduce_scatter", primitive="reduce_scatter",
    expr=GLOO_RING_ALLREDUCE,
    source="measured: PyTorch's gloo backend (torch 2.13) runs reduce_scatter as a ring allreduce of the whole "
           "buffer, each rank keeping its shard; over 100 Mbit/s emulated links a 4 MiB reduce_scatter took 0.995 "
           "of a 4 MiB allreduce, not the 0.5 of a ring reduce-scatter (commscope validate, bench/results/"
           "validation); cost = ring_allreduce (Patarasuk & Yuan 2009), with gloo's ring's one message per step "
           "below 2p elements (GLOO_RING_SEGMENTS); plus its host buffers, the clone of the input and the copy "
           "of the shard (ProcessGroupGloo.cpp reduce_scatter_tensor_coalesced; host_buffers.py)",
    description="an allreduce of the whole input, then each rank keeps its n/p shard (gloo's reduce_scatter)",
    lower_bound_exempt="",
    host=GLOO_REDUCE_SCATTER_HOST,
)
_add(
    name="ring_allgather", primitive="allgather",
    expr=(p - 1) * alpha + _f * n * beta,
    source=f"{THAKUR}, Sec. 3 (ring allgather)",
    description="p-1 steps; each step forwards the n/p block received in the previous step",
)
_add(
    name="ring_allreduce", primitive="allreduce",
    expr=2 * (p - 1) * alpha + 2 * _f * n * beta + _f * n * gamma,
    source="Patarasuk & Yuan, 'Bandwidth optimal all-reduce algorithms for clusters of workstations', "
           f"JPDC 69(2), 2009; = ring reduce-scatter + ring allgather ({THAKUR}, Sec. 4.4)",
    description="ring reduce-scatter followed by ring allgather (Baidu/Horovod/NCCL ring)",
)
_add(
    name="recursive_doubling_allreduce", primitive="allreduce",
    expr=lg(p) * (alpha + n * beta + n * gamma),
    domain=POW2,
    source=f"{THAKUR}, Sec. 4.4 (recursive doubling: lgp.alpha + n.lgp.beta + n.lgp.gamma)",
    description="lg p steps; in step k rank i exchanges the whole vector with rank i xor 2^k and reduces",
)
_add(
    name="rabenseifner_allreduce", primitive="allreduce",
    expr=2 * lg(p) * alpha + 2 * _f * n * beta + _f * n * gamma,
    domain=POW2,
    source=f"Rabenseifner, 'Optimization of collective reduction operations', ICCS 2004; {THAKUR}, Sec. 4.4",
    description="recursive-halving reduce-scatter followed by recursive-doubling allgather",
)
_not_pow2 = sp.Min(p - 2 ** flg(p), 1)  # 0 when p is a power of two, 1 otherwise
_add(
    name="rabenseifner_allreduce_general", primitive="allreduce",
    expr=2 * flg(p) * alpha + 2 * _f * n * beta + _f * n * gamma
    + _not_pow2 * (2 * alpha + 2 * n * beta + n * gamma),
    source="MPICH src/mpi/coll/allreduce (reduce_scatter_allgather) cost comment, after "
           f"{THAKUR}, Sec. 4.4: for p not a power of two, "
           "(2 floor(lg p)+2) alpha + (2 (p-1)/p + 2) n beta + (1 + (p-1)/p) n gamma",
    description="Rabenseifner on the largest power of two p' <= p; the p-p' extra ranks first send "
                "their vectors to a partner and receive the result at the end",
)
_add(
    name="recursive_halving_reduce_scatter", primitive="reduce_scatter",
    expr=lg(p) * alpha + _f * n * beta + _f * n * gamma,
    domain=POW2,
    source=f"{THAKUR}, Sec. 4.3 (recursive halving, commutative operations)",
    description="lg p steps exchanging n/2, n/4, ... bytes with partners at distance p/2, p/4, ...",
)
_add(
    name="recursive_doubling_allgather", primitive="allgather",
    expr=lg(p) * alpha + _f * n * beta,
    domain=POW2,
    source=f"{THAKUR}, Sec. 3 (recursive doubling)",
    description="lg p steps exchanging n/p, 2n/p, ... bytes with partners at distance 1, 2, 4, ...",
)
_add(
    name="bruck_allgather", primitive="allgather",
    expr=clg(p) * alpha + _f * n * beta,
    source=f"Bruck et al., IEEE TPDS 8(11), 1997; {THAKUR}, Sec. 3 (ceil(lg p) steps, any p)",
    description="ceil(lg p) steps of doubling blocks, then a local rotation; any p",
)
_add(
    name="binomial_broadcast", primitive="broadcast",
    expr=clg(p) * (alpha + n * beta),
    source=f"{THAKUR}, Sec. 2 (binomial tree broadcast: lgp.alpha + n.lgp.beta)",
    description="binomial tree: the set of ranks holding the data doubles every step",
)
_add(
    name="scatter_allgather_broadcast", primitive="broadcast",
    expr=(clg(p) + p - 1) * alpha + 2 * _f * n * beta,
    source=f"Van de Geijn et al. (scatter + allgather); {THAKUR}, Sec. 2: (lgp+p-1).alpha + 2.n.((p-1)/p).beta",
    description="binomial scatter of n/p blocks followed by a ring allgather",
)
_add(
    name="binomial_reduce", primitive="reduce",
    expr=clg(p) * (alpha + n * beta + n * gamma),
    source=f"{THAKUR}, Sec. 4.2 (binomial tree reduce: lgp.alpha + n.lgp.beta + n.lgp.gamma)",
    description="binomial tree towards the root, reducing whole vectors at every level",
)
_add(
    name="binary_tree_allreduce", primitive="allreduce",
    expr=2 * clg(p) * alpha + 2 * clg(p) * n * beta + clg(p) * n * gamma,
    source=f"{THAKUR}, Sec. 4.2 and 2: binomial reduce followed by binomial broadcast of the result",
    description="tree reduce to the root, then tree broadcast of the result (no pipelining)",
)

# Double binary tree, pipelined (NCCL >= 2.4). Each rank is interior in one tree and a leaf in the
# other, so one chunk step moves about 2 n/c bytes through every rank's link (reduce up + broadcast
# down in flight together), over a pipeline of 2 ceil(lg p) hops. With c chunks:
#   T(c) = (2 ceil(lg p) - 1 + c) (alpha + 2 n beta / c);  minimised over real c >= 1.
_depth = 2 * clg(p) - 1
_vol = 2 * n * beta
_dbt = sp.Piecewise(
    (0, sp.Eq(p, 1)),
    ((_depth + 1) * (alpha + _vol), _depth * _vol <= alpha),  # optimum c* < 1: one chunk
    (_depth * alpha + _vol + 2 * sp.sqrt(_depth * alpha * _vol), True),  # c* = sqrt(depth vol / alpha)
) + sp.Min(p - 1, 1) * n * gamma
_add(
    name="double_binary_tree_allreduce", primitive="allreduce",
    expr=_dbt,
    source="Sanders, Speck, Traeff, 'Two-tree algorithms for full bandwidth broadcast, reduction and "
           "scan', Parallel Computing 35(12), 2009 (double binary trees, used by NCCL >= 2.4); "
           "pipeline of depth D with c chunks costs (D - 1 + c)(alpha + V/c), minimised over c "
           "(derived; NCCL's tuner (src/graph/tuning.cc) likewise charges tree allreduce ~2n bytes "
           "per rank plus a per-hop latency x 2 log2 p)",
    description="reduce up and broadcast down two complementary binary trees, each carrying n/2, "
                "pipelined in the optimal number of chunks",
)

_m = p / g  # nodes
_add(
    name="hierarchical_allreduce", primitive="allreduce", topology="hierarchical",
    expr=2 * (g - 1) * alpha_intra + 2 * (g - 1) / g * n * beta_intra + (g - 1) / g * n * gamma
    + 2 * (_m - 1) * alpha + 2 * (_m - 1) / _m * (n / r) * beta + (_m - 1) / _m * (n / g) * gamma,
    source="derived for Horovod's hierarchical allreduce (Sergeev & Del Balso 2018, "
           "HOROVOD_HIERARCHICAL_ALLREDUCE) and NCCL's intra/inter split: intra-node ring "
           "reduce-scatter, g concurrent inter-node ring allreduces of n/g sharing r NICs, "
           "intra-node ring allgather",
    description="m = p/g nodes of g GPUs: ring RS inside nodes, ring allreduce of the n/g shards "
                "across nodes (r NICs per node), ring AG inside nodes",
)
_add(
    name="parameter_server", primitive="allreduce",
    params=(Param(k, "number of parameter servers (each holds n/k of the model)",
                  default=lambda pr: pr, default_text="k = p (BytePS' recommendation)", integer=True,
                  minimum=1, minimum_inclusive=True),),
    expr=sp.Min(p - 1, 1) * (2 * alpha + 2 * sp.Max(p / k, 1) * n * beta + (p - 1) / k * n * gamma),
    source="derived (push + pull through k dedicated servers, as in BytePS, Jiang et al., OSDI 2020): "
           "each phase is limited by the busiest endpoint, a server receiving p n/k bytes or a worker "
           "sending n; messages of one phase are in flight together, so latency counts once per phase",
    description="push n/k to each of k servers, which sum p shards, then pull the sums",
    extra_resources="k parameter-server nodes besides the p workers",
    lower_bound_exempt="uses k extra server nodes with concurrent messages; Chan et al.'s bound counts only "
                       "p single-ported ranks",
)
_add(
    name="pairwise_all_to_all", primitive="all_to_all",
    expr=(p - 1) * alpha + _f * n * beta,
    source=f"{THAKUR}, Sec. 5 (pairwise exchange, (p-1) alpha + n beta with n the bytes sent; the "
           "n/p block a rank keeps does not cross the network, hence (p-1)/p n beta here)",
    description="p-1 steps; in step k rank i sends its block for rank i xor k (or i+k mod p)",
)
_add(
    name="bruck_all_to_all", primitive="all_to_all",
    expr=clg(p) * alpha + n / 2 * clg(p) * beta,
    source=f"Bruck et al., IEEE TPDS 8(11), 1997; {THAKUR}, Sec. 5: lgp.alpha + (n/2).lgp.beta",
    description="ceil(lg p) steps, each sending about half of the buffer",
)
_add(
    name="topk_sparse_allgather", primitive="sparse_allgather",
    params=(
        Param(rho, "density k/d: fraction of gradient elements sent", default=0.001,
              default_text="0.001", maximum=1.0),
        Param(iota, "index bytes per value byte (int32 indices with fp32 values: 1)", default=1.0,
              default_text="1", minimum_inclusive=True),
    ),
    expr=(p - 1) * alpha + (p - 1) * rho * (1 + iota) * n * beta,
    source="Ring allgather of k values + k indices from every rank (Renggli et al., SparCML, SC 2019; "
           "Shi et al., gTop-k, ICDCS 2019): (p-1) alpha + 2 (p-1) k b beta for b-byte values and indices",
    description="every rank gathers the k (value, index) pairs of all others; volume grows with p",
    lower_bound_exempt="a sparse exchange; it does not move the dense buffer",
)
_add(
    name="gossip_ring", primitive="gossip",
    expr=sp.Min(p - 1, 2) * (alpha + n * beta + n * gamma),
    source="D-PSGD neighbour exchange on a ring (Lian et al., NeurIPS 2017): each rank sends its model "
           "to and receives from its 2 neighbours (1 when p = 2) and averages (derived)",
    description="send/receive the full model to/from both ring neighbours, then average",
)
_add(
    name="gossip_torus", primitive="gossip",
    expr=4 * (alpha + n * beta + n * gamma),
    domain=Domain(min_p=9),
    source="D-PSGD neighbour exchange on a 2-D torus (Lian et al., NeurIPS 2017; Koloskova et al., "
           "ICML 2020): 4 neighbours when both sides are >= 3, i.e. p >= 9 (derived)",
    description="send/receive the full model to/from the 4 torus neighbours, then average",
)
