"""ByteScheduler with interference, host overhead and the optimizer step, for many configurations at once.

The recurrence of :func:`.terms_bytescheduler._bytescheduler` (which also draws the timeline) with the
link's queue kept as intervals instead of a configurations x partitions mask, so that a choice costs a
few operations per configuration instead of a pass over every partition. What makes this exact (derived
here):

* the ready partitions of the iteration being sent are a suffix [R, P) (backward runs from the last
  layer), and a choice takes a prefix, in index order, of the ready unsent ones (the cumulative sum is
  monotone). Between two choices R only moves down, so the unsent ready partitions are a stack of
  intervals: the newly ready ones [R, R_seen) go below all the others, and a choice pops from the bottom;
* a choice's bytes are integers (checked, else the reference runs), so the credit test on prefix sums,
  G[x] - G[lo] <= credit left, is the reference's cumulative sum exactly;
* the forward of layer r in iteration i waits for layer r of iteration i - 1. Done when the link is past
  that iteration; when it is on it, the forwards of layers 0..r-1 have run, so their partitions [0,
  first(r)) have all been sent, and layer r is complete iff its last partition is below u, the lowest
  unsent one (partitions of a batch on the link are unsent until it leaves): u = 0 while some are not
  yet ready (R_seen > 0), else the lowest of the batch on the link and the bottom interval. u changes
  only at a choice, at a batch's end and when the link starts an iteration.

A backward of no work ends as it starts: the compute goes past it in the step that ends the task before
it (the reference spends a step of length 0 on it, and makes no choice while it is pending).

The rates, the steps and the iteration starts are the reference's operations on the same values; the
batch's transfer time is a difference of per-configuration prefix sums of the prices instead of a sum
of the masked row (the same numbers, summed in another order: equal to about 1e-16 relative). A
configuration whose last iteration has started leaves the arrays.
"""

from __future__ import annotations

import numpy as np

from .engine import PHI


def integral(size_of: np.ndarray, credit: float) -> bool:
    """Whether prefix sums of the partitions' bytes are exact (integers below 2**53)."""
    return bool(np.all(size_of == np.floor(size_of)) and credit == np.floor(credit) and size_of.sum() + credit < 2**53)


