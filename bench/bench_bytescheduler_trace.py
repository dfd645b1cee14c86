"""Where ByteScheduler's time goes on an emulated cluster (needs root and iproute2): every negotiation, issue,
completion and gradient hook of the runner timestamped on every rank, set beside the model's price of each message.

    python bench/bench_bytescheduler_trace.py [--rate 200mbit] [--nodes 4] [--iterations 11] [--env ENV.json]
        [--json [--out PATH]]

The runner (``runners/training/exact_bytescheduler.py``) trains resnet_small (batch 32 per rank, one thread per
rank, gloo) under ``commscope emulate``; a subclass records, with the host's monotonic clock that all namespaces
share, when each rank's gradient hook fired, when its communication thread negotiated each batch (rank 0's
broadcast of the batch mask) and issued each partition's all-reduce, and when each all-reduce completed. The
timed steps are those after ``WARMUP``. It reports, per step:

* ``batches`` and rank 0's seconds in the negotiating broadcast (median, mean, max per batch);
* the **rendezvous**: gloo's broadcast returns on rank 0 only once every rank has entered it, timed after training
  with the other ranks entering 0, 50 and 100 ms late;
* the ranks' **skew**: how far apart the same gradient became ready on the ranks, and how long after the last
  rank's readiness its partition was issued on all of them;
* the **link**: each all-reduce's service (from the later of its last issue and the previous one's completion, to
  its completion on every rank) against its price in ``--env`` (default: the fitted environment of the held-out
  run ``bench/results/validation_4ranks_run6`` for the rate), its idle time waiting for issues, and the service
  over the price by how many ranks were computing beside it (a rank computes inside its step, outside the waits
  of its forward pre-hooks).

``--json`` writes bench/results/bench_bytescheduler_trace_<rate>.json (``--out`` another path). Exit code 2 with
one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WARMUP = 4
LATE_S = (0.0, 0.05, 0.1)


# ------------------------------------------------------------------------------------------- rank side
def rank_side(out_dir: str, iterations: int) -> int:
    import threading

    import torch
    import torch.distributed as dist

    import runners.training.exact_bytescheduler as bsmod
    from runners.training.zoo import MODELS

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    events: list[tuple[float, str, float, float]] = []
    lock = threading.Lock()

    def ev(kind: str, a: float, b: float = 0.0, t: float | None = None) -> None:
        with lock:
            events.append((time.perf_counter() if t is None else t, kind, a, b))

    class TimedDist:  # the module's dist, with the negotiating broadcast timed
        def __getattr__(self, name: str) -> Any:
            return getattr(dist, name)

        @staticmethod
        def broadcast(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            done = dist.broadcast(tensor, *args, **kwargs)
            ev("bcast", t0, float(tensor.sum()))
            return done

    bsmod.dist = TimedDist()

    class Traced(bsmod.ByteScheduler):
        def _send(self, c: int) -> Any:
            ev("issue", c)
            work = super()._send(c)
            work.get_future().then(lambda _f, c=c: ev("done", c))
            return work

        def _apply(self, i: int) -> None:
            t0 = time.perf_counter()
            super()._apply(i)
            ev("apply", i, t0)

        def _mark_ready(self, i: int) -> None:
            ev("ready", i)
            super()._mark_ready(i)

    entry = MODELS.get("resnet_small")
    x, y = entry.batch(32, torch.Generator().manual_seed(rank), entry.options())
    trainer = Traced(entry.builder(seed=0), 0.05)
    for i in range(WARMUP + iterations + 1):
        ev("step", i)
        trainer.step(x, y, entry.loss)
    trainer.finish()
    late = []
    mask = torch.zeros(len(trainer.partitions), dtype=torch.uint8)
    for delay in LATE_S:  # the rendezvous: rank 0's broadcast against the others entering it late
        for _ in range(3):
            dist.barrier()
            if rank:
                time.sleep(delay)
            t0 = time.perf_counter()
            dist.broadcast(mask, 0)
            late.append((delay, time.perf_counter() - t0))
    parts = [int(i) for i, _, _ in trainer.partitions]
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"rank": rank, "param_of_partition": parts,
                                                             "bytes": trainer._bytes, "events": events,
                                                             "late": late}))
    trainer.close()
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------------------------------- analysis
def _median(xs: Any) -> float:
    return float(statistics.median(xs)) if len(xs) else float("nan")


def analyse(ranks: list[dict[str, Any]], price_s: list[float], iterations: int) -> dict[str, Any]:
    """Per-step figures of a traced run (see the module's docstring); ``price_s``: each partition's modelled
    all-reduce time, in the runner's partition order. Pure: ``ranks`` as the rank side writes them."""
    ev = [sorted(r["events"]) for r in ranks]
    steps = [[t for t, k, a, _ in e if k == "step"] for e in ev]
    lo, hi = steps[0][WARMUP], steps[0][WARMUP + iterations]
    param_of = ranks[0]["param_of_partition"]
    order = [int(a) for t, k, a, _ in ev[0] if k == "issue"]

    def matched(e: list) -> tuple[list[float], list[float]]:  # the k-th issue of a partition ends at its k-th done
        ends: dict[int, list[float]] = {}
        for t, k, a, _ in e:
            if k == "done":
                ends.setdefault(int(a), []).append(t)
        seen: dict[int, int] = {}
        issued, ended = [], []
        for t, k, a, _ in e:
            if k == "issue":
                c = int(a)
                j = seen[c] = seen.get(c, -1) + 1
                issued.append(t)
                ended.append(ends[c][j] if j < len(ends.get(c, [])) else np.nan)
        return issued, ended

    pairs = [matched(e) for e in ev]
    n = min(len(i) for i, _ in pairs)
    issue = np.array([i[:n] for i, _ in pairs])
    done = np.array([d[:n] for _, d in pairs])
    order = order[:n]

    def ready(e: list, at: np.ndarray) -> np.ndarray:  # each issued partition's gradient: last hook at or before
        hooks: dict[int, list[float]] = {}
        for t, k, a, _ in e:
            if k == "ready":
                hooks.setdefault(int(a), []).append(t)
        return np.array([max((h for h in hooks[param_of[c]] if h <= ti + 1e-9), default=np.nan)
                         for c, ti in zip(order, at, strict=True)])

    rdy = np.array([ready(e, issue[r]) for r, e in enumerate(ev)])
    last_issue, last_done = issue.max(axis=0), done.max(axis=0)
    start = np.maximum(last_issue, np.concatenate([[-np.inf], last_done[:-1]]))
    sel = (start >= lo) & (start < hi)
    service, price = (last_done - start)[sel], np.asarray(price_s)[order][sel]
    gap = last_issue - np.concatenate([[np.nan], last_done[:-1]])  # the first message waits for nothing earlier
    waiting = np.clip(np.nan_to_num(gap, nan=0.0), 0, None)[sel]

    def computing(r: int, a: float, b: float) -> float:  # share of [a, b] rank r spent computing
        e = ev[r]
        inside = sum(max(0.0, min(b, s1) - max(a, s0)) for s0, s1 in zip(steps[r][:-1], steps[r][1:], strict=True))
        waits = sum(max(0.0, min(b, t) - max(a, t0)) for t, k, _, t0 in e if k == "apply")
        return (inside - waits) / max(b - a, 1e-12)

    beside = np.array([sum(computing(r, a, b) for r in range(len(ev))) for a, b in zip(start[sel], last_done[sel],
                                                                                      strict=True)])
    by_computing = {}
    for k in range(len(ev) + 1):
        m = (beside >= k - 0.5) & (beside < k + 0.5)
        if m.any():
            by_computing[str(k)] = {"messages": int(m.sum()),
                                    "service_over_price_median": _median(service[m] / price[m]),
                                    "excess_ms_per_step": float((service[m] - price[m]).sum() / iterations * 1e3)}
    neg = [(t - a) for t, k, a, _ in ev[0] if k == "bcast" and lo <= t < hi]
    skew = (rdy.max(axis=0) - rdy.min(axis=0))[sel]
    late = {}
    for delay, took in ranks[0]["late"]:
        late.setdefault(f"{delay * 1e3:.0f} ms", []).append(took * 1e3)
    return {
        "period_ms": (hi - lo) / iterations * 1e3,
        "batches_per_step": len(neg) / iterations,
        "negotiation_ms": {"median": _median(neg) * 1e3, "mean": float(np.mean(neg)) * 1e3, "max": max(neg) * 1e3,
                           "per_step": sum(neg) / iterations * 1e3},
        "rendezvous_rank0_broadcast_ms_by_lateness": {k: _median(v) for k, v in late.items()},
        "ready_skew_ms_median": _median(skew) * 1e3,
        "issue_after_last_ready_ms": {"median": _median((last_issue - rdy.max(axis=0))[sel]) * 1e3,
                                      "mean": float(np.nanmean((last_issue - rdy.max(axis=0))[sel])) * 1e3},
        "link_busy_ms_per_step": float(service.sum() / iterations * 1e3),
        "link_priced_ms_per_step": float(price.sum() / iterations * 1e3),
        "link_idle_waiting_for_issue_ms_per_step": float(waiting.sum() / iterations * 1e3),
        "service_over_price_median": _median(service / price),
        "by_ranks_computing": by_computing,
    }


# ------------------------------------------------------------------------------------------- host side
def prices(env_path: Path, sizes: list[int], p: int) -> list[float]:
    """Each partition's all-reduce time in ``env_path``'s environment, chained as the schedule prices them."""
    from costmodels.environment import Environment
    from costmodels.messages import Comm
    from costmodels.schedules.blocks import chain_prices
    from runners.training.pricing import _collective_for

    env = Environment.load(env_path)
    coll = _collective_for(env.metadata)
    comm = Comm("allreduce", p, env, coll.get("allreduce") if isinstance(coll, dict) else coll, {})
    return [float(x) for x in chain_prices(comm, np.asarray(sizes, dtype=float))]


def run(rate: str, nodes: int, iterations: int, out_dir: str) -> None:
    node = ('exec "$0" -m torch.distributed.run --nnodes "$COMMSCOPE_NNODES" --nproc-per-node 1 --node-rank '
            '"$COMMSCOPE_NODE_RANK" --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "$1" --rank-side "$2" '
            '--iterations "$3"')
    cmd = [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(nodes), "--rate", rate, "--", "sh", "-c",
           node, sys.executable, str(Path(__file__).resolve()), out_dir, str(iterations)]
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"the traced run failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank-side", help=argparse.SUPPRESS)
    ap.add_argument("--rate", default="200mbit")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=11)
    ap.add_argument("--env", type=Path, default=None, help="environment pricing the messages (default: run6's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.rank_side:
        return rank_side(a.rank_side, a.iterations)
    env = a.env or RESULTS / "validation_4ranks_run6" / a.rate / "environment.json"
    if a.nodes < 2 or a.iterations < 1 or not env.is_file():
        print(f"commscope: error: need --nodes >= 2 (got {a.nodes}), --iterations >= 1 (got {a.iterations}) and an "
              f"environment file (got {env}; pass --env)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="commscope-bstrace-") as tmp:
        try:
            run(a.rate, a.nodes, a.iterations, tmp)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"commscope: error: {exc}", file=sys.stderr)
            return 2
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(a.nodes)]
    res = {"rate": a.rate, "nodes": a.nodes, "model": "resnet_small", "batch_size": 32, "iterations": a.iterations,
           "priced_with": str(env.relative_to(ROOT) if env.is_relative_to(ROOT) else env),
           **analyse(ranks, prices(env, ranks[0]["bytes"], a.nodes), a.iterations)}
    print(json.dumps(res, indent=1))
    if a.json:
        out = a.out or RESULTS / f"bench_bytescheduler_trace_{a.rate}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_name(out.name + ".tmp")  # written whole, then renamed
        tmp_out.write_text(json.dumps(res, indent=1) + "\n")
        tmp_out.replace(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
