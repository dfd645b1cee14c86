"""The answers of the Predicted vs measured page, from :func:`app.data_measured.validation_frame` (pure functions,
no Streamlit): how well each of the three predictions does per environment, which one ranks first, the winner
figure ("fastest technique predicted right in k of n cells"), the regime of every (environment, model) cell and
which term accounts for each cell's error.

The predictions (:func:`runners.validate.compare`): (a) ``sweep``, the sweep-fitted environment alone; (b)
``calibrated``, calibrated leave-one-technique-out; (c) ``defaults``, the shipped default interference and
overhead terms. Older records carry (a) only. The numbers are those of ``commscope validate``'s report:
the frame is turned into its rows and :func:`runners.validate.summary`, :func:`~runners.validate.winners` and
:func:`~runners.validate.regimes` do the counting.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from app.data_measured import TERMS
from runners.validate.report import LABELS, PREDICTIONS, regime_name, regimes, summary, winners

SHORT = {"sweep": "(a) sweep", "calibrated": "(b) calibrated", "defaults": "(c) defaults"}


def predicted_column(key: str) -> str:
    return f"predicted{PREDICTIONS[key]}_s"


def error_column(key: str) -> str:
    return f"error{PREDICTIONS[key]}"


def available(frame: pd.DataFrame) -> list[str]:
    """The predictions with at least one value in ``frame``, in the order (a), (b), (c); (a) always."""
    return [k for k in PREDICTIONS if k == "sweep" or np.isfinite(frame[predicted_column(k)].to_numpy(float)).any()]


def prediction_view(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    """``frame`` with ``predicted_s``, ``error`` and ``abs_error`` taken from prediction ``key``, and
    ``within_spread``: the error is no larger than the measurement's own spread."""
    view = frame.copy()
    view["predicted_s"], view["error"] = frame[predicted_column(key)], frame[error_column(key)]
    view["abs_error"] = view["error"].abs()
    view["within_spread"] = (view["abs_error"] <= view["spread"]).to_numpy() & np.isfinite(view["spread"].to_numpy())
    return view


def report_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame as :func:`runners.validate.table_rows` gives it (what its summary and winners read)."""
    rows = []
    for r in frame.to_dict("records"):
        row = {"technique": r["technique"], "environment": r["environment"], "p": r["p"], "model": r["model"],
               "comm_share_bsp": float(r["comm_share_bsp"]), "repeats": int(r["repeats"]),
               "measured_ms": float(r["measured_s"]) * 1e3, "spread": float(r["spread"])}
        for key, suffix in PREDICTIONS.items():
            row["predicted_ms" if key == "sweep" else f"predicted_{key}_ms"] = float(r[f"predicted{suffix}_s"]) * 1e3
            row[f"error{suffix}"] = float(r[f"error{suffix}"])
        rows.append(row)
    return rows


def accuracy_table(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per environment, then "all": cells, and for each prediction in ``keys`` the median and max |error| and
    how many errors are within the measured spread ("k/n")."""
    rows = report_rows(frame)
    stats = {k: summary(rows, k) for k in keys}
    envs = [e for e in stats[keys[0]] if e != "all"] + ["all"] if rows else []
    out = []
    for env in envs:
        first = stats[keys[0]][env]
        row: dict[str, Any] = {"environment": env, "cells": first["n"] + first["unpredicted"]}
        for k in keys:
            s = stats[k][env]
            row[f"{SHORT[k]} median |error|"] = s["median_abs_error"]
            row[f"{SHORT[k]} max |error|"] = s["max_abs_error"]
            row[f"{SHORT[k]} within spread"] = f"{s['within_spread']}/{s['n']}"
        out.append(row)
    return pd.DataFrame(out)


def percent_columns(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.endswith("|error|") or c in ("spread", "comm_share_bsp", "max regret")
            or c.startswith("error")]


