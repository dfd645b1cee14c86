"""Interference, host overhead and the optimizer step in BSP, WFBP, fusion, MG-WFBP, ps and local SGD.

Each schedule becomes a task graph on the piecewise-rate engine (:mod:`.engine`, where the interference
recurrence is derived); where interference, host overhead and the optimizer step are all 0 the graph
gives the schedule's own recurrences (tested to 1e-12). Placements, and their sources:

* **bsp**: the messages are issued after backward, one after the other from the training thread, each a
  blocking ``all_reduce`` (``runners/training/exact_allreduce.py``: BSP), so the thread pays o, waits for the
  message, then issues the next: T = F + B + sum_j (o + t_j) + the optimizer step (one message of every
  gradient with ``flatten``). Communication never overlaps compute: interference has no effect.
* **wfbp**, **fusion**, **mgwfbp**: PyTorch DDP issues a bucket's all-reduce from the autograd hook of its
  last gradient (``reducer.cpp``: ``mark_variable_ready`` -> ``all_reduce_bucket``), on the backward
  thread, so o delays the backward of the layers after it; Horovod and MG-WFBP's ``dopt.py`` likewise
  enqueue from the gradient hooks. A bucket's further messages (PowerSGD's P and Q, chained by futures)
  pay no o on that thread. The optimizer step after the last message (``optimizer.step()`` after
  ``backward()``, whose end waits for the buckets). MG-WFBP plans its merges with its own model:
  interference-free layer times and a per-message saving a = latency + o.
* **ps** (BytePS): pushes and pulls are issued by communication threads (BytePS's per-stage loops):
  o is serial with that thread's other issues, not with compute; push j is issued once its tensor's
  gradient is ready, pull j once push j has been summed. The optimizer step after the last pull.
* **local_sgd**: no overlap: F + B + the local step every iteration, and the averaging (o + its
  all-reduce) every H steps.

Interference slows a compute task while any message (ps: a push or a pull) is in flight, by the same
1 + kappa_c; the optimizer step is compute.

**Memory passes over the gradients** (host work on the training thread, each q = ``pass_s_per_byte`` of the
profile per byte: :attr:`.core.Configurations.pass_time`, 0 where p = 1), as the runners and the frameworks
do them: bsp divides every gradient by p before the step (one pass; ``flatten``: ``torch.cat`` at the issue
and the copy back too, three); wfbp and MG-WFBP divide likewise, and MG-WFBP copies each group of several
tensors into a flat buffer at its issue; DDP (``reducer.cpp``: ``mark_variable_ready_dense`` scales each
gradient into its bucket with ``mul_out``, ``finalize_bucket_dense`` copies the bucket back unless
``gradient_as_bucket_view``) pays a pass over a bucket's bytes at its issue and one over all the gradients
before the step. With q = 0 (a profile without an optimizer step, or ``pass_s_per_byte`` measured 0) every
graph is the one without them.

How the terms enter the recurrences (derived here, with :mod:`.engine`'s pair rule): bsp and local SGD
stay closed (bsp: T = F + B + sum_j (o + t_j) + U; local SGD: T = F + B + U + (o + t)/H). In WFBP,
fusion and MG-WFBP, o only moves readiness, r_j = F + sum of the backward and the o's before message j,
but ``e_j = max(e_{j-1}, r_j) + t_j`` holds in wall time only where a message overlaps no backward:
over an overlap both stretch, and the backward's stretch moves every later r_j, so the two recurrences
(the backward's ends and the link's) are advanced together, event by event, by the engine. ps is the
same with two more stages (the threads' issues) in its flow shop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import CommscopeError
from ..timeline import Event
from .blocks import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    _bytes_option,
    buffer_events,
    chain_prices,
    chained_prices,
)
from .core import TERMS, Configurations, TermsRun
from .engine import COMM, COMPUTE, HOST, Graph, events, run_many, run_one
from .sequential import BYTEPS_PARTITION_BYTES, _fusion_buckets, _ps_plan, buffer_prices, mgwfbp_plan

KEY_END = 1e9  # place of the optimizer step on the compute stream, after everything else


def compute_stream(g: Graph, cfg: Configurations) -> np.ndarray:
    """Forward (keys below 0) then backward from the last layer (key 2j for the j-th in backward order,
    so that a task at 2j + 1 comes right after it); returns each layer's backward task id."""
    prof = cfg.prof
    n = len(prof)
    names = [x.name for x in prof.layers]
    g.add("compute", COMPUTE, np.array(prof.column("forward_s")), np.arange(n) - 2.0 * n - 2,
          labels=[("forward", x) for x in names])
    back = np.arange(n - 1, -1, -1)
    ids = g.add("compute", COMPUTE, np.array(prof.column("backward_s"))[back], 2.0 * np.arange(n),
                labels=[("backward", names[i]) for i in back])
    return ids[::-1]  # by layer index


