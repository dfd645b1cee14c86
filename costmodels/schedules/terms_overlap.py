"""Interference, host overhead and the optimizer step in DeAR, ZeRO-1/2 and FSDP (task graphs on :mod:`.engine`).

Placements, and their sources:

* **dear** (``dopt_rsag.py``, lzhangbv/dear_pytorch): a group's reduce-scatter is issued from the gradient
  hook that completes it (o on the backward thread); ``_bp_barrier`` waits for every reduce-scatter and
  issues group 0's all-gather (o); the forward pre-hook of group g's first module waits for its
  all-gather, issues group g+1's (o) and then, module by module, ``_update_one_module`` runs the
  optimizer step of the module before its forward: the optimizer step per module, inside the forward.
  One iteration starts when group 0's all-gather ends, with nothing in flight, so every iteration is
  the same and the period is one iteration of the graph.
* **zero** (DeepSpeed ``stage_1_and_2.py``): a bucket's reduction is issued from the hook of the gradient
  that would overflow it (o on the backward thread; with ``overlap_comm`` after waiting for the previous
  reduction, without it the backward waits for this one); the step updates this worker's shard: 1/p of
  the optimizer time, once every reduction has ended; then the main thread issues the all-gathers (o each).
* **fsdp** (torch ``fsdp/_runtime_utils.py``): all-gathers are issued by the training thread from the
  pre-forward and pre-backward hooks (after waiting for the unit's own), reduce-scatters from the
  post-backward hook (o each); ``optimizer.step()`` on the sharded parameters (1/p of the optimizer time)
  once backward, whose end waits for the last reduce-scatter, returns.

Memory passes (q per byte, :attr:`.core.Configurations.pass_time`; ``runners/training/exact_sharded.py``): DeAR
and ZeRO flatten a group into its buffer at the reduce-scatter's issue (a pass over its bytes), ZeRO divides the
shard by p before the shard's step (1/p of a pass over the gradients), and both copy the gathered parameters
into place once an all-gather has ended (DeAR before the group's first step, ZeRO after each all-gather).
FSDP's flat parameters are views: no pass is priced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..messages import Comm
from .blocks import DDP_BUCKET_BYTES, _bytes_option, decoupled
from .core import TERMS, Configurations, TermsRun
from .engine import COMM, COMPUTE, HOST, Graph
from .overlap import _dear_forward_groups
from .sharded import DEEPSPEED_BUCKET_ELEMENTS, _fsdp_units, _overlap, _zero_plan
from .terms import KEY_END, compute_stream, group_label, run_graph


class Stream:
    """Tasks appended to one stream in the order they run (keys 0, 1, 2, ...)."""

    def __init__(self, g: Graph, name: str) -> None:
        self.g, self.name, self.next = g, name, 0

    def add(self, kind: int, work: Any, dep: Any = -1, label: tuple[str, str] = ("", ""), nbytes: float = 0.0,
            floor: Any = 0.0, loss: Any = 0.0) -> int:
        self.next += 1
        return int(self.g.add(self.name, kind, np.asarray(work, dtype=float).reshape(-1, 1), self.next, dep,
                              label, nbytes, np.asarray(floor, dtype=float).reshape(-1, 1),
                              np.asarray(loss, dtype=float).reshape(-1, 1))[0])


# ---------------------------------------------------------------------------------------- DeAR
def dear_graph(cfg: Configurations, groups: list[list[int]], rs: Comm, ag: Comm, record: bool) -> TermsRun:
    """One DeAR iteration from the end of group 0's all-gather (groups in forward order)."""
    prof, nbytes = cfg.prof, cfg.nbytes
    names = [x.name for x in prof.layers]
    fwd, bwd, opt = (np.array(prof.column(c)) for c in ("forward_s", "backward_s", "optimizer_s"))
    sizes = np.array([nbytes[x].sum() for x in groups])
    t_rs, t_ag = rs(sizes[None, :]), ag(sizes[None, :])
    f_rs, f_ag = (np.broadcast_to(cfg.contended_floor(x, sizes[None, :]), t_rs.shape) for x in (rs, ag))
    l_rs, l_ag = (np.broadcast_to(cfg.compute_loss(x, sizes[None, :]), t_rs.shape) for x in (rs, ag))
    labels = [group_label(names, x[::-1]) for x in groups]
    g = Graph(len(cfg.p))
    cs, link = Stream(g, "compute"), Stream(g, "comm")
    ag_end = [-1] * len(groups)
    for j, group in enumerate(groups):  # forward: wait for the group's all-gather, issue the next one's
        wait = ag_end[j]
        if j + 1 < len(groups):
            issue = cs.add(HOST, cfg.overhead, wait, ("issue", labels[j + 1]))
            ag_end[j + 1] = link.add(COMM, t_ag[:, j + 1], issue, ("allgather", labels[j + 1]), sizes[j + 1],
                                     f_ag[:, j + 1], l_ag[:, j + 1])
            wait = -1
        # the gathered group copied into its parameters, before the group's first step
        wait = cs.add(HOST, cfg.pass_time[:, 0] * sizes[j], wait, ("copy", labels[j]))
        for i in group:
            cs.add(COMPUTE, opt[i], wait, ("optimizer", names[i]))
            cs.add(COMPUTE, fwd[i], label=("forward", names[i]))
            wait = -1
    closes = {x[0]: j for j, x in enumerate(groups)}  # a group's last gradient is its first layer's
    for i in range(len(prof) - 1, -1, -1):
        cs.add(COMPUTE, bwd[i], label=("backward", names[i]))
        if i in closes:
            j = closes[i]
            issue = cs.add(HOST, cfg.overhead[:, 0] + cfg.pass_time[:, 0] * sizes[j], label=("issue", labels[j]))
            last_rs = link.add(COMM, t_rs[:, j], issue, ("reduce_scatter", labels[j]), sizes[j], f_rs[:, j],
                               l_rs[:, j])
    issue = cs.add(HOST, cfg.overhead, last_rs, ("issue", labels[0]))  # step(): _bp_barrier
    link.add(COMM, t_ag[:, 0], issue, ("allgather", labels[0]), sizes[0], f_ag[:, 0], l_ag[:, 0])
    return run_graph(g, cfg, record, prof.optimizer_s, groups=len(groups))


