"""Benchmarks 8b and 8c of the measurement runners, on an emulated link (needs root and iproute2).

    python bench/bench_emulated_link.py [--rate 1gbit] [--nodes 2] [--json]

Runs the issue's pipeline: ``commscope emulate --nodes N --rate R -- commscope bench collectives --op
allreduce --min-size 1MiB --max-size 64MiB --out RUN.jsonl``, then ``commscope fit RUN.jsonl
--primitive allreduce`` (ring_allreduce). Reports (b) busbw at 64 MiB as a fraction of the configured
rate (goal >= 0.9) and (c) P1, the fitted model's relative prediction error over the sweep for
n >= 64 KiB, median and max (goal: median <= 3%), with the fitted beta beside the one the framing
overhead predicts. ``--json`` writes bench/results/bench_emulated_link.json and keeps the sweep's
records in bench/results/emulated_<rate>_<nodes>nodes.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from runners import results as rs
    from runners.measure import fit as fitting

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    commscope = [sys.executable, "-m", "runners.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.jsonl"
        command = [*commscope, "emulate", "--nodes", str(args.nodes), "--rate", args.rate, "--", *commscope, "bench",
                   "collectives", "--op", "allreduce", "--min-size", "1MiB", "--max-size", "64MiB", "--out", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            sys.exit(f"the emulated sweep failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        loaded = rs.load(out)
        records = loaded.records
        text = out.read_text()
    network = records[0]["run"]["network"]
    largest = max(records, key=lambda r: r["config"]["bytes"])
    fraction = largest["result"]["busbw_GBps"] * 1e9 / (network["rate_bps"] / 8)
    result = fitting.fit(records, "allreduce", "ring_allreduce")
    errors = fitting.prediction_errors(result.environment, records, "allreduce", "ring_allreduce")
    report = {
        "command": " ".join(["commscope", *command[3:]]).replace(f"{sys.executable} -m runners.cli", "commscope"),
        "rate": args.rate, "nodes": args.nodes, "records": len(records),
        "busbw_64MiB_fraction_of_rate": fraction, "goal_b": ">= 0.9",
        "fitted_alpha_s": result.environment.alpha, "fitted_beta_s_per_byte": result.environment.beta,
        "expected_beta_s_per_byte": network["expected_beta_s_per_byte"],
        "p1_median": errors.median, "p1_max": errors.max, "p1_count": errors.count, "goal_c": "median <= 0.03",
        "host_ceiling_bps": network.get("host_ceiling_bps"), "rate_above_ceiling": network.get("rate_above_ceiling"),
    }
    print(f"(b) busbw at 64 MiB: {fraction:.3f} of {args.rate} (goal >= 0.9)")
    print(f"(c) P1 for n >= 64 KiB: median {errors.median:.2%}, max {errors.max:.2%} over {errors.count} sizes "
          f"(goal: median <= 3%)")
    print(f"fitted beta {result.environment.beta * 1e9:.3f} ns/B vs {network['expected_beta_s_per_byte'] * 1e9:.3f} "
          f"ns/B expected with framing; alpha {result.environment.alpha * 1e6:.1f} us")
    if args.json:
        (RESULTS / "bench_emulated_link.json").write_text(json.dumps(report, indent=1) + "\n")
        (RESULTS / f"emulated_{args.rate}_{args.nodes}nodes.jsonl").write_text(text)


if __name__ == "__main__":
    main()
