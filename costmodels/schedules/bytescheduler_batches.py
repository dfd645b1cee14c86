"""ByteScheduler's link over one iteration, for many configurations at once: the batches it sends and when.

Used by the vectorized kernel of the ``bytescheduler`` schedule (:mod:`.overlap`); its work per step does not
grow with the number of partitions.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _frontier(t0: np.ndarray, plateaus: tuple[np.ndarray, np.ndarray], link: np.ndarray) -> np.ndarray:
    """First partition ready by ``link`` (t0 + ready_after[q] <= link), for every configuration.

    ``plateaus``: (first partition, ready_after) of each run of equal ready_after, which falls with q and
    ends with -inf. A search on link - t0 finds the run up to rounding; two steps each way on the exact
    comparison settle it (rounding moves it by at most one run).
    """
    start, value = plateaus
    j = len(value) - np.searchsorted(value[::-1], link - t0, side="right")
    for _ in range(2):
        j = j + ~(t0 + value[j] <= link)
        j = j - ((j > 0) & (t0 + value[np.maximum(j - 1, 0)] <= link))
    return start[j]


def _send_batches(t0: np.ndarray, plateaus: tuple[np.ndarray, np.ndarray], ps: np.ndarray, pp: np.ndarray,
                  credit: float, link: np.ndarray, neg: Any = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One iteration of ByteScheduler's link for every configuration: (link free, end of each partition's batch).

    Gradients are ready from the last partition down (:func:`_frontier`) and a batch
    takes the ready unsent partitions of lowest index, so within the ready part [f, P) the unsent ones
    are a stack of intervals [x, e) (the lowest on top): the frontier moving down pushes [f', f) (joined
    to the top when that is untouched), a batch pops from the top while the credit lasts (``ps``: bytes
    before each partition, so that [x, e) holds ps[e] - ps[x]; ``pp``: the same of each configuration's
    prices). Each pop is recorded; pops tile [0, P), so a partition's batch is the pop with the largest
    start at or below it. ``neg`` (C,): each batch's negotiation, before its messages.
    """
    c, parts = pp.shape[0], len(ps) - 1
    rows = np.arange(c)
    ready_after = np.repeat(plateaus[1], np.diff(np.append(plateaus[0], parts + 1)))
    f, depth, left_parts = np.full(c, parts), np.zeros(c, dtype=np.int64), np.full(c, parts)
    link = link.copy()
    xt, et = np.zeros(c, dtype=np.int64), np.zeros(c, dtype=np.int64)  # the top interval
    below_x, below_e = np.zeros((c, 1), dtype=np.int64), np.zeros((c, 1), dtype=np.int64)  # the rest; grows
    pops: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def advance(idx: np.ndarray) -> None:
        """Move the frontier of configurations ``idx`` to the link's time, pushing what became ready."""
        nonlocal below_x, below_e
        new = np.minimum(_frontier(t0[idx], plateaus, link[idx]), f[idx])
        g, new = idx[new < f[idx]], new[new < f[idx]]
        push = g[~((depth[g] > 0) & (xt[g] == f[g]))]  # else the untouched top interval grows down
        spill = push[depth[push] > 0]
        if spill.size:
            if depth.max() > below_x.shape[1]:
                below_x, below_e = (np.concatenate([a, np.zeros_like(a)], axis=1) for a in (below_x, below_e))
            below_x[spill, depth[spill] - 1], below_e[spill, depth[spill] - 1] = xt[spill], et[spill]
        et[push] = f[push]
        xt[g], f[g] = new, new
        depth[push] += 1

    while (left_parts > 0).any():
        active = np.flatnonzero(left_parts > 0)
        advance(active)
        idle = active[depth[active] == 0]
        if idle.size:  # nothing ready: the link waits for the next gradient (the latest not ready)
            link[idle] = t0[idle] + ready_after[f[idle] - 1]
            advance(idle)
        left, cost, taken, sel = np.full(c, credit), np.zeros(c), [], active
        link[active] += np.broadcast_to(neg, (c,))[active]  # the batch's negotiation
        while sel.size:  # the batch: from the top interval down while the credit lasts
            x, e, room = xt[sel], et[sel], left[sel]
            whole = ps[e] - ps[x] <= room
            cut = np.where(whole, e, np.minimum(np.searchsorted(ps, ps[x] + room, side="right") - 1, e))
            take = cut > x
            sel, x, cut, whole = sel[take], x[take], cut[take], whole[take]
            cost[sel] += pp[sel, cut] - pp[sel, x]
            left[sel] -= ps[cut] - ps[x]
            left_parts[sel] -= cut - x
            taken.append((sel, x))
            xt[sel] = cut
            popped = sel[whole]
            depth[popped] -= 1
            sel = popped[depth[popped] > 0]
            if sel.size:  # the next interval comes up
                xt[sel], et[sel] = below_x[sel, depth[sel] - 1], below_e[sel, depth[sel] - 1]
        link = link + cost
        pops += [(r, x, link[r]) for r, x in taken]
    end, start = np.zeros((c, parts)), np.zeros((c, parts), dtype=bool)
    for r, x, t in pops:
        end[r, x], start[r, x] = t, True
    first = np.maximum.accumulate(np.where(start, np.arange(parts), 0), axis=1)
    return link, end[rows[:, None], first]
