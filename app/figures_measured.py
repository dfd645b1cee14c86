"""Figure builders of the measured pages: tables in, plotly figures out (no Streamlit; unit-testable).

Every trace carries ``meta``: ``"points"`` for measured data (one marker per record), ``"model"`` for
model curves, ``"reference"`` for guides (the y = x line, the error band, zero lines), so a test or a
reader of the figure JSON can tell them apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from app.data_measured import EFFICIENCY_METRICS
from app.palette import colors as technique_colors

COLORS = qualitative.Plotly + qualitative.D3
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down", "pentagon", "hexagon"]
SOURCE_COLORS = {"predicted": "#9aa5b1", "measured": "#1f77b4"}


def color_map(names: Sequence[str]) -> dict[str, str]:
    """A stable colour per name, in order of first appearance."""
    return {n: COLORS[i % len(COLORS)] for i, n in enumerate(dict.fromkeys(names))}


def _layout(fig: go.Figure, title: str, height: int = 480) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"t": 60 if title else 20},
                      legend={"orientation": "h", "y": -0.2})
    return fig


# ============================================================================ predicted vs measured
def scatter_figure(frame: pd.DataFrame, log: bool = True, band: float = 0.1, panels: bool = False,
                   title: str = "") -> go.Figure:
    """Predicted versus measured iteration time (ms), one marker per row of ``frame``
    (:func:`app.data_measured.validation_frame`, or one prediction's :func:`app.data_validation.prediction_view`):
    colour by technique; environment by symbol, or one panel per environment (``panels``). Horizontal error
    bars span the measured spread (+-``spread`` x measured); a marker is open where the error is within that
    spread. The y = x line and the +-``band`` lines are drawn over the data's range. Rows without a prediction
    are left out.
    """
    df = frame[np.isfinite(frame["predicted_s"].to_numpy(dtype=float))]
    envs = list(dict.fromkeys(df["environment"])) or [""]
    colors = technique_colors(frame["technique"])  # one colour per technique on every page (app.palette)
    symbols = {e: SYMBOLS[i % len(SYMBOLS)] for i, e in enumerate(envs)}
    fig = make_subplots(rows=1, cols=len(envs), subplot_titles=envs, horizontal_spacing=0.06) if panels else go.Figure()
    values = np.concatenate([df["predicted_s"].to_numpy(dtype=float), df["measured_s"].to_numpy(dtype=float)]) * 1e3
    lo, hi = (float(values.min()), float(values.max())) if values.size else (1.0, 10.0)
    lo, hi = (lo / 1.15, hi * 1.15) if log else (0.0, hi * 1.1)
    line = np.geomspace(max(lo, 1e-12), hi, 50) if log else np.linspace(lo, hi, 50)
    shown: set[str] = set()
    parts = [(df[df["environment"] == e], i + 1) for i, e in enumerate(envs)] if panels else [(df, None)]
    for k, (sub, col) in enumerate(parts):
        where = {"row": 1, "col": col} if panels else {}
        _identity(fig, line, band, k == 0, where)
        for tech, g in sub.groupby("technique", sort=False):
            meas = g["measured_s"].to_numpy(dtype=float) * 1e3
            rel = g["spread"].to_numpy(dtype=float) if "spread" in g else np.full(len(g), np.nan)
            within = np.abs(g["error"].to_numpy(dtype=float)) <= np.nan_to_num(rel, nan=-1.0)
            spread = {"type": "data", "array": np.nan_to_num(rel * meas, nan=0.0), "thickness": 1, "width": 0,
                      "color": colors[str(tech)]}
            fig.add_trace(go.Scatter(
                x=meas, y=g["predicted_s"].to_numpy(dtype=float) * 1e3, mode="markers", name=str(tech),
                meta="points", legendgroup=str(tech), showlegend=str(tech) not in shown,
                marker={"color": colors[str(tech)], "size": 10, "line": {"width": 1.5, "color": colors[str(tech)]},
                        "symbol": [symbols.get(e, "circle") + ("-open" if w else "")
                                   for e, w in zip(g["environment"], within, strict=True)]},
                error_x=spread if np.isfinite(rel).any() else None, error_y=_ci_bars(g, colors[str(tech)]),
                customdata=[[str(e), float(x) * 100, float(sp) * 100, " (within the spread)" if w else ""]
                            for e, x, sp, w in zip(g["environment"], g["error"], rel, within, strict=True)],
                hovertemplate=(f"<b>{tech}</b> on %{{customdata[0]}}<br>measured %{{x:.4g}} ms "
                               "(spread +-%{customdata[2]:.1f}%)<br>predicted %{y:.4g} ms<br>error "
                               "%{customdata[1]:+.1f}%%{customdata[3]}<extra></extra>"),
            ), **where)
            shown.add(str(tech))
    if not panels and len(envs) > 1:  # a legend of the symbols: gray markers without data
        for env in envs:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{env}", meta="legend",
                                     marker={"symbol": symbols[env], "color": "gray", "size": 9},
                                     legendgroup=f"env:{env}"))
    _square_axes(fig, lo, hi, log, "measured (ms)", "predicted (ms)", {"row": 1, "col": 1} if panels else {})
    return _layout(fig, title, height=520)


def _ci_bars(g: pd.DataFrame, color: str) -> dict | None:
    """Vertical bars from the prediction at both ends of the link's fitted 95% CIs (``predicted_lo_s``,
    ``predicted_hi_s``, :func:`app.data_uncertainty.prediction_band`), or None where there are none."""
    if "predicted_lo_s" not in g or not np.isfinite(g["predicted_lo_s"].to_numpy(dtype=float)).any():
        return None
    pred = g["predicted_s"].to_numpy(dtype=float)
    up = np.nan_to_num(g["predicted_hi_s"].to_numpy(dtype=float) - pred, nan=0.0) * 1e3
    down = np.nan_to_num(pred - g["predicted_lo_s"].to_numpy(dtype=float), nan=0.0) * 1e3
    return {"type": "data", "symmetric": False, "array": np.maximum(up, 0), "arrayminus": np.maximum(down, 0),
            "thickness": 1, "width": 3, "color": color}


def _identity(fig: go.Figure, line: np.ndarray, band: float, legend: bool, where: dict) -> None:
    """The y = x line and the +-``band`` lines over ``line`` (guides: ``meta="reference"``)."""
    fig.add_trace(go.Scatter(x=line, y=line, mode="lines", name="y = x", meta="reference", showlegend=legend,
                             line={"color": "black", "width": 1}, legendgroup="y=x", hoverinfo="skip"), **where)
    if band > 0:
        for sign in (1, -1):
            fig.add_trace(go.Scatter(
                x=line, y=line * (1 + sign * band), mode="lines", name=f"+-{band:.0%}", meta="reference",
                line={"color": "gray", "width": 1, "dash": "dot"}, showlegend=legend and sign == 1,
                legendgroup="band", hoverinfo="skip"), **where)


def _square_axes(fig: go.Figure, lo: float, hi: float, log: bool, xtitle: str, ytitle: str, first: dict) -> None:
    """Both axes over [lo, hi], log or linear, titled (the y title on the ``first`` panel only)."""
    axis = "log" if log else "linear"
    fig.update_xaxes(type=axis, title_text=xtitle)
    fig.update_yaxes(type=axis)
    fig.update_yaxes(title_text=ytitle, **first)
    span = [math.log10(max(lo, 1e-12)), math.log10(hi)] if log else [lo, hi]
    fig.update_xaxes(range=span)
    fig.update_yaxes(range=span)


TERM_COLORS = {"latency": "#1f77b4", "bandwidth": "#ff7f0e", "interference": "#2ca02c", "overhead": "#9467bd"}


def contributions_figure(contrib: pd.DataFrame, title: str = "") -> go.Figure:
    """What each term contributes to each cell's prediction (ms, bars stacked per cell, one colour per term) and
    the gap to the measurement (measured - predicted, a black diamond): the term the gap is attributed to has a
    black outline. ``contrib`` is :func:`app.data_validation.contributions`."""
    fig = go.Figure()
    terms = contrib[contrib["term"] != "gap"]
    for term, d in terms.groupby("term", sort=False):
        fig.add_trace(go.Bar(
            y=d["cell"], x=d["ms"], orientation="h", name=str(term), meta="points",
            marker={"color": TERM_COLORS.get(str(term), "gray"),
                    "line": {"color": "black", "width": np.where(d["attributed"], 2.0, 0.0)}},
            customdata=np.nan_to_num(d["share"].to_numpy(dtype=float) * 100, nan=0.0),
            hovertemplate="%{y}<br>" + str(term) + " %{x:.4g} ms (%{customdata:.0f}% of the prediction)<extra></extra>",
        ))
    gap = contrib[contrib["term"] == "gap"]
    fig.add_trace(go.Scatter(
        y=gap["cell"], x=gap["ms"], mode="markers", name="gap (measured - predicted)", meta="gap",
        marker={"symbol": "diamond", "color": "black", "size": 9},
        hovertemplate="%{y}<br>gap %{x:+.4g} ms<extra></extra>",
    ))
    fig.add_vline(x=0, line={"color": "gray", "width": 1})
    fig.update_layout(barmode="relative", xaxis_title="ms of the predicted iteration", yaxis={"autorange": "reversed"})
    return _layout(fig, title, height=max(260, 26 * gap["cell"].nunique() + 140))


def published_figure(frame: pd.DataFrame, band: float = 0.1, title: str = "") -> go.Figure:
    """Predicted against measured bus bandwidth (GB/s, log axes) of published points
    (:func:`app.data_published.published_frame`): a colour per system, filled markers in the bandwidth
    regime (>= 1 GiB), open ones below; the y = x line and the +-``band`` lines. Points whose published
    busbw rounds to 0 have no place on log axes and are left out."""
    from app.data_published import BANDWIDTH_REGIME

    meas = frame["measured_busbw_GBps"].to_numpy(dtype=float)
    pred = frame["predicted_busbw_GBps"].to_numpy(dtype=float)
    df = frame[(meas > 0) & (pred > 0) & np.isfinite(pred)]
    values = np.concatenate([df["measured_busbw_GBps"].to_numpy(dtype=float),
                             df["predicted_busbw_GBps"].to_numpy(dtype=float)])
    lo, hi = (float(values.min()) / 1.3, float(values.max()) * 1.3) if values.size else (0.01, 1000.0)
    fig = go.Figure()
    _identity(fig, np.geomspace(lo, hi, 50), band, True, {})
    colors = color_map(frame["system"])
    for system, g in df.groupby("system", sort=False):
        big = g["bytes"].to_numpy(dtype=float) >= BANDWIDTH_REGIME
        fig.add_trace(go.Scatter(
            x=g["measured_busbw_GBps"], y=g["predicted_busbw_GBps"], mode="markers", name=str(system),
            meta="points", legendgroup=str(system),
            marker={"color": colors[str(system)], "size": np.where(big, 11, 8),
                    "symbol": np.where(big, "circle", "circle-open"), "line": {"width": 1.5,
                                                                             "color": colors[str(system)]}},
            customdata=[[size, choice, float(e) * 100] for size, choice, e in zip(g["size"], g["choice"],
                                                                                  g["busbw_error"], strict=True)],
            hovertemplate=(f"<b>{system}</b> %{{customdata[0]}}<br>measured %{{x:.4g}} GB/s<br>predicted "
                           "%{y:.4g} GB/s (%{customdata[1]})<br>error %{customdata[2]:+.1f}%<extra></extra>"),
        ))
    _square_axes(fig, lo, hi, True, "measured bus bandwidth (GB/s)", "predicted bus bandwidth (GB/s)", {})
    return _layout(fig, title, height=520)


def efficiency_figure(eff: pd.DataFrame, metric: str = "speedup", baseline: str = "", title: str = "") -> go.Figure:
    """Grouped bars, predicted beside measured, of each technique's ``metric`` (the long table of
    :func:`app.data_measured.efficiency_frame`); the x axis groups techniques by environment (and model, where
    there is more than one)."""
    label = EFFICIENCY_METRICS[metric][0]
    if metric == "speedup" and baseline:
        label = f"speedup over {baseline} (x)"
    fig = go.Figure()
    for source in ("predicted", "measured"):
        d = eff[eff["source"] == source]
        group = d["environment"].astype(str)
        if "model" in eff and eff["model"].nunique() > 1:
            group = group + " " + d["model"].astype(str)
        fig.add_trace(go.Bar(
            x=[group.tolist(), d["technique"].astype(str).tolist()], y=d["value"],
            name=source, meta="points", marker={"color": SOURCE_COLORS[source]},
            hovertemplate="%{x}<br>" + source + " %{y:.4g}<extra></extra>",
        ))
    if metric == "speedup":
        fig.add_hline(y=1.0, line={"color": "black", "width": 1, "dash": "dot"})
    fig.update_layout(barmode="group", yaxis_title=label, xaxis_title="")
    _layout(fig, title, height=460)
    fig.update_layout(legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"})
    return fig


def parameter_figure(params: pd.DataFrame, title: str = "") -> go.Figure:
    """Fitted alpha (us) and bandwidth 1/beta (GB/s) of each link with their 95% CIs (error bars);
    ``params`` is :func:`app.data_measured.parameter_table`."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["alpha: latency (us)", "1/beta: bandwidth (GB/s)"],
                        horizontal_spacing=0.12)
    for col, name in ((1, "alpha"), (2, "beta")):
        d = params[params["parameter"] == name]
        v = d["value"].to_numpy(dtype=float)
        lo_ci, hi_ci = d["ci95_low"].to_numpy(dtype=float), d["ci95_high"].to_numpy(dtype=float)
        if name == "alpha":
            y, up, down = v * 1e6, (hi_ci - v) * 1e6, (v - lo_ci) * 1e6
        else:  # bandwidth: the CI of beta maps to [1/hi, 1/lo], an upper end at beta's 0 is unbounded
            with np.errstate(divide="ignore", invalid="ignore"):
                y = 1 / v / 1e9
                up = np.where(lo_ci > 0, 1 / lo_ci / 1e9 - y, np.nan)
                down = y - 1 / hi_ci / 1e9
        fig.add_trace(go.Scatter(
            x=d["link"], y=y, mode="markers", name=name, meta="points", showlegend=False,
            marker={"size": 11, "color": COLORS[col - 1]},
            error_y={"type": "data", "array": np.nan_to_num(up, nan=0.0), "arrayminus": np.nan_to_num(down, nan=0.0),
                     "thickness": 1.5},
            hovertemplate="%{x}: %{y:.4g}<extra>" + name + "</extra>",
        ), row=1, col=col)
    return _layout(fig, title, height=360)


