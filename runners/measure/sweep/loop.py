"""The sweep: every op x size of the options measured in turn, printed as nccl-tests prints its table.

Rank 0 prints a table as it goes and appends each size's record to ``--out`` right after it was
measured, so a run that is killed keeps everything it wrote; ``--resume`` skips what ``--out``
already holds. A collective that takes longer than ``--timeout`` seconds ends the job with a message
naming the op and the size.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from costmodels.errors import CommscopeError
from costmodels.nccl_tests import busbw_factor
from runners import results
from runners.torchrun.rank import Context, fail

from .calls import build
from .options import DTYPES, EQUIVALENTS, SOURCE, BenchError, Options, config_of, describe, round_size
from .timing import Measurement, measure, probe

HEADER = ("#{:>8} {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}".format(
    "", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong") + "\n"
    + "#{:>8} {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}".format(
    "", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))


def row(step: str, cfg: dict[str, Any], res: dict[str, Any]) -> str:
    wrong = str(res["wrong"]) if cfg["check"] else "N/A"
    return (f"{step:>9} {cfg['bytes']:>12} {cfg['count']:>12} {DTYPES[cfg['dtype']][0]:>8} {cfg['redop']:>6} "
            f"{cfg['root']:>6} {res['time_s'] * 1e6:>10.2f} {res['algbw_GBps']:>8.3f} {res['busbw_GBps']:>8.3f} "
            f"{wrong:>7}")


def result_of(op: str, nbytes: int, world: int, m: Measurement) -> dict[str, Any]:
    algbw = nbytes / m.median / 1e9
    busbw = algbw * float(busbw_factor(op, world)) if world > 1 else 0.0  # one rank moves nothing
    return {"time_s": m.median, "algbw_GBps": algbw, "busbw_GBps": busbw, "wrong": m.wrong, "checked": m.checked,
            "time_min_s": m.min,
            "time_p10_s": m.p10, "time_p90_s": m.p90, "times": m.times, "nranks": world,
            **({} if m.chain is None else {"time_chain_s": m.chain}),
            **({} if m.cpu is None else {"cpu_s": m.cpu_median, "cpu_mean_s": float(sum(m.cpu) / len(m.cpu))})}


def _plan(ctx: Context, opts: Options, modes: dict[str, tuple[str, str | None]], run: dict[str, Any],
          ) -> tuple[list[tuple[str, int]], list[str]]:
    """(op, bytes) still to measure, and notes; on rank 0 (reads --out for --resume)."""
    sizes: list[int] = []
    for s in opts.sizes:
        r = round_size(s, opts.dtype, ctx.world)
        if r not in sizes:
            sizes.append(r)
    done: set[str] = set()
    notes: list[str] = []
    if opts.resume and opts.out and Path(opts.out).is_file():
        loaded = results.load(opts.out, "collective")
        done = {results.config_key(r) for r in loaded.records}
        if loaded.bad:
            notes.append(f"resume: {len(loaded.bad)} unreadable line(s) in {opts.out} ignored, first: {loaded.bad[0]}")
    todo: list[tuple[str, int]] = []
    skipped = 0
    for op in opts.ops:
        mode = modes[op][0]
        if mode == "unsupported":
            continue
        for nbytes in sizes:
            cfg = config_of(op, nbytes, opts, ctx.world, mode == "equivalent")
            if results.config_key({"kind": "collective", "config": cfg, "run": run}) in done:
                skipped += 1
            else:
                todo.append((op, nbytes))
    if opts.resume:
        notes.append(f"resume: {skipped} of {skipped + len(todo)} measurement(s) already in {opts.out}; "
                     "skipping them")
    return todo, notes


def sweep(ctx: Context, opts: Options, stdout: TextIO | None = None) -> list[dict[str, Any]]:
    """Measure every op x size of ``opts``; rank 0 prints the table and appends records. Returns the
    records (on rank 0; empty elsewhere)."""
    out = stdout or sys.stdout
    lead = ctx.rank == 0

    def say(text: str) -> None:
        if lead:
            print(text, file=out, flush=True)

    if opts.root >= ctx.world:
        raise BenchError(f"--root {opts.root} is not a rank of this {ctx.world}-rank job")
    modes = probe(ctx, opts.ops, opts.dtype, opts.use_equivalent)
    run = ctx.run_info()
    plan: list[Any] = [None]
    if lead:
        try:
            plan[0] = _plan(ctx, opts, modes, run)
        except CommscopeError as exc:
            plan[0] = str(exc)
    ctx.watchdog.arm("agreeing on the plan")
    ctx.dist.broadcast_object_list(plan, src=0)
    ctx.watchdog.disarm()
    if isinstance(plan[0], str):
        raise BenchError(plan[0])
    todo, notes = plan[0]
    torch_version = ctx.torch.__version__
    say(f"# commscope collectives: torch {torch_version}, backend {ctx.backend}, {ctx.world} rank(s), "
        f"{ctx.local_world} per node, timing: {ctx.timing}, max over ranks")
    say(f"# warmup iters: {opts.warmup} iters: {opts.iters} validation: {int(opts.check)} "
        f"dtype: {opts.dtype} timeout: {opts.timeout:g} s")
    for r in ctx.ranks:
        say(f"#  Rank {r['rank']:>3} Pid {r['pid']:>7} on {r['host']:>10} device {r['device']:>7} {r['name']}")
    for op in opts.ops:
        mode, why = modes[op]
        if mode == "equivalent":
            say(f"# note: {op} is measured as {EQUIVALENTS[op]}: {why}")
        elif mode == "unsupported":
            say(f"# note: {op} is skipped: {why}")
    for note in notes:
        say(f"# {note}")
    written: list[dict[str, Any]] = []
    total = len(todo)
    current = None
    bus: dict[str, list[float]] = {}
    for k, (op, nbytes) in enumerate(todo, start=1):
        if op != current:
            current = op
            say("#")
            say(f"# {op}" + (f" (as {EQUIVALENTS[op]})" if modes[op][0] == "equivalent" else ""))
            say(HEADER)
        what = describe(op, nbytes)
        try:
            prep = build(ctx, op, nbytes, opts.dtype, opts.root, equivalent=modes[op][0] == "equivalent")
            m = measure(ctx, prep, opts.warmup, opts.iters, opts.check)
        except CommscopeError:
            raise
        except Exception as exc:  # the backend's errors: a peer died, a timeout, out of memory
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fail(f"{what} failed on rank {ctx.rank}: {first}")
        cfg = prep.config(opts, ctx.world)
        res = result_of(op, nbytes, ctx.world, m)
        del prep
        if lead:
            rec = results.record("collective", cfg, res, run, SOURCE)
            if opts.out:
                results.append(opts.out, [rec])
            written.append(rec)
            bus.setdefault(op, []).append(res["busbw_GBps"])
            say(row(f"[{k}/{total}]", cfg, res))
    say("#")
    for op, values in bus.items():
        say(f"# Avg bus bandwidth ({op}) : {sum(values) / len(values):.4f} GB/s")
    wrong = sum(r["result"]["wrong"] for r in written)
    if opts.check:
        say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if opts.out and lead:
        say(f"# wrote {len(written)} record(s) to {opts.out}")
    return written
