"""Schedules that overlap communication with the next iteration's forward: ByteScheduler and DeAR.

Both are simulated over consecutive iterations until the pattern repeats: the forward of layer l
in iteration k+1 may start only when layer l's parameters are updated, i.e. when its gradient of
iteration k has been fully communicated. The reported ``iteration_time`` is the steady-state
period (between the forward starts of the last two simulated iterations), and the timeline is
that period's window, shifted to start at 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy as sp

from ..environment import Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError
from ..messages import Comm
from ..profiles import ModelProfile
from ..timeline import Event, Timeline
from .blocks import DDP_BUCKET_BYTES, _bytes_option, _validated, decoupled, greedy_buckets, serial_ends
from .core import SCHEDULES, B, C, Configurations, F, IterationResult, Schedule

ITERATIONS = 4  # the pattern repeats from the second iteration on; four leave a margin
CommPlan = Callable[[np.ndarray, float], tuple[list[Event], np.ndarray, float]]


def _steady_state(name: str, prof: ModelProfile, p: int, plan: CommPlan, **details: Any) -> IterationResult:
    """Run ITERATIONS iterations; ``plan(ready, link_free) -> (events, done_per_layer, link_free)``."""
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    names = [x.name for x in prof.layers]
    done = np.zeros(len(prof))  # parameters of iteration 0 are available at t = 0
    t, link, starts, windows = 0.0, 0.0, [], []
    for _ in range(ITERATIONS):
        events = []
        first = True
        for i in range(len(prof)):
            s = max(t, float(done[i]))
            if first:
                starts.append(s)
                first = False
            events.append(Event("compute", "forward", names[i], s, s + fwd[i]))
            t = s + fwd[i]
        ready = np.empty(len(prof))
        for i in range(len(prof) - 1, -1, -1):
            events.append(Event("compute", "backward", names[i], t, t + bwd[i]))
            t += bwd[i]
            ready[i] = t
        comm_events, done, link = plan(ready, link) if p > 1 else ([], ready * 0, link)
        windows.append(events + comm_events)
    period = starts[-1] - starts[-2]
    lo, hi = starts[-2], starts[-1]
    window = [e for es in windows for e in es if lo - 1e-15 <= e.start < hi - 1e-15 or (e.start == e.end == lo)]
    shifted = [Event(e.stream, e.kind, e.label, e.start - lo, e.end - lo, e.nbytes) for e in window]
    return IterationResult(name, p, max(period, prof.compute_s), prof.compute_s, prof.batch_size,
                           Timeline.of(shifted), {**details, "iterations_simulated": ITERATIONS})


# ---------------------------------------------------------------------------------------- DeAR
def _dear_algorithms(collective: Any) -> tuple[str | None, str | None]:
    return decoupled(collective, "dear")


def dear_groups(nbytes: np.ndarray, buffer_bytes: float) -> list[list[int]]:
    """Fused groups of consecutive layers in backward order, each filled up to ``buffer_bytes``."""
    order = np.arange(len(nbytes) - 1, -1, -1)
    return [[int(order[j]) for j in g] for g in greedy_buckets(nbytes[order], buffer_bytes)]


def _dear(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          buffer_bytes: Any = DDP_BUCKET_BYTES, **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("buffer_bytes", buffer_bytes)
    rs_name, ag_name = _dear_algorithms(collective)
    rs = Comm("reduce_scatter", p, env, rs_name, params)
    ag = Comm("allgather", p, env, ag_name, params)
    groups = dear_groups(nbytes, cap)
    sizes = np.array([nbytes[g].sum() for g in groups])
    t_rs, t_ag = rs(sizes), ag(sizes)
    labels = [names[g[0]] if len(g) == 1 else f"{names[g[-1]]}..{names[g[0]]} ({len(g)})" for g in groups]

    def plan(ready: np.ndarray, link: float) -> tuple[list[Event], np.ndarray, float]:
        events, done = [], np.empty(len(ready))
        rs_end = np.empty(len(groups))
        for j, g in enumerate(groups):  # backward order: reduce-scatter as each group's gradients are ready
            s = max(link, float(ready[g].max()))
            link = rs_end[j] = s + t_rs[j]
            events.append(Event("comm", "reduce_scatter", labels[j], s, link, float(sizes[j])))
        for j in range(len(groups) - 1, -1, -1):  # forward order: all-gather before the group's next forward
            s = max(link, rs_end[j])
            link = s + t_ag[j]
            events.append(Event("comm", "allgather", labels[j], s, link, float(sizes[j])))
            done[groups[j]] = link
        return events, done, link

    return _steady_state("dear", prof, p, plan, groups=len(groups), buffer_bytes=cap)


def _dear_kernel(cfg: Configurations, collective: str | None = None, *, buffer_bytes: Any = DDP_BUCKET_BYTES,
                 **params: Any) -> np.ndarray:
    """:func:`_dear`'s steady state for many configurations (see :func:`_dear_period`)."""
    cap = _bytes_option("buffer_bytes", buffer_bytes)
    rs_name, ag_name = _dear_algorithms(collective)
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    return _dear_period(cfg, dear_groups(cfg.nbytes, cap), rs, ag)


