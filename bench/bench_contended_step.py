"""What the contended step would do as a shipped default: the nine quick-suite runs predicted with it.

    python bench/bench_contended_step.py [--steps 0,5,10,15] [--dir DIR ...] [--probes]

For each finished validation run (default: the nine four-rank quick-suite runs in the repository) and each step
(ms per latency step, ``Environment.contended_step``), every measured cell is predicted two ways from the run's
own fitted environment and profiles: sweep-only (all terms 0 but the step) and (c), the shipped defaults
(``costmodels.default_terms`` with the run's host) with the step. Printed: the median and max of |predicted /
measured - 1| of (c) and how many (environment, model) cells get their fastest technique right (strictly: the
measured fastest predicted fastest), and per technique the sweep-only error of each (environment, model), so
that the step's effect on MG-WFBP, ByteScheduler and WFBP shows. ``--probes``: every cell at the latency the probes
before its runs measured (:func:`runners.validate.latency.latency_scale`). Exit 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("bench/results/validation_4ranks_cpu", "bench/results/validation_4ranks_probes",
        "bench/results/validation_4ranks_probes_rerun", "runners/reference/validation",
        "runners/reference/validation-rerun", "runners/reference/validation-run3",
        "bench/results/validation_4ranks_b2b", "bench/results/validation_4ranks_latency",
        "bench/results/validation_4ranks_latency_rerun")
OVERLAPPING = ("wfbp", "mgwfbp", "bytescheduler")


def scan(directory: Path, steps: list[float], probes: bool = False) -> dict:
    sys.path.insert(0, str(ROOT))
    import costmodels as cm
    from runners import results as rs
    from runners.calibrate.cells import gather_cells
    from runners.calibrate.solve import TERMS, predict_grid, with_terms
    from runners.validate import host_cpu
    from runners.validate.latency import FILE, latency_scale
    from runners.validate.prediction import shipped_defaults

    data = host_cpu.load(directory)
    errors = {s: [] for s in steps}
    right = {s: 0 for s in steps}
    cells_n, sweep_only = 0, {}
    for envdir in sorted(d for d in directory.iterdir() if (d / "records.jsonl").is_file()):
        recs = rs.load([envdir / "records.jsonl"]).records
        env = with_terms(cm.Environment.load(envdir / "environment.json"), {t: 0.0 for t in TERMS})
        defaults = shipped_defaults(env, host_cpu.shared_host(data, recs, 1, env))
        cells = gather_cells(recs, None)
        if probes and (envdir / FILE).is_file():  # each cell at the latency its runs' probes measured
            kept = rs.load(envdir / FILE).records
            cells = [dataclasses.replace(c, latency_scale=latency_scale(env, c.p, kept, c.technique, c.options,
                                                                        c.model) or 1.0) for c in cells]
        envs = [with_terms(e, {"contended_step": s}) for e in (defaults, env) for s in steps]
        grid = predict_grid(cells, envs)
        measured = np.array([c.measured_s for c in cells])
        rows: dict = {}
        for i, c in enumerate(cells):
            rows.setdefault((c.model, c.technique, json.dumps(dict(c.options), sort_keys=True)), []).append(i)
        for model in dict.fromkeys(k[0] for k in rows):
            keys = [k for k in rows if k[0] == model]
            cells_n += 1
            m = {k: float(np.median(measured[rows[k]])) for k in keys}
            best = min(keys, key=m.get)
            for j, s in enumerate(steps):
                p = {k: float(grid[j, rows[k][0]]) for k in keys}
                errors[s] += [abs(p[k] / m[k] - 1) for k in keys]
                right[s] += min(keys, key=p.get) == best
                for k in keys:
                    if k[1] in OVERLAPPING:
                        e = float(grid[len(steps) + j, rows[k][0]]) / m[k] - 1
                        sweep_only.setdefault(f"{envdir.name}/{model}/{k[1]}", []).append(round(100 * e, 1))
    return {"cells": cells_n, "defaults": {f"{s * 1e3:g} ms": {
        "median_abs_error": float(np.median(errors[s])), "max_abs_error": float(np.max(errors[s])),
        "winner_right": right[s]} for s in steps}, "sweep_only_percent_by_step": sweep_only}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="0,5,10,15", help="contended steps, ms, comma-separated")
    ap.add_argument("--dir", action="append", type=Path, help="a finished validation run (default: the nine)")
    ap.add_argument("--probes", action="store_true",
                    help="each cell at the latency its runs' probes measured (runs with latency_probes.jsonl)")
    a = ap.parse_args(argv)
    try:
        steps = [float(x) * 1e-3 for x in a.steps.split(",") if x.strip()]
    except ValueError:
        steps = []
    if not steps or any(not np.isfinite(s) or s < 0 for s in steps):
        print(f"commscope: error: --steps must be numbers >= 0 (ms), got {a.steps!r}", file=sys.stderr)
        return 2
    dirs = a.dir or [ROOT / r for r in RUNS]
    bad = [str(d) for d in dirs if not (d / "validation.md").is_file()]
    if bad:
        print(f"commscope: error: no finished validation in {', '.join(bad)}", file=sys.stderr)
        return 2
    for d in dirs:
        out = scan(d, steps, a.probes)
        print(f"== {d.relative_to(ROOT) if d.is_relative_to(ROOT) else d}")
        for s, v in out["defaults"].items():
            print(f"  (c) with {s:>6}: median {v['median_abs_error']:.1%}, max {v['max_abs_error']:.1%}, "
                  f"winner {v['winner_right']} of {out['cells']}")
        for k, v in out["sweep_only_percent_by_step"].items():
            print(f"  sweep-only {k}: " + " / ".join(f"{x:+.1f}%" for x in v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
