"""Issue 15, item 6: the fitted environment of each emulated validation environment, with its library (gloo),
predicts every primitive of that environment's own collective sweep.

    python bench/bench_library_fit.py [VALIDATION_DIR ...] [--min-size 64KiB] [--library gloo] [--json]

For every environment directory of each ``commscope validate`` run given (default: every shipped run,
``runners.reference.RUNS``, each with its own fit), the
environment fitted by the run (``environment.json``: alpha, beta, gamma) prices each measured message with
``collective=None`` under ``--library`` (what the library would run, :func:`costmodels.choose`), and the
error |predicted / measured - 1| of the message time (the statistic the run fitted: the mean) is reported
per (environment, primitive) for sizes of at least ``--min-size``. Goal: median <= 5% in every pair.
Beside it, the measurement's own uncertainty: each point's relative standard error (the fit's own
``record_se``: the spread of its timed iterations over their square root, relative to the time) and the part of
its error beyond two standard errors; a pair whose error beyond that is 0 missed by no more than its sweep can
tell.
After the runs, one line says in how many pairs each met the goal. ``--json`` prints one JSON object per run given,
a list of them when several. Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

GOAL_MEDIAN = 0.05


def measure(root: Path, library: str = "gloo", min_size: str = "64KiB") -> dict[str, Any]:
    """Per (environment, primitive): count, median and max relative error, and the algorithms chosen."""
    import costmodels as cm
    from runners import results as rs
    from runners.measure.fit.records import record_se, record_time

    min_bytes = cm.parse_size(min_size)
    if not root.is_dir():
        raise cm.CommscopeError(f"{root} is not a directory")
    envdirs = sorted(d for d in root.iterdir()
                     if (d / "environment.json").is_file() and (d / "records.jsonl").is_file())
    if not envdirs:
        raise cm.CommscopeError(f"{root} holds no environment directory (environment.json + records.jsonl)")
    out: dict[str, Any] = {}
    for d in envdirs:
        env = dataclasses.replace(cm.Environment.load(d / "environment.json"), library=library)
        plan = json.loads((d / "plan.json").read_text()) if (d / "plan.json").is_file() else {}
        statistic = plan.get("fit_statistic", "median")  # the statistic the environment was fitted to
        recs = rs.load(d / "records.jsonl").of_kind("collective")
        by: dict[str, list[tuple[int, int, float, float]]] = {}
        for r in recs:
            if r["config"]["bytes"] >= min_bytes:
                by.setdefault(r["config"]["op"], []).append((int(r["config"]["bytes"]), int(r["run"]["world_size"]),
                                                             record_time(r, statistic), record_se(r, statistic)))
        for op, pts in sorted(by.items()):
            n, p, t, se = (np.array(x) for x in zip(*pts, strict=True))
            choice = cm.choose(op, n, p, env)
            err = np.abs(choice.time / t - 1.0)
            beyond = np.maximum(err - 2.0 * se, 0.0)  # a point of one iteration has se 0: all its error counts
            out[f"{d.name}/{op}"] = {"points": len(t), "median": float(np.median(err)), "max": float(err.max()),
                                     "median_standard_error": float(np.median(se)),
                                     "median_beyond_2se": float(np.median(beyond)),
                                     "algorithms": sorted(set(np.asarray(choice.algorithm).ravel().tolist())),
                                     "met": bool(np.median(err) <= GOAL_MEDIAN)}
    return {"root": str(root), "library": library, "min_size": min_size, "goal": f"median <= {GOAL_MEDIAN:.0%}",
            "pairs": out, "met": sum(v["met"] for v in out.values()), "of": len(out)}


def report(res: dict[str, Any]) -> str:
    """One run's :func:`measure` as the table the script prints."""
    lines = [f"{res['root']}: library {res['library']}, sizes >= {res['min_size']} (goal {res['goal']})"]
    lines += [f"  {k:>28}: median {v['median']:6.1%}  max {v['max']:6.1%}  over {v['points']:3d}  "
              f"(standard error {v['median_standard_error']:5.1%}, beyond 2 s.e. {v['median_beyond_2se']:5.1%})  "
              f"{','.join(v['algorithms'])}  {'met' if v['met'] else 'MISSED'}" for k, v in res["pairs"].items()]
    lines.append(f"goal met in {res['met']} of {res['of']} pairs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from runners import reference

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", type=Path)
    ap.add_argument("--library", default="gloo")
    ap.add_argument("--min-size", default="64KiB")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    roots = a.roots or [reference.run_dir(run) for run in reference.RUNS]
    try:
        runs = [measure(root, a.library, a.min_size) for root in roots]
    except Exception as exc:  # one line, exit 2 (bad directory, bad size, bad library)
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(runs[0] if len(runs) == 1 else runs, indent=1))
        return 0
    print("\n".join(report(res) for res in runs))
    if len(runs) > 1:
        print("every run: " + ", ".join(f"{Path(r['root']).name} {r['met']} of {r['of']}" for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