def ranking(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per prediction, best (smallest median |error| over every cell) first: median and max |error|,
    errors within the measured spread, and the winner figure (cells where the fastest technique was predicted
    right, :func:`runners.validate.winners`)."""
    rows = report_rows(frame)
    out = []
    for k in keys:
        s, w = summary(rows, k)["all"], winners(rows, k)
        out.append({"prediction": LABELS[k], "key": k, "cells": s["n"], "median |error|": s["median_abs_error"],
                    "max |error|": s["max_abs_error"], "within spread": s["within_spread"],
                    "fastest right": w["right"], "contests": w["n"],
                    "max regret": w["max_regret"]})
    table = pd.DataFrame(out, columns=["prediction", "key", "cells", "median |error|", "max |error|", "within spread",
                                       "fastest right", "contests", "max regret"])
    return table.sort_values("median |error|", kind="stable", na_position="last").reset_index(drop=True)


def verdict(rank: pd.DataFrame) -> str:
    """One sentence: the best prediction and the winner figure of each."""
    if rank.empty or not math.isfinite(rank["median |error|"].iloc[0]):
        return "No cell has a prediction."
    best = rank.iloc[0]
    text = (f"**{best['prediction']}**{' is closest' if len(rank) > 1 else ''}: median |error| "
            f"{best['median |error|']:.1%} (max "
            f"{best['max |error|']:.1%}) over {best['cells']} cells, {best['within spread']} of them within the "
            "measured spread.")
    figures = [f"{r['prediction']}: {r['fastest right']} of {r['contests']}" for r in rank.to_dict("records")
               if r["contests"]]
    if figures:
        text += " Fastest technique predicted right in " + "; ".join(figures) + " (environment, model) cells."
        if math.isfinite(best["max regret"]):
            text += (f" Running {best['prediction']}'s pick costs at most {best['max regret']:.1%} over the measured "
                     "fastest.")
    return text


def winner_cells(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per (environment, model) cell with at least two contending techniques: the measured fastest and each
    prediction's pick, marked "(within spread)" where it is not the fastest but within the measured spread of it,
    "(wrong)" where it is neither."""
    rows = report_rows(frame)
    picks = {k: winners(rows, k)["cells"] for k in keys}
    cells = list(dict.fromkeys(c for k in keys for c in picks[k]))
    out = []
    for cell in cells:
        row = {"cell": cell, "measured fastest": next(picks[k][cell]["measured"] for k in keys if cell in picks[k])}
        for k in keys:
            c = picks[k].get(cell)
            mark = "" if c is None or c["exact"] else (f" ({c['regret']:+.1%}, within spread)" if c["right"] else
                                                       f" ({c['regret']:+.1%}, wrong)")
            row[SHORT[k]] = "" if c is None else c["predicted"] + mark
        out.append(row)
    return pd.DataFrame(out, columns=["cell", "measured fastest", *[SHORT[k] for k in keys]])


def regime_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (environment, model): the measured communication share of the bsp iteration and its regime
    (communication-bound >= 60%, mixed 25-60%, compute-bound <= 20%)."""
    out = []
    for cell, share in regimes(report_rows(frame)).items():
        env, _, model = cell.partition("/")
        out.append({"environment": env, "model": model, "comm_share_bsp": share, "regime": regime_name(share)})
    return pd.DataFrame(out, columns=["environment", "model", "comm_share_bsp", "regime"])


def has_attribution(frame: pd.DataFrame) -> bool:
    return bool((frame["term"] != "").any())


def attribution_text(term: str, change: float, within: bool) -> str:
    """"bandwidth +18%": the term and the change of its contribution that would close the gap; "missing term"
    when no one term can; prefixed "within spread:" when the error is no larger than the measured spread."""
    if not term:
        return ""
    text = term + (f" {change:+.0%}" if math.isfinite(change) else "")
    return f"within spread: {text}" if within else text


def cell_table(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per cell: measurement, spread, each prediction's error, whether the attributed prediction's error
    is within the spread, and the term that accounts for it (:func:`attribution_text`)."""
    out = []
    for r in frame.to_dict("records"):
        key = "calibrated" if r["attributed"] == "calibrated" else "sweep"
        err = r[error_column(key)]
        within = bool(math.isfinite(err) and math.isfinite(r["spread"]) and abs(err) <= r["spread"])
        row = {"technique": r["technique"], "environment": r["environment"], "model": r["model"], "p": r["p"],
               "measured_ms": r["measured_s"] * 1e3, "spread": r["spread"],
               **{f"error {SHORT[k]}": r[error_column(k)] for k in keys},
               "within spread": within, "term": attribution_text(r["term"], r["term_change"], within),
               "attributed on": SHORT[key] if r["term"] else ""}
        out.append(row)
    return pd.DataFrame(out)


def contributions(frame: pd.DataFrame) -> pd.DataFrame:
    """Long table of each attributed cell's term contributions (ms) and its gap (measured - predicted, ms):
    columns cell, term, ms, share (of the prediction the attribution was made on), attributed (the term named)."""
    out = []
    for r in frame[frame["term"] != ""].to_dict("records"):
        cell = f"{r['technique']} · {r['environment']} · {r['model']}"
        total = r[predicted_column("calibrated" if r["attributed"] == "calibrated" else "sweep")]
        for t in TERMS:
            v = r[f"contrib_{t}_s"]
            out.append({"cell": cell, "term": t, "ms": v * 1e3, "share": v / total if total > 0 else math.nan,
                        "attributed": r["term"] == t})
        out.append({"cell": cell, "term": "gap", "ms": r["gap_s"] * 1e3, "share": math.nan,
                    "attributed": r["term"] == "missing term"})
    return pd.DataFrame(out, columns=["cell", "term", "ms", "share", "attributed"])


def negotiation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """ByteScheduler's negotiations per (environment, model) where the records kept the runner's counters: batches
    per step, the measured milliseconds per batch (rank 0's broadcast, a rendezvous that waits for the slowest
    rank) and the model's price of one; empty where none kept them."""
    cols = ["environment", "model", "batches per step", "measured ms per batch", "priced ms per batch",
            "measured / priced"]
    rows = frame[np.isfinite(frame["negotiation_ms_per_batch"].to_numpy(dtype=float))]
    return pd.DataFrame({"environment": rows["environment"], "model": rows["model"],
                         "batches per step": rows["batches_per_step"],
                         "measured ms per batch": rows["negotiation_ms_per_batch"],
                         "priced ms per batch": rows["negotiation_priced_ms"],
                         "measured / priced": rows["negotiation_ms_per_batch"] / rows["negotiation_priced_ms"]},
                        columns=cols).reset_index(drop=True)
