"""Sequential and per-tensor schedules: BSP, WFBP, fusion, MG-WFBP, parameter server and local SGD.

Each iteration's communication ends within the iteration: per-tensor all-reduces after backward
(BSP) or as each gradient is ready (WFBP), fused buckets (fusion, MG-WFBP), through parameter
servers (ps), or a model average every H steps (local SGD). Every schedule has an event
simulation and a vectorized kernel over many configurations.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    greedy_buckets,
    serial_ends,
)
from .core import SCHEDULES, B, C, Configurations, F, IterationResult, Schedule


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


def _bsp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, **params: Any
         ) -> IterationResult:
    return _per_tensor("bsp", prof, env, p, collective, params, overlap=False)


def _wfbp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, **params: Any
          ) -> IterationResult:
    return _per_tensor("wfbp", prof, env, p, collective, params, overlap=True)


def _fusion(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
            bucket_bytes: Any = DDP_BUCKET_BYTES, first_bucket_bytes: Any = DDP_FIRST_BUCKET_BYTES,
            **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    first = _bytes_option("first_bucket_bytes", first_bucket_bytes)
    events, ready = _compute_events(prof)
    comm = Comm("allreduce", p, env, collective, params)
    backward_order = np.arange(len(prof) - 1, -1, -1)
    groups = [[int(backward_order[j]) for j in g] for g in greedy_buckets(nbytes[backward_order], cap, first)]
    if p > 1:
        events += _send_in_order(groups, ready, nbytes, comm, "allreduce", names)[0]
    return _result("fusion", p, prof, events, buckets=len(groups))


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


def _ps(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, k: int | None = None,
        **params: Any) -> IterationResult:
    if collective not in (None, "parameter_server"):
        raise CommscopeError(f"the ps schedule always uses the parameter_server collective, got {collective!r}")
    extra = {} if k is None else {"k": k}
    r = _wfbp(prof, env, p, "parameter_server", **extra, **params)
    return IterationResult("ps", r.p, r.iteration_time, r.compute_time, r.batch_size, r.timeline,
                           {**r.details, "servers": p if k is None else k})


def _local_sgd(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, H: int = 8,
               **params: Any) -> IterationResult:
    nbytes, _names = _validated(prof, env, p)
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
        raise CommscopeError(f"H (local steps between averagings) must be a positive integer, got {H!r}")
    events, _ = _compute_events(prof)
    comm = Comm("allreduce", p, env, collective, params)
    total = float(nbytes.sum())
    averaging = float(comm(total)[0]) if p > 1 else 0.0
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
    dt = cfg.comm("allreduce", collective, params)(cfg.nbytes[back][None, :])
    if not overlap:
        return cfg.prof.compute_s + dt.sum(axis=1)
    return np.maximum(serial_ends(cfg.ready[back], dt)[:, -1], cfg.prof.compute_s)


def _bsp_kernel(cfg: Configurations, collective: str | None = None, **params: Any) -> np.ndarray:
    return _per_tensor_kernel(cfg, collective, params, overlap=False)


def _wfbp_kernel(cfg: Configurations, collective: str | None = None, **params: Any) -> np.ndarray:
    return _per_tensor_kernel(cfg, collective, params, overlap=True)


def _groups_kernel(cfg: Configurations, groups: list[list[int]], comm: Comm) -> np.ndarray:
    """Fixed groups sent in order, each when its last gradient is ready: the end of communication."""
    sizes = np.array([cfg.nbytes[g].sum() for g in groups])
    ready = np.array([cfg.ready[g].max() for g in groups])
    return np.maximum(serial_ends(ready, comm(sizes[None, :]))[:, -1], cfg.prof.compute_s)


def _fusion_kernel(cfg: Configurations, collective: str | None = None, *, bucket_bytes: Any = DDP_BUCKET_BYTES,
                   first_bucket_bytes: Any = DDP_FIRST_BUCKET_BYTES, **params: Any) -> np.ndarray:
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    first = _bytes_option("first_bucket_bytes", first_bucket_bytes)
    back = np.arange(len(cfg.prof) - 1, -1, -1)
    groups = [[int(back[j]) for j in g] for g in greedy_buckets(cfg.nbytes[back], cap, first)]
    return _groups_kernel(cfg, groups, cfg.comm("allreduce", collective, params))


def _mgwfbp_kernel(cfg: Configurations, collective: str | None = None, **params: Any) -> np.ndarray:
    """:func:`mgwfbp_groups` with every configuration's group state advanced together."""
    comm = cfg.comm("allreduce", collective, params)
    a = comm.latency()[:, 0]
    nbytes, ready = cfg.nbytes, cfg.ready
    last = len(nbytes) - 1
    link = np.zeros(len(a))
    group_bytes, group_ready = np.full(len(a), nbytes[last]), np.full(len(a), ready[last])
    for nxt in range(last - 1, -1, -1):
        start = np.maximum(link, group_ready)
        close = ready[nxt] >= start + a
        if close.any():
            sent = start + comm(group_bytes[:, None])[:, 0]
            link = np.where(close, sent, link)
            group_bytes = np.where(close, 0.0, group_bytes)
            group_ready = np.where(close, ready[nxt], np.maximum(group_ready, ready[nxt]))
        else:
            group_ready = np.maximum(group_ready, ready[nxt])
        group_bytes = group_bytes + nbytes[nxt]
    end = np.maximum(link, group_ready) + comm(group_bytes[:, None])[:, 0]
    return np.maximum(end, cfg.prof.compute_s)


