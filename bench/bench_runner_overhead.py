"""The collective runner's own overhead: the median it reports against a bare loop of the same calls.

    python bench/bench_runner_overhead.py [--nproc 2] [--sizes 1MiB,16MiB] [--iters 4] [--rounds 120] [--json]

Starts one gloo job with torchrun (``--nproc`` ranks on this machine). In the same processes, for
each size and round, in alternating order:

- ``runner``: ``runners.measure.sweep.sweep`` of allreduce at that size (the code path of
  ``commscope bench collectives``: probe, plan, build, measure, record), and the median it reports;
- ``bare``: a hand-written loop of the same torch.distributed calls timed the same way (restore the
  buffer, barrier, ``perf_counter`` around ``all_reduce``; max over ranks after the loop), and its
  median.

Reports per size the pooled medians (every timed iteration of every round), their ratio
runner / bare, and the ratio of each round. Goal (issue 6): ratio <= 1.02. ``--json`` prints one
JSON object (saved as bench/results/bench_runner_overhead.json).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """One rank: alternate runner sweeps and bare loops; rank 0 writes the numbers to ``args.result``."""
    from costmodels.units import format_size, parse_size
    from runners.measure import sweep as bench
    from runners.measure.sweep.patterns import _pattern

    ctx = bench.setup("gloo", timeout=300)
    t, dist = ctx.torch, ctx.dist
    sizes = [bench.round_size(parse_size(s), "float32", ctx.world) for s in args.sizes.split(",")]
    runner: dict[int, list[list[float]]] = {s: [] for s in sizes}
    bare: dict[int, list[list[float]]] = {s: [] for s in sizes}

    def bare_loop(nbytes: int) -> list[float]:
        src = _pattern(ctx, nbytes // 4, ctx.rank, "float32")
        buf = src.clone()
        times = []
        for i in range(args.warmup + args.iters):
            buf.copy_(src)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            t1 = time.perf_counter()
            if i >= args.warmup:
                times.append(t1 - t0)
        out = t.tensor(times, dtype=t.float64)
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
        return out.tolist()

    def runner_sweep(nbytes: int) -> list[float]:
        opts = bench.make_options(op="allreduce", min_size=nbytes, max_size=nbytes, warmup=args.warmup,
                                  iters=args.iters, backend="gloo", timeout=300)
        records = bench.sweep(ctx, opts, stdout=io.StringIO())
        mine = t.tensor(records[0]["result"]["times"] if ctx.rank == 0 else [0.0] * args.iters, dtype=t.float64)
        dist.broadcast(mine, 0)
        return mine.tolist()

    for nbytes in sizes:  # one untimed round: first-touch of memory, gloo's connections, imports
        runner_sweep(nbytes)
        bare_loop(nbytes)
    for r in range(args.rounds):
        for nbytes in sizes:
            order = (runner_sweep, bare_loop) if r % 2 == 0 else (bare_loop, runner_sweep)
            for fn in order:
                (runner if fn is runner_sweep else bare)[nbytes].append(fn(nbytes))
    bench.teardown(ctx)
    if ctx.rank != 0:
        return
    out = {}
    for nbytes in sizes:
        pooled_runner = sorted(x for run in runner[nbytes] for x in run)
        pooled_bare = sorted(x for run in bare[nbytes] for x in run)
        p10_runner, p10_bare = (x[len(x) // 10] for x in (pooled_runner, pooled_bare))
        rounds = [statistics.median(a) / statistics.median(b) for a, b in zip(runner[nbytes], bare[nbytes],
                                                                             strict=True)]
        out[format_size(nbytes)] = {
            "bytes": nbytes, "iterations_each": len(pooled_runner),
            "runner_median_s": statistics.median(pooled_runner), "bare_median_s": statistics.median(pooled_bare),
            "ratio": statistics.median(pooled_runner) / statistics.median(pooled_bare),
            "ratio_p10": p10_runner / p10_bare, "ratio_min": pooled_runner[0] / pooled_bare[0],
            "round_ratio_median": statistics.median(rounds),
            "round_ratio_p10_p90": [statistics.quantiles(rounds, n=10)[0], statistics.quantiles(rounds, n=10)[-1]]}
    Path(args.result).write_text(json.dumps({"world_size": ctx.world, "results": out}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2, help="gloo ranks")
    ap.add_argument("--sizes", default="1MiB,16MiB", help="allreduce sizes, comma-separated")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=4, help="timed iterations per measurement")
    ap.add_argument("--rounds", type=int, default=120, help="runner and bare measurements per size, alternating")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node",
               str(args.nproc), str(Path(__file__).resolve()), "--worker", "--result", str(result),
               "--sizes", args.sizes, "--warmup", str(args.warmup), "--iters", str(args.iters),
               "--rounds", str(args.rounds)]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        data = json.loads(result.read_text())
    if args.json:
        doc = {"command": "python bench/bench_runner_overhead.py --json",
               "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
               "date": datetime.date.today().isoformat(),
               "setup": f"gloo, {data['world_size']} ranks on one machine, allreduce float32, {args.warmup} warm-up "
                        f"+ {args.iters} timed iterations per measurement, {args.rounds} rounds alternating",
               "goal": "ratio (runner median / bare-loop median) <= 1.02",
               "results": data["results"]}
        print(json.dumps(doc, indent=2))
        return
    for size, r in data["results"].items():
        lo, hi = r["round_ratio_p10_p90"]
        print(f"{size:>8}: runner {r['runner_median_s'] * 1e6:9.1f} us, bare {r['bare_median_s'] * 1e6:9.1f} us, "
              f"ratio {r['ratio']:.4f} (p10 {r['ratio_p10']:.4f}, min {r['ratio_min']:.4f}; per round: median "
              f"{r['round_ratio_median']:.3f}, p10-p90 {lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
