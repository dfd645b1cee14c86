"""Issue 16 diagnostics on an emulated cluster (needs root and iproute2): what gloo ranks sharing 2 cores really do
when communication overlaps computation.

    python bench/bench_overlap_diagnostics.py [--rate 1gbit] [--nodes 2] [--ranks-per-node 2] [--repeats 2]
        [--only EXPERIMENT] [--json [--out PATH]]

Each experiment runs under ``commscope emulate`` (torchrun in every node, gloo, one thread per rank), and is
repeated ``--repeats`` times; medians are over a run's iterations on rank 0, and the report gives each
repetition's, so their spread shows:

* ``interference``: an 8 MiB all-reduce alone and beside a matmul loop on every rank (kappa_m = slowdown of
  the all-reduce - 1), and the matmul rate alone and during the all-reduce (kappa_c = rate ratio - 1);
* ``buckets``: the buckets PyTorch DDP all-reduces for gpt_wide (the validation's transformer, 23 MB of
  gradients), timed by a comm hook, with ``bucket_cap_mb=25`` as the runner passes it: their sizes and when
  each is launched, against the end of backward;
* ``two_groups``: gpt_wide's LM head (8.4 MB) all-reduced from its gradient hook while backward goes on and
  the rest after backward, against one flattened all-reduce after backward: iteration time to the last byte.
* ``progress``: one all-reduce of 20 KB, 640 KB or 4 MB alone, and launched asynchronously beside a matmul loop
  that runs on every rank until it completes: the time to complete (in-flight progress on cores the compute keeps
  busy; ``slowdown`` = beside / alone - 1, the kappa_m a single message sees);
* ``queue``: 16 all-reduces of 20 KB one after another (blocking) against all launched at once (asynchronous,
  then waited for), no compute: how many gloo runs at once (``concurrency`` = blocking / queued); and 60 of
  10 KB launched evenly over 200 ms of matmuls, as WFBP's hooks launch them: how many complete before the
  compute ends, and the tail after it against the same 60 queued with no compute.
* ``wfbp``: the validation's two models (resnet_small, batch 32; gpt_wide, batch 8) with every gradient
  all-reduced asynchronously from its hook during a real backward, as the WFBP runner does: how many complete
  before backward ends, the tail after it, and the same messages with no compute queued at once and one by one
  (blocking), as bsp per tensor sends them.
* ``timing``: all-reduces of 1 KB to 1 MB timed as the sweep times them (a barrier, then the call; the maximum
  over ranks; median and mean over calls, the sweep's fit takes the mean) and back to back (20 blocking calls
  after one barrier, divided by 20), as bsp per tensor sends them: whether the sweep's per-call protocol prices a
  training message right.
* ``bsp``: per iteration and close in time, resnet_small's 47 gradients all-reduced one by one right after a real
  backward (bsp per tensor), the same 47 with no compute before, and 47 back-to-back 1 KB all-reduces: whether a
  message costs less right after compute than alone, and whether a latency probe taken beside a run tracks it.
* ``beside``: an 8 MiB all-reduce launched asynchronously and a 1 KiB one right after it, no compute: when each
  completes, against each alone. A FIFO link (the schedules' model) would finish the small one after the large
  one and the pair in the sum of their times alone; gloo's second worker thread runs it beside the large one.

``--json`` writes bench/results/bench_overlap_diagnostics.json (``--out`` another path). Exit code 2 with one line
on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
EXPERIMENTS = ("interference", "buckets", "two_groups", "progress", "queue", "wfbp", "timing", "bsp", "beside")
ITERS, WARMUP = 8, 2


# ------------------------------------------------------------------------------------------- rank side
def _gpt_wide() -> Any:
    import torch

    from runners.training.zoo.networks import GPTSmall

    torch.manual_seed(0)
    return GPTSmall(8192, 32, 256, 2, 4, 4)  # the zoo's gpt_wide options (runners/training/zoo/networks.py)


def _interference(dist: Any, torch: Any) -> dict[str, Any]:
    buf, a = torch.ones(2**21), torch.randn(192, 192)  # 8 MiB of fp32

    def spin(seconds: float) -> float:
        end, k, t0 = time.perf_counter() + seconds, 0, time.perf_counter()
        while time.perf_counter() < end:
            torch.mm(a, a)
            k += 1
        return k / (time.perf_counter() - t0)

    dist.barrier()
    rate_alone = spin(0.5)
    alone, beside, rate_during = [], [], []
    for _ in range(ITERS):
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(buf)
        alone.append(time.perf_counter() - t)
        dist.barrier()
        t, k = time.perf_counter(), 0
        work = dist.all_reduce(buf, async_op=True)
        while not work.is_completed():
            torch.mm(a, a)
            k += 1
        work.wait()
        beside.append(time.perf_counter() - t)
        rate_during.append(k / beside[-1])
    m = statistics.median
    return {"allreduce_alone_ms": m(alone) * 1e3, "allreduce_beside_compute_ms": m(beside) * 1e3,
            "kappa_m": m(beside) / m(alone) - 1, "kappa_c": rate_alone / m(rate_during) - 1}


def _buckets(dist: Any, torch: Any) -> dict[str, Any]:
    import torch.nn.functional as F  # noqa: N812 (the usual name)
    from torch.nn.parallel import DistributedDataParallel

    model = _gpt_wide()
    t0, seen = [0.0], []

    def hook(_state, bucket):  # unannotated: DDP checks a hook's annotations, if any, against GradBucket
        seen.append((bucket.buffer().numel() * 4, (time.perf_counter() - t0[0]) * 1e3))
        return dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True).get_future().then(
            lambda f: f.value()[0])

    ddp = DistributedDataParallel(model, bucket_cap_mb=25)
    ddp.register_comm_hook(None, hook)
    x, y = torch.randint(0, 8192, (8, 32)), torch.randint(0, 8192, (8, 32))
    rows = []
    for it in range(ITERS):
        seen.clear()
        dist.barrier()
        t0[0] = time.perf_counter()
        F.cross_entropy(ddp(x).flatten(0, 1), y.flatten()).backward()
        if it >= WARMUP:
            rows.append(list(seen))
    return {"bucket_bytes": [b for b, _ in rows[-1]],
            "launch_ms": [statistics.median(r[i][1] for r in rows) for i in range(len(rows[-1]))]}


def _two_groups(dist: Any, torch: Any) -> dict[str, Any]:
    import torch.nn.functional as F  # noqa: N812 (the usual name)

    model = _gpt_wide()
    head = model.head.weight
    pending: list[Any] = []
    early = [False]
    head.register_post_accumulate_grad_hook(
        lambda p: pending.append(dist.all_reduce(p.grad, async_op=True)) if early[0] else None)
    x, y = torch.randint(0, 8192, (8, 32)), torch.randint(0, 8192, (8, 32))
    out: dict[str, Any] = {}
    for mode in ("head_first", "flattened", "head_first", "flattened"):
        early[0] = mode == "head_first"
        times, backward = [], []
        for it in range(ITERS):
            pending.clear()
            dist.barrier()
            t0 = time.perf_counter()
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            tb = time.perf_counter() - t0
            rest = [p.grad.flatten() for p in model.parameters() if not (early[0] and p is head)]
            dist.all_reduce(torch.cat(rest))
            for w in pending:
                w.wait()
            if it >= WARMUP:
                times.append((time.perf_counter() - t0) * 1e3)
                backward.append(tb * 1e3)
            model.zero_grad()
        out.setdefault(mode, []).append({"iteration_ms": statistics.median(times),
                                         "backward_ms": statistics.median(backward)})
    return out


def _after_barrier(dist: Any, run: Any) -> float:
    """Seconds ``run()`` takes, started on every rank together."""
    dist.barrier()
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def _all_at_once(dist: Any, bufs: list[Any]) -> None:
    """Every buffer all-reduced asynchronously, then all waited for (as queued messages run)."""
    for w in [dist.all_reduce(b, async_op=True) for b in bufs]:
        w.wait()


def _one_by_one(dist: Any, bufs: list[Any]) -> None:
    """Every buffer all-reduced blocking, in turn (as bsp per tensor sends them)."""
    for b in bufs:
        dist.all_reduce(b)


def _spin_until(torch: Any, a: Any, work: Any) -> None:
    while not work.is_completed():
        torch.mm(a, a)
    work.wait()


def _progress(dist: Any, torch: Any) -> dict[str, Any]:
    a = torch.randn(192, 192)
    out: dict[str, Any] = {}
    for nbytes in (20_000, 640_000, 4_000_000):
        buf = torch.ones(nbytes // 4)
        alone, beside = [], []
        for it in range(WARMUP + ITERS):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            x = time.perf_counter() - t
            dist.barrier()
            t = time.perf_counter()
            _spin_until(torch, a, dist.all_reduce(buf, async_op=True))
            if it >= WARMUP:
                alone.append(x)
                beside.append(time.perf_counter() - t)
        m = statistics.median
        out[str(nbytes)] = {"alone_ms": m(alone) * 1e3, "beside_compute_ms": m(beside) * 1e3,
                            "slowdown": m(beside) / m(alone) - 1}
    return out


def _queue(dist: Any, torch: Any) -> dict[str, Any]:
    a = torch.randn(192, 192)
    m = statistics.median
    small = [torch.ones(5_000) for _ in range(16)]  # 20 KB each
    blocking, queued = [], []
    for it in range(WARMUP + ITERS):
        x = _after_barrier(dist, lambda: _one_by_one(dist, small))
        y = _after_barrier(dist, lambda: _all_at_once(dist, small))
        if it >= WARMUP:
            blocking.append(x)
            queued.append(y)
    hooks = [torch.ones(2_500) for _ in range(60)]  # 10 KB each, launched over the compute as WFBP's hooks do
    compute_s, during, tails, alone = 0.2, [], [], []
    for it in range(WARMUP + ITERS):
        dist.barrier()
        t0, works, i = time.perf_counter(), [], 0
        while (now := time.perf_counter() - t0) < compute_s or i < len(hooks):
            while i < len(hooks) and now >= compute_s * (0.05 + 0.9 * i / len(hooks)):
                works.append(dist.all_reduce(hooks[i], async_op=True))
                i += 1
            torch.mm(a, a)
        t1 = time.perf_counter()
        done = sum(w.is_completed() for w in works)
        for w in works:
            w.wait()
        tail = time.perf_counter() - t1
        queued_s = _after_barrier(dist, lambda: _all_at_once(dist, hooks))
        if it >= WARMUP:
            during.append(done)
            tails.append(tail)
            alone.append(queued_s)
    return {"blocking_16x20KB_ms": m(blocking) * 1e3, "queued_16x20KB_ms": m(queued) * 1e3,
            "concurrency": m(blocking) / m(queued),
            "wfbp_like_60x10KB": {"compute_ms": compute_s * 1e3, "completed_during_compute": m(during),
                                  "tail_after_compute_ms": m(tails) * 1e3, "queued_alone_ms": m(alone) * 1e3}}


def _wfbp(dist: Any, torch: Any) -> dict[str, Any]:
    from runners.training import zoo

    out: dict[str, Any] = {}
    for name, batch in (("resnet_small", 32), ("gpt_wide", 8)):
        entry = zoo.model(name)
        model = entry.builder(seed=0)
        x, y = entry.example_batch(batch)
        params = [q for q in model.parameters() if q.requires_grad]
        works: list[Any] = []
        handles = [q.register_post_accumulate_grad_hook(
            lambda q: works.append(dist.all_reduce(q.grad, async_op=True))) for q in params]
        rows = []
        for it in range(WARMUP + ITERS):
            works.clear()
            model.zero_grad(set_to_none=True)
            dist.barrier()
            loss = entry.loss_fn(model(x), y)
            t0 = time.perf_counter()
            loss.backward()
            t1 = time.perf_counter()
            done = sum(w.is_completed() for w in works)
            for w in works:
                w.wait()
            t2 = time.perf_counter()
            grads = [q.grad for q in params]
            queued = _after_barrier(dist, lambda: _all_at_once(dist, grads))
            blocking = _after_barrier(dist, lambda: _one_by_one(dist, grads))
            if it >= WARMUP:
                rows.append((t1 - t0, done, len(works), t2 - t1, queued, blocking))
        for h in handles:
            h.remove()

        def med(i: int) -> float:
            return statistics.median(r[i] for r in rows)

        out[name] = {"messages": med(2), "backward_ms": med(0) * 1e3, "completed_during_backward": med(1),
                     "tail_after_backward_ms": med(3) * 1e3, "queued_alone_ms": med(4) * 1e3,
                     "blocking_alone_ms": med(5) * 1e3, "concurrency": med(5) / med(4)}
    return out


def _timing(dist: Any, torch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    calls = 20
    for nbytes in (1_000, 20_000, 64_000, 256_000, 1_000_000):
        buf = torch.ones(nbytes // 4)
        single, chained = [], []
        for it in range(WARMUP + ITERS):
            for _ in range(calls // 4):
                x = torch.tensor([_after_barrier(dist, lambda: dist.all_reduce(buf))], dtype=torch.float64)
                dist.all_reduce(x, op=dist.ReduceOp.MAX)  # as the sweep: the slowest rank's call
                if it >= WARMUP:
                    single.append(float(x))

            def chain() -> None:
                for _ in range(calls):
                    dist.all_reduce(buf)

            y = torch.tensor([_after_barrier(dist, chain) / calls], dtype=torch.float64)
            dist.all_reduce(y, op=dist.ReduceOp.MAX)
            if it >= WARMUP:
                chained.append(float(y))
        m = statistics.median
        mean = statistics.fmean
        out[str(nbytes)] = {"after_barrier_ms": m(single) * 1e3, "after_barrier_mean_ms": mean(single) * 1e3,
                            "back_to_back_ms": m(chained) * 1e3, "back_to_back_mean_ms": mean(chained) * 1e3,
                            "ratio": m(chained) / m(single), "ratio_of_means": mean(chained) / mean(single)}
    return out


def _bsp(dist: Any, torch: Any) -> dict[str, Any]:
    """Per iteration, in one process group and close in time: resnet_small's 47 gradients all-reduced one by one
    right after a real backward (bsp per tensor; from the slowest rank's end of backward, on the host's one
    monotonic clock), the same 47 one by one after a barrier with no compute before, and 47 back-to-back 1 KB
    all-reduces (a latency probe); each the slowest rank's time."""
    from runners.training import zoo

    entry = zoo.model("resnet_small")
    model = entry.builder(seed=0)
    x, y = entry.example_batch(32)
    params = [q for q in model.parameters() if q.requires_grad]
    small = [torch.ones(256) for _ in params]
    rows = []

    def slowest(t: float) -> float:
        v = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return float(v)

    for it in range(WARMUP + 3 * ITERS):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        entry.loss_fn(model(x), y).backward()
        t0 = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every rank of the host
        _one_by_one(dist, [q.grad for q in params])
        ends = torch.tensor([t0, time.perf_counter()], dtype=torch.float64)
        dist.all_reduce(ends, op=dist.ReduceOp.MAX)  # from the slowest rank's end of backward to the last finish
        after_backward = float(ends[1] - ends[0])
        alone = slowest(_after_barrier(dist, lambda: _one_by_one(dist, [q.grad for q in params])))
        probe = slowest(_after_barrier(dist, lambda: _one_by_one(dist, small)))
        if it >= WARMUP:
            rows.append((after_backward, alone, probe))
    m = statistics.median
    return {"messages": len(params), "after_backward_ms": [r[0] * 1e3 for r in rows],
            "alone_ms": [r[1] * 1e3 for r in rows], "probe_1KB_ms": [r[2] * 1e3 for r in rows],
            "after_backward_over_alone": m(r[0] / r[1] for r in rows),
            "after_backward_over_probe": m(r[0] / r[2] for r in rows)}


