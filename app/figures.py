"""Figure builders: data in, plotly figure out. No Streamlit here, so they are unit-testable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

import costmodels as cm
from app.palette import color as palette_color

METRICS = {
    "time_s": ("time (s)", "log"),
    "busbw_GBps": ("bus bandwidth (GB/s)", "linear"),
    "algbw_GBps": ("algorithm bandwidth (GB/s)", "linear"),
}
BAND_COLORS = qualitative.Pastel1 + qualitative.Pastel2
LIBRARY_LINE = {"color": "black", "width": 3}
NARROW_BAND = 0.08  # a band narrower than this share of the log size axis gets its label turned upright


def band_colors(labels: Sequence[str]) -> dict[str, str]:
    """A stable pastel colour per band label ("ring/LL"), in order of first appearance."""
    return {k: BAND_COLORS[i % len(BAND_COLORS)] for i, k in enumerate(dict.fromkeys(labels))}


def band_edges(bands: Sequence[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The bands of :func:`cm.choice_bands` as touching intervals: neighbours meet half way (geometrically)
    between the last size of one and the first size of the next."""
    out = []
    for i, (first, last, label) in enumerate(bands):
        x0 = first if i == 0 else float(np.sqrt(bands[i - 1][1] * first))
        x1 = last if i == len(bands) - 1 else float(np.sqrt(last * bands[i + 1][0]))
        out.append((x0, x1, label))
    return out


def _band_shapes(bands: Sequence[tuple[float, float, str]]) -> tuple[list[dict], list[dict]]:
    """Shade each band of the size axis (a rectangle the plot's height) and name it at its top."""
    edges = band_edges(bands)
    if not edges:
        return [], []
    colors = band_colors([label for _, _, label in edges])
    span = max(np.log10(edges[-1][1] / edges[0][0]), 1e-9)
    shapes, notes = [], []
    for x0, x1, label in edges:
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
                       "fillcolor": colors[label], "opacity": 0.35, "layer": "below", "line": {"width": 0},
                       "name": label})
        narrow = np.log10(x1 / x0) / span < NARROW_BAND
        notes.append({"xref": "x", "yref": "paper", "x": float(np.log10(np.sqrt(x0 * x1))), "y": 1,
                      "yanchor": "top", "text": label, "showarrow": False, "textangle": -90 if narrow else 0,
                      "font": {"size": 11, "color": "#333"}, "name": "band"})
    return shapes, notes


def size_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick positions (powers of two) and their labels in B/KiB/MiB/GiB/TiB for a log size axis over [lo, hi]."""
    a, b = int(np.floor(np.log2(max(lo, 1.0)))), int(np.ceil(np.log2(max(hi, 1.0))))
    octaves = max(b - a, 1)
    step = next(s for s in (1, 2, 5, 10, 20) if octaves / s <= 12)
    first = -(-a // step) * step  # ticks at multiples of the step: 1 KiB, 1 MiB, 1 GiB where they fall
    vals = [2.0**e for e in range(first, b + 1, step)]
    return vals, [cm.format_size(v) for v in vals]


def size_axis(fig: go.Figure, sizes: Sequence[float] | np.ndarray, title: str = "message size", **where: Any) -> None:
    """A log x axis of message sizes labelled in B/KiB/MiB/GiB (powers of 1024)."""
    arr = np.asarray(sizes, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    vals, text = size_ticks(float(arr.min()), float(arr.max())) if arr.size else ([], [])
    fig.update_xaxes(type="log", tickvals=vals, ticktext=text, title_text=title, **where)


def band_traces(fig: go.Figure, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, color: str, name: str) -> None:
    """A translucent band between ``lo`` and ``hi`` (two traces, ``meta="band"``), in the curve's colour."""
    ok = np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        return
    common = {"mode": "lines", "line": {"width": 0, "color": color}, "legendgroup": name, "showlegend": False,
              "hoverinfo": "skip", "meta": "band"}
    fig.add_trace(go.Scatter(x=x[ok], y=hi[ok], name=f"{name} (CI high)", **common))
    fig.add_trace(go.Scatter(x=x[ok], y=lo[ok], name=f"{name} (CI low)", fill="tonexty", opacity=0.2,
                             fillcolor=_translucent(color), **common))


def _translucent(color: str, alpha: float = 0.18) -> str:
    c = color.lstrip("#")
    if len(c) != 6:
        return color
    r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


BAND_COLUMNS = {"time_s": ("time_lo_s", "time_hi_s"), "busbw_GBps": ("busbw_lo_GBps", "busbw_hi_GBps")}