def _dear(cfg: Configurations, collective: Any, record: bool, *, buffer_bytes: Any = DDP_BUCKET_BYTES,
          **params: Any) -> TermsRun:
    cap = _bytes_option("buffer_bytes", buffer_bytes)
    rs_name, ag_name = decoupled(collective, "dear")
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    out = dear_graph(cfg, _dear_forward_groups(cfg.nbytes, cap), rs, ag, record)
    return TermsRun(out.time, out.events, {**out.details, "buffer_bytes": cap})


# ---------------------------------------------------------------------------------------- ZeRO
def _zero(cfg: Configurations, collective: Any, record: bool, *, reduce_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS,
          allgather_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS, overlap_comm: bool = False, bucket_bytes: Any = None,
          allgather_bucket_bytes: Any = None, **params: Any) -> TermsRun:
    prof = cfg.prof
    buckets, _, ag_sizes = _zero_plan(prof, reduce_bucket_size, allgather_bucket_size, bucket_bytes,
                                      allgather_bucket_bytes)
    overlap = _overlap(overlap_comm)
    rs_name, ag_name = decoupled(collective, "sharded schedules")
    sizes = np.array([cfg.nbytes[x].sum() for x in buckets])
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    t_rs, t_ag = rs(sizes[None, :]), ag(ag_sizes[None, :])
    f_rs = np.broadcast_to(cfg.contended_floor(rs, sizes[None, :]), t_rs.shape)
    f_ag = np.broadcast_to(cfg.contended_floor(ag, ag_sizes[None, :]), t_ag.shape)
    l_rs = np.broadcast_to(cfg.compute_loss(rs, sizes[None, :]), t_rs.shape)
    l_ag = np.broadcast_to(cfg.compute_loss(ag, ag_sizes[None, :]), t_ag.shape)
    names, n = [x.name for x in prof.layers], len(prof)
    g = Graph(len(cfg.p))
    compute_stream(g, cfg)
    hooks = [2.0 * (n - 1 - buckets[b + 1][0]) + 1 for b in range(len(buckets) - 1)] + [2.0 * n]
    reduced = -1
    for b, key in enumerate(hooks):  # at hook b: (overlap_comm) wait for reduction b-1, then issue b
        label = group_label(names, buckets[b])
        issue = int(g.add("compute", HOST, cfg.overhead + cfg.pass_time * sizes[b], key, reduced if overlap else -1,
                          ("issue", label))[0])
        reduced = int(g.add("comm", COMM, t_rs[:, b:b + 1], b, issue, ("reduce_scatter", label), sizes[b],
                            f_rs[:, b:b + 1], l_rs[:, b:b + 1])[0])
        if not overlap:  # the reduction runs on the compute stream: backward goes on once it has ended
            g.add("compute", HOST, 0.0, key + 0.5, reduced)
    # the shard averaged (one pass over 1/p of the gradient bytes), then the shard's step
    g.add("compute", HOST, cfg.pass_time * float(cfg.nbytes.sum()) / cfg.p, KEY_END - 0.5, reduced,
          ("copy", "shard averaged"))
    step = prof.optimizer_s / cfg.p[:, 0]
    g.add("compute", COMPUTE, step[:, None], KEY_END, reduced, ("optimizer", "step (shard)"))
    for j in range(len(ag_sizes)):
        label = f"parameters {j + 1}/{len(ag_sizes)}"
        issue = g.add("compute", HOST, cfg.overhead, KEY_END + 1 + j, labels=("issue", label))
        gathered = g.add("comm", COMM, t_ag[:, j:j + 1], len(buckets) + j, issue, ("allgather", label), ag_sizes[j],
                         f_ag[:, j:j + 1], l_ag[:, j:j + 1])
        g.add("compute", HOST, cfg.pass_time * ag_sizes[j], KEY_END + 1 + len(ag_sizes) + j, gathered,
              ("copy", label))  # the gathered parameters copied into place
    return run_graph(g, cfg, record, step, stage="ZeRO-1/2", buckets=len(buckets), overlap_comm=overlap)