def _beside(dist: Any, torch: Any) -> dict[str, Any]:
    big, small = torch.ones(2**21), torch.ones(256)  # 8 MiB and 1 KiB of fp32
    rows = []
    for it in range(WARMUP + 2 * ITERS):
        dist.barrier()
        t0 = time.perf_counter()
        work_big = dist.all_reduce(big, async_op=True)
        work_small = dist.all_reduce(small, async_op=True)
        work_small.wait()
        t_small = time.perf_counter() - t0
        work_big.wait()
        t_big = time.perf_counter() - t0
        big_alone = _after_barrier(dist, lambda: dist.all_reduce(big))
        small_alone = _after_barrier(dist, lambda: dist.all_reduce(small))
        v = torch.tensor([t_small, t_big, big_alone, small_alone], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)  # each the slowest rank's
        if it >= WARMUP:
            rows.append(v.tolist())
    m = statistics.median
    names = ("small_done_ms", "pair_done_ms", "big_alone_ms", "small_alone_ms")
    out: dict[str, Any] = {n: m(r[i] for r in rows) * 1e3 for i, n in enumerate(names)}
    out["pair_over_fifo"] = m(r[1] / (r[2] + r[3]) for r in rows)  # 1 = the FIFO link's sum, less = overlapped
    out["small_done_over_big_alone"] = m(r[0] / r[2] for r in rows)
    return out