def _curve_traces(fig: go.Figure, curves: pd.DataFrame, metric: str, prefix: str = "", dash: str | None = None,
                  bands: bool = True) -> None:
    for name, df in curves.groupby("algorithm", sort=False):
        kind = df["kind"].iloc[0]
        label = f"{prefix}{name}"
        color = "black" if kind == "library" else palette_color(str(name))
        line = ({"dash": "dash", "color": "gray"} if kind == "lower bound" else
                {**LIBRARY_LINE, "dash": dash} if kind == "library" else {"color": color, "dash": dash})
        x = df["bytes"].to_numpy(dtype=float)
        sizes = [cm.format_size(b) for b in x]
        if kind == "library" and "choice" in df:
            custom = np.column_stack([sizes, df["choice"].astype(str)])
            hover = "%{customdata[0]}: %{y:.4g} (%{customdata[1]})<extra>" + label + "</extra>"
        else:
            custom = np.array(sizes, dtype=object).reshape(-1, 1)
            hover = "%{customdata[0]}: %{y:.4g}<extra>" + label + "</extra>"
        if bands and metric in BAND_COLUMNS and BAND_COLUMNS[metric][0] in df and kind != "lower bound":
            lo, hi = (df[c].to_numpy(dtype=float) for c in BAND_COLUMNS[metric])
            band_traces(fig, x, lo, hi, color if kind != "library" else "#444444", label)
        fig.add_trace(go.Scatter(x=x, y=df[metric], name=label, mode="lines", line=line, legendgroup=label,
                                 customdata=custom, hovertemplate=hover, meta="pinned" if prefix else kind))


def _crossover_marks(crossovers: Sequence[tuple[float, str, str]]) -> tuple[list[dict], list[dict]]:
    """A dotted vertical line at each crossover size, labelled with the size and the pair."""
    shapes, notes = [], []
    for i, (size, a, b) in enumerate(crossovers):
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": size, "x1": size, "y0": 0, "y1": 1,
                       "name": "crossover", "line": {"dash": "dot", "width": 1, "color": "#333"}})
        notes.append({"x": float(np.log10(size)), "xref": "x", "yref": "paper", "y": 0.02 + 0.07 * (i % 4),
                      "showarrow": False, "text": f"{cm.format_size(size)}: {_short(a)} = {_short(b)}",
                      "name": "crossover", "xanchor": "left", "font": {"size": 10, "color": "#333"},
                      "bgcolor": "rgba(255,255,255,0.7)"})
    return shapes, notes


def _short(name: str) -> str:
    return name.replace("_allreduce", "").replace("_reduce_scatter", "").replace("_allgather", "").replace(
        "_all_to_all", "")


def collective_figure(curves: pd.DataFrame, metric: str = "time_s", title: str = "",
                      measured: pd.DataFrame | None = None,
                      bands: Sequence[tuple[float, float, str]] | None = None,
                      crossovers: Sequence[tuple[float, str, str]] = (), pinned: pd.DataFrame | None = None,
                      pinned_label: str = "") -> go.Figure:
    """Lines of ``metric`` versus message size (a log axis in KiB/MiB/GiB), one per algorithm in its palette colour
    (:mod:`app.palette`); lower bounds dashed gray; a library's curve (kind ``"library"``,
    :func:`app.data.library_curve`) thick and black, its choice at each size in the hover; where ``curves`` carry
    ``time_lo_s``/``time_hi_s`` (:func:`app.data_uncertainty.collective_band`), a translucent band from the fitted
    parameters' 95% CIs. Measured sweep points (:func:`app.data.measured_points`) as markers, one trace per label,
    with the p10-p90 spread of the time as error bars; ``bands`` (:func:`cm.choice_bands`) as shaded, labelled
    ranges of the size axis; ``crossovers`` (size, a, b) as dotted vertical lines; ``pinned`` (curves of a pinned
    configuration A) dashed, named "A: ...", beside the current ones, named "B: ...".

    ``curves`` is the long table of :func:`app.data.collective_curves` (and the library's rows).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    label, yscale = METRICS[metric]
    fig = go.Figure()
    compare = pinned is not None and not pinned.empty
    if compare:
        _curve_traces(fig, pinned, metric, prefix="A: ", dash="dash", bands=False)
    _curve_traces(fig, curves, metric, prefix="B: " if compare else "")
    if measured is not None and not measured.empty:
        for name, df in measured.groupby("label", sort=False):
            err = None
            if metric == "time_s" and (df["time_p90_s"] > df["time_p10_s"]).any():  # published: no spread
                err = {"type": "data", "symmetric": False, "array": df["time_p90_s"] - df["time_s"],
                       "arrayminus": df["time_s"] - df["time_p10_s"], "thickness": 1}
            fig.add_trace(go.Scatter(
                x=df["bytes"], y=df[metric], name=str(name), mode="markers", error_y=err,
                marker={"symbol": "circle-open", "size": 9}, meta="measured",
                customdata=np.array([cm.format_size(b) for b in df["bytes"]], dtype=object).reshape(-1, 1),
                hovertemplate="%{customdata[0]}: %{y:.4g}<extra>" + str(name) + "</extra>",
            ))
    shapes, notes = _band_shapes(bands or [])
    marks = _crossover_marks(crossovers)
    fig.update_layout(shapes=shapes + marks[0], annotations=notes + marks[1],
        title=title, yaxis_title=label, legend={"orientation": "h", "y": -0.2},
        margin={"t": 40 if title else 10}, height=480,
    )
    xs = [curves["bytes"]] + ([pinned["bytes"]] if compare else []) + (
        [measured["bytes"]] if measured is not None and not measured.empty else [])
    size_axis(fig, np.concatenate([np.asarray(x, dtype=float) for x in xs]) if xs else [1.0, 2.0])
    fig.update_yaxes(type=yscale)
    return fig