def after(layer: int, n: int) -> float:
    """Key of a task right after ``layer``'s backward on the compute stream."""
    return 2.0 * (n - 1 - layer) + 1


def group_label(names: list[str], g: list[int]) -> str:
    return names[g[0]] if len(g) == 1 else f"{names[g[-1]]}..{names[g[0]]} ({len(g)})"


def run_graph(g: Graph, cfg: Configurations, record: bool, optimizer: Any, **details: Any) -> TermsRun:
    """Run the graph: the timeline of one configuration (``record``), or the times of all of them."""
    kc, km = cfg.env.kappa_c.reshape(-1), cfg.env.kappa_m.reshape(-1)
    if record:
        f = g.freeze()
        end, starts, ends = run_one(f, float(kc[0]), float(km[0]))
        time, evs = np.array([end]), events(f, starts, ends)
        sends = int(cfg.p.reshape(-1)[0]) > 1  # p = 1 sends nothing: no messages on the timeline
        evs = [e for e in evs if (e.kind not in ("issue", "optimizer", "copy") or e.end > e.start)
               and (sends or e.stream == "compute")]
    else:
        f = g.freeze(merge=True)
        time, evs = run_many(f, kc, km), None
    return TermsRun(time, evs, {**details, "communication_s": f.total(COMM, "comm"), "host_overhead_s": f.total(HOST),
                                "compute_loss_s": f.loss(),
                                "optimizer_s": np.broadcast_to(np.asarray(optimizer, float), time.shape).copy()})


def passes_before_step(g: Graph, cfg: Configurations, passes: float, dep: Any, label: str) -> None:
    """``passes`` memory passes over all gradient bytes on the training thread once ``dep`` has ended, right
    before the optimizer step (copies out of a flat buffer, the averaging division): passes x q x N, host work
    (:attr:`Configurations.pass_time`)."""
    g.add("compute", HOST, passes * cfg.pass_time * float(cfg.nbytes.sum()), KEY_END - 0.5, dep=dep,
          labels=("copy", label))