def periods(work: np.ndarray, n: int, iterations: int, layer_of: np.ndarray, size_of: np.ndarray,
            price: np.ndarray, o: np.ndarray, kc: np.ndarray, km: np.ndarray, credit: float,
            neg: np.ndarray | None = None, floor: np.ndarray | None = None,
            loss: np.ndarray | None = None) -> np.ndarray:
    """Start of each iteration's first forward, (configurations, iterations): the reference's ``starts``.

    ``work``: the compute stream's tasks (2n per iteration: forward blocks, then backward from the last
    layer); ``price`` (C, P): each partition's transfer; ``o``, ``kc``, ``km`` (C,); ``neg`` (C,): each batch's
    negotiation on the issuing thread (none when None); ``floor`` (C, P): each partition's contended floor (none
    when None), a batch's transfer held to max(1 + km, its floor / its transfer) beside compute; ``loss`` (C, P):
    the compute each partition takes from beside it (none when None), spent as :mod:`.engine` spends it.
    """
    c, parts, two_n = price.shape[0], len(size_of), 2 * n
    floored = floor is not None and bool(np.any(floor))
    lossy = loss is not None and bool(np.any(loss))
    first_of_layer = np.searchsorted(layer_of, np.arange(n))
    first_ready = np.append(first_of_layer, parts)
    last = np.append(first_of_layer[1:], parts) - 1  # last partition of each layer
    big = np.concatenate([[0.0], np.cumsum(size_of)])
    reach = np.searchsorted(big, big + credit, side="right") - 1
    qs = np.arange(len(work) + 1)
    it_of, r_of = qs // two_n, qs % two_n
    fwd_of, last_at = r_of < n, last[np.minimum(r_of, n - 1)]
    ready_of = first_ready[n - np.clip(r_of - n, 0, n)]  # R after the backwards of the compute's own iteration
    # after a task: the next one, past backwards of no work (each would end at once, before any choice)
    jump = qs + 1
    for x in range(len(work) - 1, -1, -1):
        if r_of[x] >= n and work[x] == 0:
            jump[x - 1] = jump[x]
    jump = np.minimum(jump, len(work) - 1)
    work_next = work[jump]
    # the forward at q runs iff key = comm_iter (P + 1) + u >= thr[q] (comm_iter >= it, or = it - 1 and u above the
    # layer's last partition, as 0 <= u <= P); a backward always
    thr = np.where(fwd_of, (it_of - 1) * (parts + 1) + last_at + 1, -1)
    # the first iteration's forwards run alike everywhere (nothing is on the link): their steps, added in turn
    q0, t0 = 0, 0.0
    while iterations > 1 and r_of[q0] < n:
        q0, t0 = int(jump[q0]), t0 + float(work[q0])
    s = {"q": np.full(c, q0), "rem": np.full(c, work[q0]), "t": np.full(c, t0),
         "phase": np.zeros(c, dtype=np.int8), "lw": np.full(c, np.inf), "wire": np.zeros(c),
         "n_sent": np.zeros(c, dtype=np.int64), "comm_iter": np.zeros(c, dtype=np.int64),
         "n_started": np.full(c, int(q0 > 0)), "next_q": np.full(c, two_n * int(q0 > 0)),
         "active": np.ones(c, dtype=bool), "starts": np.full((c, iterations), np.nan),
         "u": np.zeros(c, dtype=np.int64), "key": np.zeros(c, dtype=np.int64),
         "lo": np.zeros((c, n + 1), dtype=np.int64), "hi": np.zeros((c, n + 1), dtype=np.int64),
         "depth": np.zeros(c, dtype=np.int64),
         "seen": np.full(c, parts), "cnt": np.zeros(c, dtype=np.int64),
         "cp": np.concatenate([np.zeros((c, 1)), np.cumsum(price, axis=1)], axis=1),
         **({} if not floored else {
             "cf": np.concatenate([np.zeros((c, 1)), np.cumsum(np.broadcast_to(floor, (c, parts)), axis=1)], axis=1),
             "held": np.zeros(c)}),
         **({} if not lossy else {
             "cl": np.concatenate([np.zeros((c, 1)), np.cumsum(np.broadcast_to(loss, (c, parts)), axis=1)], axis=1),
             "taking": np.zeros(c), "freed": np.full(c, -np.inf)}),
         "o": o.astype(float), "kc": kc.astype(float), "km": km.astype(float), "ids": np.arange(c),
         "neg": np.zeros(c) if neg is None else np.broadcast_to(np.asarray(neg, float), (c,)).copy()}
    s["starts"][:, 0] = 0.0 if q0 else np.nan
    out = np.full((c, iterations), np.nan)
    while True:
        q, rem, active, phase = s["q"], s["rem"], s["active"], s["phase"]
        run = active & (s["key"] >= thr[q])
        first = run & (q == s["next_q"])
        if first.any():
            f = np.flatnonzero(first)
            s["starts"][f, s["n_started"][f]] = s["t"][f]
            s["n_started"][f] += 1
            s["next_q"][f] += two_n
            s["active"][f] = s["n_started"][f] < iterations
            left = int(s["active"].sum())
            if not left:
                break
            if left < 0.7 * len(q):  # configurations done leave the arrays, and the step starts again
                gone = ~s["active"]
                out[s["ids"][gone]] = s["starts"][gone]
                s = {k: v[~gone] for k, v in s.items()}
                continue
        # the link is free: gradients ready at this instant are ready for the choice
        cand = np.flatnonzero(active & (phase == 0) & ~(run & (rem <= 0)))
        if len(cand):
            qc = q[cand]
            ready_from = np.where(s["comm_iter"][cand] < it_of[qc], 0, ready_of[qc])
            ok = s["n_sent"][cand] < parts - ready_from  # some ready partition is unsent
            if ok.any():
                _choose(s, cand[ok], ready_from[ok], reach, big, credit, parts)
        on_wire = phase == 2
        c_slow = 1.0 + s["kc"] * on_wire
        l_slow = 1.0 + s["km"] * (on_wire & run)
        if floored:
            l_slow = np.maximum(l_slow, s["held"] * (on_wire & run))
        if lossy:  # the compute the batch takes (engine: theta / PHI holds the batch, compute keeps 1 - phi)
            l_slow = np.maximum(l_slow, s["taking"] * (on_wire & run) / PHI)
            c_slow = c_slow / (1.0 - np.minimum(s["taking"] * on_wire / l_slow, PHI))
        need_c = np.where(run, rem * c_slow, np.inf)
        need_l = s["lw"] * l_slow  # the issue (rate 1), the transfer, or inf while the link is free
        dt = np.minimum(need_c, need_l)
        dt = np.where(np.isfinite(dt), dt, 0.0)
        s["t"] = s["t"] + dt
        fin_c = need_c <= dt
        s["rem"] = np.where(fin_c, work_next[q], np.where(run, rem - dt / c_slow, rem))
        s["q"] = np.where(fin_c, jump[q], q)
        s["lw"] = np.maximum(s["lw"] - dt / l_slow, 0.0)
        fin_l = np.flatnonzero(need_l <= dt)
        if len(fin_l):
            _link_step(s, fin_l, parts)
    out[s["ids"]] = s["starts"]
    return out


