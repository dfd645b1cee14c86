"""Simulations per second of ResNet-50 (161 tensors) per schedule, and the time of a 1,000-point sweep.

    python bench/bench_schedules.py [--configs 10000] [--repeat 5] [--json]

For every schedule, in one run:
- ``event``: ``cm.simulate`` one configuration at a time (builds the full timeline), on a cycle of
  (environment, p) configurations; simulations/s = configurations / seconds.
- ``vectorized``: ``cm.sweep`` over ``configs`` configurations at once (a grid of inter-node beta x
  p on 10GbE's alpha), the same recurrences on arrays; simulations/s likewise.
- ``sweep_1000_ms``: wall time of a 1,000-point sweep (100 bandwidths x 10 worker counts), best of
  ``repeat``, with ``collective=None`` (the environment's library's choice per message).
- ``terms_sims_per_s``: ``cm.sweep`` over ``configs // 5`` configurations with interference and host
  overhead on (kappa_c = 0.2, kappa_m = 0.1, o = 10 us, and an optimizer step of 1% of compute), which
  runs each schedule's task graph on the piecewise-rate engine instead of its recurrences.
Goals: >= 10,000 ResNet-50 simulations/s in ``cm.sweep`` for every schedule, ByteScheduler included
(issue 16, item 6; issue 4 set it for wfbp and dear); a 1,000-point sweep < 100 ms. ``meets_goal``
says whether the vectorized rate reaches 10,000/s. Times are wall-clock: on a shared machine another
process's load lowers them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np
from _timing import best_of  # bench/ is on sys.path when a script in it runs

import costmodels as cm

P = np.array([2, 4, 8, 12, 16, 24, 32, 48, 64, 128])
GOAL = 10_000  # simulations per second in cm.sweep, every schedule (issue 16, item 6)
TERMS = {"kappa_c": 0.2, "kappa_m": 0.1, "host_overhead": 10e-6}


def event_rate(prof: cm.ModelProfile, schedule: str, seconds: float) -> float:
    envs = [cm.environment(x) for x in ("1GbE", "10GbE", "25GbE", "IB-EDR")]
    configs = itertools.cycle([(e, int(q)) for e in envs for q in P])
    cm.simulate(prof, envs[0], 2, schedule)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        e, q = next(configs)
        cm.simulate(prof, e, q, schedule)
        done += 1
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=10_000, help="configurations per vectorized call")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--event-seconds", type=float, default=1.0, help="time spent on one-at-a-time runs")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    prof = cm.profile("resnet50")
    base = cm.environment("10GbE")
    big = cm.EnvironmentArray.grid(base, beta=np.geomspace(1e-11, 1e-7, max(1, args.configs // len(P))))
    small = cm.EnvironmentArray.grid(base, beta=np.geomspace(1e-11, 1e-7, 100))
    on = cm.EnvironmentArray.grid(base.with_(**TERMS),
                                  beta=np.geomspace(1e-11, 1e-7, max(1, args.configs // 5 // len(P))))
    stepped = prof.with_optimizer(0.01 * prof.compute_s)
    results = {}
    for name in cm.schedules():
        vec = cm.schedule(name).vectorized is not None
        row: dict[str, object] = {"vectorized": vec, "event_sims_per_s": event_rate(prof, name, args.event_seconds)}
        if vec:
            n_big = big.size * len(P)
            row["batch"] = n_big
            row["vectorized_sims_per_s"] = n_big / best_of(lambda: cm.sweep(prof, big, P, name), args.repeat)
            row["speedup"] = row["vectorized_sims_per_s"] / row["event_sims_per_s"]
            row["meets_goal"] = row["vectorized_sims_per_s"] >= GOAL
        row["sweep_1000_ms"] = 1e3 * best_of(lambda: cm.sweep(prof, small, P, name), 1 if not vec else args.repeat)
        row["terms_sims_per_s"] = on.size * len(P) / best_of(lambda: cm.sweep(stepped, on, P, name),
                                                            max(1, args.repeat // 2))
        results[name] = row
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"ResNet-50 ({len(prof)} tensors), collective=None (the library's choice); best of {args.repeat}")
    print(f"{'schedule':14s} {'event sims/s':>13s} {'vectorized sims/s':>18s} {'ratio':>7s} {'1000-pt sweep':>14s} "
          f"{'with terms/s':>13s}")
    for name, r in results.items():
        v = f"{r['vectorized_sims_per_s']:,.0f}" if r["vectorized"] else "(loop)"
        ratio = f"{r['speedup']:.0f}x" if r["vectorized"] else "-"
        print(f"{name:14s} {r['event_sims_per_s']:>13,.0f} {v:>18s} {ratio:>7s} {r['sweep_1000_ms']:>11.1f} ms "
              f"{r['terms_sims_per_s']:>13,.0f}")


if __name__ == "__main__":
    main()
