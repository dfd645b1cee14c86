"""Sequential and per-tensor schedules: BSP, WFBP, fusion, MG-WFBP, parameter server and local SGD.

Each iteration's communication ends within the iteration: per-tensor all-reduces after backward
(BSP) or as each gradient is ready (WFBP), fused buckets (fusion, MG-WFBP; DDP buckets dense bytes
before its comm hook compresses them), through parameter servers with pipelined push and pull of
partitions (ps), or a model average every H steps (local SGD). Every schedule has an event
simulation and a vectorized kernel over many configurations. With interference, host overhead or an
optimizer step they run as task graphs instead (``terms``, which states where each pays o and the step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..environment import Environment
from ..errors import CommscopeError
from ..messages import Comm
from ..profiles import ModelProfile
from ..timeline import Event, Timeline
from .blocks import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    _bytes_option,
    _compute_events,
    _result,
    _send_in_order,
    _validated,
    broadcast_comm,
    buffer_broadcasts,
    buffer_events,
    chain_prices,
    chained_prices,
    greedy_buckets,
    partitions,
    serial_ends,
)
from .core import (
    COMPRESSED,
    SCHEDULES,
    B,
    C,
    Configurations,
    F,
    IterationResult,
    O,
    Schedule,
    U,
    interference_excess,
)

BYTEPS_PARTITION_BYTES = 4_096_000  # BytePS docs/env.md: "The default and recommended value is 4096000"


# -------------------------------------------------------------------------------- schedules
def _per_tensor(name: str, prof: ModelProfile, env: Environment, p: int, collective: str | None,
                params: Mapping[str, Any], overlap: bool) -> IterationResult:
    """One allreduce per tensor in backward order: as soon as ready (WFBP) or after backward (BSP)."""
    nbytes, names = _validated(prof, env, p)
    events, ready = _compute_events(prof)
    comm = Comm("allreduce", p, env, collective, params)
    order = [[i] for i in range(len(prof) - 1, -1, -1)]
    if p > 1:
        when = ready if overlap else np.full(len(prof), float(ready.max()))
        events += _send_in_order(order, when, nbytes, comm, "allreduce", names)[0]
    return _result(name, p, prof, events, messages=len(order) if p > 1 else 0)


def _bsp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, flatten: bool = False,
         **params: Any) -> IterationResult:
    if not flatten:
        return _per_tensor("bsp", prof, env, p, collective, params, overlap=False)
    nbytes, names = _validated(prof, env, p)  # one message of every gradient, after backward
    events, ready = _compute_events(prof)
    if p > 1:
        order = [list(range(len(prof) - 1, -1, -1))]
        comm = Comm("allreduce", p, env, collective, params)
        events += _send_in_order(order, np.full(len(prof), float(ready.max())), nbytes, comm, "allreduce",
                                 names)[0]
    return _result("bsp", p, prof, events, messages=1 if p > 1 else 0)


def _wfbp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, **params: Any
          ) -> IterationResult:
    return _per_tensor("wfbp", prof, env, p, collective, params, overlap=True)


def _fusion_buckets(prof: ModelProfile, cap: float, first: float) -> tuple[list[list[int]], np.ndarray]:
    """DDP's buckets in backward order and each bucket's message sizes, shape (buckets, K).

    DDP buckets by the dense gradient bytes (``_compute_bucket_assignment_by_size``) and its comm hook
    then compresses each bucket: under a compressor (:data:`COMPRESSED`) the buckets are formed on the
    uncompressed bytes and carry the compressed ones, in the compressor's K messages per bucket
    (PowerSGD: the uncompressed tensors, the Ps, the Qs), sent back to back (the hook chains them; a
    later bucket's first message, which NCCL could slip in between, is kept after them).
    """
    active = COMPRESSED.get()
    if active is not None and active.profile is prof:
        dense, parts = active.dense_bytes, active.parts
    else:
        dense = np.array(prof.column("grad_bytes"))
        parts = dense[:, None]
    back = np.arange(len(prof) - 1, -1, -1)
    groups = [[int(back[j]) for j in g] for g in greedy_buckets(dense[back], cap, first)]
    return groups, np.array([parts[g].sum(axis=0) for g in groups])


def broadcast_buffers_option(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise CommscopeError(f"broadcast_buffers must be True or False, got {value!r}")
    return bool(value)


def buffer_prices(prof: ModelProfile, env: Any, p: Any, collective: Any, broadcast_buffers: Any) -> np.ndarray:
    """Seconds of each of DDP's buffer broadcasts before forward (:func:`.blocks.buffer_broadcasts`), blocking
    calls back to back after the idle link of the step's end: a chain (:func:`.blocks.chain_prices`), (..., k); none
    without buffers, with ``broadcast_buffers=False`` or where p = 1. Nothing else runs meanwhile, so the
    iteration is longer by their sum in every path (timelines, ``cm.sweep``, the interference engine, whose o
    and link time add up to the same price: :class:`.core.LinkComm`)."""
    sizes = buffer_broadcasts(prof) if broadcast_buffers_option(broadcast_buffers) else np.zeros(0)
    if np.ndim(p):  # configurations: p (C, 1) -> (C, k)
        if not len(sizes):
            return np.zeros((np.shape(p)[0], 0))
        return np.where(np.asarray(p) > 1, chain_prices(broadcast_comm(p, env, collective), sizes[None, :]), 0.0)
    if not len(sizes) or p <= 1:
        return np.zeros(0)
    return np.asarray(chain_prices(broadcast_comm(p, env, collective), sizes), dtype=float)


def _fusion(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
            bucket_bytes: Any = DDP_BUCKET_BYTES, first_bucket_bytes: Any = DDP_FIRST_BUCKET_BYTES,
            broadcast_buffers: Any = True, **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    first = _bytes_option("first_bucket_bytes", first_bucket_bytes)
    bc = np.asarray(buffer_prices(prof, env, p, collective, broadcast_buffers), dtype=float).reshape(-1)
    events = buffer_events(prof, bc)
    compute, ready = _compute_events(prof, float(bc.sum()))
    events += compute
    comm = Comm("allreduce", p, env, collective, params)
    groups, sizes = _fusion_buckets(prof, cap, first)
    if p > 1:
        times = chained_prices(comm, sizes)[0]
        events += _send_in_order(groups, ready, nbytes, comm, "allreduce", names, times=times)[0]
    return _result("fusion", p, prof, events, buckets=len(groups), buffer_broadcast_s=float(bc.sum()))


def mgwfbp_groups(ready: np.ndarray, nbytes: np.ndarray, comm: Comm) -> list[list[int]]:
    """MG-WFBP's merge decisions (Shi, Wang, Chu, Li, IEEE INFOCOM 2019, Sec. IV).

    Walk the layers in backward order keeping the current group and the time its message would
    start, ``s = max(link free, ready of the group)``. The next layer (l-1) joins the group when its
    gradient is ready less than one message latency ``a`` after that start (``ready[l-1] < s + a``):
    waiting for it delays the message by less than the ``a`` that one message fewer saves. ``a``
    is the time of an empty message of the chosen collective (``2 (p-1) alpha`` for the ring).
    """
    a = comm.latency()
    order = list(range(len(nbytes) - 1, -1, -1))
    groups: list[list[int]] = []
    link_free, cur = 0.0, [order[0]]
    for nxt in order[1:]:
        start = max(link_free, float(ready[cur].max()))
        if float(ready[nxt]) < start + a:
            cur.append(nxt)
            continue
        link_free = start + float(comm(nbytes[cur].sum())[0])
        groups.append(cur)
        cur = [nxt]
    groups.append(cur)
    return groups


def _mgwfbp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, **params: Any
            ) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    events, ready = _compute_events(prof)
    comm = Comm("allreduce", p, env, collective, params)
    groups = mgwfbp_groups(ready, nbytes, comm) if p > 1 else []
    if p > 1:
        events += _send_in_order(groups, ready, nbytes, comm, "allreduce", names)[0]
    return _result("mgwfbp", p, prof, events, groups=len(groups))


def _ps_plan(nbytes: np.ndarray, collective: Any, k: Any, partition_bytes: Any, params: dict[str, Any]
             ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The partitions a pipelined parameter server sends, in backward order: (tensor, bytes) of each,
    and the parameter_server collective's parameters."""
    if collective not in (None, "parameter_server"):
        raise CommscopeError(f"the ps schedule always uses the parameter_server collective, got {collective!r}")
    part = _bytes_option("partition_bytes", partition_bytes)
    back = np.arange(len(nbytes) - 1, -1, -1)
    layer_of, size_of = partitions(nbytes[back], part)
    return back[layer_of], size_of, {**({} if k is None else {"k": k}), **params}


def _push_pull(ready: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """End times of each partition's push and pull (derived here).

    BytePS pushes partition j+1 while partition j is pulled: the worker's link is full duplex, pushes
    go up in order once their tensor is ready, and a partition is pulled once its push has been summed.
    The parameter_server collective prices push + pull of m bytes as T(m) = 2 alpha + 2 max(p/k, 1) m beta
    + (p-1)/k m gamma; each stage takes half of it, T(m)/2 (the servers' sum split evenly, exact at
    gamma = 0). Two serial stages are a two-stage flow shop: push_j = max(push_{j-1}, ready_j) + T_j/2,
    pull_j = max(pull_{j-1}, push_j) + T_j/2 (:func:`serial_ends` twice). One tensor of n = P s bytes,
    ready at 0: push_j = j T(s)/2, pull_P = (P + 1) T(s)/2 = (1 + 1/P) max(p/k, 1) n beta + (P + 1) alpha
    (+ gamma), about n beta plus the pipeline's fill, where one message takes T(n) = 2 n beta + 2 alpha.
    """
    push = serial_ends(ready, half)
    return push, serial_ends(push, half)


def _ps(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, k: int | None = None,
        partition_bytes: Any = BYTEPS_PARTITION_BYTES, **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    layer_of, size_of, ps_params = _ps_plan(nbytes, collective, k, partition_bytes, params)
    events, ready = _compute_events(prof)
    if p > 1:
        half = Comm("allreduce", p, env, "parameter_server", ps_params)(size_of) / 2
        push, pull = _push_pull(ready[layer_of], half)
        for j, i in enumerate(layer_of):
            h, n = float(half[j]), float(size_of[j])
            events.append(Event("comm", "push", names[i], float(push[j]) - h, float(push[j]), n))
            events.append(Event("pull", "pull", names[i], float(pull[j]) - h, float(pull[j]), n))
    return _result("ps", p, prof, events, servers=p if k is None else k, partitions=len(size_of))


def _local_sgd(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, H: int = 8,
               **params: Any) -> IterationResult:
    nbytes, _names = _validated(prof, env, p)
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
        raise CommscopeError(f"H (local steps between averagings) must be a positive integer, got {H!r}")
    events, _ = _compute_events(prof)
    comm = Comm("allreduce", p, env, collective, params)
    total = float(nbytes.sum())
    averaging = float(chain_prices(comm, np.array([total]))[0]) if p > 1 else 0.0
    if p > 1:  # the model is averaged once, after the H-th step's update: shown on that step
        events.append(Event("comm", "allreduce", f"model average (every {H} steps)", prof.compute_s,
                            prof.compute_s + averaging, total))
    tl = Timeline.of(events)
    amortised = prof.compute_s + averaging / H
    return IterationResult("local_sgd", p, amortised, prof.compute_s, prof.batch_size, tl,
                           {"H": H, "averaging_time": averaging, "step_with_averaging": tl.end})


# -------------------------------------------------------- vectorized kernels (many configurations)
def _per_tensor_kernel(cfg: Configurations, collective: str | None, params: Mapping[str, Any], overlap: bool
                       ) -> np.ndarray:
    back = np.arange(len(cfg.prof) - 1, -1, -1)
    dt = chain_prices(cfg.comm("allreduce", collective, params), cfg.nbytes[back][None, :])
    if not overlap:
        return cfg.prof.compute_s + dt.sum(axis=1)
    return np.maximum(serial_ends(cfg.ready[back], dt)[:, -1], cfg.prof.compute_s)


def _bsp_kernel(cfg: Configurations, collective: str | None = None, *, flatten: bool = False,
                **params: Any) -> np.ndarray:
    if flatten:
        return cfg.prof.compute_s + chain_prices(cfg.comm("allreduce", collective, params),
                                                 np.array([[cfg.nbytes.sum()]]))[:, 0]
    return _per_tensor_kernel(cfg, collective, params, overlap=False)


def _wfbp_kernel(cfg: Configurations, collective: str | None = None, **params: Any) -> np.ndarray:
    return _per_tensor_kernel(cfg, collective, params, overlap=True)


def _fusion_kernel(cfg: Configurations, collective: str | None = None, *, bucket_bytes: Any = DDP_BUCKET_BYTES,
                   first_bucket_bytes: Any = DDP_FIRST_BUCKET_BYTES, broadcast_buffers: Any = True,
                   **params: Any) -> np.ndarray:
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    first = _bytes_option("first_bucket_bytes", first_bucket_bytes)
    groups, sizes = _fusion_buckets(cfg.prof, cap, first)
    times = chained_prices(cfg.comm("allreduce", collective, params), sizes)
    ready = np.array([cfg.ready[g].max() for g in groups])
    before = buffer_prices(cfg.prof, cfg.env, cfg.p, collective, broadcast_buffers).sum(axis=-1)  # (C,)
    return np.maximum(serial_ends(ready, times)[:, -1], cfg.prof.compute_s) + before


def mgwfbp_plan(cfg: Configurations, comm: Comm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MG-WFBP's merges for every configuration (:func:`mgwfbp_groups`, a = latency + o), by layer:
    whether a group's message goes after that layer's backward, the bytes of that group, and when the plan's last
    message ends. The plan is MG-WFBP's own: its link times are the messages' prices one by one, whatever a chain
    of them then takes (:func:`.blocks.chain_prices`)."""
    a = comm.latency()[:, 0] + cfg.overhead[:, 0]
    nbytes, ready = cfg.nbytes, cfg.ready
    last = len(nbytes) - 1
    close, size = np.zeros((len(a), last + 1), dtype=bool), np.zeros((len(a), last + 1))
    link = np.zeros(len(a))
    group_bytes, group_ready = np.full(len(a), nbytes[last]), np.full(len(a), ready[last])
    for nxt in range(last - 1, -1, -1):
        start = np.maximum(link, group_ready)
        shut = ready[nxt] >= start + a
        if shut.any():
            close[:, nxt + 1], size[:, nxt + 1] = shut, np.where(shut, group_bytes, 0.0)
            link = np.where(shut, start + comm(group_bytes[:, None])[:, 0], link)
            group_bytes = np.where(shut, 0.0, group_bytes)
            group_ready = np.where(shut, ready[nxt], np.maximum(group_ready, ready[nxt]))
        else:
            group_ready = np.maximum(group_ready, ready[nxt])
        group_bytes = group_bytes + nbytes[nxt]
    close[:, 0], size[:, 0] = True, group_bytes
    return close, size, np.maximum(link, group_ready) + comm(group_bytes[:, None])[:, 0]


def _mgwfbp_kernel(cfg: Configurations, collective: str | None = None, **params: Any) -> np.ndarray:
    """:func:`mgwfbp_plan`'s messages, in backward order, each when its group is ready and the link free."""
    comm = cfg.comm("allreduce", collective, params)
    close, size, planned = mgwfbp_plan(cfg, comm)
    if not np.any(np.asarray(cfg.env.burst_bytes) > 0):  # no bucket: each message at its price, as planned
        return np.maximum(planned, cfg.prof.compute_s)
    back = np.arange(len(cfg.nbytes) - 1, -1, -1)
    close, size = close[:, back], size[:, back]
    times = np.where(close, chain_prices(comm, size, sent=close), 0.0)
    return np.maximum(serial_ends(cfg.ready[back], times)[:, -1], cfg.prof.compute_s)


def _ps_kernel(cfg: Configurations, collective: str | None = None, *, k: int | None = None,
               partition_bytes: Any = BYTEPS_PARTITION_BYTES, **params: Any) -> np.ndarray:
    layer_of, size_of, ps_params = _ps_plan(cfg.nbytes, collective, k, partition_bytes, params)
    half = cfg.comm("allreduce", "parameter_server", ps_params)(size_of[None, :]) / 2
    return np.maximum(_push_pull(cfg.ready[layer_of], half)[1][:, -1], cfg.prof.compute_s)


def _local_sgd_kernel(cfg: Configurations, collective: str | None = None, *, H: int = 8, **params: Any
                      ) -> np.ndarray:
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
        raise CommscopeError(f"H (local steps between averagings) must be a positive integer, got {H!r}")
    averaging = chain_prices(cfg.comm("allreduce", collective, params), np.array([[cfg.nbytes.sum()]]))[:, 0]
    return cfg.prof.compute_s + averaging / H


PLACEMENTS = {  # where each pays o and the optimizer step (see terms*.py)
    "bsp": ("o per message on the training thread, which issues each blocking all_reduce after backward once the "
            "one before it has ended (runners/training/exact_allreduce.py); the optimizer step after the last; "
            "nothing overlaps, so interference has no effect"),
    "wfbp": ("o per tensor on the backward thread, from its gradient's hook (delays the next layer's backward; "
            "Horovod and MG-WFBP's dopt.py issue from the hooks); the optimizer step after the last all-reduce"),
    "fusion": ("o per bucket on the autograd (backward) thread, from the hook of the bucket's last gradient (torch "
            "reducer.cpp: mark_variable_ready -> all_reduce_bucket); a comm hook's chained messages (PowerSGD's "
            "P, Q) pay none there; the optimizer step after the last bucket"),
    "mgwfbp": ("o per merged group on the backward thread; merges planned on interference-free times with a saving a"
            " = latency + o per message fewer (MG-WFBP's dopt.py plans offline); the optimizer step after the "
            "last message"),
    "ps": ("o per push and per pull on BytePS's communication threads (one loop per stage; serial with that "
            "thread's issues, not with compute); the optimizer step after the last pull"),
    "local_sgd": ("o once per averaging (every H steps); the local optimizer step every iteration; nothing overlaps"),
}

for _entry in (
    Schedule("bsp", "forward, backward, then every gradient tensor all-reduced (no overlap; flatten: all of "
                    "them as one message)",
             "Tang et al., arXiv 2003.06307, Sec. 3 (BSP); Shi et al., arXiv 2005.13247 (naive S-SGD)",
             "allreduce", {"flatten": False}, _bsp, vectorized=_bsp_kernel),
    Schedule("wfbp", "each layer's gradient all-reduced as soon as it is ready and the link is free",
             "Zhang et al., Poseidon (USENIX ATC 2017); Awan et al., S-Caffe (PPoPP 2017)", "allreduce", {}, _wfbp,
             vectorized=_wfbp_kernel),
    Schedule("fusion", "gradients fused into buckets in ready order (PyTorch DDP: 25 MiB, first bucket 1 MiB; an "
                       "explicit bucket_cap_mb caps the first bucket too, torch 2.13)",
             "Li et al., 'PyTorch Distributed', VLDB 2020 (bucketing); Sergeev & Del Balso, Horovod 2018 "
             "(tensor fusion)", "allreduce",
             {"bucket_bytes": DDP_BUCKET_BYTES, "first_bucket_bytes": DDP_FIRST_BUCKET_BYTES,
              "broadcast_buffers": True}, _fusion,
             vectorized=_fusion_kernel),
    Schedule("mgwfbp", "layers merged by MG-WFBP's rule: merge when waiting costs less than a message latency",
             "Shi, Wang, Chu, Li, 'MG-WFBP: Efficient data communication for distributed synchronous SGD "
             "algorithms', IEEE INFOCOM 2019, Sec. IV", "allreduce", {}, _mgwfbp,
             vectorized=_mgwfbp_kernel),
    Schedule("ps", "WFBP over a BytePS-like parameter server with k servers (default k = p): each tensor cut "
             "into partitions (BytePS default 4,096,000 B) whose push and pull pipeline on the two directions "
             "of the link; C is the push direction's busy time (the pull's is the same)",
             "Jiang et al., BytePS, OSDI 2020 (partitioned push/pull pipeline; BYTEPS_PARTITION_BYTES default "
             "4096000, docs/env.md); flow-shop recurrences derived here", "allreduce",
             {"k": None, "partition_bytes": BYTEPS_PARTITION_BYTES}, _ps,
             no_overlap=F + B + U + 2 * C + O + interference_excess(F + B + U, 2 * C),
             vectorized=_ps_kernel),
    Schedule("local_sgd", "local steps, model averaged every H iterations (amortised time per iteration)",
             "Lin et al., 'Don't use large mini-batches, use local SGD', ICLR 2020; Stich, ICLR 2019", "allreduce",
             {"H": 8}, _local_sgd, no_overlap=F + B + U + C + O, perfect_overlap=F + B + U,
             vectorized=_local_sgd_kernel),
):
    SCHEDULES.register(replace(_entry, placement=PLACEMENTS[_entry.name]))
