"""Benchmarks of the validation suite: P2 and DeAR's speedup over fusion, predicted vs measured.

    python bench/bench_validation.py [--dir DIR] [--json]            # a finished validation (default: shipped)
    python bench/bench_validation.py --run --emulate 100mbit,1gbit,2500mbit [--ranks 4] [--json]

P2: the prediction error of iteration time, |predicted / measured - 1|, across techniques and
emulated environments: median and max, overall, per environment and per technique (goal: median
<= 5%, max <= 15%). DeAR: its speedup over ``fusion`` (fusion time / dear time) measured and
predicted on every link, with the relative difference (goal: within 10% on the slowest link).
``--run`` first runs ``commscope validate --suite quick`` into a temporary directory (needs root
for ``--emulate``). ``--json`` writes bench/results/bench_validation.json.
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
    out: dict = {"directory": str(directory), "p2": v.summary(rows), "per_technique": {}, "dear_over_fusion": {}}
    for tech in dict.fromkeys(r["technique"] for r in rows):
        e = np.array([abs(r["error"]) for r in rows if r["technique"] == tech and np.isfinite(r["error"])])
        out["per_technique"][tech] = {"median_abs_error": float(np.median(e)), "max_abs_error": float(e.max())}
    for env in dict.fromkeys(r["environment"] for r in rows):
        by = {r["technique"]: r for r in rows if r["environment"] == env}
        if "dear" in by and "fusion" in by:
            measured = by["fusion"]["measured_ms"] / by["dear"]["measured_ms"]
            predicted = by["fusion"]["predicted_ms"] / by["dear"]["predicted_ms"]
            out["dear_over_fusion"][env] = {"measured_speedup": measured, "predicted_speedup": predicted,
                                            "relative_difference": predicted / measured - 1}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT / "runners" / "reference" / "validation")
    ap.add_argument("--run", action="store_true", help="run the quick suite first")
    ap.add_argument("--emulate", default="100mbit,1gbit,2500mbit")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir
        if args.run:
            directory = Path(tmp) / "validation"
            subprocess.run([sys.executable, "-m", "runners.cli", "validate", "--suite", "quick", "--ranks",
                            str(args.ranks), "--emulate", args.emulate, "--out", str(directory)], check=False)
        res = analyse(directory)
    print(f"P2 (|predicted/measured - 1| of iteration time), from {res['directory']}:")
    for env, s in res["p2"].items():
        print(f"  {env:>10}: median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%} over {s['n']}")
    for tech, s in res["per_technique"].items():
        print(f"  {tech:>14}: median {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%}")
    print("DeAR speedup over fusion (fusion time / dear time):")
    for env, s in res["dear_over_fusion"].items():
        print(f"  {env:>10}: measured {s['measured_speedup']:.3f}, predicted {s['predicted_speedup']:.3f} "
              f"({s['relative_difference']:+.1%})")
    if args.json:
        RESULTS.mkdir(parents=True, exist_ok=True)
        if args.run:
            res["directory"] = "(temporary: --run)"
        else:
            res["directory"] = str(Path(res["directory"]).resolve().relative_to(ROOT))
        (RESULTS / "bench_validation.json").write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {RESULTS / 'bench_validation.json'}")


if __name__ == "__main__":
    main()
