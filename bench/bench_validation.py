"""Benchmarks of the validation suite: P2 and the winner figure for each prediction, and DeAR's speedup over fusion.

    python bench/bench_validation.py [--dir DIR ...] [--json]        # finished validations (default: every shipped)
    python bench/bench_validation.py --run --emulate 200mbit,1gbit,2500mbit,1gbit:2 [--ranks 4] [--json]

P2: the prediction error of iteration time, |predicted / measured - 1|, across (technique, environment,
model) cells: median and max, overall, per environment and per technique, for each of the three
predictions: (a) sweep only, (b) calibrated leave-one-technique-out (goal: median <= 5%, max <= 15%),
(c) shipped defaults. The winner: the fastest technique per (environment, model) predicted right, or
within the measured spread of the fastest (goal for (b): >= 90% of cells), with what running the pick costs
(its measured time over the fastest's) and Kendall's tau between the predicted and measured orders. Regimes: the
measured communication share of the bsp iteration per (environment, model). DeAR: its speedup over ``fusion``
measured and predicted on every link. ``--run`` first runs ``commscope validate --suite quick`` into a
temporary directory (needs root for ``--emulate``). ``--json`` writes bench/results/bench_validation.json
(``{"runs": [...]}`` for several). The shipped runs (``runners.reference.RUNS``): ``runners/reference/validation``
(2026-11-24, a busy host), ``validation-rerun`` and ``validation-run3`` (2026-11-27, the same command on quiet
hosts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def analyse(directory: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from runners import results as rs
    from runners import validate as v

    recs = rs.load(directory / "validation.jsonl").records
    rows = v.table_rows(recs)
    out: dict = {"directory": str(directory), "regimes": {k: {"comm_share_bsp": s, "regime": v.regime_name(s)}
                                                          for k, s in v.regimes(rows).items()},
                 "predictions": {}, "dear_over_fusion": {}}
    for key, suffix in (("sweep", ""), ("calibrated", "_calibrated"), ("defaults", "_defaults")):
        per_tech = {}
        for tech in dict.fromkeys(r["technique"] for r in rows):
            e = np.array([abs(r["error" + suffix]) for r in rows if r["technique"] == tech
                          and np.isfinite(r["error" + suffix])])
            if e.size:
                per_tech[tech] = {"median_abs_error": float(np.median(e)), "max_abs_error": float(e.max())}
        per_cell = {}  # per (environment, model): the closing note's table
        for env in dict.fromkeys(r["environment"] for r in rows):
            for model in dict.fromkeys(r["model"] for r in rows if r["environment"] == env):
                e = np.array([abs(r["error" + suffix]) for r in rows if r["environment"] == env
                              and r["model"] == model and np.isfinite(r["error" + suffix])])
                if e.size:
                    per_cell[f"{env}/{model}"] = {"n": int(e.size), "median_abs_error": float(np.median(e)),
                                                  "max_abs_error": float(e.max())}
        out["predictions"][key] = {"p2": v.summary(rows, key), "per_technique": per_tech,
                                   "per_environment_model": per_cell, "winner": v.winners(rows, key)}
        if key == "calibrated":  # (b)'s own uncertainty: cells whose error is within 2 standard errors of 0
            se = np.array([r["error_calibrated_stderr"] for r in rows])
            e = np.array([abs(r["error_calibrated"]) for r in rows])
            ok = np.isfinite(se) & np.isfinite(e)
            big = np.isfinite(e) & (e > 0.15)  # every cell over 15%; those without a standard error are not within
            out["predictions"][key]["uncertainty"] = {
                "cells_with_stderr": int(ok.sum()), "within_2_stderr": int(np.sum(e[ok] <= 2 * se[ok])),
                "over_15_percent": int(big.sum()),
                "over_15_percent_within_2_stderr": int(np.sum(e[big & ok] <= 2 * se[big & ok])),
                "median_stderr": float(np.median(se[ok])) if ok.any() else float("nan")}
    out["host_load"] = {}  # how much of the CPUs other work took while each environment ran (commscope validate)
    for env in dict.fromkeys(r["environment"] for r in rows):
        load = directory / env / "host_load.json"
        if load.is_file():
            out["host_load"][env] = json.loads(load.read_text())
    for env in dict.fromkeys(r["environment"] for r in rows):
        for model in dict.fromkeys(r["model"] for r in rows if r["environment"] == env):
            by = {r["technique"]: r for r in rows if r["environment"] == env and r["model"] == model}
            if "dear" in by and "fusion" in by:
                measured = by["fusion"]["measured_ms"] / by["dear"]["measured_ms"]
                predicted = by["fusion"]["predicted_ms"] / by["dear"]["predicted_ms"]
                out["dear_over_fusion"][f"{env}/{model}"] = {
                    "measured_speedup": measured, "predicted_speedup": predicted,
                    "relative_difference": predicted / measured - 1}
    return out


def _print(res: dict) -> None:
    print(f"from {res['directory']}")
    for env, load in res["host_load"].items():
        print(f"host during {env}: other work took {load['other_work']:.1%} of the CPUs"
              + (" (DISTURBED)" if load.get("disturbed") else ""))
    print("regimes (communication share of the bsp iteration):")
    for cell, r in res["regimes"].items():
        print(f"  {cell:>24}: {r['comm_share_bsp']:.0%} ({r['regime']})")
    for key, pred in res["predictions"].items():
        print(f"P2 of prediction {key} (|predicted/measured - 1| of iteration time):")
        for env, s in pred["p2"].items():
            if s["n"]:
                print(f"  {env:>14}: median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over {s['n']} "
                      f"({s['within_spread']} within the measured spread)")
        for cell, s in pred["per_environment_model"].items():
            c = pred["winner"]["cells"].get(cell, {})
            right = c.get("right")
            print(f"  {cell:>24}: median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over {s['n']}; "
                  f"winner {'right' if right else 'wrong' if right is not None else 'n/a'}"
                  + (f" (pick {c['regret']:+.1%} measured, tau {c['tau']:.2f})" if c else ""))
        w = pred["winner"]
        print(f"  winner right in {w['right']} of {w['n']} (environment, model) cells; running the pick costs "
              f"{w['median_regret']:.1%} at the median cell, {w['max_regret']:.1%} at worst; Kendall's tau "
              f"{w['median_tau']:.2f} at the median cell")
        u = pred.get("uncertainty")
        if u and u["cells_with_stderr"]:
            print(f"  standard error from the calibrated terms: median {u['median_stderr']:.1%}; "
                  f"{u['within_2_stderr']} of {u['cells_with_stderr']} errors within 2 standard errors; of the "
                  f"{u['over_15_percent']} over 15%, {u['over_15_percent_within_2_stderr']} within them")
    print("DeAR speedup over fusion (fusion time / dear time):")
    for cell, s in res["dear_over_fusion"].items():
        print(f"  {cell:>24}: measured {s['measured_speedup']:.3f}, predicted {s['predicted_speedup']:.3f} "
              f"({s['relative_difference']:+.1%})")


def summary(runs: list[dict]) -> list[dict]:
    """One row per (run, prediction): P2 median and max over every cell, and the winner figure."""
    rows = []
    for res in runs:
        for key, pred in res["predictions"].items():
            p2 = pred["p2"]["all"]
            rows.append({"run": Path(res["directory"]).name, "prediction": key, "cells": p2["n"],
                         "median_abs_error": p2["median_abs_error"], "max_abs_error": p2["max_abs_error"],
                         "winner_right": pred["winner"]["right"], "winner_cells": pred["winner"]["n"],
                         "max_regret": pred["winner"]["max_regret"], "median_tau": pred["winner"]["median_tau"]})
    return rows


def _print_summary(runs: list[dict]) -> None:
    print("every run (goals for (b): median <= 5%, max <= 15%, winner >= 90% of cells):")
    for r in summary(runs):
        print(f"  {r['run']:>18} {r['prediction']:>10}: median {r['median_abs_error']:5.1%}, max "
              f"{r['max_abs_error']:5.1%} over {r['cells']}; winner {r['winner_right']} of {r['winner_cells']} "
              f"(pick at most {r['max_regret']:+.1%} slower; tau {r['median_tau']:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, action="append",
                    help="a finished validation (repeat for several; default: every shipped run)")
    ap.add_argument("--run", action="store_true", help="run the quick suite first")
    ap.add_argument("--emulate", default="200mbit,1gbit,2500mbit,1gbit:2")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from runners import reference

    with tempfile.TemporaryDirectory() as tmp:
        directories = args.dir or [reference.run_dir(run) for run in reference.RUNS]
        if args.run:
            directories = [Path(tmp) / "validation"]
            subprocess.run([sys.executable, "-m", "runners.cli", "validate", "--suite", "quick", "--ranks",
                            str(args.ranks), "--emulate", args.emulate, "--out", str(directories[0])], check=False)
        runs = [analyse(d) for d in directories]
    for i, res in enumerate(runs):
        if i:
            print()
        _print(res)
    if len(runs) > 1:
        print()
        _print_summary(runs)
    if args.json:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for res in runs:
            if args.run:
                res["directory"] = "(temporary: --run)"
            else:
                where = Path(res["directory"]).resolve()
                res["directory"] = str(where.relative_to(ROOT)) if where.is_relative_to(ROOT) else str(where)
        out = runs[0] if len(runs) == 1 else {"runs": runs}
        (RESULTS / "bench_validation.json").write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {RESULTS / 'bench_validation.json'}")


if __name__ == "__main__":
    main()
