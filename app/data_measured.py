"""Tables of the measured pages, from result records (pure functions, no Streamlit).

Predicted vs measured: :func:`validation_frame` (one row per "validation" record, with the three predictions,
the measured spread, the regime and the attribution where the records carry them), :func:`error_table`
(median / max |error| per technique or environment), :func:`efficiency_frame` (speedup, throughput,
time or compute share, predicted beside measured), :func:`parameter_table` and :func:`fit_quality`
(fitted environments with their 95% confidence intervals).

Environments: :func:`fit_tables` (what :func:`runners.measure.fit.fit` found, as plain tables) and
:func:`model_curves` (an environment's predicted time over the measured size range).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm
from runners.validate.report import negotiation_figures

BASELINE = "bsp"
#: the term groups a cell's error is attributed to (:mod:`runners.validate.attribution`)
TERMS = ("latency", "bandwidth", "interference", "overhead")
VALIDATION_COLUMNS = ["technique", "environment", "p", "model", "batch_size", "predicted_s", "measured_s",
                      "measured_p10_s", "measured_p90_s", "error", "abs_error", "compute_s", "exposed_comm_s",
                      "environment_name", "how", "repeats", "spread", "comm_share_bsp", "predicted_calibrated_s",
                      "error_calibrated", "stderr_calibrated", "predicted_defaults_s", "error_defaults", "term",
                      "term_change", "gap_s",
                      "attributed", *[f"contrib_{t}_s" for t in TERMS], "batches_per_step",
                      "negotiation_ms_per_batch", "negotiation_priced_ms"]
# metric -> (axis label, help)
EFFICIENCY_METRICS = {
    "speedup": ("speedup over the baseline (x)", "baseline iteration time / technique iteration time, per source"),
    "throughput": ("throughput (samples/s)", "batch size x p / iteration time"),
    "time_ms": ("iteration time (ms)", "seconds per iteration"),
    "compute_share": ("compute / iteration time", "the measured compute (forward + backward + update) over the "
                                                  "measured or predicted iteration time"),
}
ERROR_COLUMNS = ["n", "median_abs_error", "max_abs_error", "mean_error", "unpredicted"]


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else math.nan


# ============================================================================ predicted vs measured
def validation_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per "validation" record (others are skipped): prediction, measurement (with its p10/p90),
    error = predicted / measured - 1 (NaN when not predicted), and the measured compute and exposed
    communication of the iteration.

    Records of ``commscope validate`` since issue 16 also give the repetitions (``repeats``), the measured
    ``spread`` (else half the p10..p90 range relative to the measurement), the communication share of the
    bsp iteration (``comm_share_bsp``; else the bsp record's exposed communication over its time), predictions
    (b) ``predicted_calibrated_s`` (with ``stderr_calibrated``, its standard error over the measurement) and
    (c) ``predicted_defaults_s`` with their errors, and the attribution:
    ``term``, ``term_change``, ``gap_s``, ``attributed`` (which prediction) and ``contrib_<term>_s``. Older
    records leave these NaN or empty. ``technique`` names the variant where options change the schedule
    (``bsp (flatten)``), so that each (environment, model) has one plain ``bsp`` baseline.
    """
    from runners.validate.report import technique_label

    rows = []
    for r in records:
        if r.get("kind", "validation") != "validation":
            continue
        c, s = r["config"], r["result"]
        measured = float(s["measured_s"])
        br = s.get("breakdown_s") if isinstance(s.get("breakdown_s"), Mapping) else {}
        parts = [_num(br.get(k)) for k in ("forward", "backward", "update")]
        compute = sum(parts) if all(math.isfinite(v) for v in parts) else math.nan
        p10, p90 = _num(s.get("measured_p10_s")), _num(s.get("measured_p90_s"))
        spread = _num(s.get("spread"))
        if math.isnan(spread) and math.isfinite(p90 - p10):
            spread = 0.5 * (p90 - p10) / measured
        row = {"technique": technique_label(c["technique"], c.get("options")), "environment": c["environment"],
               "p": int(c["world_size"]),
               "model": c.get("model", ""), "batch_size": _num(c.get("batch_size")), "measured_s": measured,
               "measured_p10_s": p10, "measured_p90_s": p90, "compute_s": compute,
               "exposed_comm_s": _num(br.get("exposed_comm")), "environment_name": c.get("environment_name", ""),
               "how": s.get("how", ""), "repeats": int(c.get("repeats", 1)), "spread": spread,
               "comm_share_bsp": _num(s.get("comm_share_bsp"))}
        for suffix in ("", "_calibrated", "_defaults"):
            pred, err = _num(s.get(f"predicted{suffix}_s")), _num(s.get(f"error{suffix}"))
            if math.isnan(err) and math.isfinite(pred):
                err = pred / measured - 1.0
            row[f"predicted{suffix}_s"], row[f"error{suffix}"] = pred, err
        # (b)'s standard error from the calibrated terms' covariance, relative to the measurement as its error
        row["stderr_calibrated"] = _num(s.get("predicted_calibrated_stderr_s")) / measured
        row["abs_error"] = abs(row["error"])
        att = s.get("attribution") if isinstance(s.get("attribution"), Mapping) else {}
        contrib = att.get("contributions_s") if isinstance(att.get("contributions_s"), Mapping) else {}
        row.update({"term": str(att.get("term") or ""), "term_change": _num(att.get("change")),
                    "gap_s": _num(att.get("gap_s")), "attributed": str(att.get("prediction") or ""),
                    **{f"contrib_{t}_s": _num(contrib.get(t)) for t in TERMS}})
        # the runner's counters (runs since 2026-11-29): ByteScheduler's negotiations, measured and priced
        row.update(negotiation_figures(s))
        rows.append(row)
    return _fill_shares(pd.DataFrame(rows, columns=VALIDATION_COLUMNS))


