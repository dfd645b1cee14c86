"""The validation report: rows of predicted against measured iteration time, three predictions per cell, the
median and max error per environment, the winner figure, and the CSV and markdown files ``commscope validate``
writes.

The predictions (:func:`runners.validate.prediction.compare`): (a) ``sweep`` the sweep-fitted environment
alone, (b) ``calibrated`` leave-one-technique-out, (c) ``defaults`` the shipped default terms. Column
``error`` is (a), kept under its old name; ``error_calibrated`` and ``error_defaults`` are (b) and (c).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PREDICTIONS = {"sweep": "", "calibrated": "_calibrated", "defaults": "_defaults"}
LABELS = {"sweep": "(a) sweep only", "calibrated": "(b) calibrated, technique left out",
          "defaults": "(c) shipped defaults"}
#: Techniques left out of the winner figure: they change the algorithm (fewer synchronisations), not only
#: the schedule, so their iteration time does not compete with the synchronous techniques' for the same progress.
NOT_IN_CONTEST = frozenset({"local_sgd"})
#: Options that make a different schedule of the same technique: shown beside its name (``bsp (flatten)``).
VARIANT_OPTIONS = ("flatten",)


def technique_label(name: str, options: Mapping[str, Any] | None) -> str:
    """A technique's name in the tables, with the variant options that change its schedule."""
    variants = [k for k in VARIANT_OPTIONS if (options or {}).get(k)]
    return f"{name} ({', '.join(variants)})" if variants else name


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else math.nan


def negotiation_figures(result: Mapping[str, Any]) -> dict[str, float]:
    """ByteScheduler's negotiations in one validation record's ``result``, as the report and the app show them:
    ``batches_per_step`` (the runner's counter), ``negotiation_ms_per_batch`` (its measured seconds per step over
    those batches) and ``negotiation_priced_ms`` (the model's price of one,
    :func:`runners.validate.prediction._counted`); NaN where the record kept no counters (runs before
    2026-11-29) or counted no batch."""
    counted = result.get("counters") if isinstance(result.get("counters"), Mapping) else {}
    batches = _num(counted.get("batches"))
    return {"batches_per_step": batches,
            "negotiation_ms_per_batch": _num(counted.get("negotiation_s")) / batches * 1e3 if batches > 0
            else math.nan,
            "negotiation_priced_ms": _num(result.get("negotiation_priced_s")) * 1e3}


def fault_figures(result: Mapping[str, Any]) -> dict[str, float]:
    """The training thread's page faults in one validation record's ``result``: ``minor_faults_per_step`` and
    ``fault_share``, the least they cost (:data:`runners.torchrun.allocator.FAULT_S_PER_PAGE` each) over the
    measured iteration; NaN where the record kept none (runs before 2026-11-30)."""
    from runners.torchrun.allocator import FAULT_S_PER_PAGE

    faults = _num(result.get("minor_faults_per_step"))
    return {"minor_faults_per_step": faults, "fault_share": faults * FAULT_S_PER_PAGE / result["measured_s"]}


def table_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per validation record: technique, environment, p, model, the regime (communication share of the
    bsp iteration), measured ms with its spread, and each prediction in ms with its error."""
    rows = []
    for r in records:
        c, s = r["config"], r["result"]
        row: dict[str, Any] = {"technique": technique_label(c["technique"], c.get("options")),
                               "environment": c["environment"], "p": c["world_size"],
                               "model": c["model"], "comm_share_bsp": _num(s.get("comm_share_bsp")),
                               "repeats": int(c.get("repeats", 1)), "measured_ms": s["measured_s"] * 1e3,
                               "spread": _num(s.get("spread"))}
        for key, suffix in PREDICTIONS.items():
            name = "predicted_ms" if key == "sweep" else f"predicted_{key}_ms"
            row[name] = _num(s.get(f"predicted{suffix}_s")) * 1e3
            row[f"error{suffix}"] = _num(s.get(f"error{suffix}"))
        row["technique_name"] = c["technique"]
        # (b)'s standard error from the calibrated terms' covariance, relative to the measurement (as its error)
        row["error_calibrated_stderr"] = _num(s.get("predicted_calibrated_stderr_s")) / s["measured_s"]
        row.update(negotiation_figures(s))
        row.update(fault_figures(s))
        rows.append(row)
    return rows


def _error_stats(rs: Sequence[Mapping[str, Any]], column: str) -> dict[str, Any]:
    e = np.array([abs(r[column]) for r in rs if math.isfinite(r[column])])
    spread = np.array([r["spread"] for r in rs if math.isfinite(r[column])])
    within = int(np.sum(e <= np.nan_to_num(spread, nan=0.0))) if e.size else 0
    return {"n": int(e.size), "median_abs_error": float(np.median(e)) if e.size else math.nan,
            "max_abs_error": float(e.max()) if e.size else math.nan,
            "within_spread": within, "unpredicted": sum(1 for r in rs if not math.isfinite(r[column]))}


def summary(rows: Sequence[Mapping[str, Any]], prediction: str = "sweep") -> dict[str, Any]:
    """Median and max |error| of one prediction overall and per environment (NaN errors left out and counted),
    and how many errors are within the measurement's own spread."""
    column = "error" + PREDICTIONS[prediction]
    envs = list(dict.fromkeys(r["environment"] for r in rows))
    return {"all": _error_stats(rows, column), **{e: _error_stats([r for r in rows if r["environment"] == e], column)
                                                   for e in envs}}