# ===================================================================================== fitting
def _series_label(prim: str, p: int, several_p: bool) -> str:
    return f"{prim} (p = {p})" if several_p else prim


def fit_figure(residuals: pd.DataFrame, curves: pd.DataFrame, log: bool = True, title: str = "") -> go.Figure:
    """Measured collective times (markers, one per record) and model curves (lines: the fitted model
    solid, any other ``model`` label dashed) versus message size, a colour per primitive and p."""
    several_p = residuals["p"].nunique() > 1 if len(residuals) else False
    keys = list(dict.fromkeys(zip(residuals["primitive"], residuals["p"], strict=True)))
    colors = {k: COLORS[i % len(COLORS)] for i, k in enumerate(keys)}
    fig = go.Figure()
    for (prim, p), d in residuals.groupby(["primitive", "p"], sort=False):
        label = _series_label(str(prim), int(p), several_p)
        fig.add_trace(go.Scatter(
            x=d["bytes"], y=d["measured_s"] * 1e3, mode="markers", name=f"{label} measured", meta="points",
            legendgroup=label, marker={"color": colors[(prim, p)], "size": 8},
            customdata=d["rel_error"] * 100,
            hovertemplate="%{x:.3s}B: %{y:.4g} ms (fit %{customdata:+.1f}%)<extra>" + label + "</extra>",
        ))
    for i, ((model, prim, p), d) in enumerate(curves.groupby(["model", "primitive", "p"], sort=False)):
        label = _series_label(str(prim), int(p), several_p)
        fig.add_trace(go.Scatter(
            x=d["bytes"], y=d["time_s"] * 1e3, mode="lines", name=f"{label} {model} ({d['algorithm'].iloc[0]})",
            meta="model", legendgroup=label, line={"color": colors.get((prim, p), COLORS[i % len(COLORS)]),
                                                   "dash": "solid" if model == "fitted" else "dash"},
            hovertemplate="%{x:.3s}B: %{y:.4g} ms<extra>" + f"{label} {model}" + "</extra>",
        ))
    fig.update_xaxes(type="log", exponentformat="SI", title_text="message size (bytes)")
    fig.update_yaxes(type="log" if log else "linear", title_text="time (ms)")
    return _layout(fig, title)


