"""Schedules that overlap communication with the next iteration's forward: ByteScheduler and DeAR.

Both are simulated over consecutive iterations until the pattern repeats: the forward of layer l
in iteration k+1 may start only when layer l's parameters are updated, i.e. when its gradient of
iteration k has been fully communicated. The reported ``iteration_time`` is the steady-state
period (between the forward starts of the last two simulated iterations), and the timeline is
that period's window, shifted to start at 0. With interference, host overhead or an optimizer step
they run in ``terms_overlap`` (DeAR) and ``terms_bytescheduler``, which state where each pays o and the step.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import sympy as sp

from ..environment import Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError
from ..messages import Comm
from ..profiles import ModelProfile
from ..timeline import Event, Timeline
from .blocks import (
    DDP_BUCKET_BYTES,
    _bytes_option,
    _validated,
    bounded_buckets,
    chain_prices,
    decoupled,
    negotiation_time,
    partitions,
    serial_ends,
)
from .bytescheduler_batches import _send_batches
from .core import SCHEDULES, TERMS, B, C, Configurations, F, IterationResult, Schedule, U, has_terms, simulate

ITERATIONS = 4  # the pattern repeats from the second iteration on; four leave a margin
# Each partition is its own all-reduce, and over a link with a token bucket each is priced as a message of a
# chain in priority order (blocks.chain_prices): within a batch that is the order they are sent in; a batch's first
# partition is taken to follow the one before it in that order, which it may not have (an approximation).
# ByteScheduler's vectorized kernel stops at three: its period from iterations 2-3 equals that from 3-4 to 1e-13
# (every shipped profile x 1GbE/10GbE/25GbE/IB-EDR x p 2..128 x three partition/credit pairs; tested against
# the event simulation, which runs ITERATIONS), and the kernel's time is linear in the iterations it runs
KERNEL_ITERATIONS = 3
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


def _dear_forward_groups(nbytes: np.ndarray, buffer_bytes: float) -> list[list[int]]:
    """DeAR's groups in forward order, each listing its layers in forward order (see :func:`dear_groups`)."""
    return bounded_buckets(nbytes, buffer_bytes, strict=True)


def dear_groups(nbytes: np.ndarray, buffer_bytes: float) -> list[list[int]]:
    """DeAR's fusion groups (``dopt_rsag.py``, ``_generate_groups_with_threshold``, lzhangbv/dear_pytorch).

    Layers are taken in forward order; a layer joins the current group while the group's sum stays
    below the threshold (``tot_size == 0 or tot_size + size < threshold``), else it opens the next
    group. Returned in backward order (the order their reduce-scatters go), each group listing its
    layers in backward order.
    """
    return [g[::-1] for g in _dear_forward_groups(nbytes, buffer_bytes)[::-1]]


def _dear(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          buffer_bytes: Any = DDP_BUCKET_BYTES, **params: Any) -> IterationResult:
    """DeAR as ``dopt_rsag.py`` runs it: each group's reduce-scatter once all its gradients are ready
    (backward hooks); ``step()`` waits for every reduce-scatter and starts group 0's all-gather; the
    forward pre-hook of group g's first module waits for its all-gather and only then starts group
    g+1's, so one all-gather is in flight at a time and each is paced by the forward."""
    nbytes, names = _validated(prof, env, p)
    cap = _bytes_option("buffer_bytes", buffer_bytes)
    rs_name, ag_name = _dear_algorithms(collective)
    rs = Comm("reduce_scatter", p, env, rs_name, params)
    ag = Comm("allgather", p, env, ag_name, params)
    groups = _dear_forward_groups(nbytes, cap)
    sizes = np.array([nbytes[g].sum() for g in groups])
    t_rs, t_ag = rs(sizes), ag(sizes)
    fwd = np.array(prof.column("forward_s"))
    f = [float(fwd[g].sum()) for g in groups]
    labels = [names[g[0]] if len(g) == 1 else f"{names[g[0]]}..{names[g[-1]]} ({len(g)})" for g in groups]

    def plan(ready: np.ndarray, link: float) -> tuple[list[Event], np.ndarray, float]:
        events, done = [], np.empty(len(ready))
        for j in range(len(groups) - 1, -1, -1):  # backward order, as each group's gradients are all ready
            s = max(link, float(ready[groups[j]].max()))
            link = s + t_rs[j]
            events.append(Event("comm", "reduce_scatter", labels[j], s, link, float(sizes[j])))
        start = 0.0  # forward start of the previous group in the next iteration
        for j in range(len(groups)):  # forward order: group j's all-gather from group j-1's pre-hook
            s = link if j == 0 else max(link, start)
            link = s + t_ag[j]
            events.append(Event("comm", "allgather", labels[j], s, link, float(sizes[j])))
            done[groups[j]] = link
            start = link if j == 0 else max(start + f[j - 1], link)
        return events, done, link

    return _steady_state("dear", prof, p, plan, groups=len(groups), buffer_bytes=cap)


