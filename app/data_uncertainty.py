"""Uncertainty bands from a fitted environment's 95% confidence intervals (pure functions, no Streamlit).

A fitted environment carries each fitted parameter's 95% CI (``metadata["parameters"][name]["ci95"]``).
:func:`ci_environments` gives the two corner environments: every fitted alpha, beta, gamma (and intra-node
alpha, beta) at the low end of its interval, and every one at the high end. The cost models only add time
for more latency, less bandwidth or slower reduction, so a prediction made at the two corners brackets what
any parameters inside the intervals predict; a band is the range between them (each value's min and max
over the two corners). The intervals are marginal (one parameter at a time), so the band is a guide to how
firmly the fit pins a prediction, not a joint confidence region.

- Collectives: :func:`collective_band` (time and bus bandwidth of each curve);
- Iteration: :func:`scaling_band` (time, throughput, scaling efficiency of each schedule versus p);
- Predicted vs measured: :func:`prediction_band` (prediction (a) of each validation record).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm

VARIED = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta")
_TINY = 1e-300  # a beta whose interval reaches 0 keeps a positive low end (infinitely fast is not a link)


def _interval(env: cm.Environment, name: str) -> tuple[float, float] | None:
    params = env.metadata.get("parameters") if isinstance(env.metadata, Mapping) else None
    prm = params.get(name) if isinstance(params, Mapping) else None
    if not isinstance(prm, Mapping) or prm.get("status") != "fitted" or getattr(env, name) is None:
        return None
    ci = prm.get("ci95")
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)):
        return None
    lo, hi = float(ci[0]), float(ci[1])
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and hi >= lo else None


def ci_environments(env: cm.Environment) -> tuple[cm.Environment, cm.Environment] | None:
    """The low and the high corner of the fitted parameters' 95% CIs (None: nothing fitted with an interval)."""
    low, high = {}, {}
    for name in VARIED:
        ci = _interval(env, name)
        if ci is None:
            continue
        floor = _TINY if name.endswith("beta") else 0.0
        low[name], high[name] = max(ci[0], floor), max(ci[1], floor)
    if not low:
        return None
    return env.with_(**low, name=f"{env.name} (CI low)"), env.with_(**high, name=f"{env.name} (CI high)")


def ci_text(env: cm.Environment) -> str:
    """The intervals the band spans, in words ("alpha 952-1185 us, beta 6.92-10.0 ns/B")."""
    parts = []
    for name in VARIED:
        ci = _interval(env, name)
        if ci is not None:
            scale, unit = (1e6, "us") if name.endswith("alpha") else (1e9, "ns/B")
            parts.append(f"{name} {ci[0] * scale:.3g}-{ci[1] * scale:.3g} {unit}")
    return ", ".join(parts)


def _bracket(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.fmin(a, b), np.fmax(a, b)


def collective_band(curves: pd.DataFrame, p: int, env: cm.Environment, params: Mapping[str, Any] | None = None
                    ) -> pd.DataFrame:
    """``curves`` (:func:`app.data.collective_curves`, library rows included) with ``time_lo_s``, ``time_hi_s``,
    ``busbw_lo_GBps`` and ``busbw_hi_GBps`` at the CI corners of ``env`` (unchanged without fitted CIs)."""
    corners = ci_environments(env)
    if corners is None or curves.empty:
        return curves
    out = curves.copy()
    lo_t, hi_t = np.full(len(out), np.nan), np.full(len(out), np.nan)
    for name, idx in out.groupby("algorithm", sort=False).groups.items():
        rows = out.loc[idx]
        sizes = rows["bytes"].to_numpy(dtype=float)
        times = []
        for corner in corners:
            if rows["kind"].iloc[0] == "library":
                library = str(name).split(": ", 1)[-1]
                t = cm.choose(str(rows["primitive"].iloc[0]), sizes, int(p), corner.with_(library=library)).time
            else:
                c = cm.collective(str(name))
                mine = {k: v for k, v in (params or {}).items() if k in {q.name for q in c.params}}
                t = c.time(sizes, int(p), corner, out_of_domain="nan", **mine)
            times.append(np.broadcast_to(np.asarray(t, dtype=float), sizes.shape))
        a, b = _bracket(*times)
        pos = out.index.get_indexer(idx)
        lo_t[pos], hi_t[pos] = a, b
    out["time_lo_s"], out["time_hi_s"] = lo_t, hi_t
    factor = out["busbw_GBps"].to_numpy(dtype=float) * out["time_s"].to_numpy(dtype=float)  # busbw x t
    with np.errstate(divide="ignore", invalid="ignore"):
        out["busbw_lo_GBps"], out["busbw_hi_GBps"] = factor / hi_t, factor / lo_t
    return out


METRIC_BANDS = ("iteration_time_s", "throughput", "scaling_efficiency", "speedup")


def scaling_band(curves: pd.DataFrame, low: pd.DataFrame, high: pd.DataFrame) -> pd.DataFrame:
    """``curves`` (:func:`app.data_iteration.scaling_curves`) with ``<metric>_lo`` and ``<metric>_hi`` for each
    metric, from the same curves computed at the two CI corners (``low``, ``high``); rows match on schedule,
    compressor and p."""
    keys = ["schedule", "compressor", "p"]
    out = curves.copy()
    if curves.empty:
        return out
    a = curves[keys].merge(low, on=keys, how="left")
    b = curves[keys].merge(high, on=keys, how="left")
    for m in METRIC_BANDS:
        out[f"{m}_lo"], out[f"{m}_hi"] = _bracket(a[m].to_numpy(dtype=float), b[m].to_numpy(dtype=float))
    return out


def prediction_band(records: Sequence[Mapping[str, Any]], profiles: Mapping[Any, Any],
                    environments: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Prediction (a) of every validation record again at its link's CI corners: one row per validation record, in
    order, with ``predicted_lo_s`` and ``predicted_hi_s`` (NaN where the link has no fitted CIs or no profile).

    ``environments``: link -> ``Environment.to_dict()`` (each link's fitted environment); ``profiles``: as
    :func:`app.data_measured.repredict` takes them."""
    from app.data_measured import repredict

    recs = [r for r in records if r.get("kind", "validation") == "validation"]
    lo, hi = np.full(len(recs), np.nan), np.full(len(recs), np.nan)
    links = [str(r["config"]["environment"]) for r in recs]
    for link in dict.fromkeys(links):
        env_dict = environments.get(link)
        corners = ci_environments(cm.Environment.from_dict(dict(env_dict))) if env_dict else None
        if corners is None:
            continue
        where = np.array([x == link for x in links])
        sub = [r for r, w in zip(recs, where, strict=True) if w]
        a, b = (repredict(sub, profiles, corner)["predicted_s"].to_numpy(dtype=float) for corner in corners)
        lo[where], hi[where] = _bracket(a, b)
    return pd.DataFrame({"predicted_lo_s": lo, "predicted_hi_s": hi})
