"""Interference, host overhead and the optimizer step in ByteScheduler: the engine's recurrence with a link
whose next message is chosen when it falls free.

The priority queue cannot be a fixed task graph (which partitions go next depends on when the link
falls free), so this module runs :mod:`.engine`'s piecewise-rate recurrence with the choice built in,
over ``ITERATIONS`` iterations as ``overlap._bytescheduler`` does, all configurations in lock-step:

* the compute stream: per iteration the forward of each layer, which waits until the layer's
  partitions of the previous iteration have all been sent, then backward from the last layer;
* the optimizer step per layer, once its communication has ended, right before the layer's forward:
  ByteScheduler's PyTorch plugin (byteps ``bytescheduler/pytorch/horovod.py``, ``ScheduledOptimizer``)
  updates a parameter from its poller thread when the parameter's all-reduce finishes (``_poll``:
  ``_sgd(p)``, then the lock is released) and the layer's forward pre-hook waits on that lock. The update
  is GPU work on the compute stream, queued behind the kernels already issued; placing it just before
  the layer's forward is exact when the stream waits for the lock, and otherwise moves it later within
  the same stream (an approximation: the same work, possibly slotted into the previous backward); the update
  divides the parameter's gradient by p first (``runners/training/exact_bytescheduler.py``): a memory pass
  over its bytes (``ModelProfile.pass_s_per_byte``) added to the layer's step;
* the link: when free, it takes the ready partitions of highest priority within the credit (the
  batch); the communication thread, which issues every partition (o each, serial with its own launches,
  not with compute: Peng et al., SOSP 2019, Sec. 4, the core's scheduler thread), launches the batch's k
  partitions (k o, HOST) and the link then carries them back to back (COMM); the batch's end marks its
  partitions sent. With ``negotiation``, the thread first waits for rank 0's broadcast of the batch
  (:func:`.blocks.negotiation_time`), as the runner's scheduler does.

Rates as in the engine: compute slows by 1 + kappa_c while a batch is on the link, the batch by
max(1 + kappa_m, its contended floor / its transfer) while compute runs (the batch's floor: the sum of its
partitions' S x contended_step, :meth:`.core.Configurations.contended_floor`); a batch whose partitions take
compute (S x compute_loss_step each, :meth:`.core.Configurations.compute_loss`) takes it as the engine's
messages do (theta = the batch's loss over its transfer), and only where it meets an idle link: a batch chosen
at the instant the link fell free, its partitions already waiting, takes none. The period is the time
between the forward starts of the last two iterations, as without these terms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CommscopeError
from ..timeline import Event
from .blocks import _bytes_option, chain_prices, negotiation_time, partitions
from .core import TERMS, Configurations, TermsRun
from .engine import PHI
from .overlap import ITERATIONS
from .terms_bytescheduler_fast import integral, periods


def _bytescheduler(cfg: Configurations, collective: Any, record: bool, *, partition_bytes: Any = 4 * 2**20,
                   credit_bytes: Any = 16 * 2**20, negotiation: Any = False, **params: Any) -> TermsRun:
    part = _bytes_option("partition_bytes", partition_bytes)
    credit = _bytes_option("credit_bytes", credit_bytes)
    if credit < part:
        raise CommscopeError(f"credit_bytes ({credit:g}) must be at least one partition ({part:g} bytes)")
    prof, nbytes = cfg.prof, cfg.nbytes
    n, names = len(prof), [x.name for x in prof.layers]
    layer_of, size_of = partitions(nbytes, part)
    first_of_layer = np.searchsorted(layer_of, np.arange(n))
    c = cfg.p.shape[0]
    comm = cfg.comm("allreduce", collective, params)
    price = np.broadcast_to(chain_prices(comm, size_of[None, :]), (c, len(size_of)))  # overlap.py: chain
    floor = np.broadcast_to(cfg.contended_floor(comm, size_of[None, :]), (c, len(size_of)))
    loss = np.broadcast_to(cfg.compute_loss(comm, size_of[None, :]), (c, len(size_of)))
    o = cfg.overhead[:, 0]
    neg = np.broadcast_to(negotiation_time(cfg.p, cfg.env, len(size_of), negotiation), (c, 1))[:, 0]
    kc, km = cfg.env.kappa_c.reshape(-1), cfg.env.kappa_m.reshape(-1)
    # the compute stream's tasks, 2n per iteration: forward blocks (optimizer + forward) then backward
    fwd, bwd, opt = (np.array(prof.column(x)) for x in ("forward_s", "backward_s", "optimizer_s"))
    opt = opt + prof.pass_s_per_byte * nbytes  # each layer's update averages its gradient first (one pass)
    work = np.tile(np.concatenate([opt + fwd, bwd[::-1]]), ITERATIONS)
    total = price.sum(axis=1)
    alone = cfg.p[:, 0] == 1  # nothing sent: no averaging, compute and the step alone
    details = {"partitions": len(size_of), "partition_bytes": part, "credit_bytes": credit,
               "iterations_simulated": ITERATIONS, "communication_s": total,
               "host_overhead_s": o * len(size_of), "negotiation_s": neg, "compute_loss_s": loss.sum(axis=1),
               "optimizer_s": np.where(alone, prof.optimizer_s, opt.sum())}
    if not record and integral(size_of, credit):  # the same recurrence with the queue as intervals
        starts = periods(work, n, ITERATIONS, layer_of, size_of, price, o, kc, km, credit, neg, floor, loss)
        period = np.maximum(starts[:, -1] - starts[:, -2], prof.compute_s + opt.sum())
        return TermsRun(np.where(alone, prof.compute_s + prof.optimizer_s, period), None, details)
    bwd_at = n + (n - 1 - layer_of)  # place of each partition's backward within an iteration
    rows = np.arange(c)
    q, rem = np.zeros(c, dtype=np.int64), np.full(c, work[0])  # compute: task index and work left
    done_iter = np.full((c, n), -1)  # last iteration whose partitions of the layer have all been sent
    comm_iter, sent = np.zeros(c, dtype=np.int64), np.zeros((c, len(size_of)), dtype=bool)
    n_sent, first_ready = np.zeros(c, dtype=np.int64), np.append(first_of_layer, len(size_of))
    busy, batch = np.zeros(c, dtype=bool), np.zeros((c, len(size_of)), dtype=bool)
    host, wire = np.zeros(c), np.zeros(c)  # the batch's issuing and transfer work left
    held = np.zeros(c)  # the batch's contended floor over its transfer (engine: the slowdown it is held to)
    taking = np.zeros(c)  # the compute the batch takes over its transfer (engine: theta)
    freed = np.full(c, -np.inf)  # when the link last fell free: a batch chosen later meets an idle link
    starts, t = np.full((c, ITERATIONS), np.nan), np.zeros(c)
    evs: list[Event] = []
    c_start, l_start = np.full(c, np.nan), np.zeros(c)
    while np.isnan(starts[:, -1]).any():
        it, r = q // (2 * n), q % (2 * n)
        active = np.isnan(starts[:, -1])
        run = active & ((r >= n) | (done_iter[rows, np.minimum(r, n - 1)] >= it - 1))
        first = run & (r == 0) & np.isnan(starts[rows, np.minimum(it, ITERATIONS - 1)])
        starts[rows[first], it[first]] = t[first]
        if first.any() and not np.isnan(starts[:, -1]).any():
            break
        idle = active & ~busy & ~(run & (rem <= 0))  # gradients ready at this instant are ready for the choice
        # ready partitions of the iteration being sent: [first ready, P); some unsent iff fewer have been sent
        k = np.where(it > comm_iter, n, np.clip(r - n, 0, n))  # its backwards done
        idle &= n_sent < len(size_of) - first_ready[n - k]
        if idle.any():  # the link is free: the ready partitions of highest priority, within the credit
            i = np.flatnonzero(idle)
            avail = ~sent[i] & (q[i, None] > bwd_at[None, :] + 2 * n * comm_iter[i, None])
            take = avail & (np.cumsum(np.where(avail, size_of, 0.0), axis=1) <= credit)
            go = take.any(axis=1)
            i, take = i[go], take[go]
            busy[i], batch[i], l_start[i] = True, take, t[i]
            host[i], wire[i] = o[i] * take.sum(axis=1) + neg[i], np.where(take, price[i], 0.0).sum(axis=1)
            bf = np.where(take, floor[i], 0.0).sum(axis=1)
            held[i] = np.divide(bf, wire[i], out=np.zeros_like(bf), where=wire[i] > 0)
            bl = np.where(take, loss[i], 0.0).sum(axis=1) * (t[i] > freed[i])
            taking[i] = np.divide(bl, wire[i], out=np.zeros_like(bl), where=wire[i] > 0)
        on_wire = busy & (host <= 0)
        l_slow = np.where(on_wire, np.maximum(np.maximum(1.0 + km * run, held * run), taking * run / PHI), 1.0)
        c_slow = (1.0 + kc * on_wire) / (1.0 - np.minimum(taking * on_wire / l_slow, PHI))
        need_c = np.where(run, rem * c_slow, np.inf)
        need_l = np.where(busy, np.where(on_wire, wire * l_slow, host), np.inf)
        dt = np.minimum(need_c, need_l)
        dt = np.where(active & np.isfinite(dt), dt, 0.0)
        if record and run[0] and np.isnan(c_start[0]):
            c_start[0] = t[0]
        t = t + dt
        fin_c, fin_l = run & (need_c <= dt), busy & (need_l <= dt)
        if record and fin_c[0]:
            k = int(r[0])
            label = names[k if k < n else 2 * n - 1 - k] + (" (and its optimizer step)" if k < n and opt[k] else "")
            evs.append(Event("compute", "forward" if k < n else "backward", label, float(c_start[0]), float(t[0])))
            c_start[0] = np.nan
        rem = np.where(fin_c, work[np.minimum(q + 1, len(work) - 1)], np.where(run, rem - dt / c_slow, rem))
        q = q + fin_c
        host = np.where(busy & ~on_wire, np.where(fin_l, 0.0, host - dt), host)
        wire = np.where(on_wire, np.maximum(wire - dt / l_slow, 0.0), wire)
        ended = fin_l & on_wire  # a batch off the link: its partitions are sent
        if ended.any():
            j = np.flatnonzero(ended)
            if record:
                lo, hi = names[layer_of[batch[0]][0]], names[layer_of[batch[0]][-1]]
                evs.append(Event("comm", "allreduce", lo if lo == hi else f"{lo}..{hi}", float(l_start[0]),
                                 float(t[0]), float(size_of[batch[0]].sum())))
            sent[j] |= batch[j]
            n_sent[j] += batch[j].sum(axis=1)
            busy[j], freed[j] = False, t[j]
            complete = np.logical_and.reduceat(sent[j], first_of_layer, axis=1)
            done_iter[j] = np.where(complete, comm_iter[j, None], done_iter[j])
            over = n_sent[j] == len(size_of)
            comm_iter[j[over]] += 1
            sent[j[over]], n_sent[j[over]] = False, 0
    period = np.maximum(starts[:, -1] - starts[:, -2], prof.compute_s + opt.sum())
    period = np.where(alone, prof.compute_s + prof.optimizer_s, period)
    window = None
    if record:
        lo_t, hi_t = starts[0, -2], starts[0, -1]
        window = [Event(e.stream, e.kind, e.label, e.start - lo_t, e.end - lo_t, e.nbytes) for e in evs
                  if lo_t - 1e-15 <= e.start < hi_t - 1e-15 and (e.stream == "compute" or int(cfg.p[0, 0]) > 1)]
    return TermsRun(period, window, details)


TERMS.update(bytescheduler=_bytescheduler)