def _dear_kernel(cfg: Configurations, collective: str | None = None, *, buffer_bytes: Any = DDP_BUCKET_BYTES,
                 **params: Any) -> np.ndarray:
    """:func:`_dear`'s steady state for many configurations (see :func:`_dear_period`)."""
    cap = _bytes_option("buffer_bytes", buffer_bytes)
    rs_name, ag_name = _dear_algorithms(collective)
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    return _dear_period(cfg, _dear_forward_groups(cfg.nbytes, cap), rs, ag)


def _dear_period(cfg: Configurations, groups: list[list[int]], rs: Comm, ag: Comm) -> np.ndarray:
    """DeAR's steady-state period for each configuration, groups in forward order (derived here).

    Let ag_g, rs_g be group g's all-gather and reduce-scatter times and f_g its forward time. Group
    0's all-gather starts when the reduce-scatters end (R) and the forward starts when it ends:
    s_0 = R + ag_0. Group g+1's all-gather starts at s_g (the link is free: ag_g ended before s_g),
    so s_{g+1} = max(s_g + f_g, s_g + ag_{g+1}) = s_g + max(f_g, ag_{g+1}); the forward ends at
    T = s_{G-1} + f_{G-1}, when the link is free again. The reduce-scatters then go in backward order
    as gradients are ready, ending at T + tail (:func:`serial_ends` from the backward's start). So
    period = ag_0 + sum_{g < G-1} max(f_g, ag_{g+1}) + f_{G-1} + tail, the same every iteration.
    """
    prof, nbytes = cfg.prof, cfg.nbytes
    sizes = np.array([nbytes[g].sum() for g in groups])[None, :]
    t_rs, t_ag = rs(sizes), ag(sizes)
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    f = np.array([fwd[g].sum() for g in groups])
    after_backward = np.cumsum(bwd[::-1])[::-1]  # time from backward start to each layer's gradient
    first = np.array([g[0] for g in groups])  # a group's last gradient to be ready
    tail = serial_ends(after_backward[first][::-1], t_rs[:, ::-1])[:, -1]
    period = t_ag[:, 0] + np.maximum(f[:-1], t_ag[:, 1:]).sum(axis=1) + f[-1] + tail
    return np.maximum(period, prof.compute_s)