def _dear_period(cfg: Configurations, groups: list[list[int]], rs: Comm, ag: Comm) -> np.ndarray:
    """DeAR's steady-state period for each configuration: the event simulation's recurrences
    unrolled by :func:`serial_ends` (the forward waits on the previous iteration's all-gathers
    exactly as the link waits on ready gradients), over ITERATIONS iterations as there."""
    prof, nbytes = cfg.prof, cfg.nbytes
    sizes = np.array([nbytes[g].sum() for g in groups])[None, :]
    t_rs, t_ag = rs(sizes), ag(sizes)
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    first = np.array([min(g) for g in groups])  # the group's last gradient to be ready (backward order)
    group_of = np.empty(len(nbytes), dtype=int)
    for j, g in enumerate(groups):
        group_of[g] = j
    after_backward = np.cumsum(bwd[::-1])[::-1]  # time from backward start to each layer's gradient
    c = t_rs.shape[0]
    done, t, link, starts = np.zeros((c, len(nbytes))), np.zeros(c), np.zeros(c), []
    for _ in range(ITERATIONS):
        starts.append(np.maximum(t, done[:, 0]))
        t = serial_ends(done, np.broadcast_to(fwd, done.shape), t)[:, -1]  # forward, waiting for parameters
        ready = t[:, None] + after_backward[first][None, :]
        t = t + after_backward[0]
        rs_end = serial_ends(ready, t_rs, link)[:, -1]
        ag_end = rs_end[:, None] + np.cumsum(t_ag[:, ::-1], axis=1)[:, ::-1]  # forward order, back to back
        link = ag_end[:, 0]
        done = ag_end[:, group_of]
    return np.maximum(starts[-1] - starts[-2], prof.compute_s)