def _ps_kernel(cfg: Configurations, collective: str | None = None, *, k: int | None = None, **params: Any
               ) -> np.ndarray:
    if collective not in (None, "parameter_server"):
        raise CommscopeError(f"the ps schedule always uses the parameter_server collective, got {collective!r}")
    return _wfbp_kernel(cfg, "parameter_server", **({} if k is None else {"k": k}), **params)


def _local_sgd_kernel(cfg: Configurations, collective: str | None = None, *, H: int = 8, **params: Any
                      ) -> np.ndarray:
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
        raise CommscopeError(f"H (local steps between averagings) must be a positive integer, got {H!r}")
    averaging = cfg.comm("allreduce", collective, params)(np.array([[cfg.nbytes.sum()]]))[:, 0]
    return cfg.prof.compute_s + averaging / H


for _entry in (
    Schedule("bsp", "forward, backward, then every gradient tensor all-reduced (no overlap)",
             "Tang et al., arXiv 2003.06307, Sec. 3 (BSP); Shi et al., arXiv 2005.13247 (naive S-SGD)",
             "allreduce", {}, _bsp, vectorized=_bsp_kernel),
    Schedule("wfbp", "each layer's gradient all-reduced as soon as it is ready and the link is free",
             "Zhang et al., Poseidon (USENIX ATC 2017); Awan et al., S-Caffe (PPoPP 2017)", "allreduce", {}, _wfbp,
             vectorized=_wfbp_kernel),
    Schedule("fusion", "gradients fused into buckets in ready order (PyTorch DDP: 25 MiB, first bucket 1 MiB)",
             "Li et al., 'PyTorch Distributed', VLDB 2020 (bucketing); Sergeev & Del Balso, Horovod 2018 "
             "(tensor fusion)", "allreduce",
             {"bucket_bytes": DDP_BUCKET_BYTES, "first_bucket_bytes": DDP_FIRST_BUCKET_BYTES}, _fusion,
             vectorized=_fusion_kernel),
    Schedule("mgwfbp", "layers merged by MG-WFBP's rule: merge when waiting costs less than a message latency",
             "Shi, Wang, Chu, Li, 'MG-WFBP: Efficient data communication for distributed synchronous SGD "
             "algorithms', IEEE INFOCOM 2019, Sec. IV", "allreduce", {}, _mgwfbp,
             vectorized=_mgwfbp_kernel),
    Schedule("ps", "WFBP over a BytePS-like parameter server with k servers (default k = p)",
             "Jiang et al., BytePS, OSDI 2020; Shi et al., arXiv 2005.13247 (PS architecture)", "allreduce",
             {"k": None}, _ps, vectorized=_ps_kernel),
    Schedule("local_sgd", "local steps, model averaged every H iterations (amortised time per iteration)",
             "Lin et al., 'Don't use large mini-batches, use local SGD', ICLR 2020; Stich, ICLR 2019", "allreduce",
             {"H": 8}, _local_sgd, no_overlap=F + B + C, perfect_overlap=F + B,
             vectorized=_local_sgd_kernel),
):
    SCHEDULES.register(_entry)
