"""Sharded data parallelism: ZeRO-1/2 and ZeRO-3 / FSDP full sharding.

ZeRO-1/2 (Rajbhandari et al., SC 2020, Sec. 5-7): gradients are reduce-scattered in buckets as
backward produces them (each rank keeps the reduced shard it updates), then the updated
parameters are all-gathered after the optimizer step: RS + AG = 2 Psi bytes, as an allreduce.

ZeRO-3 / FSDP full shard (Zhao et al., 'PyTorch FSDP', VLDB 2023, Sec. 3-4): parameters live
sharded; each FSDP unit's parameters are all-gathered before its forward (the next unit's
all-gather is issued when a unit's forward starts: forward prefetch), freed, all-gathered again
before its backward (BACKWARD_PRE prefetch: the next unit's all-gather is issued before this
unit's reduce-scatter), and its gradients are reduce-scattered after its backward: 3 Psi bytes.
The link serves messages in the order they are issued.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy as sp

from ..environment import Environment
from ..messages import Comm
from ..profiles import ModelProfile
from ..timeline import Event
from .blocks import (
    DDP_BUCKET_BYTES,
    _bytes_option,
    _compute_events,
    _result,
    _send_in_order,
    _validated,
    decoupled,
    greedy_buckets,
    serial_ends,
)
from .core import SCHEDULES, B, C, Configurations, F, IterationResult, Schedule


def _zero(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          bucket_bytes: Any = DDP_BUCKET_BYTES, allgather_bucket_bytes: Any = DDP_BUCKET_BYTES, **params: Any
          ) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    ag_cap = _bytes_option("allgather_bucket_bytes", allgather_bucket_bytes)
    rs_name, ag_name = _decoupled(collective)
    rs, ag = Comm("reduce_scatter", p, env, rs_name, params), Comm("allgather", p, env, ag_name, params)
    events, ready = _compute_events(prof)
    if p > 1:
        back = np.arange(len(prof) - 1, -1, -1)
        groups = [[int(back[j]) for j in g] for g in greedy_buckets(nbytes[back], cap)]
        rs_events, link = _send_in_order(groups, ready, nbytes, rs, "reduce_scatter", names)
        fwd = list(range(len(prof)))
        ag_groups = [[fwd[j] for j in g] for g in greedy_buckets(nbytes, ag_cap)]
        done = np.full(len(prof), max(link, prof.compute_s))  # parameters gathered after the optimizer step
        ag_events, _ = _send_in_order(ag_groups, done, nbytes, ag, "allgather", names, link)
        events += rs_events + ag_events
    return _result("zero", p, prof, events, stage="ZeRO-1/2")


def _zero_kernel(cfg: Configurations, collective: str | None = None, *, bucket_bytes: Any = DDP_BUCKET_BYTES,
                 allgather_bucket_bytes: Any = DDP_BUCKET_BYTES, **params: Any) -> np.ndarray:
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    ag_cap = _bytes_option("allgather_bucket_bytes", allgather_bucket_bytes)
    rs_name, ag_name = _decoupled(collective)
    nbytes = cfg.nbytes
    back = np.arange(len(nbytes) - 1, -1, -1)
    rs_groups = [[int(back[j]) for j in g] for g in greedy_buckets(nbytes[back], cap)]
    rs_sizes = np.array([nbytes[g].sum() for g in rs_groups])[None, :]
    rs_ready = np.array([cfg.ready[g].max() for g in rs_groups])
    link = serial_ends(rs_ready, cfg.comm("reduce_scatter", rs_name, params)(rs_sizes))[:, -1]
    ag_sizes = np.array([nbytes[g].sum() for g in greedy_buckets(nbytes, ag_cap)])[None, :]
    gathered = np.maximum(link, cfg.prof.compute_s)  # after the optimizer step, back to back
    return gathered + cfg.comm("allgather", ag_name, params)(ag_sizes).sum(axis=1)


def _decoupled(collective: Any) -> tuple[str | None, str | None]:
    """(reduce-scatter, allgather) algorithms of a sharded schedule; see ``blocks.decoupled``."""
    return decoupled(collective, "sharded schedules")


def _fsdp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          unit_bytes: Any = DDP_BUCKET_BYTES, **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("unit_bytes", unit_bytes)
    if p == 1:
        return _result("fsdp", p, prof, _compute_events(prof)[0], units=0)
    rs_name, ag_name = _decoupled(collective)
    rs, ag = Comm("reduce_scatter", p, env, rs_name, params), Comm("allgather", p, env, ag_name, params)
    units = greedy_buckets(nbytes, cap)  # consecutive layers in forward order
    size = np.array([nbytes[u].sum() for u in units])
    t_ag, t_rs = ag(size), rs(size)
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    label = [names[u[0]] if len(u) == 1 else f"{names[u[0]]}..{names[u[-1]]} ({len(u)})" for u in units]
    events: list[Event] = []
    link = 0.0

    def send(kind: str, j: int, issued: float, dt: float) -> float:
        nonlocal link
        s = max(link, issued)
        link = s + float(dt)
        events.append(Event("comm", kind, label[j], s, link, float(size[j])))
        return link

    ag_end = {0: send("allgather", 0, 0.0, t_ag[0])}
    t = 0.0
    for j, u in enumerate(units):  # forward, prefetching one unit ahead
        start = max(t, ag_end[j])
        if j + 1 < len(units):
            ag_end[j + 1] = send("allgather", j + 1, start, t_ag[j + 1])
        for i in u:
            events.append(Event("compute", "forward", names[i], start, start + fwd[i]))
            start += fwd[i]
        t = start
    last = len(units) - 1
    agb_end = {last: send("allgather", last, t, t_ag[last])}
    for j in range(last, -1, -1):  # backward, prefetching the previous unit before this unit's RS
        start = max(t, agb_end[j])
        if j - 1 >= 0:
            agb_end[j - 1] = send("allgather", j - 1, start, t_ag[j - 1])
        for i in reversed(units[j]):
            events.append(Event("compute", "backward", names[i], start, start + bwd[i]))
            start += bwd[i]
        t = start
        send("reduce_scatter", j, t, t_rs[j])
    return _result("fsdp", p, prof, events, units=len(units))


def _fsdp_kernel(cfg: Configurations, collective: str | None = None, *, unit_bytes: Any = DDP_BUCKET_BYTES,
                 **params: Any) -> np.ndarray:
    """:func:`_fsdp` for many configurations: the same per-unit recurrence on arrays of configurations."""
    cap = _bytes_option("unit_bytes", unit_bytes)
    rs_name, ag_name = _decoupled(collective)
    prof, nbytes = cfg.prof, cfg.nbytes
    units = greedy_buckets(nbytes, cap)
    size = np.array([nbytes[u].sum() for u in units])[None, :]
    t_ag = cfg.comm("allgather", ag_name, params)(size)
    t_rs = cfg.comm("reduce_scatter", rs_name, params)(size)
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    unit_f = np.array([fwd[u].sum() for u in units])
    unit_b = np.array([bwd[u].sum() for u in units])
    link = t_ag[:, 0].copy()
    ag_end = {0: link}
    t = np.zeros_like(link)
    for j in range(len(units)):  # forward, prefetching one unit ahead
        start = np.maximum(t, ag_end[j])
        if j + 1 < len(units):
            link = ag_end[j + 1] = np.maximum(link, start) + t_ag[:, j + 1]
        t = start + unit_f[j]
    last = len(units) - 1
    link = agb_end = np.maximum(link, t) + t_ag[:, last]
    for j in range(last, -1, -1):  # backward, prefetching the previous unit before this unit's RS
        start = np.maximum(t, agb_end)
        if j - 1 >= 0:
            link = agb_end = np.maximum(link, start) + t_ag[:, j - 1]
        t = start + unit_b[j]
        link = np.maximum(link, t) + t_rs[:, j]
    return np.maximum(np.maximum(link, t), prof.compute_s)


for _entry in (
    Schedule("zero", "ZeRO-1/2: bucketed reduce-scatter of gradients in backward, all-gather of updated "
             "parameters after the step (2 Psi bytes)",
             "Rajbhandari et al., 'ZeRO: memory optimizations toward training trillion parameter models', SC 2020",
             "reduce_scatter", {"bucket_bytes": DDP_BUCKET_BYTES, "allgather_bucket_bytes": DDP_BUCKET_BYTES},
             _zero, vectorized=_zero_kernel),
    Schedule("fsdp", "ZeRO-3 / FSDP full shard: all-gather per unit before forward and before backward "
             "(prefetched), reduce-scatter after each unit's backward (3 Psi bytes)",
             "Zhao et al., 'PyTorch FSDP: experiences on scaling fully sharded data parallel', VLDB 2023; "
             "Rajbhandari et al., SC 2020 (ZeRO stage 3)", "allgather", {"unit_bytes": DDP_BUCKET_BYTES},
             _fsdp, perfect_overlap=sp.Max(F + B, C), vectorized=_fsdp_kernel),
):
    SCHEDULES.register(_entry)