def winners(rows: Sequence[Mapping[str, Any]], prediction: str = "sweep") -> dict[str, Any]:
    """Per (environment, model): the measured fastest technique and the predicted one; right when they are the same,
    or when the predicted one's measured time is within the measured spread of the fastest (both spreads).

    Each cell also says what following the prediction costs and how well it orders the contenders:
    ``regret``, the predicted pick's measured time over the measured fastest's, minus 1 (0 when the pick is the
    fastest: the time a user who runs the predicted winner loses); ``tau``, Kendall's tau-b between the predicted
    and the measured order of the cell's techniques (1: the same order; :func:`.convergence_measure.kendall_tau`).
    The whole: ``median_regret`` and ``max_regret`` over cells, and ``median_tau``.
    """
    from .convergence_measure import kendall_tau

    column = "predicted_ms" if prediction == "sweep" else f"predicted_{prediction}_ms"
    cells: dict[str, Any] = {}
    for env in dict.fromkeys(r["environment"] for r in rows):
        for model in dict.fromkeys(r["model"] for r in rows if r["environment"] == env):
            rs = [r for r in rows if r["environment"] == env and r["model"] == model
                  and r.get("technique_name", r["technique"]) not in NOT_IN_CONTEST and math.isfinite(r[column])]
            if len(rs) < 2:
                continue
            best = min(rs, key=lambda r: r["measured_ms"])
            pick = min(rs, key=lambda r: r[column])
            slack = sum(x["measured_ms"] * (x["spread"] if math.isfinite(x["spread"]) else 0.0) for x in (best, pick))
            right = pick is best or pick["measured_ms"] - best["measured_ms"] <= slack
            tau = kendall_tau({r["technique"]: r[column] for r in rs}, {r["technique"]: r["measured_ms"] for r in rs})
            cells[f"{env}/{model}"] = {"measured": best["technique"], "predicted": pick["technique"], "right": right,
                                       "exact": pick is best, "regret": pick["measured_ms"] / best["measured_ms"] - 1.0,
                                       "tau": math.nan if tau["tau"] is None else tau["tau"], "contenders": len(rs)}
    n = len(cells)
    regret = np.array([c["regret"] for c in cells.values()])
    taus = np.array([c["tau"] for c in cells.values() if math.isfinite(c["tau"])])
    return {"cells": cells, "n": n, "right": sum(c["right"] for c in cells.values()),
            "fraction": sum(c["right"] for c in cells.values()) / n if n else math.nan,
            "median_regret": float(np.median(regret)) if n else math.nan,
            "max_regret": float(regret.max()) if n else math.nan,
            "median_tau": float(np.median(taus)) if taus.size else math.nan}