def residual_figure(residuals: pd.DataFrame, band: float = 0.1, title: str = "") -> go.Figure:
    """Relative error of the fit, (predicted - measured) / measured in %, versus message size."""
    several_p = residuals["p"].nunique() > 1 if len(residuals) else False
    fig = go.Figure()
    for i, ((prim, p), d) in enumerate(residuals.groupby(["primitive", "p"], sort=False)):
        label = _series_label(str(prim), int(p), several_p)
        fig.add_trace(go.Scatter(
            x=d["bytes"], y=d["rel_error"] * 100, mode="markers", name=label, meta="points",
            marker={"color": COLORS[i % len(COLORS)], "size": 8},
            hovertemplate="%{x:.3s}B: %{y:+.1f}%<extra>" + label + "</extra>",
        ))
    xs = residuals["bytes"].to_numpy(dtype=float)
    if xs.size:
        x = [float(xs.min()) / 1.5, float(xs.max()) * 1.5]
        fig.add_trace(go.Scatter(x=x, y=[0, 0], mode="lines", name="0", meta="reference", showlegend=False,
                                 line={"color": "black", "width": 1}, hoverinfo="skip"))
        if band > 0:
            for sign in (1, -1):
                fig.add_trace(go.Scatter(x=x, y=[sign * band * 100] * 2, mode="lines", name=f"+-{band:.0%}",
                                         meta="reference", showlegend=sign == 1, legendgroup="band",
                                         line={"color": "gray", "width": 1, "dash": "dot"}, hoverinfo="skip"))
    fig.update_xaxes(type="log", exponentformat="SI", title_text="message size (bytes)")
    fig.update_yaxes(title_text="relative error of the fit (%)", ticksuffix="%", zeroline=False)
    return _layout(fig, title, height=400)