def _greedy_ends(csum: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """End positions of :func:`greedy_buckets`' groups for every cap at once, one row per cap.

    Each step bisects the running sum ``csum`` for every cap together; rows are padded with
    ``len(csum) - 1`` (the end) once a grouping is complete.
    """
    m = len(csum) - 1
    pos, steps = np.zeros(len(caps), dtype=np.int64), []
    while (pos < m).any():
        pos = np.minimum(m, np.searchsorted(csum, csum[pos] + caps, side="left"))
        steps.append(pos)
    return np.stack(steps, axis=1) if steps else np.zeros((len(caps), 0), dtype=np.int64)


def best_dear_buffer(prof: ModelProfile, env: Environment, p: int, collective: str | None = None,
                     **params: Any) -> tuple[float, IterationResult]:
    """The fusion buffer size that minimises DeAR's iteration time, by exact search.

    The grouping only changes where the threshold crosses a sum of consecutive gradient sizes, so
    trying one threshold per distinct grouping is exhaustive. Candidates: every sum of a run of
    consecutive layers (in backward order) up to the model size, deduplicated by the grouping they
    produce. DeAR's paper tunes this by Bayesian optimisation in [1, 256] MB; the exact search
    finds the optimum of this model instead.
    """
    nbytes, _ = _validated(prof, env, p)
    order = nbytes[::-1]
    csum = np.concatenate([[0.0], np.cumsum(order)])
    runs = np.unique((csum[None, :] - csum[:, None])[np.triu_indices(len(csum), 1)])
    cfg = Configurations(prof, np.array([[p]]), EnvironmentArray.of([env]).reshape(1, 1))
    rs_name, ag_name = _dear_algorithms(collective)
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    ends, first = np.unique(_greedy_ends(csum, runs), axis=0, return_index=True)  # one row per grouping
    best_cap, best_time = None, np.inf
    for row, cap in zip(ends, runs[first], strict=True):
        bounds = (0, *sorted(set(row.tolist())))
        groups = [[len(order) - 1 - i for i in range(a, b)] for a, b in itertools.pairwise(bounds)]
        t = float(_dear_period(cfg, groups, rs, ag)[0])
        if t < best_time or (t == best_time and best_cap is not None and cap < best_cap):
            best_cap, best_time = float(cap), t
    assert best_cap is not None
    return best_cap, _dear(prof, env, p, collective, buffer_bytes=best_cap, **params)


# ------------------------------------------------------------------------------ ByteScheduler
def _bytescheduler(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
                   partition_bytes: Any = 4 * 2**20, credit_bytes: Any = 16 * 2**20, **params: Any
                   ) -> IterationResult:
    """ByteScheduler: whenever the link is free, the ready partitions of highest priority, up to
    ``credit_bytes``, are sent; each partition is its own all-reduce (as in ByteScheduler, where every
    partition is a separate communication task), so a batch of k partitions costs the sum of k
    messages, k latencies included, not one message of their total size."""
    nbytes, names = _validated(prof, env, p)
    part = _bytes_option("partition_bytes", partition_bytes)
    credit = _bytes_option("credit_bytes", credit_bytes)
    if credit < part:
        raise CommscopeError(f"credit_bytes ({credit:g}) must be at least one partition ({part:g} bytes)")
    comm = Comm("allreduce", p, env, collective, params)
    # partitions: (layer, bytes), priority = layer index (closest to the input first)
    parts = [(i, min(part, nbytes[i] - k * part)) for i in range(len(prof))
             for k in range(max(1, math.ceil(nbytes[i] / part)))]
    layer_of = np.array([q[0] for q in parts])
    size_of = np.array([q[1] for q in parts], dtype=float)

    def plan(ready: np.ndarray, link: float) -> tuple[list[Event], np.ndarray, float]:
        events, done = [], np.zeros(len(ready))
        pending = list(range(len(parts)))  # sorted by priority (layer, chunk)
        part_ready = ready[layer_of]
        while pending:
            avail = [q for q in pending if part_ready[q] <= link]
            if not avail:
                link = min(part_ready[q] for q in pending)
                continue
            batch, total = [], 0.0
            for q in avail:  # highest priority first, up to the credit
                if batch and total + size_of[q] > credit:
                    break
                batch.append(q)
                total += size_of[q]
            dt = float(np.sum(comm(size_of[batch])))  # one all-reduce per partition, back to back
            lo, hi = names[layer_of[batch[0]]], names[layer_of[batch[-1]]]
            events.append(Event("comm", "allreduce", lo if lo == hi else f"{lo}..{hi}", link, link + dt, total))
            link += dt
            for q in batch:
                done[layer_of[q]] = max(done[layer_of[q]], link)
            taken = set(batch)
            pending = [q for q in pending if q not in taken]
        return events, done, link

    return _steady_state("bytescheduler", prof, p, plan, partitions=len(parts), partition_bytes=part,
                         credit_bytes=credit)


def _bytescheduler_kernel(cfg: Configurations, collective: str | None = None, *,
                          partition_bytes: Any = 4 * 2**20, credit_bytes: Any = 16 * 2**20, **params: Any
                          ) -> np.ndarray:
    """:func:`_bytescheduler`'s steady state for many configurations at once.

    The priority queue becomes a (configurations x partitions) mask: each step, every configuration
    takes its available partitions in priority order while the running sum stays within the credit
    (the first always fits, since a partition is at most the credit), or, with none available,
    jumps its link to the earliest pending partition. Configurations advance in lock-step; one that
    has emptied its queue idles until the others finish the iteration.
    """
    part = _bytes_option("partition_bytes", partition_bytes)
    credit = _bytes_option("credit_bytes", credit_bytes)
    if credit < part:
        raise CommscopeError(f"credit_bytes ({credit:g}) must be at least one partition ({part:g} bytes)")
    comm = cfg.comm("allreduce", collective, params)
    prof, nbytes = cfg.prof, cfg.nbytes
    counts = np.maximum(1, np.ceil(nbytes / part).astype(int))
    layer_of = np.repeat(np.arange(len(nbytes)), counts)
    chunk = np.arange(len(layer_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    size_of = np.minimum(part, nbytes[layer_of] - chunk * part)
    first_of_layer = np.cumsum(counts) - counts
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    after_backward = np.cumsum(bwd[::-1])[::-1]
    c = cfg.p.shape[0]
    price = np.broadcast_to(comm(size_of[None, :]), (c, len(size_of)))  # each partition is its own all-reduce
    done, t, link, starts = np.zeros((c, len(nbytes))), np.zeros(c), np.zeros(c), []
    for _ in range(ITERATIONS):
        starts.append(np.maximum(t, done[:, 0]))
        t = serial_ends(done, np.broadcast_to(fwd, done.shape), t)[:, -1]
        part_ready = t[:, None] + after_backward[layer_of][None, :]
        t = t + after_backward[0]
        pending = np.ones(part_ready.shape, dtype=bool)
        sent = np.zeros(part_ready.shape)
        while pending.any():
            avail = pending & (part_ready <= link[:, None])
            idle = ~avail.any(axis=1) & pending.any(axis=1)
            if idle.any():
                link = np.where(idle, np.where(pending, part_ready, np.inf).min(axis=1), link)
                avail = pending & (part_ready <= link[:, None])
            take = avail & (np.cumsum(np.where(avail, size_of, 0.0), axis=1) <= credit)
            active = take.any(axis=1)
            link = np.where(active, link + np.where(take, price, 0.0).sum(axis=1), link)
            sent = np.where(take, link[:, None], sent)
            pending &= ~take
        done = np.maximum.reduceat(sent, first_of_layer, axis=1)
    return np.maximum(starts[-1] - starts[-2], prof.compute_s)


for _entry in (
    Schedule("bytescheduler",
             "tensors split into partitions sent by priority (input layers first) within a credit, "
             "overlapping the next iteration's forward",
             "Peng et al., 'A generic communication scheduler for distributed DNN training acceleration' "
             "(ByteScheduler), SOSP 2019; Jayarajan et al., P3, SysML 2019", "allreduce",
             {"partition_bytes": 4 * 2**20, "credit_bytes": 16 * 2**20}, _bytescheduler,
             perfect_overlap=sp.Max(F + B, C), vectorized=_bytescheduler_kernel),
    Schedule("dear",
             "reduce-scatter of fused groups during backward, all-gather of each group before its forward "
             "in the next iteration",
             "Zhang, Shi, et al., 'DeAR: accelerating distributed deep learning with fine-grained all-reduce "
             "pipelining', ICDCS 2023 (arXiv 2302.12445)", "allreduce", {"buffer_bytes": DDP_BUCKET_BYTES},
             _dear, perfect_overlap=sp.Max(F + B, C), vectorized=_dear_kernel),
):
    SCHEDULES.register(_entry)