def _fill_shares(frame: pd.DataFrame) -> pd.DataFrame:
    """Where a record lacks ``comm_share_bsp``: the bsp row's measured exposed communication over its time, for
    every row of the same environment and model."""
    missing = frame["comm_share_bsp"].isna()
    if not missing.any():
        return frame
    bsp = frame[frame["technique"] == BASELINE]
    share = {(e, m): x / t for e, m, x, t in zip(bsp["environment"], bsp["model"], bsp["exposed_comm_s"],
                                                  bsp["measured_s"], strict=True) if math.isfinite(x / t)}
    fill = [share.get((e, m), math.nan) for e, m in zip(frame["environment"], frame["model"], strict=True)]
    frame.loc[missing, "comm_share_bsp"] = np.asarray(fill, dtype=float)[missing.to_numpy()]
    return frame


def repredict(records: Sequence[Mapping[str, Any]], profiles: Mapping[str, Any], env: cm.Environment
              ) -> pd.DataFrame:
    """:func:`validation_frame` with every prediction redone in ``env`` (on the cell's measured profile in
    ``profiles``: (environment, model) or environment -> ``ModelProfile``); rows without one are not predicted."""
    from costmodels.errors import CommscopeError
    from runners.training.profiler.target import with_model_buffers
    from runners.validate import predict

    frame = validation_frame(records)
    recs = [r for r in records if r.get("kind", "validation") == "validation"]
    pred, how = [], []
    for r in recs:
        c = r["config"]
        prof = profiles.get((c["environment"], c.get("model", ""))) or profiles.get(c["environment"])
        if prof is None:
            pred.append(math.nan)
            how.append("not predicted: no profile of this environment")
            continue
        try:  # with the model's buffers, as validate predicts (DDP broadcasts them)
            t, h = predict(c["technique"], c.get("options", {}), with_model_buffers(prof, str(c.get("model", ""))),
                           env, int(c["world_size"]))
        except CommscopeError as exc:
            t, h = math.nan, f"not predicted: {exc}"
        pred.append(t)
        how.append(h)
    frame["predicted_s"] = np.asarray(pred, dtype=float)
    frame["error"] = frame["predicted_s"] / frame["measured_s"] - 1.0
    frame["abs_error"] = frame["error"].abs()
    frame["how"] = how
    frame["environment_name"] = env.name
    cleared = ["predicted_calibrated_s", "error_calibrated", "stderr_calibrated", "predicted_defaults_s",
               "error_defaults", "term_change", "gap_s", *[f"contrib_{t}_s" for t in TERMS], "negotiation_priced_ms"]
    frame[cleared] = math.nan  # (b), (c) and the attribution belong to the recorded environment, not to ``env``
    frame[["term", "attributed"]] = ""
    return frame


