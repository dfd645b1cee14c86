"""Figure builders: data in, plotly figure out. No Streamlit here, so they are unit-testable."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

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


def _add_bands(fig: go.Figure, bands: Sequence[tuple[float, float, str]]) -> None:
    """Shade each band of the size axis (a rectangle the plot's height) and name it at its top."""
    edges = band_edges(bands)
    if not edges:
        return
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
    fig.update_layout(shapes=shapes, annotations=notes)


def collective_figure(curves: pd.DataFrame, metric: str = "time_s", title: str = "",
                      measured: pd.DataFrame | None = None,
                      bands: Sequence[tuple[float, float, str]] | None = None) -> go.Figure:
    """Lines of ``metric`` versus message size, one per algorithm; lower bounds dashed; a library's curve
    (kind ``"library"``, :func:`app.data.library_curve`) thick and black, its choice at each size in the
    hover; measured sweep points (:func:`app.data.measured_points`) as markers, one trace per label, with
    the p10-p90 spread of the time (where a record has one) as error bars; ``bands``
    (:func:`cm.choice_bands`) as shaded, labelled ranges of the size axis.

    ``curves`` is the long table of :func:`app.data.collective_curves` (and the library's rows).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    label, yscale = METRICS[metric]
    fig = go.Figure()
    for name, df in curves.groupby("algorithm", sort=False):
        kind = df["kind"].iloc[0]
        line = {"dash": "dash", "color": "gray"} if kind == "lower bound" else LIBRARY_LINE if kind == "library" else {}
        extra = {}
        if kind == "library" and "choice" in df:
            extra = {"customdata": df["choice"], "hovertemplate": "%{x:.3s}B: %{y:.4g} (%{customdata})<extra>"
                                                                  + str(name) + "</extra>"}
        fig.add_trace(go.Scatter(
            x=df["bytes"], y=df[metric], name=str(name), mode="lines", line=line,
            **(extra or {"hovertemplate": "%{x:.3s}B: %{y:.4g}<extra>" + str(name) + "</extra>"}),
        ))
    if measured is not None and not measured.empty:
        for name, df in measured.groupby("label", sort=False):
            err = None
            if metric == "time_s" and (df["time_p90_s"] > df["time_p10_s"]).any():  # published: no spread
                err = {"type": "data", "symmetric": False, "array": df["time_p90_s"] - df["time_s"],
                       "arrayminus": df["time_s"] - df["time_p10_s"], "thickness": 1}
            fig.add_trace(go.Scatter(
                x=df["bytes"], y=df[metric], name=str(name), mode="markers", error_y=err,
                marker={"symbol": "circle-open", "size": 9},
                hovertemplate="%{x:.3s}B: %{y:.4g}<extra>" + str(name) + "</extra>",
            ))
    if bands:
        _add_bands(fig, bands)
    fig.update_layout(
        title=title, xaxis_title="message size (bytes)", yaxis_title=label,
        legend={"orientation": "h", "y": -0.2}, margin={"t": 40 if title else 10},
        template="plotly_white", height=480,
    )
    fig.update_xaxes(type="log", exponentformat="SI")
    fig.update_yaxes(type=yscale)
    return fig