def regimes(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The communication share of the bsp iteration per (environment, model): the regime each cell lives in."""
    out = {}
    for r in rows:
        if math.isfinite(r["comm_share_bsp"]):
            out[f"{r['environment']}/{r['model']}"] = r["comm_share_bsp"]
    return out


def regime_name(share: float) -> str:
    """communication-bound (>= 60%), mixed (25-60%), compute-bound (<= 20%), or between (20-25%)."""
    if not math.isfinite(share):
        return "unknown"
    return ("communication-bound" if share >= 0.6 else "mixed" if share >= 0.25 else
            "compute-bound" if share <= 0.2 else "between")


def _pct(x: float) -> str:
    return f"{x:+.1%}" if math.isfinite(x) else "n/a"


def _stderr(row: Mapping[str, Any], error: str) -> str:
    """The text after an error that has a standard error (``<error>_stderr``, so far (b)'s): " ± x%", else ""."""
    se = row.get(f"{error}_stderr", math.nan)
    return f" ± {se:.1%}" if isinstance(se, float) and math.isfinite(se) else ""


def negotiation_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """ByteScheduler's negotiations as measured (batches and seconds per step, from the runner's counters) beside
    the model's price of one; empty where no row kept them."""
    kept = [r for r in rows if math.isfinite(r.get("negotiation_ms_per_batch", math.nan))]
    if not kept:
        return []
    lines = ["", "ByteScheduler's negotiations (rank 0's broadcast of each batch; gloo's broadcast returns on rank 0 "
             "only once every rank has entered it, so a batch waits for the slowest rank):", "",
             "| environment | model | batches per step | measured ms per batch | priced ms per batch |",
             "|---|---|---|---|---|"]
    for r in kept:
        lines.append(f"| {r['environment']} | {r['model']} | {r['batches_per_step']:.1f} | "
                     f"{r['negotiation_ms_per_batch']:.2f} | "
                     f"{r['negotiation_priced_ms']:.2f} |")
    return lines


def fault_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cells whose ranks' training threads faulted pages costing at least 2% of the iteration
    (:func:`fault_figures`; :data:`runners.torchrun.allocator.WARN_SHARE`), which no model prices; empty where none
    did or no row counted them."""
    from runners.torchrun.allocator import FAULT_S_PER_PAGE, WARN_SHARE

    kept = [r for r in rows if math.isfinite(r.get("fault_share", math.nan)) and r["fault_share"] >= WARN_SHARE]
    if not kept:
        return []
    lines = ["", "Page faults of the training thread (glibc handing memory back; at least "
             f"{FAULT_S_PER_PAGE * 1e6:.0f} us a page, not priced by the models):", "",
             "| technique | environment | model | faults per step | at least (ms) | share of the measured |",
             "|---|---|---|---|---|---|"]
    for r in kept:
        lines.append(f"| {r['technique']} | {r['environment']} | {r['model']} | {r['minor_faults_per_step']:.0f} | "
                     f"{r['minor_faults_per_step'] * FAULT_S_PER_PAGE * 1e3:.1f} | {r['fault_share']:.1%} |")
    return lines


def markdown(rows: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> str:
    """The report as markdown: the command, its notes, the regimes, the rows, then per prediction the median and max
    error per environment and the winner figure."""
    lines = ["# commscope validate: predicted vs measured iteration time", "", f"Command: `{command}`", ""]
    lines += [f"- {n}" for n in notes]
    reg = regimes(rows)
    if reg:
        lines += ["", "| environment / model | communication share of bsp | regime |", "|---|---|---|"]
        lines += [f"| {k} | {v:.0%} | {regime_name(v)} |" for k, v in reg.items()]
    lines += ["", "| technique | environment | p | model | measured (ms) | spread | (a) sweep | (b) calibrated | "
              "(c) defaults |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = f"±{r['spread']:.1%}" if math.isfinite(r["spread"]) else "-"
        cells = [f"{r[p]:.2f} ({_pct(r[e])}{_stderr(r, e)})" if math.isfinite(r[p]) else "n/a" for p, e in
                 (("predicted_ms", "error"), ("predicted_calibrated_ms", "error_calibrated"),
                  ("predicted_defaults_ms", "error_defaults"))]
        lines.append(f"| {r['technique']} | {r['environment']} | {r['p']} | {r['model']} | {r['measured_ms']:.2f} | "
                     f"{spread} | " + " | ".join(cells) + " |")
    lines += negotiation_lines(rows)
    lines += fault_lines(rows)
    for key, label in LABELS.items():
        lines += ["", f"**{label}**", "",
                  "| environment | cells | median abs. error | max abs. error | within spread |",
                  "|---|---|---|---|---|"]
        for env, s in summary(rows, key).items():
            if s["n"]:
                lines.append(f"| {env} | {s['n']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} | "
                             f"{s['within_spread']} |")
        w = winners(rows, key)
        if w["n"]:
            lines.append("")
            lines.append(f"Fastest technique predicted right (or within the measured spread) in {w['right']} of "
                         f"{w['n']} (environment, model) cells: " + "; ".join(
                             f"{k}: measured {c['measured']}, predicted {c['predicted']}"
                             + ("" if c["exact"] else f" ({c['regret']:+.1%} measured"
                                + ("" if c["right"] else ", wrong") + ")") for k, c in w["cells"].items()))
            lines.append("")
            lines.append(f"Running the predicted fastest costs {w['median_regret']:.1%} at the median cell and "
                         f"{w['max_regret']:.1%} at worst over the measured fastest; the predicted order of the "
                         f"techniques agrees with the measured one with Kendall's tau {w['median_tau']:.2f} at the "
                         "median cell.")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, records: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> None:
    """Write ``validation.csv`` and ``validation.md`` into ``out``."""
    rows = table_rows(records)
    with open(out / "validation.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["technique"])
        w.writeheader()
        w.writerows(rows)
    (out / "validation.md").write_text(markdown(rows, command, notes))