def _error_stats(df: pd.DataFrame) -> dict[str, Any]:
    e = df["error"].to_numpy(dtype=float)
    ok = e[np.isfinite(e)]
    return {"n": int(ok.size), "median_abs_error": float(np.median(np.abs(ok))) if ok.size else math.nan,
            "max_abs_error": float(np.max(np.abs(ok))) if ok.size else math.nan,
            "mean_error": float(np.mean(ok)) if ok.size else math.nan, "unpredicted": int(e.size - ok.size)}


def error_table(frame: pd.DataFrame, by: str = "technique", total: bool = True) -> pd.DataFrame:
    """Median and max |error|, mean (signed) error, count and unpredicted per ``by`` (in order of
    appearance), then an "all" row; the same numbers as :func:`runners.validate.summary`."""
    if by not in ("technique", "environment"):
        raise ValueError(f"by must be 'technique' or 'environment', got {by!r}")
    rows = [{by: str(key), **_error_stats(df)} for key, df in frame.groupby(by, sort=False)]
    if total and len(frame):
        rows.append({by: "all", **_error_stats(frame)})
    return pd.DataFrame(rows, columns=[by, *ERROR_COLUMNS])


def efficiency_frame(frame: pd.DataFrame, metric: str = "speedup", baseline: str = BASELINE) -> pd.DataFrame:
    """Long table (environment, model, technique, source, value): ``metric`` of each technique, predicted and
    measured. ``speedup`` divides the baseline technique's time in the same environment, model and source
    (NaN where that cell has no baseline)."""
    if metric not in EFFICIENCY_METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(EFFICIENCY_METRICS)}")
    rows = []
    models = frame["model"] if "model" in frame else pd.Series("", index=frame.index)
    for (env_name, model), df in frame.groupby([frame["environment"], models.fillna("")], sort=False):
        base = df[df["technique"] == baseline]
        for source in ("predicted", "measured"):
            t = df[f"{source}_s"].to_numpy(dtype=float)
            if metric == "speedup":
                t0 = float(base[f"{source}_s"].iloc[0]) if len(base) else math.nan
                values = t0 / t
            elif metric == "throughput":
                values = df["batch_size"].to_numpy(dtype=float) * df["p"].to_numpy(dtype=float) / t
            elif metric == "time_ms":
                values = t * 1e3
            else:
                values = df["compute_s"].to_numpy(dtype=float) / t
            rows += [{"environment": str(env_name), "model": str(model), "technique": tech, "source": source,
                      "value": float(v)} for tech, v in zip(df["technique"], values, strict=True)]
    return pd.DataFrame(rows, columns=["environment", "model", "technique", "source", "value"])


# ============================================================================== fitted environments
PARAMETER_COLUMNS = ["link", "parameter", "value", "unit", "ci95_low", "ci95_high", "status", "readable", "note"]
_SHOW = {"alpha": (1e6, "us"), "intra_alpha": (1e6, "us"), "beta": (1e9, "ns/B"), "intra_beta": (1e9, "ns/B"),
         "gamma": (1e9, "ns/B")}


def _readable(name: str, value: float, ci: Sequence[float] | None) -> str:
    scale, unit = _SHOW.get(name, (1.0, ""))
    text = f"{value * scale:.4g} {unit}"
    if ci is not None:
        text += f" [{ci[0] * scale:.4g}, {ci[1] * scale:.4g}]"
    if name in ("beta", "intra_beta") and value > 0:
        text += f" ({1 / value / 1e9:.4g} GB/s)"
    return text