def messages_in_order(cfg: Configurations, groups: list[list[int]], times: np.ndarray, record: bool,
                      kind: str = "allreduce", after_backward: bool = False, copy_in: Any = 0.0,
                      passes_after: float = 0.0, after_label: str = "", floor: Any = 0.0, loss: Any = 0.0,
                      **details: Any) -> TermsRun:
    """Messages of ``groups`` (backward order) on one link, each issued (o on the compute stream) after the
    backward of its last gradient, or all after backward (``after_backward``: BSP); then the optimizer step.
    ``copy_in`` (a number, or one per group): memory passes over a group's bytes its issue makes (copying the
    gradients into a flat buffer); ``passes_after``: passes over all gradient bytes before the step
    (``after_label`` names them); ``floor``: each message's least time beside compute
    (:meth:`Configurations.contended_floor`); ``loss``: the compute each takes from beside it
    (:meth:`Configurations.compute_loss`)."""
    prof = cfg.prof
    n, names = len(prof), [x.name for x in prof.layers]
    g = Graph(len(cfg.p))
    compute_stream(g, cfg)
    nbytes = np.array(cfg.prof.column("grad_bytes"))
    sizes = np.array([nbytes[x].sum() for x in groups])
    keys = (2.0 * n + np.arange(len(groups)) if after_backward else np.array([after(min(x), n) for x in groups]))
    issue = g.add("compute", HOST, cfg.overhead + cfg.pass_time * np.asarray(copy_in, float) * sizes, keys,
                  labels=[("issue", group_label(names, x)) for x in groups])
    sent = g.add("comm", COMM, times, np.arange(len(groups)), dep=issue,
                 labels=[(kind, group_label(names, x)) for x in groups], nbytes=sizes, floor=floor, loss=loss)
    if passes_after:
        passes_before_step(g, cfg, passes_after, sent[-1], after_label)
    g.add("compute", COMPUTE, prof.optimizer_s, KEY_END, dep=sent[-1], labels=("optimizer", "step"))
    return run_graph(g, cfg, record, prof.optimizer_s, **details)


def _per_tensor(cfg: Configurations, collective: str | None, record: bool, params: Mapping[str, Any],
                after_backward: bool) -> TermsRun:
    n = len(cfg.prof)
    groups = [[i] for i in range(n - 1, -1, -1)]
    sizes = cfg.nbytes[::-1][None, :]
    comm = cfg.comm("allreduce", collective, params)
    times = chain_prices(comm, sizes)
    return messages_in_order(cfg, groups, times, record, after_backward=after_backward, passes_after=1.0,
                             after_label="gradients averaged",
                             floor=cfg.contended_floor(comm, sizes), loss=cfg.compute_loss(comm, sizes),
                             messages=n if int(cfg.p.max()) > 1 else 0)


def _bsp(cfg: Configurations, collective: str | None, record: bool, *, flatten: bool = False,
         **params: Any) -> TermsRun:
    """Blocking messages after backward: each waits for the one before it, o then the message on the thread
    (issue j waits for message j - 1)."""
    prof = cfg.prof
    n, names = len(prof), [x.name for x in prof.layers]
    back = list(range(n - 1, -1, -1))
    groups = [back] if flatten else [[i] for i in back]
    sizes = np.array([[cfg.nbytes[x].sum() for x in groups]])
    comm = cfg.comm("allreduce", collective, params)
    times = chain_prices(comm, sizes)
    g = Graph(len(cfg.p))
    compute_stream(g, cfg)
    j, label = np.arange(len(groups)), [group_label(names, x) for x in groups]
    sent = g.size + len(groups) + j  # the messages' ids: added right after the issues
    g.add("compute", HOST, cfg.overhead + (cfg.pass_time * sizes if flatten else 0.0), 2.0 * n + j,
          dep=np.where(j > 0, sent - 1, -1), labels=[("issue", x) for x in label])
    g.add("comm", COMM, times, j, dep=sent - len(groups), labels=[("allreduce", x) for x in label], nbytes=sizes[0],
          floor=cfg.contended_floor(comm, sizes), loss=cfg.compute_loss(comm, sizes))
    passes_before_step(g, cfg, 2.0 if flatten else 1.0, sent[-1],
                       "flat buffer to gradients, averaged" if flatten else "gradients averaged")
    g.add("compute", COMPUTE, prof.optimizer_s, KEY_END, dep=sent[-1], labels=("optimizer", "step"))
    return run_graph(g, cfg, record, prof.optimizer_s, messages=len(groups) if int(cfg.p.max()) > 1 else 0)


def _wfbp(cfg: Configurations, collective: str | None, record: bool, **params: Any) -> TermsRun:
    return _per_tensor(cfg, collective, record, params, after_backward=False)


