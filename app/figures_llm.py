"""Figures of the Large models page (pure plotly, from the tables of :mod:`app.data_llm`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

KIND_COLORS = {"forward": "#4c78a8", "backward": "#f58518", "weight-gradient": "#54a24b"}
PART_COLORS = {"weights": "#4c78a8", "gradients": "#72b7b2", "optimizer": "#f58518", "activations": "#e45756"}
LAYER_COLORS = {"compute": "#4c78a8", "strategy": "#f58518", "library": "#b279a2", "network": "#e45756"}


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def communication_figure(groups: pd.DataFrame, title: str = "") -> go.Figure:
    """Per group: each collective's busy time per iteration (stacked) beside the group's exposed time."""
    fig = go.Figure()
    for name, df in groups.groupby("collective", sort=False):
        custom = np.column_stack([df["size"], df["calls"], df["per"], df["algorithm"], df["time_s"] * 1e3])
        fig.add_trace(go.Bar(
            x=df["group"], y=df["busy_s"], name=f"{name} (busy)", customdata=custom, offsetgroup="busy",
            hovertemplate=("<b>%{x} " + str(name) + "</b><br>%{customdata[0]} x %{customdata[1]} per "
                           "%{customdata[2]}<br>%{customdata[3]}, %{customdata[4]:.3g} ms per call<br>"
                           "busy %{y:.3g} s per iteration<extra></extra>")))
    exposed = groups.drop_duplicates("group")
    fig.add_trace(go.Bar(x=exposed["group"], y=exposed["exposed_s"], name="exposed (critical path)",
                         offsetgroup="exposed", marker={"color": "black", "opacity": 0.6},
                         hovertemplate="<b>%{x}</b>: %{y:.3g} s exposed per iteration<extra></extra>"))
    _layout(fig, title, 360)
    fig.update_layout(barmode="relative", yaxis_title="seconds per iteration", xaxis_title="group")
    return fig


def pipeline_figure(events: pd.DataFrame, title: str = "") -> go.Figure:
    """The pipeline as a Gantt chart: one row per stage, one bar per forward / backward / weight-gradient pass."""
    fig = go.Figure()
    for kind, df in events.groupby("kind", sort=False):
        fig.add_trace(go.Bar(
            y=df["stream"], x=df["duration_s"], base=df["start_s"], orientation="h", name=str(kind),
            customdata=df["name"], width=0.7, marker={"color": KIND_COLORS.get(str(kind))},
            hovertemplate=("<b>%{y}</b> " + str(kind) + " %{customdata}<br>start %{base:.4g} s, "
                           "%{x:.3g} s<extra></extra>")))
    stages = list(dict.fromkeys(events["stream"]))
    _layout(fig, title, max(260, 40 + 22 * len(stages)))
    fig.update_layout(barmode="overlay", xaxis_title="seconds since the iteration's first forward")
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=stages[::-1])
    return fig


def memory_figure(memory: pd.DataFrame, title: str = "") -> go.Figure:
    """GiB per GPU of each plan, stacked (weights, gradients, optimizer, activations), with the device's memory
    as a line and plans that do not fit marked OOM."""
    fig = go.Figure()
    for part, df in memory.groupby("part", sort=False):
        fig.add_trace(go.Bar(x=df["plan"], y=df["gib"], name=str(part), marker={"color": PART_COLORS.get(str(part))},
                             hovertemplate="%{x}<br>" + str(part) + " %{y:.1f} GiB<extra></extra>"))
    if not memory.empty:
        fig.add_hline(y=float(memory["device_gib"].iloc[0]), line={"dash": "dash", "color": "black"},
                      annotation_text="device memory", annotation_position="top left")
        totals = memory.drop_duplicates("plan")
        for _, row in totals[totals["oom"]].iterrows():
            fig.add_annotation(x=row["plan"], y=row["total_gib"], text="OOM", showarrow=False, yshift=10,
                               font={"color": "red"})
    _layout(fig, title, 380)
    fig.update_layout(barmode="stack", yaxis_title="GiB per GPU")
    fig.update_xaxes(tickangle=-20)
    return fig


def attribution_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """Seconds per iteration attributed to each layer (compute, strategy, library, network)."""
    fig = go.Figure(go.Bar(
        x=table["seconds"], y=table["layer"], orientation="h", customdata=table["share"] * 100,
        marker={"color": [LAYER_COLORS.get(x) for x in table["layer"]]}, text=[f"{s:.1%}" for s in table["share"]],
        hovertemplate="%{y}: %{x:.3g} s (%{customdata:.1f}% of the iteration)<extra></extra>"))
    _layout(fig, title, 260)
    fig.update_layout(xaxis_title="seconds per iteration", showlegend=False)
    fig.update_yaxes(categoryorder="array", categoryarray=list(table["layer"])[::-1])
    return fig


def published_figure(table: pd.DataFrame, title: str = "") -> go.Figure:
    """Predicted against published TFLOP/s per GPU, one point per row, with the line y = x."""
    lo = float(min(table["published_tflops"].min(), table["predicted_tflops"].min())) * 0.9
    hi = float(max(table["published_tflops"].max(), table["predicted_tflops"].max())) * 1.1
    fig = go.Figure([
        go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = published",
                   line={"dash": "dash", "color": "grey"}),
        go.Scatter(x=table["published_tflops"], y=table["predicted_tflops"], mode="markers+text",
                   text=table["model"], textposition="top center", name="Narayanan et al. 2021 Table 1",
                   customdata=np.column_stack([table["gpus"], table["error"] * 100]),
                   hovertemplate=("%{text} on %{customdata[0]} GPUs<br>published %{x:.0f}, predicted %{y:.0f} "
                                  "TFLOP/s per GPU (%{customdata[1]:+.1f}%)<extra></extra>")),
    ])
    _layout(fig, title, 420)
    fig.update_layout(xaxis_title="published TFLOP/s per GPU", yaxis_title="predicted TFLOP/s per GPU")
    return fig
