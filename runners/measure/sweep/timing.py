"""Timing one prepared collective, and probing which ops the backend has.

Timing, as nccl-tests times (its ``iters`` calls back to back, the elapsed time over their number): the timed
calls run back to back in up to :data:`WINDOWS` windows. Each window starts with a barrier and one untimed call,
so that every rank enters the timed calls in step, as it does in a stream of collectives; then the window's
calls are timed together (on GPUs (NCCL) between CUDA events, on CPUs (gloo, whose calls are synchronous) with
``time.perf_counter``) and each window gives one time per call: its elapsed time over its calls, the maximum
over ranks (one MAX all-reduce after the timed loop, so it adds nothing to what is timed). The record keeps the
median of the windows (``time_s``), p10, p90, min and every window's time.

Why back to back: a call timed alone after a barrier also pays for the ranks leaving the barrier at different
times and waking to a sleeping peer. On four gloo ranks sharing two cores behind emulated 200 Mbit/s links the
sum of such lone medians for resnet_small's 47 gradients came to 259 ms (their means to 278 ms) where the same
47 all-reduces back to back took 228 ms: 12-18% less, about 1 ms of a 5 ms latency per call, and training sends
its gradients back to back.

``--check`` counts the wrong output elements after the timed loop (see :mod:`.patterns`). Buffers an op reduces
into are restored before each window, so a window of ``w`` calls grows them by at most p^w (:func:`windows`
keeps that finite).

Where the backend lacks an op (a tiny probe call at start raises), the documented equivalent is
used, said once in the output and recorded as ``config.equivalent``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from runners.torchrun.rank import Context

from .calls import Prepared, build
from .options import EQUIVALENTS, describe, round_size
from .patterns import _torch_dtype


@dataclass
class Measurement:
    """Per-call times of each window (max over ranks, seconds) and their summary, with the wrong-element count
    and the timed calls of each window."""

    times: list[float]
    wrong: int
    checked: bool
    window_calls: list[int]

    def _q(self, q: float) -> float:
        s = sorted(self.times)
        pos = (len(s) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return self._q(0.5)

    @property
    def p10(self) -> float:
        return self._q(0.1)

    @property
    def p90(self) -> float:
        return self._q(0.9)

    @property
    def min(self) -> float:
        return min(self.times)


WINDOWS = 10  # windows of back-to-back calls per measurement (fewer where there are fewer timed calls)


def windows(iters: int, world: int = 1, headroom: float = math.inf) -> list[int]:
    """Timed calls per window: ``iters`` split as evenly as it goes over ``min(iters, WINDOWS)`` windows, or over
    more where a sum over ``world`` ranks, repeated in place, would pass ``headroom`` (the dtype's largest value
    over the patterns' largest, 7) within a window: a window's calls, its untimed one too, grow a buffer by
    ``world`` each, so at most ``floor(log(headroom) / log(world)) - 1`` timed calls each (at least 1)."""
    if iters < 1:
        return []
    most = iters
    if world > 1 and math.isfinite(headroom):
        most = max(1, int(math.log(headroom) / math.log(world)) - 1)
    count = max(min(iters, WINDOWS), -(-iters // most))
    return [iters // count + (k < iters % count) for k in range(count)]


def _headroom(ctx: Context, prep: Prepared) -> float:
    """The dtype's largest value over the patterns' largest (7)."""
    dt = _torch_dtype(ctx, prep.dtype)
    info = ctx.torch.finfo(dt) if dt.is_floating_point else ctx.torch.iinfo(dt)
    return float(info.max) / 7.0


def measure(ctx: Context, prep: Prepared, warmup: int, iters: int, check: bool = False) -> Measurement:
    """Time ``iters`` calls after ``warmup`` ones, back to back in windows (module docstring); each window's time
    per call is the maximum over ranks.

    sendrecv: rank 0's round trip halved (the other ranks only wait). Raises whatever the backend
    raises; a call that outlives the context's timeout ends the process (see :class:`_Watchdog`).
    """
    t, dist, dog = ctx.torch, ctx.dist, ctx.watchdog
    what = describe(prep.op, prep.nbytes)
    call, prepare, barrier, arm = prep.call, prep.prepare, dist.barrier, dog.arm
    counted = prep.op != "sendrecv" or ctx.rank == 0
    plan = windows(iters, ctx.world, _headroom(ctx, prep) if prepare is not None else math.inf)
    for _ in range(warmup):
        if prepare is not None:
            prepare()
        arm(what)
        barrier()
        call()
    elapsed: list[float] = []
    if ctx.cuda:
        events = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in plan]
        for (start, end), calls in zip(events, plan, strict=True):
            if prepare is not None:
                prepare()
            arm(what)
            barrier()
            call()  # untimed: the ranks leave the barrier at different times
            start.record()
            for _ in range(calls):
                call()
            end.record()
        arm(what)
        t.cuda.synchronize(ctx.device)
        elapsed = [s.elapsed_time(e) / 1e3 / calls for (s, e), calls in zip(events, plan, strict=True)]
    else:
        clock = time.perf_counter
        for calls in plan:
            if prepare is not None:
                prepare()
            arm(what)
            barrier()
            call()  # untimed: the ranks leave the barrier at different times
            t0 = clock()
            for _ in range(calls):
                call()
            elapsed.append((clock() - t0) / calls)
    if not counted:
        elapsed = [0.0] * len(plan)
    arm(what)
    times = t.tensor(elapsed, dtype=t.float64, device=ctx.device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    per_iter = [float(x) * (0.5 if prep.op == "sendrecv" else 1.0) for x in times.cpu().tolist()]
    wrong = 0
    if check:
        arm(what + " (checking the result)")
        mine = t.tensor([prep.verify()], dtype=t.int64, device=ctx.device)
        dist.all_reduce(mine)
        wrong = int(mine.item())
    dog.disarm()
    return Measurement(per_iter, wrong, check, plan)


def probe(ctx: Context, ops: Sequence[str], dtype: str, use_equivalent: Sequence[str] = (),
          ) -> dict[str, tuple[str, str | None]]:
    """For each op: ("native" | "equivalent" | "unsupported", why). A tiny call of each native op tells."""
    out: dict[str, tuple[str, str | None]] = {}
    t = ctx.torch
    for op in ops:
        if op == "sendrecv" and ctx.world < 2:
            out[op] = ("unsupported", "needs at least 2 ranks")
            continue
        if op in use_equivalent:
            out[op] = ("equivalent", "asked for with --use-equivalent")
            continue
        reason = None
        ctx.watchdog.arm(f"probing {op}")
        try:
            build(ctx, op, round_size(1, dtype, ctx.world), dtype, 0).call()
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        ok = t.tensor([0 if reason else 1], dtype=t.int64, device=ctx.device)
        ctx.dist.all_reduce(ok, op=ctx.dist.ReduceOp.MIN)
        ctx.watchdog.disarm()
        if int(ok.item()) == 1:
            out[op] = ("native", None)
        elif op in EQUIVALENTS:
            out[op] = ("equivalent", f"{ctx.backend} lacks it for {dtype} ({reason or 'on another rank'})")
        else:
            out[op] = ("unsupported", f"{ctx.backend} lacks it for {dtype} ({reason or 'on another rank'})")
    return out
