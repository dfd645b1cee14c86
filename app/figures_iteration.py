"""Figure builders of the Iteration page: data in, plotly figure out (no Streamlit, unit-testable)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

import costmodels as cm
from app.figures import band_traces
from app.palette import color as palette_color

METRICS = {
    "iteration_time_s": ("iteration time (s)", "log"),
    "throughput": ("throughput (samples/s, all workers)", "log"),
    "scaling_efficiency": ("scaling efficiency", "linear"),
}
METRIC_LABELS = {"iteration_time_s": "iteration time", "throughput": "throughput",
                 "scaling_efficiency": "scaling efficiency"}
STREAM_LABELS = {"compute": "compute", "comm": "communication"}
KIND_COLORS = {
    "forward": "#4C78A8", "backward": "#72B7B2", "allreduce": "#E45756", "reduce_scatter": "#F58518",
    "allgather": "#B279A2", "all_to_all": "#9D755D", "optimizer": "#54A24B", "issue": "#FF9DA6",
    "copy": "#BAB0AC",  # memory passes over the gradients (flat-buffer copies, the averaging)
}
PART_COLORS = {"forward": "#4C78A8", "backward": "#72B7B2", "compression (encode)": "#EECA3B",
               "exposed communication": "#E45756"}
MS = 1e3


def _layout(fig: go.Figure, title: str, height: int, *, legend_on_top: bool = False) -> go.Figure:
    legend = ({"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0.0, "xanchor": "left",
               "traceorder": "normal"} if legend_on_top else {"orientation": "h", "y": -0.2})
    fig.update_layout(title=title, legend=legend, margin={"t": 60 if title or legend_on_top else 10},
                      height=height)
    return fig


def _scaling_traces(fig: go.Figure, curves: pd.DataFrame, metric: str, prefix: str = "", dash: str | None = None,
                    bands: bool = True) -> None:
    unit = {"iteration_time_s": " s", "throughput": " samples/s"}.get(metric, "")
    for (sched, comp), df in curves.groupby(["schedule", "compressor"], sort=False):
        name = prefix + (str(sched) if comp == "none" else f"{sched} + {comp}")
        color = palette_color(str(sched))
        x = df["p"].to_numpy(dtype=float)
        if bands and f"{metric}_lo" in df:
            band_traces(fig, x, df[f"{metric}_lo"].to_numpy(dtype=float), df[f"{metric}_hi"].to_numpy(dtype=float),
                  color, name)
        fig.add_trace(go.Scatter(
            x=x, y=df[metric], name=name, mode="lines+markers", marker={"size": 5}, legendgroup=name,
            line={"color": color, "dash": dash}, meta="pinned" if prefix.startswith("A") else "curve",
            hovertemplate=name + ": %{y:.4g}" + unit + "<extra></extra>",
        ))


def scaling_figure(curves: pd.DataFrame, metric: str = "iteration_time_s", title: str = "",
                   p_mark: int | None = None, pinned: pd.DataFrame | None = None) -> go.Figure:
    """Lines of ``metric`` versus p (log2 axis), one per schedule (and compressor) in its palette colour
    (:mod:`app.palette`), with one hover for every line at a p ("x unified").

    ``curves`` is the long table of :func:`app.data_iteration.scaling_curves`; where it carries ``<metric>_lo`` and
    ``<metric>_hi`` (:func:`app.data_uncertainty.scaling_band`) a translucent band spans them. ``pinned``: the
    curves of a pinned configuration A, drawn dashed ("A: ...") beside the current ones ("B: ..."). ``p_mark``
    draws a dotted vertical line at that p.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
    label, yscale = METRICS[metric]
    fig = go.Figure()
    compare = pinned is not None and not pinned.empty
    if compare:
        _scaling_traces(fig, pinned, metric, prefix="A: ", dash="dash", bands=False)
    _scaling_traces(fig, curves, metric, prefix="B: " if compare else "")
    _layout(fig, title, 480)
    fig.update_layout(xaxis_title="p (workers)", yaxis_title=label, hovermode="x unified")
    both = pd.concat([curves["p"], pinned["p"]]) if compare else curves["p"]
    ps = both.to_numpy(dtype=float) if len(both) else np.array([1.0, 2.0])
    ticks = [2**k for k in range(int(np.floor(np.log2(ps.min()))), int(np.ceil(np.log2(ps.max()))) + 1)]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks])
    fig.update_yaxes(type=yscale)
    if metric == "scaling_efficiency":
        fig.update_yaxes(range=[0, 1.05])
    if p_mark is not None:
        fig.add_vline(x=p_mark, line={"dash": "dot", "color": "gray"})  # an annotation on a log axis takes log10(x)
        fig.add_annotation(x=float(np.log10(p_mark)), y=1, yref="paper", text=f"p = {p_mark}", showarrow=False,
                           xanchor="right", yanchor="bottom")
    return fig


