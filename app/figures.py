"""Figure builders: data in, plotly figure out. No Streamlit here, so they are unit-testable."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

METRICS = {
    "time_s": ("time (s)", "log"),
    "busbw_GBps": ("bus bandwidth (GB/s)", "linear"),
    "algbw_GBps": ("algorithm bandwidth (GB/s)", "linear"),
}


def collective_figure(curves: pd.DataFrame, metric: str = "time_s", title: str = "",
                      measured: pd.DataFrame | None = None) -> go.Figure:
    """Lines of ``metric`` versus message size, one per algorithm; lower bounds dashed; measured sweep
    points (:func:`app.data.measured_points`) as markers, one trace per label, with the p10-p90 spread
    of the time as error bars.

    ``curves`` is the long table of :func:`app.data.collective_curves`.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    label, yscale = METRICS[metric]
    fig = go.Figure()
    for name, df in curves.groupby("algorithm", sort=False):
        bound = (df["kind"] == "lower bound").all()
        fig.add_trace(go.Scatter(
            x=df["bytes"], y=df[metric], name=str(name), mode="lines",
            line={"dash": "dash", "color": "gray"} if bound else {},
            hovertemplate="%{x:.3s}B: %{y:.4g}<extra>" + str(name) + "</extra>",
        ))
    if measured is not None and not measured.empty:
        for name, df in measured.groupby("label", sort=False):
            err = None
            if metric == "time_s":
                err = {"type": "data", "symmetric": False, "array": df["time_p90_s"] - df["time_s"],
                       "arrayminus": df["time_s"] - df["time_p10_s"], "thickness": 1}
            fig.add_trace(go.Scatter(
                x=df["bytes"], y=df[metric], name=str(name), mode="markers", error_y=err,
                marker={"symbol": "circle-open", "size": 9},
                hovertemplate="%{x:.3s}B: %{y:.4g}<extra>" + str(name) + "</extra>",
            ))
    fig.update_layout(
        title=title, xaxis_title="message size (bytes)", yaxis_title=label,
        legend={"orientation": "h", "y": -0.2}, margin={"t": 40 if title else 10},
        template="plotly_white", height=480,
    )
    fig.update_xaxes(type="log", exponentformat="SI")
    fig.update_yaxes(type=yscale)
    return fig