def _link_step(s: dict, j: np.ndarray, parts: int) -> None:
    """Configurations ``j``: the batch's issue ends (its transfer starts) or its transfer ends (it is sent)."""
    ph = s["phase"][j]
    issued = j[ph == 1]
    s["phase"][issued], s["lw"][issued] = 2, s["wire"][issued]
    j = j[ph == 2]
    if not len(j):
        return
    s["phase"][j], s["lw"][j] = 0, np.inf
    if "freed" in s:
        s["freed"][j] = s["t"][j]
    s["n_sent"][j] += s["cnt"][j]
    d = s["depth"][j]
    s["u"][j] = np.where(s["seen"][j] > 0, 0, np.where(d > 0, s["lo"][j, np.maximum(d - 1, 0)], parts))
    over = j[s["n_sent"][j] == parts]  # the iteration is sent: the link goes on to the next one
    s["comm_iter"][over] += 1
    s["n_sent"][over], s["depth"][over], s["seen"][over], s["u"][over] = 0, 0, parts, 0
    s["key"][j] = s["comm_iter"][j] * (parts + 1) + s["u"][j]


def _choose(s: dict, i: np.ndarray, r: np.ndarray, reach: np.ndarray, big: np.ndarray, credit: float,
            parts: int) -> None:
    """Configurations ``i`` put the batch of highest priority within the credit on the link; ``r``: their R.
    ``reach[x]``: the end of a batch that starts at x with the whole credit."""
    seen, depth = s["seen"][i], s["depth"][i]
    stack_lo, stack_hi, cp = s["lo"].reshape(-1), s["hi"].reshape(-1), s["cp"].reshape(-1)
    floored, lossy = "cf" in s, "cl" in s
    new = r < seen  # newly ready partitions [r, seen) go below every unsent one: the bottom interval
    top = i * s["lo"].shape[1] + np.maximum(depth - 1, 0)
    lo, hi = np.where(new, r, stack_lo[top]), np.where(new, seen, stack_hi[top])
    seen = np.minimum(seen, r)
    s["seen"][i] = seen
    u = np.where(seen > 0, 0, lo)  # the batch's first partition is the lowest unsent one
    end = np.minimum(reach[lo], hi)
    row = i * (parts + 1)
    cnt, wire = end - lo, cp[row + end] - cp[row + lo]
    bf = s["cf"].reshape(-1)[row + end] - s["cf"].reshape(-1)[row + lo] if floored else None
    bl = s["cl"].reshape(-1)[row + end] - s["cl"].reshape(-1)[row + lo] if lossy else None
    whole = end == hi
    slot = top + (new & (depth > 0))  # what is left of the bottom interval, if anything
    stack_lo[slot], stack_hi[slot] = end, hi
    depth = depth + new - whole
    s["depth"][i] = depth
    sel = np.flatnonzero(whole & (depth > 0))  # the bottom interval fitted: on to the next one
    if len(sel):
        budget = credit - (big[end] - big[lo])
    while len(sel):
        k = i[sel]
        d = s["depth"][k] - 1
        lo, hi = s["lo"][k, d], s["hi"][k, d]
        end = np.minimum(np.searchsorted(big, big[lo] + budget[sel], side="right") - 1, hi)
        cnt[sel] += end - lo
        wire[sel] += s["cp"][k, end] - s["cp"][k, lo]
        if floored:
            bf[sel] += s["cf"][k, end] - s["cf"][k, lo]
        if lossy:
            bl[sel] += s["cl"][k, end] - s["cl"][k, lo]
        budget[sel] -= big[end] - big[lo]
        whole = end == hi
        s["lo"][k, d], s["depth"][k] = end, d + 1 - whole
        sel = sel[whole & (d > 0)]
    host = s["o"][i] * cnt + s["neg"][i]
    s["cnt"][i], s["wire"][i], s["u"][i] = cnt, wire, u
    if floored:
        s["held"][i] = np.divide(bf, wire, out=np.zeros_like(bf), where=wire > 0)
    if lossy:  # only a batch that meets an idle link (chosen after the instant the link fell free)
        bl = bl * (s["t"][i] > s["freed"][i])
        s["taking"][i] = np.divide(bl, wire, out=np.zeros_like(bl), where=wire > 0)
    issuing = host > 0  # no issuing time: on the wire at once
    s["phase"][i] = np.where(issuing, 1, 2)
    s["lw"][i] = np.where(issuing, host, wire)
    s["key"][i] = s["comm_iter"][i] * (parts + 1) + u
