"""The piecewise-rate engine: compute and communication that slow each other while both run.

A schedule with interference, host overhead or an optimizer step (issue 16) is a :class:`Graph` of
tasks on streams (host threads, CUDA streams, directions of the link). Each task has a kind:

* ``COMPUTE``: kernels of the compute stream (forward, backward, the optimizer step);
* ``COMM``: a message of a collective on the link;
* ``HOST``: LogP's o (Culler et al., PPoPP 1993), time of the thread that issues a message: it delays
  what comes after it on that thread, and neither slows nor is slowed by anything else.

A stream runs its tasks in order; a task may also wait for one task of another stream (a gradient
before its message, a message before the compute that needs its result). ``work`` is a task's
duration when it runs alone.

**Derivation (derived here).** Let c(t) = 1 while a COMPUTE task runs and m(t) = 1 while a COMM task
runs. A running COMPUTE task progresses at rate 1 / (1 + kappa_c m(t)), a COMM task at
1 / (1 + kappa_m c(t)), a HOST task at 1. Between two consecutive events (a task starting or ending)
the set of running tasks, and so every rate, is constant. With rem_i the work task i has left and
s_i in {1, 1 + kappa_c, 1 + kappa_m} its slowdown over the current interval,

    t' = t + dt,   dt = min_i rem_i s_i,   rem_i <- rem_i - dt / s_i,

the tasks reaching 0 end at t', and a stream whose next task's dependency has ended starts it at t'.
Each step ends at least one task, so a graph of T tasks takes at most T steps, and the times are
exact: progress is piecewise linear in time with breakpoints at the events. At kappa_c = kappa_m = 0
every s_i = 1 and the recurrence is the schedules' own (``serial_ends``: e_j = max(e_{j-1}, r_j) + dt_j).

Example (one message of work M issued at the start of a compute segment of work W, with
W >= M (1 + kappa_m) / (1 + kappa_c)): both run for M (1 + kappa_m), when the message ends; the
segment has done M (1 + kappa_m) / (1 + kappa_c) and ends at W + M (1 + kappa_m) kappa_c / (1 + kappa_c).
In general a compute segment W and a message M that start together both end after

    pair(W, M) = M + W (1 + kappa_c) kappa_m / (1 + kappa_m)   if W (1 + kappa_c) <= M (1 + kappa_m)
                 W + M (1 + kappa_m) kappa_c / (1 + kappa_c)   otherwise

(whichever ends first has run slowed all along, the other finishes alone); at kappa = 0 it is
max(W, M), the term of the overlap recurrences (DeAR's s_{g+1} = s_g + max(f_g, ag_{g+1}) becomes
s_g + o + pair(f_g, ag_{g+1}): its forward phase stays closed). Where a message spans several
segments, or segments several messages (WFBP's backward), the pairs chain at every event: that is the
recurrence above.

**The contended step (derived here, measured by ``bench/bench_overlap_diagnostics.py --only progress --only
wfbp``).** A COMM task may carry a
``floor``: the least time it takes while compute runs beside it, S delta for a message of S latency steps
(:mod:`.contended`). On CPU ranks that share their cores with compute, each step of a
message waits for the communication thread to get a core back: a 20 KB all-reduce (6 ring steps) on 4 ranks took
2.3-6.6 ms alone and 64-116 ms beside compute, while a 4 MB one at 200 Mbit/s (41 ms per step on the wire)
was only 3-5% slower. So a COMM task's slowdown while compute runs is

    s_i = max(1 + kappa_m, floor_i / work_i),

a rate like the others (a message entirely beside compute takes max(work (1 + kappa_m), floor); one that
runs partly alone takes the matching share of each); at floor = 0 it is the rule above. Floored tasks are
not joined by ``freeze(merge=True)``: their ratios may differ, so their joint matters.

**The compute a message takes (derived here).** On CPU ranks the communication's own CPU work runs on the cores
that compute (gloo's threads: a system call, a wake-up and a copy per step). A COMM task may carry a ``loss``:
the compute seconds it takes from the compute beside it over its whole run, S x ``compute_loss_step`` for a
message of S latency steps (:mod:`.contended`). It is spent at the pace of the message's progress: with
theta_i = loss_i / work_i and the message slowed by s_i, the compute beside it loses theta_i / s_i of its rate,
so over the message it loses loss_i whatever the slowdown. The scheduler gives a thread that wakes to
communicate at most a fair share of a core against one computing thread (Linux CFS), so compute keeps at least
1 - PHI of its rate, PHI = 1/2, and a message whose loss would take more is slowed until it does not::

    s_i = max(1 + kappa_m, floor_i / work_i, theta_i / PHI)   (beside compute)
    compute slowdown = (1 + kappa_c) / (1 - phi),   phi = min(PHI, sum_i theta_i / s_i)

So a message beside compute takes loss_i from it in every case, and one that runs alone takes nothing.

Only a message that meets an idle link takes compute: one that starts later than the instant the task before it on
its stream ended (it waited for its own dependency, its issue, with the link free), or the first on its stream. A
message queued behind another (it starts at the instant the one before it left the link) takes none: its thread is
already awake and running the stream of messages, where a message on an idle link wakes it (Linux CFS preempts a
computing thread for a woken one). At loss = 0 the rule is the one above.

:func:`run_many` advances C configurations in lock-step (one event per configuration per step, arrays
of shape (streams, C)); :func:`run_one` is the same recurrence in plain Python for one configuration,
recording each task's start and end for the timeline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CommscopeError
from ..timeline import Event

HOST, COMPUTE, COMM = 0, 1, 2
PHI = 0.5  # the most of a computing thread's rate that a communicating one takes (module docstring)


@dataclass(frozen=True, eq=False)
class Frozen:
    """A built graph: T tasks sorted by stream (each stream's tasks contiguous, in order), plus a sentinel.

    ``dep[i]`` is the task i waits for (-1: none) and ``dep_stream[i]`` its stream; ``work`` is (T + 1, C),
    each task's work in every configuration, with a zero sentinel row; ``off[s]:off[s + 1]`` are stream
    s's tasks.
    """

    streams: tuple[str, ...]
    stream: np.ndarray
    kind: np.ndarray
    dep: np.ndarray
    dep_stream: np.ndarray
    work: np.ndarray
    off: np.ndarray
    labels: tuple[tuple[str, str], ...]
    nbytes: np.ndarray
    ratio: np.ndarray | None  # (T + 1, C): floor / work of each COMM task, the slowdown it is held to; None: none
    lost: np.ndarray | None = None  # (T + 1, C): loss / work of each COMM task, theta (module docstring); None: none

    @property
    def floored(self) -> bool:
        return self.ratio is not None

    @property
    def tasks(self) -> int:
        return len(self.stream) - 1

    def loss(self) -> np.ndarray:
        """The compute all messages can take (the sum of their losses), per configuration."""
        lost = np.zeros_like(self.work[:-1]) if self.lost is None else self.lost[:-1]
        return (lost * self.work[:-1]).sum(axis=0)

    def total(self, kind: int, stream: str | None = None) -> np.ndarray:
        """Work of all tasks of ``kind`` (on one stream), per configuration."""
        sel = self.kind[:-1] == kind
        if stream is not None:
            sel &= self.stream[:-1] == self.streams.index(stream)
        return self.work[:-1][sel].sum(axis=0)


class Graph:
    """Tasks added in any order; ``key`` orders the tasks of a stream (ties keep the order of adding)."""

    def __init__(self, configs: int) -> None:
        self.configs = configs
        self.streams: list[str] = []
        self._parts: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list, np.ndarray,
                                np.ndarray | None, np.ndarray | None]] = []
        self._count = 0

    @property
    def size(self) -> int:
        """Tasks added so far: the id the next one gets."""
        return self._count

    def add(self, stream: str, kind: int, work: Any, key: Any, dep: Any = -1,
            labels: Sequence[tuple[str, str]] | tuple[str, str] = ("", ""), nbytes: Any = 0.0,
            floor: Any = 0.0, loss: Any = 0.0) -> np.ndarray:
        """Add n tasks to ``stream``: ``work`` of shape (n,), (C, n) or a scalar, ``key`` (n,) their places on
        the stream, ``dep`` (n,) the ids of the tasks they wait for (-1: none), ``floor`` (COMM tasks; shaped as
        ``work``) the least time each takes while compute runs, ``loss`` (likewise) the compute seconds each takes
        from the compute beside it. Returns their ids."""
        key = np.atleast_1d(np.asarray(key, dtype=float))
        n = len(key)
        work = np.broadcast_to(np.asarray(work, dtype=float), (self.configs, n)).T
        floor = np.asarray(floor, dtype=float)
        ratio = None  # most graphs have no floor: nothing is allocated for it
        if floor.any():
            if kind != COMM:
                raise CommscopeError("internal error: only a message (COMM task) has a contended floor")
            floor = np.broadcast_to(floor, (self.configs, n)).T
            ratio = np.divide(floor, work, out=np.zeros_like(floor), where=work > 0)
        loss = np.asarray(loss, dtype=float)
        lost = None
        if loss.any():
            if kind != COMM:
                raise CommscopeError("internal error: only a message (COMM task) takes compute from beside it")
            loss = np.broadcast_to(loss, (self.configs, n)).T
            lost = np.divide(loss, work, out=np.zeros_like(loss), where=work > 0)
        dep = np.broadcast_to(np.asarray(dep, dtype=np.int64), (n,))
        labels = [labels] * n if isinstance(labels, tuple) else list(labels)
        if stream not in self.streams:
            self.streams.append(stream)
        ids = np.arange(self._count, self._count + n)
        self._parts.append((self.streams.index(stream), kind, key, work, dep,
                            np.broadcast_to(np.asarray(nbytes, dtype=float), (n,)), labels, ids, ratio, lost))
        self._count += n
        return ids

    def freeze(self, merge: bool = False) -> Frozen:
        """Sort by (stream, key). With ``merge`` (for :func:`run_many`), two rewrites that keep every time:
        a HOST task of no work in any configuration that waits for nothing is dropped (what waited for it
        waits for the task before it on its stream), and runs of tasks of one kind on one stream that nothing
        waits on between are joined into one task (nothing can happen at the joints)."""
        stream = np.concatenate([np.full(len(p[2]), p[0]) for p in self._parts])
        kind = np.concatenate([np.full(len(p[2]), p[1]) for p in self._parts])
        key = np.concatenate([p[2] for p in self._parts])
        dep = np.concatenate([p[4] for p in self._parts])
        labels = [lab for p in self._parts for lab in p[6]]
        order = np.lexsort((np.arange(len(key)), key, stream))
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        work = np.empty((len(order), self.configs))
        floored = any(p[8] is not None for p in self._parts)
        ratio = np.zeros((len(order), self.configs)) if floored else None
        lost = np.zeros((len(order), self.configs)) if any(p[9] is not None for p in self._parts) else None
        for p in self._parts:
            work[inv[p[7]]] = p[3]
            if p[8] is not None:
                ratio[inv[p[7]]] = p[8]
            if p[9] is not None:
                lost[inv[p[7]]] = p[9]
        stream, kind, nbytes = stream[order], kind[order], np.concatenate([p[5] for p in self._parts])[order]
        dep = np.where(dep[order] >= 0, inv[np.maximum(dep[order], 0)], -1)
        labels = [labels[i] for i in order]
        if merge:
            drop = (kind == HOST) & (dep < 0) & ~(work != 0).any(axis=1)
            if drop.any():
                target = np.arange(len(stream))  # who is waited for instead of each task
                for i in np.flatnonzero(drop):
                    target[i] = target[i - 1] if i and stream[i - 1] == stream[i] else -1
                keep = ~drop
                new = np.cumsum(keep) - 1
                dep = np.where(dep >= 0, target[np.maximum(dep, 0)], -1)[keep]
                dep = np.where(dep >= 0, new[np.maximum(dep, 0)], -1)
                stream, kind, work, nbytes = stream[keep], kind[keep], work[keep], nbytes[keep]
                ratio = None if ratio is None else ratio[keep]
                lost = None if lost is None else lost[keep]
                labels = [lab for lab, k in zip(labels, keep, strict=True) if k]
            # within a run only the last task can be waited for, so waits move to the merged task
            waited = np.zeros(len(stream), dtype=bool)
            waited[dep[dep >= 0]] = True
            joint = np.zeros(len(stream), dtype=bool)  # task i joins task i - 1
            joint[1:] = (stream[1:] == stream[:-1]) & (kind[1:] == kind[:-1]) & (dep[1:] < 0) & ~waited[:-1]
            for own in (ratio, lost):  # floored messages, and those that take compute, keep their own ratios
                if own is not None:
                    held = own.any(axis=1)
                    joint[1:] &= ~held[1:] & ~held[:-1]
            if joint.any():
                heads = np.flatnonzero(~joint)
                new = np.cumsum(~joint) - 1
                ends = np.append(heads[1:], len(stream))
                merged = work[heads]
                for j in np.flatnonzero(ends - heads > 1):  # few runs are longer than one task
                    merged[j] = work[heads[j]:ends[j]].sum(axis=0)
                work, nbytes = merged, np.add.reduceat(nbytes, heads)
                ratio = None if ratio is None else ratio[heads]
                lost = None if lost is None else lost[heads]
                dep = np.where(dep[heads] >= 0, new[np.maximum(dep[heads], 0)], -1)
                stream, kind, labels = stream[heads], kind[heads], [labels[i] for i in heads]
        off = np.searchsorted(stream, np.arange(len(self.streams) + 1))
        dep_stream = np.where(dep >= 0, stream[np.maximum(dep, 0)], 0)
        return Frozen(tuple(self.streams), np.append(stream, -1), np.append(kind, HOST), np.append(dep, -1),
                      np.append(dep_stream, 0), np.concatenate([work, np.zeros((1, self.configs))]), off,
                      (*labels, ("", "")), np.append(nbytes, 0.0),
                      None if ratio is None else np.concatenate([ratio, np.zeros((1, self.configs))]),
                      None if lost is None else np.concatenate([lost, np.zeros((1, self.configs))]))


def chain(g: Frozen) -> list[int] | None:
    """The tasks in the order they run where at most one can run at any time (BSP: compute, then each
    issue and its message in turn), else None. Then each runs alone, at rate 1, and the end is their sum."""
    dep, dstream = g.dep.tolist(), g.dep_stream.tolist()
    pos, stop = g.off[:-1].tolist(), g.off[1:].tolist()
    order: list[int] = []
    while len(order) < g.tasks:
        run = [s for s, i in enumerate(pos) if i < stop[s] and (dep[i] < 0 or pos[dstream[i]] > dep[i])]
        if len(run) != 1:
            return None
        order.append(pos[run[0]])
        pos[run[0]] += 1
    return order


def run_many(g: Frozen, kappa_c: np.ndarray, kappa_m: np.ndarray) -> np.ndarray:
    """End of the last task of every configuration (columns of ``g.work``), by the module's recurrence.

    State is (streams, configurations): each stream's current task (the sentinel once it is done, which
    counts as after every task and waits for itself, so that it never runs) and the work it has left. In
    ``g.work`` configurations at the same task are neighbours. A step ends about one task per configuration,
    so the tasks that end are handled by index. A :func:`chain` is summed in its order: the same additions.
    """
    sentinel, c = g.tasks, g.work.shape[1]
    order = chain(g)
    if order is not None:
        t = np.zeros(c)
        for i in order:
            t = t + g.work[i]
        return t
    work = g.work.reshape(-1)
    cols = np.arange(c)
    kc, km = np.reshape(kappa_c, (1, -1)), np.reshape(kappa_m, (1, -1))
    nxt = np.arange(1, sentinel + 2)
    nxt[g.off[1:] - 1] = sentinel  # after a stream's last task: the sentinel
    nxt[sentinel] = sentinel
    dep = g.dep.copy()
    dep[sentinel] = sentinel
    dep_at = g.dep_stream * c  # where the stream a task waits on starts in the flattened state
    is_comp, is_comm = g.kind == COMPUTE, g.kind == COMM
    first = np.where(g.off[:-1] < g.off[1:], g.off[:-1], sentinel)
    pos = np.repeat(first[:, None], c, axis=1)
    rem = np.take(work, pos * c + cols)
    # per stream and configuration, of its current task: where its dependency's stream is, what it waits for,
    # its kind; rewritten only where a task ends
    at, waits, comp_k, comm_k = dep_at[pos] + cols, dep[pos], is_comp[pos], is_comm[pos]
    ratios = g.ratio.reshape(-1) if g.ratio is not None else None
    held = None if ratios is None else np.take(ratios, pos * c + cols)  # the current message's floor / work
    losts = g.lost.reshape(-1) if g.lost is not None else None
    owed = None if losts is None else np.take(losts, pos * c + cols)  # the current message's loss / work
    taking = None if owed is None else owed.copy()  # what it takes: owed, or 0 if it started behind another
    freed = np.full(pos.shape, -np.inf)  # when the task before the current one ended (none: -inf)
    fresh = np.ones(pos.shape, dtype=bool)  # the current task has not started
    flat = [x.reshape(-1) for x in (pos, rem, at, waits, comp_k, comm_k)]
    col_of = np.tile(cols, len(first))
    one = np.ones((1, c))
    t = np.zeros(c)
    while True:
        run = np.take(flat[0], at) > waits  # no dependency: waits = -1 < pos
        comp, comm = run & comp_k, run & comm_k
        busy = comp.any(axis=0)
        if taking is not None:  # a message starting now meets an idle link iff the link fell free before now
            starting = run & fresh
            taking = np.where(starting, np.where(t > freed, owed, 0.0), taking)
            fresh &= ~starting
        comm_slow = 1.0 + km * busy if held is None else np.maximum(1.0 + km * busy, held * busy)
        comp_slow = 1.0 + kc * comm.any(axis=0)
        if taking is not None:
            comm_slow = np.maximum(comm_slow, taking * (busy / PHI))
            comp_slow = comp_slow / (1.0 - np.minimum(np.where(comm, taking / comm_slow, 0.0).sum(axis=0), PHI))
        slow = np.where(comp, comp_slow, np.where(comm, comm_slow, one))
        need = np.where(run, rem * slow, np.inf)
        dt = need.min(axis=0)
        if not np.isfinite(dt).all():
            done = (pos == sentinel).all(axis=0)
            if done.all():
                return t
            if np.any(~done & ~np.isfinite(dt)):
                raise CommscopeError("internal error: a schedule's task graph waits on itself")
            dt = np.where(np.isfinite(dt), dt, 0.0)
        t = t + dt
        rem = np.where(run, np.maximum(rem - dt / slow, 0.0), rem)
        flat[1] = rem.reshape(-1)
        fin = np.flatnonzero(need <= dt)
        ended, col = nxt[flat[0][fin]], col_of[fin]
        flat[0][fin] = ended
        flat[1][fin] = work[ended * c + col]
        flat[2][fin], flat[3][fin], flat[4][fin], flat[5][fin] = dep_at[ended] + col, dep[ended], is_comp[ended], \
            is_comm[ended]
        if held is not None:
            held.reshape(-1)[fin] = ratios[ended * c + col]
        if taking is not None:
            owed.reshape(-1)[fin] = losts[ended * c + col]
            freed.reshape(-1)[fin], fresh.reshape(-1)[fin] = t[col], True


def run_one(g: Frozen, kappa_c: float, kappa_m: float, row: int = 0) -> tuple[float, list[float], list[float]]:
    """:func:`run_many` for one configuration in plain Python: (end, start of each task, end of each task)."""
    work, kind, dep, dstream = g.work[:, row].tolist(), g.kind.tolist(), g.dep.tolist(), g.dep_stream.tolist()
    ratio = g.ratio[:, row].tolist() if g.ratio is not None else [0.0] * len(work)
    lost = g.lost[:, row].tolist() if g.lost is not None else [0.0] * len(work)
    stop = g.off[1:].tolist()
    pos = g.off[:-1].tolist()
    taking = [0.0] * len(pos)  # what the current message takes (set when it starts)
    freed = [-math.inf] * len(pos)  # when the task before the current one ended
    streams = range(len(pos))
    rem = [work[pos[s]] if pos[s] < stop[s] else 0.0 for s in streams]
    starts, ends = [math.nan] * g.tasks, [math.nan] * g.tasks
    t = 0.0
    while any(pos[s] < stop[s] for s in streams):
        run = [s for s in streams if pos[s] < stop[s] and (dep[pos[s]] < 0 or pos[dstream[pos[s]]] > dep[pos[s]])]
        if not run:
            raise CommscopeError("internal error: a schedule's task graph waits on itself")
        comp = any(kind[pos[s]] == COMPUTE for s in run)
        comm = any(kind[pos[s]] == COMM for s in run)
        for s in run:
            if math.isnan(starts[pos[s]]):
                starts[pos[s]] = t
                taking[s] = lost[pos[s]] if t > freed[s] else 0.0  # it meets an idle link
        slow = {s: max(1.0 + kappa_m * comp, ratio[pos[s]] * comp, taking[s] * comp / PHI) for s in run
                if kind[pos[s]] == COMM}
        phi = min(sum(taking[s] / slow[s] for s in slow), PHI)
        slow.update({s: (1.0 + kappa_c * comm) / (1.0 - phi) if kind[pos[s]] == COMPUTE else 1.0 for s in run
                     if kind[pos[s]] != COMM})
        need = {s: rem[s] * slow[s] for s in run}
        dt = min(need.values())
        t = t + dt
        for s in run:
            if need[s] <= dt:
                ends[pos[s]] = t
                pos[s] += 1
                rem[s] = work[pos[s]] if pos[s] < stop[s] else 0.0
                freed[s] = t
            else:
                rem[s] = max(rem[s] - dt / slow[s], 0.0)
    return t, starts, ends


def events(g: Frozen, starts: list[float], ends: list[float], rename: dict[str, str] | None = None) -> list[Event]:
    """The tasks of :func:`run_one` as timeline events (``labels``: (event kind, label) of each task)."""
    names = [(rename or {}).get(s, s) for s in g.streams]
    return [Event(names[int(g.stream[i])], g.labels[i][0], g.labels[i][1], starts[i], ends[i], float(g.nbytes[i]))
            for i in range(g.tasks) if g.labels[i][0]]