def _fusion(cfg: Configurations, collective: str | None, record: bool, *, bucket_bytes: Any = DDP_BUCKET_BYTES,
            first_bucket_bytes: Any = DDP_FIRST_BUCKET_BYTES, broadcast_buffers: Any = True,
            **params: Any) -> TermsRun:
    cap = _bytes_option("bucket_bytes", bucket_bytes)
    first = _bytes_option("first_bucket_bytes", first_bucket_bytes)
    groups, sizes = _fusion_buckets(cfg.prof, cap, first)
    comm = cfg.comm("allreduce", collective, params)
    times = chained_prices(comm, sizes)
    run = messages_in_order(cfg, groups, times, record, copy_in=1.0, passes_after=1.0,
                            after_label="buckets to gradients", buckets=len(groups),
                            floor=chained_prices(lambda x: cfg.contended_floor(comm, x), sizes),
                            loss=chained_prices(lambda x: cfg.compute_loss(comm, x), sizes))
    return before_forward(run, cfg.prof, buffer_prices(cfg.prof, cfg.env, cfg.p, collective, broadcast_buffers))


def before_forward(run: TermsRun, prof: Any, prices: np.ndarray) -> TermsRun:
    """``run`` after DDP's blocking buffer broadcasts, which precede the forward, ``prices`` (C, k)
    (:func:`.sequential.buffer_prices`): nothing runs beside them, and each is o on the training thread then its
    time on the link, o + l = its price (:class:`.core.LinkComm`), so the iteration is longer by their sum and the
    timeline starts later by it."""
    total = prices.sum(axis=-1)
    if not prices.shape[-1] or not np.any(total):
        return run
    evs = None
    if run.events is not None:
        t0 = float(total[0])
        evs = buffer_events(prof, prices[0]) + [replace(e, start=e.start + t0, end=e.end + t0) for e in run.events]
    return TermsRun(run.time + total, evs, {**run.details, "buffer_broadcast_s": total})


def _mgwfbp(cfg: Configurations, collective: str | None, record: bool, **params: Any) -> TermsRun:
    """A possible message after every layer, of no work where MG-WFBP's plan does not close a group there."""
    comm = cfg.comm("allreduce", collective, params)
    prof = cfg.prof
    n, names = len(prof), [x.name for x in prof.layers]
    close, size, _ = mgwfbp_plan(cfg, comm)
    back = np.arange(n - 1, -1, -1)
    close, size = close[:, back], size[:, back]  # backward order
    times = np.where(close, chain_prices(comm, size, sent=close), 0.0)
    floor = np.where(close, cfg.contended_floor(comm, size), 0.0)
    loss = np.where(close, cfg.compute_loss(comm, size), 0.0)
    g = Graph(len(cfg.p))
    compute_stream(g, cfg)
    groups, cur = {}, []  # the first configuration's groups, by the position of their message (timeline labels)
    for j, i in enumerate(back):
        cur.append(int(i))
        if close[0, j]:
            groups[j], cur = cur, []
    label = [group_label(names, groups[j]) if j in groups else "" for j in range(n)]
    # a group of several tensors is copied into a flat buffer at its issue (one pass over its bytes)
    at = np.arange(n)
    last_close = np.maximum.accumulate(np.where(close, at, -1), axis=1)
    members = np.where(close, at - np.concatenate([np.full((len(close), 1), -1), last_close[:, :-1]], axis=1), 0)
    copied = np.where(members > 1, size, 0.0)
    issue = g.add("compute", HOST, np.where(close, cfg.overhead, 0.0) + cfg.pass_time * copied,
                  [after(i, n) for i in back], labels=[("issue", x) if x else ("", "") for x in label])
    sent = g.add("comm", COMM, times, np.arange(n), dep=issue, nbytes=size[0], floor=floor, loss=loss,
                 labels=[("allreduce", x) if x else ("", "") for x in label])
    passes_before_step(g, cfg, 1.0, sent[-1], "gradients averaged")
    g.add("compute", COMPUTE, prof.optimizer_s, KEY_END, dep=sent[-1], labels=("optimizer", "step"))
    return run_graph(g, cfg, record, prof.optimizer_s, groups=close.sum(axis=1) if int(cfg.p.max()) > 1 else 0)