# ---------------------------------------------------------------------------------------- FSDP
def _fsdp(cfg: Configurations, collective: Any, record: bool, *, unit_bytes: Any = None, **params: Any) -> TermsRun:
    """``sharded._fsdp_run``'s recurrence as a graph: each send issued (o) by the training thread."""
    prof, nbytes = cfg.prof, cfg.nbytes
    units, root = _fsdp_units(nbytes, unit_bytes)
    rs_name, ag_name = decoupled(collective, "sharded schedules")
    size = np.array([nbytes[u].sum() for u in units])
    ag, rs = cfg.comm("allgather", ag_name, params), cfg.comm("reduce_scatter", rs_name, params)
    t_ag, t_rs = ag(size[None, :]), rs(size[None, :])
    f_ag, f_rs = (np.broadcast_to(cfg.contended_floor(x, size[None, :]), t_ag.shape) for x in (ag, rs))
    l_ag, l_rs = (np.broadcast_to(cfg.compute_loss(x, size[None, :]), t_ag.shape) for x in (ag, rs))
    names = [x.name for x in prof.layers]
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    label = [names[u[0]] if len(u) == 1 else f"{names[u[0]]}..{names[u[-1]]} ({len(u)})" for u in units]
    g = Graph(len(cfg.p))
    cs, link = Stream(g, "compute"), Stream(g, "comm")

    def send(kind: str, j: int, dep: int = -1) -> int:
        issue = cs.add(HOST, cfg.overhead, dep, ("issue", label[j]))
        t, f, lost = (t_ag, f_ag, l_ag) if kind == "allgather" else (t_rs, f_rs, l_rs)
        return link.add(COMM, t[:, j], issue, (kind, label[j]), size[j], f[:, j], lost[:, j])

    n = len(units)
    wrapped = n - 1 if root else n  # units re-gathered for backward: all but the root
    ag_end = {n - 1: send("allgather", n - 1)} if root else {}
    if wrapped:
        ag_end[0] = send("allgather", 0)
    for j in range(n):  # forward, prefetching one wrapped unit ahead
        wait = ag_end[j]
        if j + 1 < wrapped:
            ag_end[j + 1], wait = send("allgather", j + 1, wait), -1
        for i in units[j]:
            cs.add(COMPUTE, fwd[i], wait, ("forward", names[i]))
            wait = -1
    agb_end = {} if root or not wrapped else {n - 1: send("allgather", n - 1)}
    for j in range(n - 1, -1, -1):  # backward, prefetching the previous unit before this unit's backward
        wait = -1 if root and j == n - 1 else agb_end[j]
        if j - 1 >= 0:
            agb_end[j - 1], wait = send("allgather", j - 1, wait), -1
        for i in units[j][::-1]:
            cs.add(COMPUTE, bwd[i], wait, ("backward", names[i]))
            wait = -1
        last = send("reduce_scatter", j)
    step = prof.optimizer_s / cfg.p[:, 0]
    cs.add(COMPUTE, step, last, ("optimizer", "step (shard)"))
    return run_graph(g, cfg, record, step, units=len(units), root_unit=root)


TERMS.update(dear=_dear, zero=_zero, fsdp=_fsdp)