def _bounded_ends(csum: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """End positions of DeAR's groups (:func:`bounded_buckets`, strict) for every cap at once, one row per cap.

    From a group's start ``pos`` it ends after the last item whose running sum stays below the cap,
    and at least after the first item with bytes; each step bisects ``csum`` for every cap together.
    Rows are padded with ``len(csum) - 1`` (the end) once a grouping is complete.
    """
    m = len(csum) - 1
    pos, steps = np.zeros(len(caps), dtype=np.int64), []
    while (pos < m).any():
        below = np.searchsorted(csum, csum[pos] + caps, side="left") - 1
        first = np.searchsorted(csum, csum[pos], side="right")
        pos = np.where(pos < m, np.minimum(m, np.maximum(below, first)), m)
        steps.append(pos)
    return np.stack(steps, axis=1) if steps else np.zeros((len(caps), 0), dtype=np.int64)


def best_dear_buffer(prof: ModelProfile, env: Environment, p: int, collective: str | None = None,
                     **params: Any) -> tuple[float, IterationResult]:
    """The fusion buffer size that minimises DeAR's iteration time, by exact search.

    DeAR's grouping (strictly below the threshold, in forward order) only changes where the threshold
    crosses a sum of consecutive gradient sizes: it is the same for every threshold in (S_i, S_{i+1}]
    between consecutive distinct run sums. Candidates: every run sum in forward order and one
    threshold above the model size (a single group), deduplicated by the grouping they produce.
    DeAR's paper tunes this by Bayesian optimisation in [1, 256] MB; the exact search finds the
    optimum of this model instead (with interference, host overhead or an optimizer step, each
    grouping is timed by the schedule's task graph, :data:`~costmodels.schedules.core.TERMS`).
    """
    nbytes, _ = _validated(prof, env, p)
    csum = np.concatenate([[0.0], np.cumsum(nbytes)])
    runs = np.unique((csum[None, :] - csum[:, None])[np.triu_indices(len(csum), 1)])
    runs = np.append(runs[runs > 0], 2 * max(csum[-1], 1.0))
    cfg = Configurations(prof, np.array([[p]]), EnvironmentArray.of([env]).reshape(1, 1))
    rs_name, ag_name = _dear_algorithms(collective)
    rs, ag = cfg.comm("reduce_scatter", rs_name, params), cfg.comm("allgather", ag_name, params)
    ends, first = np.unique(_bounded_ends(csum, runs), axis=0, return_index=True)  # one row per grouping
    terms = has_terms(prof, env)
    best_cap, best_time = None, np.inf
    for row, cap in zip(ends, runs[first], strict=True):
        bounds = (0, *sorted(set(row.tolist())))
        groups = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
        t = float((TERMS["dear"](cfg, collective, False, buffer_bytes=float(cap), **params).time if terms else
                   _dear_period(cfg, groups, rs, ag))[0])
        if t < best_time or (t == best_time and best_cap is not None and cap < best_cap):
            best_cap, best_time = float(cap), t
    assert best_cap is not None
    return best_cap, simulate(prof, env, p, "dear", collective, buffer_bytes=best_cap, **params)


# ------------------------------------------------------------------------------ ByteScheduler
def _bytescheduler(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
                   partition_bytes: Any = 4 * 2**20, credit_bytes: Any = 16 * 2**20, negotiation: Any = False,
                   **params: Any) -> IterationResult:
    """ByteScheduler: whenever the link is free, the ready partitions of highest priority, up to
    ``credit_bytes``, are sent; each partition is its own all-reduce (as in ByteScheduler, where every
    partition is a separate communication task), so a batch of k partitions costs the sum of k
    messages, k latencies included, not one message of their total size. ``negotiation``: each batch is
    first broadcast by rank 0 (:func:`negotiation_time`)."""
    nbytes, names = _validated(prof, env, p)
    part = _bytes_option("partition_bytes", partition_bytes)
    credit = _bytes_option("credit_bytes", credit_bytes)
    if credit < part:
        raise CommscopeError(f"credit_bytes ({credit:g}) must be at least one partition ({part:g} bytes)")
    comm = Comm("allreduce", p, env, collective, params)
    layer_of, size_of = partitions(nbytes, part)  # priority = layer index (closest to the input first)
    neg = negotiation_time(p, env, len(size_of), negotiation)
    chained = chain_prices(comm, size_of) if p > 1 else np.zeros(len(size_of))  # chain: see ITERATIONS

    def plan(ready: np.ndarray, link: float) -> tuple[list[Event], np.ndarray, float]:
        events, done = [], np.zeros(len(ready))
        pending = list(range(len(size_of)))  # sorted by priority (layer, chunk)
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
            link += neg  # the batch's negotiation
            dt = float(np.sum(chained[batch]))  # one all-reduce per partition, back to back
            lo, hi = names[layer_of[batch[0]]], names[layer_of[batch[-1]]]
            events.append(Event("comm", "allreduce", lo if lo == hi else f"{lo}..{hi}", link, link + dt, total))
            link += dt
            for q in batch:
                done[layer_of[q]] = max(done[layer_of[q]], link)
            taken = set(batch)
            pending = [q for q in pending if q not in taken]
        return events, done, link

    return _steady_state("bytescheduler", prof, p, plan, partitions=len(size_of), partition_bytes=part,
                         credit_bytes=credit, negotiation_s=neg)


def _bytescheduler_kernel(cfg: Configurations, collective: str | None = None, *,
                          partition_bytes: Any = 4 * 2**20, credit_bytes: Any = 16 * 2**20, negotiation: Any = False,
                          **params: Any) -> np.ndarray:
    """:func:`_bytescheduler`'s steady state for many configurations at once.

    The compute of each iteration follows from when each layer's partitions were sent
    (:func:`serial_ends`); the link's batches, from :func:`_send_batches`, whose work per step does not
    grow with the number of partitions. Configurations advance in lock-step.
    """
    part = _bytes_option("partition_bytes", partition_bytes)
    credit = _bytes_option("credit_bytes", credit_bytes)
    if credit < part:
        raise CommscopeError(f"credit_bytes ({credit:g}) must be at least one partition ({part:g} bytes)")
    comm = cfg.comm("allreduce", collective, params)
    prof, nbytes = cfg.prof, cfg.nbytes
    layer_of, size_of = partitions(nbytes, part)
    last_of_layer = np.append(np.searchsorted(layer_of, np.arange(1, len(nbytes))), len(size_of)) - 1
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    after_backward = np.cumsum(bwd[::-1])[::-1]
    ready_after = np.append(after_backward[layer_of], -np.inf)
    first = np.flatnonzero(np.append(True, ready_after[1:] != ready_after[:-1]))
    plateaus = first, ready_after[first]
    c = cfg.p.shape[0]
    price = np.broadcast_to(chain_prices(comm, size_of[None, :]), (c, len(size_of)))  # chain: see ITERATIONS
    neg = np.broadcast_to(negotiation_time(cfg.p, cfg.env, len(size_of), negotiation), (c, 1))[:, 0]
    ps = np.concatenate([[0.0], np.cumsum(size_of)])
    pp = np.concatenate([np.zeros((c, 1)), np.cumsum(price, axis=1)], axis=1)
    done, t, link, starts = np.zeros((c, len(nbytes))), np.zeros(c), np.zeros(c), []
    for _ in range(KERNEL_ITERATIONS):
        starts.append(np.maximum(t, done[:, 0]))
        t = serial_ends(done, np.broadcast_to(fwd, done.shape), t)[:, -1]
        link, sent = _send_batches(t, plateaus, ps, pp, credit, link, neg)
        t = t + after_backward[0]
        done = sent[:, last_of_layer]
    return np.maximum(starts[-1] - starts[-2], prof.compute_s)


PLACEMENTS = {  # where each pays o and the optimizer step (see terms*.py)
    "bytescheduler": ("o per partition on the scheduler's communication thread (a batch's issues, then its transfers; "
            "bytecore.py); the optimizer step per parameter when its all-reduce ends, before its layer's forward "
            "(byteps bytescheduler/pytorch/horovod.py: _poll updates, the pre-forward hook waits)"),
    "dear": ("o per reduce-scatter on the backward thread (gradient hooks), per all-gather on the training thread "
            "(_bp_barrier and the forward pre-hooks); the optimizer step per module right before its forward "
            "(dopt_rsag.py: _update_one_module)"),
}

for _entry in (
    Schedule("bytescheduler",
             "tensors split into partitions sent by priority (input layers first) within a credit, "
             "overlapping the next iteration's forward",
             "Peng et al., 'A generic communication scheduler for distributed DNN training acceleration' "
             "(ByteScheduler), SOSP 2019; Jayarajan et al., P3, SysML 2019", "allreduce",
             {"partition_bytes": 4 * 2**20, "credit_bytes": 16 * 2**20, "negotiation": False}, _bytescheduler,
             perfect_overlap=sp.Max(F + B + U, C), vectorized=_bytescheduler_kernel),
    Schedule("dear",
             "groups formed in forward order while below buffer_bytes; reduce-scatter of each group during "
             "backward, then one all-gather in flight at a time: group 0's after the step, group g+1's from "
             "group g's forward pre-hook in the next iteration",
             "Zhang, Shi, et al., 'DeAR: accelerating distributed deep learning with fine-grained all-reduce "
             "pipelining', ICDCS 2023 (arXiv 2302.12445); reference implementation dear/dopt_rsag.py "
             "(lzhangbv/dear_pytorch: _generate_groups_with_threshold, _forward_pre_hook, _bp_barrier; "
             "THRESHOLD = 25 MB)", "allreduce", {"buffer_bytes": DDP_BUCKET_BYTES},
             _dear, perfect_overlap=sp.Max(F + B + U, C), vectorized=_dear_kernel),
):
    SCHEDULES.register(replace(_entry, placement=PLACEMENTS[_entry.name]))
