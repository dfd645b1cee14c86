"""The convergence validation's report: ``convergence.md`` (tables and goals), ``convergence.csv`` (one row per
algorithm) and ``convergence.jsonl`` (one JSON object per algorithm, then one ``summary`` object with eps, the
constants, Kendall's tau and the goals), from :func:`runners.validate.convergence_analysis.analyse`."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CSV_FIELDS = ("label", "technique", "options", "lr", "bound", "constant", "measured_constant", "worst_case_constant",
              "seeds", "reached", "steps_median", "steps_min", "steps_max", "time_median_s", "time_min_s",
              "time_max_s", "time_spread", "time_at_least_s", "seconds_per_step", "seconds_per_step_cost_model",
              "measured_ratio", "measured_ratio_at_least", "iterations", "iterations_ratio", "predicted_ratio",
              "predicted_ratio_cost_model", "predicted_ratio_worst_case", "within_2x", "within_2x_cost_model",
              "measured_rank", "predicted_rank", "predicted_rank_cost_model", "applies", "note")


def _g(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float) and not math.isfinite(x):
        return "never"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _ratio(row: Mapping[str, Any]) -> str:
    if row.get("measured_ratio") is not None:
        return _g(row["measured_ratio"])
    if row.get("measured_ratio_at_least") is not None:
        return f"> {_g(row['measured_ratio_at_least'])} (censored)"
    return "-"


def _time(row: Mapping[str, Any]) -> str:
    if row.get("time_median_s") is not None:
        spread = f" ({_g(row['time_min_s'])}-{_g(row['time_max_s'])})" if row.get("reached", 0) > 1 else ""
        return f"{row['time_median_s']:.1f}{spread}"
    if row.get("time_at_least_s") is not None:
        return f"> {row['time_at_least_s']:.1f} (censored)"
    return "-"


def _steps(row: Mapping[str, Any]) -> str:
    if row.get("steps_median") is not None:
        spread = f" ({_g(row['steps_min'])}-{_g(row['steps_max'])})" if row.get("reached", 0) > 1 else ""
        return f"{row['steps_median']:g}{spread}"
    return "never" if row.get("seeds") else "-"


def _constant(row: Mapping[str, Any]) -> tuple[str, str]:
    if row.get("constant"):
        return f"{row['constant']} {_g(row['measured_constant'])}", _g(row["worst_case_constant"])
    return (row.get("constant_note", "-") if row.get("compressor") else "-"), "-"


def _tau(k: Mapping[str, Any]) -> str:
    return (f"tau = {_g(k['tau'])} over {k['n']} algorithms (p = {_g(k['p_value'])})" if k.get("tau") is not None
            else f"undefined over {k.get('n', 0)} algorithms")


def markdown(summary: Mapping[str, Any], command: str, notes: Sequence[str] = ()) -> str:
    """The report as markdown (see the module docstring)."""
    rows, goals = summary["rows"], summary["goals"]
    c = summary.get("constants")
    lines = ["# commscope validate --convergence: measured vs predicted time to accuracy", "",
             f"Command: `{command}`", ""]
    lines += [f"- {n}" for n in notes]
    if c:
        lines.append(f"- constants (commscope constants on the same model, data, batch, lr and ranks): "
                     f"L = {_g(c['L'])} "
                     f"({c['L_used']}), sigma = {_g(c['sigma'])} per worker batch, zeta = {_g(c['zeta'])}, "
                     f"Delta = {_g(c['Delta'])}" + (f"; {c['L_note']}" if c.get("L_note") else ""))
    if summary.get("eps") is not None:
        lines.append(f"- eps = {_g(summary['eps'])}: SGD's bound after SGD's measured median steps to the target "
                     "(the one number of SGD's measurement the predictions use)")
    lines += [f"- {n}" for n in summary.get("notes", [])]
    lines += ["", "| algorithm | delta/omega measured | worst case | reached | steps to target (min-max) | "
              "time to target s (min-max) | s/step | measured ratio to SGD | predicted ratio to SGD | within 2x | "
              "predicted (cost-model t) | predicted (worst-case delta/omega) | measured rank | predicted rank | note |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        meas, worst = _constant(r)
        lines.append(
            f"| {r['label']} | {meas} | {worst} | {r.get('reached', 0)}/{r.get('seeds', 0)} | {_steps(r)} | "
            f"{_time(r)} | {_g(r.get('seconds_per_step'))} | {_ratio(r)} | {_g(r.get('predicted_ratio'))} | "
            f"{_g(r.get('within_2x'))} | {_g(r.get('predicted_ratio_cost_model'))} | "
            f"{_g(r.get('predicted_ratio_worst_case'))} | {_g(r.get('measured_rank'))} | "
            f"{_g(r.get('predicted_rank'))} | {r.get('note', '') or ''} |")
    for label, why in summary.get("not_run", {}).items():
        lines.append(f"| {label} | - | - | - | - | - | - | - | - | - | - | - | - | - | not run: {why} |")
    k = summary["kendall"]
    lines += ["", "Rankings (1 = fastest; a censored algorithm ranks after every one that reached the target):", "",
              "- measured: " + ", ".join(f"{r['label']} ({_g(r['measured_rank'])})"
                                         for r in sorted(rows, key=lambda r: r.get("measured_rank", math.inf))
                                         if "measured_rank" in r),
              "- predicted: " + ", ".join(f"{r['label']} ({_g(r['predicted_rank'])})"
                                          for r in sorted(rows, key=lambda r: r.get("predicted_rank", math.inf))
                                          if "predicted_rank" in r),
              f"- Kendall tau, predicted (measured seconds per step) vs measured: {_tau(k)}; over the algorithms "
              f"that reached the target only: {_tau(summary['kendall_reached'])}",
              f"- Kendall tau with cost-model seconds per step: {_tau(summary['kendall_cost_model'])}; with the "
              f"worst-case delta/omega: {_tau(summary['kendall_worst_case'])}",
              f"- Kendall tau of the steps alone (the bounds' steps to eps vs the measured steps to the target, no "
              f"seconds per step): {_tau(summary['kendall_steps'])}", "",
              "Goals (issue 17):", "",
              f"- Kendall tau >= 0.6 over at least 8 algorithms: {_g(goals['kendall_tau'])} over "
              f"{goals['algorithms_ranked']}: {'met' if goals['tau_goal_met'] else 'NOT met'}",
              "- predicted ratio to SGD within 2x of the measured one for every algorithm whose bound applies: "
              + ("met" if goals["within_2x_goal_met"] else "NOT met") + " ("
              + ", ".join(f"{k_}: {_g(v)}" for k_, v in goals["within_2x"].items()) + ")",
              "- every compressor's measured delta/omega beside its worst case: "
              + ("yes" if goals["compressors_reported"] else "NO"), ""]
    return "\n".join(lines)


def write(out: Path, summary: Mapping[str, Any], command: str, notes: Sequence[str] = ()) -> None:
    """``convergence.md``, ``convergence.csv`` and ``convergence.jsonl`` in ``out``."""
    (out / "convergence.md").write_text(markdown(summary, command, notes))
    with open(out / "convergence.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_FIELDS)
        for r in summary["rows"]:
            w.writerow(["" if r.get(f) is None else json.dumps(r[f], sort_keys=True) if isinstance(r.get(f), dict)
                        else r[f] for f in CSV_FIELDS])
    head = {k: v for k, v in summary.items() if k != "rows"}
    with open(out / "convergence.jsonl", "w") as fh:
        for r in summary["rows"]:
            fh.write(json.dumps(_clean({"kind": "algorithm", **r}), sort_keys=True, allow_nan=False,
                                default=_num) + "\n")
        fh.write(json.dumps(_clean({"kind": "summary", "command": command, "run_notes": list(notes), **head}),
                            sort_keys=True, allow_nan=False, default=_num) + "\n")


def _clean(x: Any) -> Any:
    """JSON-ready: non-finite floats (a bound that never reaches eps) as None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _num(x: Any) -> Any:
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def read(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(algorithm rows, summary) of a ``convergence.jsonl``."""
    rows, summary = [], {}
    for line in Path(path).read_text().splitlines():
        obj = json.loads(line)
        if obj.get("kind") == "summary":
            summary = obj
        else:
            rows.append(obj)
    return rows, summary