def rank_side(experiment: str) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    res = {"interference": _interference, "buckets": _buckets, "two_groups": _two_groups, "progress": _progress,
           "queue": _queue, "wfbp": _wfbp, "timing": _timing, "bsp": _bsp, "beside": _beside}[experiment](dist, torch)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------------------------------- host side
def run(experiment: str, rate: str, nodes: int, ranks_per_node: int) -> dict[str, Any]:
    node = ('exec "$0" -m torch.distributed.run --nnodes "$COMMSCOPE_NNODES" --nproc-per-node '
            '"$COMMSCOPE_NPROC_PER_NODE" --node-rank "$COMMSCOPE_NODE_RANK" --master-addr "$MASTER_ADDR" '
            '--master-port "$MASTER_PORT" "$1" --rank-side "$2"')
    cmd = [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(nodes), "--ranks-per-node",
           str(ranks_per_node), "--rate", rate, "--", "sh", "-c", node, sys.executable, str(Path(__file__).resolve()),
           experiment]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln.split("RESULT ", 1)[1] for ln in done.stdout.splitlines() if "RESULT " in ln]
    if done.returncode or not lines:
        raise RuntimeError(f"{experiment} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return json.loads(lines[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank-side", choices=EXPERIMENTS, help=argparse.SUPPRESS)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", choices=EXPERIMENTS, action="append", help="run only these (default: all)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_overlap_diagnostics.json",
                    help="where --json writes (default: bench/results/bench_overlap_diagnostics.json)")
    a = ap.parse_args(argv)
    if a.rank_side:
        return rank_side(a.rank_side)
    if a.nodes < 1 or a.ranks_per_node < 1 or a.nodes * a.ranks_per_node < 2 or a.repeats < 1:
        print(f"commscope: error: need at least 2 ranks and 1 repeat, got --nodes {a.nodes} --ranks-per-node "
              f"{a.ranks_per_node} --repeats {a.repeats}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {"rate": a.rate, "nodes": a.nodes, "ranks_per_node": a.ranks_per_node,
                           "iterations": ITERS, "warmup": WARMUP, "runs": {}}
    try:
        for exp in a.only or EXPERIMENTS:
            out["runs"][exp] = [run(exp, a.rate, a.nodes, a.ranks_per_node) for _ in range(a.repeats)]
            print(exp, json.dumps(out["runs"][exp]), flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = a.out.with_name(a.out.name + ".tmp")  # written whole, then renamed: an old file is never half-written
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
