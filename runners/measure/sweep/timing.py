"""Timing one prepared collective, and probing which ops the backend has.

Timing: on GPUs (NCCL), CUDA events around each timed iteration; on CPUs (gloo, whose calls are
synchronous), ``time.perf_counter`` around the call. The calls run back to back after one barrier, as a
training iteration sends its messages and as nccl-tests times them. A barrier before every call made each
call's time, the slowest rank's, hold the ranks' skew leaving the barrier and each rank's own hiccups: on 4
gloo ranks at 2.5 Gbit/s, 1 KB-1 MB all-reduces back to back took 0.77-1.03 of the mean of the same calls
timed one per barrier, 0.93 at the median of 15 (size, run) pairs and 0.91 of the 9 up to 64 KB
(``bench/bench_overlap_diagnostics.py --only timing``, ``bench/results/bench_overlap_timing_2500mbit.json``),
and per-tensor BSP, whose messages go back to back, was predicted 13-19% slow on most links of the shipped
runs. Each iteration's time is the maximum over ranks (one MAX all-reduce after the timed loop, so it adds
nothing to what is timed); the record keeps the median (``time_s``), p10, p90, min and every iteration's time,
and ``config.timing`` says how they were timed.

It also keeps ``time_chain_s``: each rank's timed calls summed and divided by the iterations, the slowest
rank's. That is what a message costs in a chain of them, and nccl-tests' definition (its ``BenchTime`` divides one
rank's loop time by the iterations, then averages over ranks). The per-iteration maximum over ranks is larger
wherever the ranks' calls end at jittered times: a rank whose call ends late starts the next one late and that
call is shorter, but the maximum keeps each late end. On 2 x 2 gloo ranks behind 1 Gbit/s, the mean of the
per-iteration maxima was 1.09 / 1.11 / 1.06 / 1.02 times the chain time at 1 KiB / 16 KiB / 256 KiB / 1 MiB.

``--check`` counts the wrong output elements after the timed loop (see :mod:`.patterns`).

Where the backend lacks an op (a tiny probe call at start raises), the documented equivalent is
used, said once in the output and recorded as ``config.equivalent``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from runners.torchrun.rank import Context

from .calls import Prepared, build
from .options import EQUIVALENTS, describe, round_size


@dataclass
class Measurement:
    """Per-iteration times (max over ranks, seconds) and their summary, with the wrong-element count."""

    times: list[float]
    wrong: int
    checked: bool
    cpu: list[float] | None = None  # per iteration, CPU seconds of the call, mean over ranks (CPU ranks only)
    chain: float | None = None  # the slowest rank's timed calls summed, over the iterations (module docstring)

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

    @property
    def cpu_median(self) -> float | None:
        return None if not self.cpu else float(statistics.median(self.cpu))


def measure(ctx: Context, prep: Prepared, warmup: int, iters: int, check: bool = False) -> Measurement:
    """Time ``iters`` calls after ``warmup`` ones; each iteration's time is the maximum over ranks.

    On CPU ranks each call's CPU seconds are kept too: the process's CPU time (every thread, user and system:
    ``time.process_time``) around the call, the mean over ranks. On four gloo ranks behind emulated 200 Mbit/s
    links a 1 KiB all-reduce took about 1.1-1.6 ms of CPU per rank, nearly all system time in gloo's TCP loop
    thread, for a 4.3-4.8 ms call: what its communication takes from compute on shared cores.

    sendrecv: rank 0's round trip halved (the other ranks only wait). Raises whatever the backend
    raises; a call that outlives the context's timeout ends the process (see :class:`_Watchdog`).
    """
    t, dist, dog = ctx.torch, ctx.dist, ctx.watchdog
    what = describe(prep.op, prep.nbytes)
    call, prepare, barrier, arm = prep.call, prep.prepare, dist.barrier, dog.arm
    counted = prep.op != "sendrecv" or ctx.rank == 0
    elapsed: list[float] = []
    arm(what)
    barrier()  # once: the calls then run back to back (module docstring)
    if ctx.cuda:
        events = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for i in range(warmup + iters):
            if prepare is not None:
                prepare()
            arm(what)
            if i < warmup:
                call()
                continue
            start, end = events[i - warmup]
            start.record()
            call()
            end.record()
        arm(what)
        t.cuda.synchronize(ctx.device)
        elapsed = [s.elapsed_time(e) / 1e3 for s, e in events]
    else:
        clock, cpu_clock = time.perf_counter, time.process_time
        used: list[float] = []
        for i in range(warmup + iters):
            if prepare is not None:
                prepare()
            arm(what)
            c0 = cpu_clock()  # outside the timed part: a clock read of about a microsecond
            t0 = clock()
            call()
            t1 = clock()
            c1 = cpu_clock()
            if i >= warmup:
                elapsed.append(t1 - t0)
                used.append(c1 - c0)
    if not counted:
        elapsed = [0.0] * iters
    arm(what)
    half = 0.5 if prep.op == "sendrecv" else 1.0
    # the rank's own calls summed rides in the same MAX all-reduce as the per-iteration times
    times = t.tensor([*elapsed, sum(elapsed) / iters], dtype=t.float64, device=ctx.device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    *per_iter, chain = [float(x) * half for x in times.cpu().tolist()]
    cpu = None
    if not ctx.cuda:  # gloo's calls are synchronous: the process's CPU time around one is what it took
        spent = t.tensor(used, dtype=t.float64)
        dist.all_reduce(spent)
        cpu = [float(x) * half / ctx.world for x in spent.tolist()]
    wrong = 0
    if check:
        arm(what + " (checking the result)")
        mine = t.tensor([prep.verify()], dtype=t.int64, device=ctx.device)
        dist.all_reduce(mine)
        wrong = int(mine.item())
    dog.disarm()
    return Measurement(per_iter, wrong, check, cpu, chain)


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
