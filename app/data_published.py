"""Published collective measurements beside the collective-library model (pure functions, no Streamlit).

:func:`published_frame` is :func:`runners.reference.published_comparison` as a table, with each point's
size class (:data:`BANDWIDTH_REGIME`: from 1 GiB on, the bandwidth regime); :func:`published_summary` gives
per system the busbw errors over all sizes, mid sizes and the bandwidth regime; :func:`published_verdict`
says in a sentence where the model holds and where it misses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm

BANDWIDTH_REGIME = 2**30  # bytes: the published tables' bandwidth regime, where the model claims to hold
MID_SIZES = (2**20, BANDWIDTH_REGIME)  # [1 MiB, 1 GiB): where the published tables ramp up slower than NCCL's model
TOLERANCE = 0.10
PUBLISHED_COLUMNS = ["system", "environment", "op", "p", "bytes", "size", "regime", "measured_busbw_GBps",
                     "predicted_busbw_GBps", "busbw_error", "measured_s", "predicted_s", "time_error", "choice",
                     "timing", "library", "citation"]
SUMMARY_COLUMNS = ["system", "environment", "op", "p", "points", "sizes", "median_abs_error",
                   "mid_median_error", "bw_median_error", "bw_max_abs_error", "bw_choice", "holds", "timing"]


def _regime(n: float) -> str:
    return "bandwidth (>= 1 GiB)" if n >= BANDWIDTH_REGIME else "mid (1 MiB - 1 GiB)" if n >= MID_SIZES[0] else "small"


def published_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per published point (:func:`runners.reference.published_comparison`'s rows): measured and
    predicted busbw and time, busbw_error = predicted / measured - 1 (NaN where the table rounds the measured
    busbw to 0), the library's choice ("ring/Simple"), the size's regime and how the source timed its calls
    (:mod:`costmodels.harness`)."""
    out = []
    for r in rows:
        n = float(r["bytes"])
        choice = r["algorithm"] if r.get("protocol") in (None, "", "-") else f"{r['algorithm']}/{r['protocol']}"
        out.append({**{k: r[k] for k in ("system", "environment", "op", "p", "measured_busbw_GBps",
                                         "predicted_busbw_GBps", "busbw_error", "measured_s", "predicted_s",
                                         "time_error", "library", "citation")},
                    "bytes": n, "size": cm.format_size(n), "regime": _regime(n), "choice": choice,
                    "timing": r.get("timing", "back_to_back")})
    return pd.DataFrame(out, columns=PUBLISHED_COLUMNS)


def _median(x: pd.Series) -> float:
    x = x.dropna()
    return float(x.median()) if len(x) else np.nan


def published_summary(frame: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Per system: points, size range, the median |busbw error| over all sizes, the median (signed) error
    at mid sizes and in the bandwidth regime, the largest |error| there, what the library runs there, and
    whether every bandwidth-regime point is within ``tolerance``."""
    rows = []
    for system, g in frame.groupby("system", sort=False):
        bw = g[g["bytes"] >= BANDWIDTH_REGIME]
        mid = g[(g["bytes"] >= MID_SIZES[0]) & (g["bytes"] < MID_SIZES[1])]
        worst = float(bw["busbw_error"].abs().max()) if bw["busbw_error"].notna().any() else np.nan
        rows.append({"system": system, "environment": g["environment"].iloc[0], "op": g["op"].iloc[0],
                     "p": int(g["p"].iloc[0]), "points": len(g),
                     "sizes": f"{cm.format_size(g['bytes'].min())} - {cm.format_size(g['bytes'].max())}",
                     "median_abs_error": _median(g["busbw_error"].abs()),
                     "mid_median_error": _median(mid["busbw_error"]), "bw_median_error": _median(bw["busbw_error"]),
                     "bw_max_abs_error": worst, "bw_choice": ", ".join(dict.fromkeys(bw["choice"])) or "-",
                     "holds": bool(worst <= tolerance) if np.isfinite(worst) else False,
                     "timing": g["timing"].iloc[0]})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _percent_range(values: Iterable[float]) -> str:
    v = [x * 100 for x in values if np.isfinite(x)]
    if not v:
        return "n/a"
    lo, hi = min(v), max(v)
    return f"{lo:+.0f}%" if round(lo) == round(hi) else f"{lo:+.0f}% to {hi:+.0f}%"


def published_verdict(summary: pd.DataFrame, tolerance: float = TOLERANCE) -> str:
    """Where the library model holds (the systems whose bandwidth-regime points are all within ``tolerance``)
    and where it misses (mid sizes; the systems it misses in the bandwidth regime), with the numbers."""
    if summary.empty:
        return "No published points chosen."
    holds = summary[summary["holds"]]
    misses = summary[~summary["holds"]]
    parts = []
    if len(holds):
        parts.append(f"In the bandwidth regime (>= 1 GiB) the model holds within {tolerance:.0%} on "
                     f"{', '.join(holds['system'])} (median error {_percent_range(holds['bw_median_error'])}).")
    parts.append(f"It misses at mid sizes (1 MiB - 1 GiB: median error {_percent_range(summary['mid_median_error'])}), "
                 "where the published tables ramp up more slowly than NCCL's own tuning model")
    if len(misses):
        named = [f"{r.system} ({_percent_range([r.bw_median_error])}, {r.bw_choice})" for r in misses.itertuples()]
        parts[-1] += f", and in the bandwidth regime on {'; '.join(named)}"
    parts[-1] += "."
    notes = []
    timed_alone = summary.loc[summary["timing"] == "one_call_idle_device", "system"]
    if len(timed_alone):
        notes.append(f"{', '.join(timed_alone)} timed one call at a time on an idle device, so the prediction adds "
                     f"PyTorch's host overhead per call ({cm.harness('one_call_idle_device').exposed_host_s * 1e6:.0f} "
                     "us, costmodels.harness)")
    if notes:
        parts.append("Notes: " + "; ".join(notes) + ".")
    return " ".join(parts)
