"""Tables the app plots, computed from the math layers (pure functions, no Streamlit)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm


def collective_curves(algorithms: Sequence[str], p: int, env: cm.Environment, sizes: np.ndarray,
                      *, lower_bound: bool = True, params: dict[str, Any] | None = None) -> pd.DataFrame:
    """Long table (algorithm, primitive, bytes, time_s, algbw_GBps, busbw_GBps, kind) over sizes.

    Points outside an algorithm's domain (e.g. p not a power of two) are left out.
    """
    params = params or {}
    names = list(dict.fromkeys(algorithms))
    if lower_bound:
        for prim in sorted({cm.collective(a).primitive for a in names}):
            try:
                lb = cm.lower_bound(prim).name
            except cm.UnknownNameError:
                continue
            if lb not in names:
                names.append(lb)
    frames = []
    for name in names:
        c = cm.collective(name)
        mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
        t = np.asarray(c.time(sizes, p, env, out_of_domain="nan", **mine), dtype=float) * np.ones(len(sizes))
        ok = np.isfinite(t) & (t > 0)
        if not ok.any():
            continue
        algbw = sizes[ok] / t[ok] / 1e9
        try:
            factor = cm.busbw_factor(c.primitive, p)
        except cm.UnknownNameError:
            factor = np.nan
        frames.append(pd.DataFrame({
            "algorithm": name, "primitive": c.primitive, "bytes": sizes[ok], "time_s": t[ok],
            "algbw_GBps": algbw, "busbw_GBps": algbw * factor,
            "kind": "lower bound" if c.is_lower_bound else "algorithm",
        }))
    cols = ["algorithm", "primitive", "bytes", "time_s", "algbw_GBps", "busbw_GBps", "kind"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def crossover_table(algorithms: Sequence[str], p: int, env: cm.Environment, n_max: float) -> pd.DataFrame:
    """Crossover sizes of every pair of the chosen algorithms that implement the same primitive."""
    rows = []
    for a, b in combinations(dict.fromkeys(algorithms), 2):
        ca, cb = cm.collective(a), cm.collective(b)
        if ca.primitive != cb.primitive or ca.is_lower_bound or cb.is_lower_bound:
            continue
        try:
            x = cm.crossover(a, b, p=p, env=env, n_max=n_max)
        except cm.CommscopeError:  # one of them is not defined at this p
            continue
        for s in x.sizes or [None]:
            rows.append({
                "algorithm A": a, "algorithm B": b,
                "crossover": "none in range" if s is None else cm.format_size(s),
                "bytes": s, "faster below": x.cheaper_below or "equal", "method": x.method,
            })
    return pd.DataFrame(rows, columns=["algorithm A", "algorithm B", "crossover", "bytes", "faster below", "method"])


def measured_points(records: Sequence[dict[str, Any]], primitive: str) -> pd.DataFrame:
    """Measured sweep points of ``primitive`` from ``collective`` result records: one row per record.

    Columns: bytes, p, time_s (the record's median), busbw_GBps, algbw_GBps, time_p10_s, time_p90_s,
    network (the emulated link's rate, or "host"), label (what the legend shows).
    """
    rows = []
    for r in records:
        if r.get("kind") != "collective" or r["config"].get("op") != primitive:
            continue
        res, run = r["result"], r["run"]
        net = run.get("network") or {}
        link = net.get("rate") or "host"
        p = int(run["world_size"])
        rows.append({"bytes": float(r["config"]["bytes"]), "p": p, "time_s": float(res["time_s"]),
                     "busbw_GBps": float(res.get("busbw_GBps", 0.0)), "algbw_GBps": float(res.get("algbw_GBps", 0.0)),
                     "time_p10_s": float(res.get("time_p10_s", res["time_s"])),
                     "time_p90_s": float(res.get("time_p90_s", res["time_s"])),
                     "network": str(link), "label": f"measured p={p} ({link}, {run.get('backend', '?')})"})
    cols = ["bytes", "p", "time_s", "busbw_GBps", "algbw_GBps", "time_p10_s", "time_p90_s", "network", "label"]
    return pd.DataFrame(rows, columns=cols).sort_values(["label", "bytes"]).reset_index(drop=True)
