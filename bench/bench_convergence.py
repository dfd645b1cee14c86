"""Benchmark of measured against predicted time to accuracy (issue 17 item 4) on a convergence validation.

    python bench/bench_convergence.py [--dir DIR] [--json]     # a finished run (default: the shipped one)
    python bench/bench_convergence.py --run [--emulate 100mbit] [--ranks 4] [--seeds 3] [--json]

The run is analysed again from its records (``runners.validate.convergence_analysis.load_dir``), and the goals
are printed: Kendall's tau between the predicted and the measured ranking of at least 8 algorithms >= 0.6; every
compressor's measured delta / omega beside its worst case; the predicted ratio to SGD within 2x of the measured
one for every algorithm whose bound applies (rows where it does not say why). ``--run`` first runs
``commscope validate --convergence`` into a temporary directory (needs root for ``--emulate``). ``--json``
writes bench/results/bench_convergence.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHIPPED = ROOT / "runners" / "reference" / "convergence"
KEYS = ("constant", "measured_constant", "worst_case_constant", "reached", "seeds", "steps_median",
        "time_median_s", "time_spread", "measured_ratio", "measured_ratio_at_least", "predicted_ratio",
        "predicted_ratio_cost_model", "predicted_ratio_worst_case", "within_2x", "measured_rank", "predicted_rank",
        "applies", "note")


def analyse(directory: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from runners.validate.convergence_analysis import load_dir

    s = load_dir(directory)
    return {"directory": str(directory), "eps": s["eps"], "constants": s.get("constants"),
            "goals": s["goals"], "kendall": s["kendall"], "kendall_reached": s["kendall_reached"],
            "kendall_cost_model": s["kendall_cost_model"], "kendall_worst_case": s["kendall_worst_case"],
            "kendall_steps": s["kendall_steps"],
            "algorithms": {r["label"]: {k: r.get(k) for k in KEYS} for r in s["rows"]}, "not_run": s["not_run"]}


def _g(x: object) -> str:
    return "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=SHIPPED)
    ap.add_argument("--run", action="store_true", help="run commscope validate --convergence first")
    ap.add_argument("--emulate", default="100mbit")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir
        if args.run:
            directory = Path(tmp) / "convergence"
            subprocess.run([sys.executable, "-m", "runners.cli", "validate", "--convergence", "--ranks",
                            str(args.ranks), "--seeds", str(args.seeds), "--emulate", args.emulate, "--out",
                            str(directory)], check=False)
        res = analyse(directory)
    print(f"from {res['directory']}")
    print(f"{'algorithm':<11} {'delta/omega':>12} {'worst case':>10} {'reached':>7} {'measured':>9} "
          f"{'predicted':>9} {'within 2x':>9} {'rank m/p':>9}")
    for label, r in res["algorithms"].items():
        const = f"{r['constant'][0]} {_g(r['measured_constant'])}" if r["constant"] else "-"
        meas = _g(r["measured_ratio"]) if r["measured_ratio"] is not None else (
            f">{_g(r['measured_ratio_at_least'])}" if r["measured_ratio_at_least"] is not None else "-")
        print(f"{label:<11} {const:>12} {_g(r['worst_case_constant']):>10} {r['reached']}/{r['seeds']:<5} "
              f"{meas:>9} {_g(r['predicted_ratio']):>9} {_g(r.get('within_2x')):>9} "
              f"{_g(r.get('measured_rank'))}/{_g(r.get('predicted_rank')):<5}"
              + (f"  ({r['note']})" if r["note"] else ""))
    for name, why in res["not_run"].items():
        print(f"{name:<11} not run: {why}")
    g = res["goals"]
    print(f"goal: Kendall tau >= 0.6 over >= 8 algorithms: tau = {_g(g['kendall_tau'])} over "
          f"{g['algorithms_ranked']} -> {'met' if g['tau_goal_met'] else 'NOT met'}")
    print(f"goal: predicted ratio within 2x for every algorithm whose bound applies -> "
          f"{'met' if g['within_2x_goal_met'] else 'NOT met'} ({sum(bool(v) for v in g['within_2x'].values())} of "
          f"{len(g['bound_applies'])})")
    print("goal: every compressor's delta/omega beside its worst case -> "
          + ("yes" if g["compressors_reported"] else "NO"))
    print(f"tau over the algorithms that reached only: {_g(res['kendall_reached']['tau'])}; with cost-model seconds "
          f"per step: {_g(res['kendall_cost_model']['tau'])}; with worst-case delta/omega: "
          f"{_g(res['kendall_worst_case']['tau'])}; of the steps alone (bounds' steps vs measured steps): "
          f"{_g(res['kendall_steps']['tau'])}")
    if args.json:
        RESULTS.mkdir(parents=True, exist_ok=True)
        res["directory"] = "(temporary: --run)" if args.run else str(Path(res["directory"]).resolve().relative_to(ROOT))
        (RESULTS / "bench_convergence.json").write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {RESULTS / 'bench_convergence.json'}")


if __name__ == "__main__":
    main()
