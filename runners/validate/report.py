"""The validation report: rows of predicted against measured iteration time, the median and max error per
environment, and the CSV and markdown files ``commscope validate`` writes."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def table_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per validation record: technique, environment, p, model, predicted and measured ms, error."""
    rows = []
    for r in records:
        c, s = r["config"], r["result"]
        rows.append({"technique": c["technique"], "environment": c["environment"], "p": c["world_size"],
                     "model": c["model"], "predicted_ms": s.get("predicted_s", math.nan) * 1e3,
                     "measured_ms": s["measured_s"] * 1e3, "error": s.get("error", math.nan)})
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median and max |error| overall and per environment (NaN errors left out and counted)."""
    def stats(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        e = np.array([abs(r["error"]) for r in rs if math.isfinite(r["error"])])
        return {"n": int(e.size), "median_abs_error": float(np.median(e)) if e.size else math.nan,
                "max_abs_error": float(e.max()) if e.size else math.nan,
                "unpredicted": sum(1 for r in rs if not math.isfinite(r["error"]))}

    envs = sorted({r["environment"] for r in rows}, key=lambda x: [r["environment"] for r in rows].index(x))
    return {"all": stats(rows), **{env: stats([r for r in rows if r["environment"] == env]) for env in envs}}


def markdown(rows: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> str:
    """The report as markdown: the command, its notes, the rows, then the median and max error per environment."""
    lines = ["# commscope validate: predicted vs measured iteration time", "", f"Command: `{command}`", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", "| technique | environment | p | model | predicted (ms) | measured (ms) | error |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['error']:+.1%}" if math.isfinite(r["error"]) else "n/a"
        lines.append(f"| {r['technique']} | {r['environment']} | {r['p']} | {r['model']} | {r['predicted_ms']:.2f} | "
                     f"{r['measured_ms']:.2f} | {err} |")
    lines += ["", "| environment | techniques | median abs. error | max abs. error |", "|---|---|---|---|"]
    for env, s in summary(rows).items():
        lines.append(f"| {env} | {s['n']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} |")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, records: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> None:
    """Write ``validation.csv`` and ``validation.md`` into ``out``."""
    rows = table_rows(records)
    with open(out / "validation.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["technique"])
        w.writeheader()
        w.writerows(rows)
    (out / "validation.md").write_text(markdown(rows, command, notes))
