"""Issue 15, item 5: every shipped published collective measurement beside the prediction of its environment's
collective library (NCCL's model for the GPU systems), per point and per size regime.

    python bench/bench_published.py [--system NAME] [--json]

Regimes: small (< 1 MiB), mid (1 MiB - 1 GiB) and bandwidth (>= 1 GiB); the goal, within 10% of the
published busbw, is pinned by tests/test_published.py in the bandwidth regime. Points whose published busbw
is 0.00 (nccl-tests prints two decimals) have no finite error and are counted but not summarised.
``--json`` writes bench/results/bench_published.json. Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
GOAL = 0.10


def _summary(errors: list[float]) -> dict[str, Any]:
    e = np.abs(np.asarray([x for x in errors if math.isfinite(x)], dtype=float))
    if not len(e):
        return {"points": 0}
    return {"points": len(e), "median_abs_error": float(np.median(e)), "max_abs_error": float(e.max()),
            "within_goal": int((e <= GOAL).sum())}


def measure(system: str | None = None) -> dict[str, Any]:
    """Per system: every point (bytes, measured and predicted busbw, error, choice) and per-regime summaries."""
    from costmodels.errors import CommscopeError
    from runners import reference

    systems = reference.published_systems()
    if system is not None and system not in systems:
        raise CommscopeError(f"unknown published system {system!r}; one of: {', '.join(systems)}")
    out: dict[str, Any] = {}
    for name in [system] if system else systems:
        rows = reference.published_comparison(name)
        points = [{"bytes": r["bytes"], "measured_busbw_GBps": r["measured_busbw_GBps"],
                   "predicted_busbw_GBps": round(r["predicted_busbw_GBps"], 4), "busbw_error": r["busbw_error"],
                   "choice": f"{r['algorithm']}/{r['protocol']}"} for r in rows]
        regimes = {label: _summary([r["busbw_error"] for r in rows if lo <= r["bytes"] < hi])
                   for label, lo, hi in reference.REGIMES}
        out[name] = {"environment": rows[0]["environment"], "op": rows[0]["op"], "p": rows[0]["p"],
                     "citation": rows[0]["citation"], "regimes": regimes, "points": points}
    return {"goal": f"|busbw error| <= {GOAL:.0%}", "library": "each environment's own (nccl)", "systems": out}


def _fmt(x: float) -> str:
    return f"{x:+7.1%}" if math.isfinite(x) else "    n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default=None, help="one published system (default: all)")
    ap.add_argument("--json", action="store_true", help="write bench/results/bench_published.json")
    a = ap.parse_args(argv)
    try:
        res = measure(a.system)
    except Exception as exc:  # one line, exit 2
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    for name, s in res["systems"].items():
        print(f"{name} ({s['environment']}, {s['op']}, p = {s['p']}): {s['citation']}")
        print(f"  {'bytes':>12} {'measured':>9} {'predicted':>9} {'error':>7}  choice")
        for pt in s["points"]:
            print(f"  {pt['bytes']:>12} {pt['measured_busbw_GBps']:>9.2f} {pt['predicted_busbw_GBps']:>9.2f} "
                  f"{_fmt(pt['busbw_error'])}  {pt['choice']}")
        for label, r in s["regimes"].items():
            if r["points"]:
                print(f"  {label:>22}: median {r['median_abs_error']:6.1%}  max {r['max_abs_error']:6.1%}  "
                      f"within {GOAL:.0%}: {r['within_goal']}/{r['points']}")
    if a.json:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "bench_published.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