def parameter_table(environments: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per parameter of each environment (link -> ``Environment.to_dict()``): value, unit, 95% CI
    and status from the fit's metadata; an environment without fit metadata gives its values, no CI."""
    rows = []
    for link, env in environments.items():
        params = (env.get("metadata") or {}).get("parameters")
        if not isinstance(params, Mapping) or not params:
            params = {k: {"value": env.get(k), "unit": "s" if "alpha" in k else "s/byte", "status": "given"}
                      for k in ("alpha", "beta", "gamma", "intra_alpha", "intra_beta") if env.get(k) is not None}
        for name in sorted(params, key=lambda k: list(_SHOW).index(k) if k in _SHOW else 99):
            p = params[name]
            value = _num(p.get("value"))
            ci = p.get("ci95")
            ci = [_num(ci[0]), _num(ci[1])] if isinstance(ci, Sequence) and len(ci) == 2 else None
            rows.append({"link": str(link), "parameter": name, "value": value, "unit": p.get("unit", ""),
                         "ci95_low": ci[0] if ci else math.nan, "ci95_high": ci[1] if ci else math.nan,
                         "status": p.get("status", ""), "readable": _readable(name, value, ci),
                         "note": p.get("note", "")})
        burst = _num(env.get("burst_bytes"))
        if burst > 0:  # the shaped link's token bucket: read from the records' tc tbf, not fitted
            rows.append({"link": str(link), "parameter": "burst_bytes", "value": burst, "unit": "B",
                         "ci95_low": math.nan, "ci95_high": math.nan, "status": "given",
                         "readable": f"{burst:,.0f} B", "note": "token bucket of the shaped link (tc tbf)"})
        for name, what in (("host_copy", "gloo's own buffer copies on the host (probe, not fitted)"),
                           ("host_fault", "more per byte of a buffer glibc maps afresh, from 32 MiB (probe)")):
            value = _num(env.get(name))
            if value > 0:  # measured by runners.measure.host_buffers and given to the fit
                rows.append({"link": str(link), "parameter": name, "value": value, "unit": "s/byte",
                             "ci95_low": math.nan, "ci95_high": math.nan, "status": "given",
                             "readable": f"{value * 1e9:.3g} ns/B", "note": what})
    return pd.DataFrame(rows, columns=PARAMETER_COLUMNS)


def fit_quality(environments: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per environment: the algorithm fitted, records, relative errors, R^2, and the emulated
    link's nominal beta where the run recorded one."""
    rows = []
    for link, env in environments.items():
        meta = env.get("metadata") or {}
        net = meta.get("network") if isinstance(meta.get("network"), Mapping) else {}
        rows.append({"link": str(link), "name": env.get("name", ""), "algorithm": meta.get("algorithm", ""),
                     "records": meta.get("records"), "rms_rel_error": _num(meta.get("rms_rel_error")),
                     "median_rel_error": _num(meta.get("median_rel_error")),
                     "max_rel_error": _num(meta.get("max_rel_error")), "r2": _num(meta.get("r2")),
                     "fitted_beta": _num(env.get("beta")),
                     "nominal_beta": _num(net.get("expected_beta_s_per_byte"))})
    return pd.DataFrame(rows, columns=["link", "name", "algorithm", "records", "rms_rel_error", "median_rel_error",
                                       "max_rel_error", "r2", "fitted_beta", "nominal_beta"])


def environments_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The environments of "environment" records: name -> ``Environment.to_dict()`` (with the fit's
    metadata, taken from the record's ``fit`` where the environment lacks it); later records win."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("kind") != "environment":
            continue
        env = dict(r["result"]["environment"])
        if not env.get("metadata") and isinstance(r["result"].get("fit"), Mapping):
            env["metadata"] = dict(r["result"]["fit"])
        out[str(env.get("name") or r["config"].get("algorithm") or r["id"])] = env
    return out


def environment_json(env: Mapping[str, Any]) -> str:
    """An environment dict as the JSON ``Environment.load`` reads (checked by parsing it)."""
    return cm.Environment.from_dict(dict(env)).to_json()


# ===================================================================================== fitting
@dataclass
class FitTables:
    """What :func:`runners.measure.fit.fit` found, as plain tables and text (cacheable)."""

    environment_json: str
    name: str
    summary: str
    verdict: str
    algorithms: dict[str, str]
    parameters: pd.DataFrame
    residuals: pd.DataFrame
    ranking: pd.DataFrame
    quality: dict[str, float]
    notes: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the plausibility guards' (runners.measure.fit.plausibility)


def fit_tables(result: Any) -> FitTables:
    """:class:`FitTables` of a :class:`runners.measure.fit.FitResult`."""
    from runners.measure.fit.plausibility import plausibility

    env = result.environment
    params = parameter_table({env.name: {**env.to_dict(), "metadata": {"parameters": {
        k: v.to_dict() for k, v in result.parameters.items()}}}}).drop(columns=["link"])
    residuals = pd.DataFrame(result.residuals, columns=["primitive", "algorithm", "bytes", "p", "ranks_per_node",
                                                        "measured_s", "predicted_s", "rel_error"])
    ranking = pd.DataFrame([c.to_dict() for c in result.ranking],
                           columns=["algorithm", "rms_rel_error", "max_rel_error", "aic", "delta_aic", "parameters",
                                    "note", "skipped"])
    quality = {"records": float(result.records), "rms_rel_error": result.rms_rel_error,
               "median_rel_error": result.median_rel_error, "max_rel_error": result.max_rel_error, "r2": result.r2,
               "r2_log": result.r2_log, "condition_number": result.condition_number}
    return FitTables(env.to_json(), env.name, result.summary(), result.verdict, dict(result.algorithms), params,
                     residuals, ranking, quality, list(result.notes), [str(b) for b in result.bad],
                     plausibility(result))


def collective_summary(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per primitive and p: how many collective records, how many sizes, and the size range."""
    rows = [{"primitive": r["config"]["op"], "p": int(r["run"]["world_size"]), "bytes": int(r["config"]["bytes"])}
            for r in records if r.get("kind") == "collective"]
    df = pd.DataFrame(rows, columns=["primitive", "p", "bytes"])
    if df.empty:
        return pd.DataFrame(columns=["primitive", "p", "records", "sizes", "smallest", "largest"])
    g = df.groupby(["primitive", "p"], sort=False)["bytes"]
    out = g.agg(records="size", sizes="nunique", smallest="min", largest="max").reset_index()
    out["smallest"] = [cm.format_size(v) for v in out["smallest"]]
    out["largest"] = [cm.format_size(v) for v in out["largest"]]
    return out


def model_curves(residuals: pd.DataFrame, env: cm.Environment, algorithms: Mapping[str, str], points: int = 48,
                 label: str = "fitted") -> pd.DataFrame:
    """``env``'s predicted time of each primitive's algorithm at each p of ``residuals``, over the
    measured size range (``points`` sizes, geometric): columns primitive, algorithm, p, bytes, time_s, model."""
    frames = []
    for (prim, p), df in residuals.groupby(["primitive", "p"], sort=False):
        name = algorithms.get(str(prim))
        if name is None:
            continue
        sizes = np.geomspace(float(df["bytes"].min()), float(df["bytes"].max()), points)
        t = np.asarray(cm.collective(name).time(sizes, int(p), env, out_of_domain="nan"), dtype=float)
        t = t * np.ones(len(sizes))
        frames.append(pd.DataFrame({"primitive": str(prim), "algorithm": name, "p": int(p), "bytes": sizes,
                                    "time_s": t, "model": label}))
    cols = ["primitive", "algorithm", "p", "bytes", "time_s", "model"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def dumps(obj: Any) -> str:
    """Indented JSON for a download."""
    return json.dumps(obj, indent=2, allow_nan=False)
