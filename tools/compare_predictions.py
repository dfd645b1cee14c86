"""Judge a change to the models on kept validation runs: the same runs predicted before and after it, side by side.

    python tools/compare_predictions.py BEFORE_ROOT AFTER_ROOT [--prediction calibrated|sweep|defaults]
                                        [--median-slack 0.003] [--max-slack 0.005] [--json]

BEFORE_ROOT and AFTER_ROOT each hold copies of the same finished ``commscope validate`` runs (one directory per run,
same names), predicted again with ``tools/repredict_validation.py``: the first with the code before the change, the
second with the change. Run the second with ``PYTHONPATH=<the candidate's checkout>``: the venv's editable install
otherwise imports the main checkout's modules, whatever directory the script is started from.

Per run, for the chosen prediction ((b) ``calibrated`` by default): the median and the max |error| over its cells
and the cells whose fastest technique is predicted right (:func:`runners.validate.summary`, :func:`~runners.validate.
winners`), before -> after. Then what a rule written before the comparison can be checked against: the runs whose
median got worse by more than ``--median-slack`` and whose max by more than ``--max-slack`` (fractions), the runs
with a max <= 15% (issue 16's goal) and the winners, before and after. ``--json`` prints one JSON object. Exit code 2
with one line when a root holds no run or the two roots share none.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

GOAL_MAX = 0.15


def figures(run: Path, prediction: str) -> dict[str, Any]:
    """Median and max |error| over every cell of one prediction of a finished run, and its winner count."""
    from runners import results
    from runners import validate as v

    rows = v.table_rows(results.load(run / "validation.jsonl").records)
    p2 = v.summary(rows, prediction)["all"]
    w = v.winners(rows, prediction)
    return {"cells": p2["n"], "median": p2["median_abs_error"], "max": p2["max_abs_error"], "winners": w["right"],
            "winner_cells": w["n"]}


def compare(before: Path, after: Path, prediction: str = "calibrated", median_slack: float = 0.003,
            max_slack: float = 0.005) -> dict[str, Any]:
    """Every run present in both roots, its figures before and after, and the counts a rule is checked against."""
    from costmodels.errors import CommscopeError
    from runners.validate.report import PREDICTIONS

    if prediction not in PREDICTIONS:
        raise CommscopeError(f"unknown prediction {prediction!r}; allowed: {', '.join(PREDICTIONS)}")
    for name, slack in (("median_slack", median_slack), ("max_slack", max_slack)):
        if not math.isfinite(slack) or slack < 0:
            raise CommscopeError(f"--{name.replace('_', '-')} must be a finite fraction >= 0, got {slack!r}")
    runs = {}
    for root in (before, after):
        if not root.is_dir():
            raise CommscopeError(f"{root} is not a directory")
        found = {d.name for d in root.iterdir() if (d / "validation.jsonl").is_file()}
        if not found:
            raise CommscopeError(f"{root} holds no finished validation run (a directory with validation.jsonl)")
        runs[root] = found
    names = sorted(runs[before] & runs[after])
    if not names:
        raise CommscopeError(f"{before} and {after} share no run: give copies of the same runs, predicted twice")
    rows = [{"run": n, "before": figures(before / n, prediction), "after": figures(after / n, prediction)}
            for n in names]
    return {
        "prediction": prediction, "runs": rows,
        "median_worse": sum(r["after"]["median"] - r["before"]["median"] > median_slack for r in rows),
        "max_worse": sum(r["after"]["max"] - r["before"]["max"] > max_slack for r in rows),
        "max_within_goal": {k: sum(r[k]["max"] <= GOAL_MAX for r in rows) for k in ("before", "after")},
        "winners": {k: sum(r[k]["winners"] for r in rows) for k in ("before", "after")},
        "winner_cells": {k: sum(r[k]["winner_cells"] for r in rows) for k in ("before", "after")},
        "median_slack": median_slack, "max_slack": max_slack, "only_before": sorted(runs[before] - runs[after]),
        "only_after": sorted(runs[after] - runs[before])}


def report(res: dict[str, Any]) -> str:
    """:func:`compare`'s result as the table the command prints."""
    lines = [f"prediction {res['prediction']}: before -> after"]
    for r in res["runs"]:
        b, f = r["before"], r["after"]
        lines.append(f"  {r['run']:>28}: median {b['median']:5.1%} -> {f['median']:5.1%}, max {b['max']:5.1%} -> "
                     f"{f['max']:5.1%}, winners {b['winners']} -> {f['winners']} of {f['winner_cells']}")
    n = len(res["runs"])
    lines.append(f"median worse by more than {res['median_slack']:.1%} on {res['median_worse']} of {n} runs; max "
                 f"worse by more than {res['max_slack']:.1%} on {res['max_worse']} of {n}")
    lines.append(f"runs with max <= {GOAL_MAX:.0%}: {res['max_within_goal']['before']} -> "
                 f"{res['max_within_goal']['after']}; winners {res['winners']['before']} -> "
                 f"{res['winners']['after']} of {res['winner_cells']['after']}")
    lines += [f"  in {side.replace('_', ' ')}: {', '.join(res[side])} (not compared)"
              for side in ("only_before", "only_after") if res[side]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--prediction", default="calibrated")
    ap.add_argument("--median-slack", type=float, default=0.003)
    ap.add_argument("--max-slack", type=float, default=0.005)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        res = compare(a.before, a.after, a.prediction, a.median_slack, a.max_slack)
    except Exception as exc:  # one line, exit 2 (missing roots, no shared run, bad prediction or slack)
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1) if a.json else report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
