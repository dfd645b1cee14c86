"""Benchmark 8c, P1: prediction error of the fitted cost model over a measured collective sweep.

    python bench/bench_fit.py RESULTS.jsonl... [--primitive allreduce] [--algorithm ring_allreduce|auto]
                              [--min-size 64KiB] [--fit-min-size 0] [--json]

Fits the environment (``runners.measure.fit.fit``: alpha, beta, gamma where identifiable) to the records of
the results file(s), then reports P1: the median and max of |predicted - measured| / measured over the
records of at least ``--min-size`` (default 64 KiB). Goal: median <= 3%. The fit uses every size from
``--fit-min-size`` up (default: all), so P1 is the in-sample error of the model over the sweep.
``fit_s`` is the time of a second fit (the first, ``fit_cold_s``, also imports scipy.optimize and
compiles the models). ``--json`` prints one JSON object instead of text. Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

GOAL_MEDIAN = 0.03


def measure(paths: Sequence[str], primitive: str = "allreduce", algorithm: str | None = None,
            min_size: str | int = "64KiB", fit_min_size: str | int = 0) -> dict[str, Any]:
    """Fit the records of ``paths`` and return P1 with the fitted parameters (JSON-able)."""
    from runners import results as rs
    from runners.measure import fit as fitting

    loaded = {str(p): rs.load(p) for p in paths}
    t0 = time.perf_counter()
    res = fitting.fit(loaded, primitive, algorithm, min_bytes=fit_min_size)
    cold_s = time.perf_counter() - t0  # includes importing scipy.optimize and compiling the models
    t0 = time.perf_counter()
    res = fitting.fit(loaded, primitive, algorithm, min_bytes=fit_min_size)
    fit_s = time.perf_counter() - t0
    err = fitting.prediction_errors(res.environment, loaded, ",".join(res.primitives),
                                    [res.algorithms[q] for q in res.primitives], min_bytes=min_size)
    return {
        "benchmark": "8c", "files": [str(p) for p in paths], "primitives": list(res.primitives),
        "algorithm": res.algorithm, "records_fitted": res.records, "fit_s": fit_s,
        "fit_cold_s": cold_s,
        "parameters": {k: v.to_dict() for k, v in res.parameters.items()},
        "r2": res.r2, "r2_log": res.r2_log,
        "P1": {**err.to_dict(), "goal_median": GOAL_MEDIAN, "met": err.median <= GOAL_MEDIAN},
        "bad_lines": [str(b) for b in res.bad],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("results", nargs="+", help="results files (JSON lines) with collective records")
    ap.add_argument("--primitive", default="allreduce", help="primitive(s), comma-separated")
    ap.add_argument("--algorithm", default=None, help="algorithm per primitive, or auto [default: ring]")
    ap.add_argument("--min-size", default="64KiB", help="smallest size counted in P1")
    ap.add_argument("--fit-min-size", default="0", help="smallest size used by the fit")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    from costmodels.errors import CommscopeError

    try:
        out = measure(args.results, args.primitive, args.algorithm, args.min_size, args.fit_min_size)
    except CommscopeError as exc:
        print(f"bench_fit: error: {exc}", file=sys.stderr)
        return 2
    for line in out["bad_lines"]:
        print(f"bench_fit: skipped {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return 0
    p1 = out["P1"]
    a, b = out["parameters"]["alpha"], out["parameters"]["beta"]
    print(f"fit: {out['algorithm']} on {out['records_fitted']} records in {out['fit_s'] * 1e3:.1f} ms: "
          f"alpha = {a['value'] * 1e6:.4g} us, beta = {b['value'] * 1e9:.4g} ns/B, R^2 = {out['r2']:.5f}")
    print(f"P1 (n >= {p1['min_bytes']} B, {p1['count']} records): median relative error {p1['median_rel_error']:.2%}, "
          f"max {p1['max_rel_error']:.2%} (goal: median <= {GOAL_MEDIAN:.0%}: {'met' if p1['met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