def gantt_figure(events: pd.DataFrame, title: str = "", iteration_time: float | None = None) -> go.Figure:
    """One iteration as a Gantt chart: compute and communication streams, one bar per event.

    ``events`` is :func:`app.data_iteration.timeline_table`. Bars are grouped into one trace per
    event kind (compute kinds first: forward, backward, then allreduce, ...); hover shows the layer
    or message, its bytes, start and duration. ``iteration_time`` draws a dashed line where the next iteration starts.
    """
    fig = go.Figure()
    compute = events["stream"] == "compute"
    for kind in dict.fromkeys([*events.loc[compute, "kind"], *events.loc[~compute, "kind"]]):
        df = events[events["kind"] == kind]
        nbytes = [cm.format_size(b) if b > 0 else "-" for b in df["bytes"]]
        custom = np.column_stack([df["name"].astype(str), nbytes, df["start_s"] * MS, df["end_s"] * MS])
        fig.add_trace(go.Bar(
            y=[STREAM_LABELS.get(s, s) for s in df["stream"]], x=df["duration_s"] * MS, base=df["start_s"] * MS,
            orientation="h", name=str(kind), customdata=custom, width=0.6,
            marker={"color": KIND_COLORS.get(str(kind)), "line": {"width": 0.5, "color": "white"}},
            hovertemplate=("<b>%{customdata[0]}</b><br>" + str(kind) + ", %{customdata[1]}<br>"
                           "start %{customdata[2]:.4g} ms, duration %{x:.4g} ms<extra></extra>"),
        ))
    _layout(fig, title, 320, legend_on_top=True)
    fig.update_layout(barmode="overlay", xaxis_title="time since the iteration's first forward (ms)",
                      bargap=0.2)
    fig.update_yaxes(type="category", categoryorder="array",
                     categoryarray=[STREAM_LABELS["comm"], STREAM_LABELS["compute"]])
    if iteration_time is not None:
        fig.add_vline(x=iteration_time * MS, line={"dash": "dash", "color": "black"},
                      annotation_text="iteration time", annotation_position="top")
    return fig


def breakdown_figure(parts: pd.DataFrame, title: str = "") -> go.Figure:
    """Stacked horizontal bars of the iteration-time parts, one bar per schedule.

    ``parts`` is the long table of :func:`app.data_iteration.breakdowns`.
    """
    fig = go.Figure()
    for part, df in parts.groupby("part", sort=False):
        fig.add_trace(go.Bar(
            y=df["schedule"], x=df["seconds"] * MS, name=str(part), orientation="h",
            marker={"color": PART_COLORS.get(str(part))}, customdata=df["share"] * 100,
            hovertemplate="%{y}: %{x:.4g} ms (%{customdata:.1f}%)<extra>" + str(part) + "</extra>",
        ))
    _layout(fig, title, 140 + 40 * max(1, parts["schedule"].nunique() if len(parts) else 1), legend_on_top=True)
    fig.update_layout(barmode="stack", xaxis_title="time per iteration (ms)")
    fig.update_yaxes(autorange="reversed")
    return fig