def _ps(cfg: Configurations, collective: str | None, record: bool, *, k: int | None = None,
        partition_bytes: Any = BYTEPS_PARTITION_BYTES, **params: Any) -> TermsRun:
    """BytePS: push and pull of each partition on the two directions of the link, each issued (o) by its
    communication thread; see ``sequential._push_pull`` for the pipeline."""
    layer_of, size_of, ps_params = _ps_plan(cfg.nbytes, collective, k, partition_bytes, params)
    comm = cfg.comm("allreduce", "parameter_server", ps_params)
    half, half_floor = comm(size_of[None, :]) / 2, cfg.contended_floor(comm, size_of[None, :]) / 2
    half_loss = cfg.compute_loss(comm, size_of[None, :]) / 2
    names = [x.name for x in cfg.prof.layers]
    g = Graph(len(cfg.p))
    bwd = compute_stream(g, cfg)
    j = np.arange(len(size_of))
    lab = [names[i] for i in layer_of]
    # with o = 0 everywhere the threads are dropped: their issues would end at what they wait for, in order
    threads = bool(cfg.overhead.any())
    push_issue = g.add("push thread", HOST, cfg.overhead, j, dep=bwd[layer_of],
                       labels=[("issue", x) for x in lab]) if threads else bwd[layer_of]
    push = g.add("comm", COMM, half, j, dep=push_issue, labels=[("push", x) for x in lab], nbytes=size_of,
                 floor=half_floor, loss=half_loss)
    pull_issue = g.add("pull thread", HOST, cfg.overhead, j, dep=push, labels=[("issue", x) for x in lab]) \
        if threads else push
    pull = g.add("pull", COMM, half, j, dep=pull_issue, labels=[("pull", x) for x in lab], nbytes=size_of,
                 floor=half_floor, loss=half_loss)
    g.add("compute", COMPUTE, cfg.prof.optimizer_s, KEY_END, dep=pull[-1], labels=("optimizer", "step"))
    return run_graph(g, cfg, record, cfg.prof.optimizer_s, servers=int(cfg.p.max()) if k is None else k,
                     partitions=len(size_of))


def _local_sgd(cfg: Configurations, collective: str | None, record: bool, *, H: int = 8, **params: Any) -> TermsRun:
    if isinstance(H, bool) or not isinstance(H, (int, np.integer)) or H < 1:
        raise CommscopeError(f"H (local steps between averagings) must be a positive integer, got {H!r}")
    prof = cfg.prof
    total = float(cfg.nbytes.sum())
    averaging = chain_prices(cfg.comm("allreduce", collective, params), np.array([[total]]))[:, 0] + cfg.overhead[:, 0]
    step = prof.compute_s + prof.optimizer_s
    evs = None
    if record:
        g = Graph(1)
        compute_stream(g, cfg)
        f = g.freeze()
        evs = events(f, *run_one(f, 0.0, 0.0)[1:])
        evs.append(Event("compute", "optimizer", "step", prof.compute_s, step))
        if int(cfg.p.reshape(-1)[0]) > 1:
            evs.append(Event("comm", "allreduce", f"model average (every {H} steps)", step,
                             step + float(averaging[0]), total))
    return TermsRun(step + averaging / H, evs,
                    {"H": H, "averaging_time": averaging, "step_with_averaging": step + averaging,
                     "communication_s": averaging - cfg.overhead[:, 0], "host_overhead_s": cfg.overhead[:, 0],
                     "optimizer_s": np.full(len(averaging), prof.optimizer_s)})


TERMS.update(bsp=_bsp, wfbp=_wfbp, fusion=_fusion, mgwfbp=_mgwfbp, ps=_ps, local_sgd=_local_sgd)
