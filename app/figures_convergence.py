"""Figure builders of the Convergence and Time-to-accuracy pages: tables in, plotly figures out (no Streamlit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.data_tta import format_bandwidth
from app.palette import color as technique_color

LOWER = "#555555"
NONE_COLOR = "#d9d9d9"


def _layout(fig: go.Figure, title: str, height: int = 480) -> go.Figure:
    fig.update_layout(title=title, legend={"orientation": "h", "y": -0.2}, margin={"t": 40 if title else 10},
                      height=height)
    return fig


def bound_figure(curves: pd.DataFrame, sims: pd.DataFrame | None = None, eps: float | None = None,
                 title: str = "") -> go.Figure:
    """Bounds B(T) versus T on log-log axes, one line per bound (lower bounds dashed gray), simulated
    runs as markers with error bars in their bound's colour, and eps as a dotted line.

    ``curves``: :func:`app.data_convergence.bound_curves`; ``sims``: the points of
    :func:`app.data_convergence.simulated_points`.
    """
    fig = go.Figure()
    colors: dict[str, str] = {}
    for name, df in curves.groupby("bound", sort=False):
        lower = (df["kind"] == "lower").all()
        color = LOWER if lower else technique_color(str(name))
        colors[str(name)] = color
        fig.add_trace(go.Scatter(
            x=df["T"], y=df["value"], name=str(name), mode="lines", legendgroup=str(name),
            line={"color": color, "dash": "dash" if lower else "solid"},
            hovertemplate="T = %{x:.4g}: %{y:.4g}<extra>" + str(name) + "</extra>",
        ))
    if sims is not None and not sims.empty:
        for name, df in sims.groupby("bound", sort=False):
            color = colors.setdefault(str(name), technique_color(str(name)))
            differs = str(df["differs"].iloc[0]) if "differs" in df else ""
            note = f"<br>simulated at {differs}" if differs else ""
            fig.add_trace(go.Scatter(
                x=df["T"], y=df["metric"], name=f"{name} (simulated)", mode="markers", legendgroup=str(name),
                marker={"color": color, "size": 9, "symbol": "circle-open", "line": {"width": 2}},
                error_y={"type": "data", "array": df["spread"], "visible": True, "thickness": 1},
                hovertemplate="T = %{x}: %{y:.4g}" + note + "<extra>" + str(name) + " simulated</extra>",
            ))
    if eps is not None and not curves.empty:
        lo, hi = float(curves["T"].min()), float(curves["T"].max())
        fig.add_trace(go.Scatter(x=[lo, hi], y=[eps, eps], name="eps", mode="lines",
                                 line={"color": "black", "dash": "dot", "width": 1},
                                 hovertemplate="eps = %{y:.4g}<extra></extra>"))
    _layout(fig, title)
    fig.update_layout(xaxis_title="iterations T", yaxis_title="bound on the metric (see each bound)")
    fig.update_xaxes(type="log", exponentformat="power")
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


BAR_AXES = {  # what the bars show -> (column, axis title with its unit)
    "ratio_to_sgd": ("ratio_to_sgd", "time to eps / SGD's time to eps (ratio, log scale; < 1: faster than SGD)"),
    "seconds": ("seconds", "time to eps (s, log scale) = bound's iterations x predicted s / iteration"),
}


def tta_bar_figure(table: pd.DataFrame, title: str = "", metric: str = "seconds") -> go.Figure:
    """Horizontal bars of each technique's time to eps (log axis), fastest on top: over SGD's (``metric =
    "ratio_to_sgd"``, with a line at 1) or in seconds (``"seconds"``); the winner in colour, techniques not
    ranked (another metric) gray; those without a finite value are left out. The y axis names each technique
    with the schedule priced.

    ``table``: :func:`app.data_tta.tta_table`.
    """
    column, axis = BAR_AXES[metric]
    df = table[np.isfinite(table[column].astype(float))]
    colors, opacity = [], []
    for _, row in df.iterrows():  # each technique in its colour (app.palette), the winner opaque
        ranked = not (row["note"] and "not ranked" in str(row["note"]))
        colors.append(technique_color(str(row["technique"])) if ranked else NONE_COLOR)
        opacity.append(1.0 if bool(row["winner"]) else 0.6)
    text = df["time"] if metric == "seconds" else [f"{x:.3g}x ({t})" for x, t in zip(df[column], df["time"],
                                                                                     strict=True)]
    schedule = df["schedule"] if "schedule" in df else [""] * len(df)
    custom = np.array(list(zip(df["iterations"], df["seconds_per_iteration"], schedule, strict=True)),
                      dtype=object).reshape(-1, 3)
    fig = go.Figure(go.Bar(
        x=df[column], y=df["technique"], orientation="h", marker={"color": colors, "opacity": opacity}, text=text,
        textposition="auto", customdata=custom,
        hovertemplate="%{y}: %{text}<br>%{customdata[0]:.4g} iterations x %{customdata[1]:.4g} s"
                      "<br>priced as %{customdata[2]}<extra></extra>",
        name=axis,
    ))
    _layout(fig, title, height=max(260, 40 * len(df) + 120))
    fig.update_layout(xaxis_title=axis, yaxis_title="technique", showlegend=False)
    fig.update_xaxes(type="log", exponentformat="power")
    if len(df):  # bars start a decade below the smallest, so that their lengths compare
        vals = df[column].astype(float)
        lo = min(vals.min(), 1.0) if metric != "seconds" else vals.min()
        fig.update_xaxes(range=[np.log10(lo) - 1, np.log10(max(vals.max(), lo)) + 0.15])
    if metric != "seconds":
        fig.add_vline(x=1.0, line={"color": "black", "dash": "dot", "width": 1})
    fig.update_yaxes(autorange="reversed")
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around sorted positive centres, geometric midpoints (for heatmaps on log axes)."""
    v = np.asarray(values, dtype=float)
    if len(v) == 1:
        return np.array([v[0] / np.sqrt(2), v[0] * np.sqrt(2)])
    mid = np.sqrt(v[1:] * v[:-1])
    return np.concatenate([[v[0] ** 2 / mid[0]], mid, [v[-1] ** 2 / mid[-1]]])


def winner_map_figure(table: pd.DataFrame, here: tuple[float, int] | None = None, title: str = "") -> go.Figure:
    """Heatmap of the technique whose bound reaches eps first, over bandwidth (log x) and p (log y).

    ``table``: :func:`app.data_tta.winner_table`; ``here``: (bandwidth, p) of the chosen
    environment, marked with a cross when inside the map. Each colour is one technique (legend on the
    colour bar); gray: no bound reaches eps.
    """
    bws = np.sort(table["bandwidth_Bps"].unique())
    ps = np.sort(table["p"].unique())
    cells = table.drop_duplicates(["bandwidth_Bps", "p"]).set_index(["p", "bandwidth_Bps"])
    winners = cells["winner"].unstack("bandwidth_Bps").reindex(index=ps, columns=bws)
    techniques = list(dict.fromkeys(table["technique"]))
    present = [t for t in techniques if (winners == t).to_numpy().any()]
    if (winners == "-").to_numpy().any():
        present.append("-")
    code = {t: i for i, t in enumerate(present)}
    z = winners.apply(lambda col: col.map(code)).to_numpy(dtype=float)
    k = max(len(present), 1)
    scale = []
    for i, t in enumerate(present):
        color = NONE_COLOR if t == "-" else technique_color(t)
        scale += [[i / k, color], [(i + 1) / k, color]]
    best = table[table["technique"] == table["winner"]].set_index(["p", "bandwidth_Bps"])["seconds"]
    secs = best.unstack("bandwidth_Bps").reindex(index=ps, columns=bws).to_numpy(dtype=float)
    names = winners.fillna("-").to_numpy(dtype=object)
    custom = np.dstack([names, np.where(np.isfinite(secs), secs, np.nan)])
    fig = go.Figure(go.Heatmap(
        x=_edges(bws), y=_edges(ps), z=z, zmin=-0.5, zmax=k - 0.5,
        colorscale=scale or [[0, NONE_COLOR], [1, NONE_COLOR]],
        customdata=custom, xgap=0, ygap=0, name="winner",
        colorbar={"tickvals": list(range(k)), "ticktext": present, "title": {"text": "fastest"}},
        hovertemplate="%{customdata[0]} (%{customdata[1]:.4g} s)<extra></extra>",
    ))
    if here is not None and bws[0] <= here[0] <= bws[-1] and ps[0] <= here[1] <= ps[-1]:
        fig.add_trace(go.Scatter(x=[here[0]], y=[here[1]], mode="markers", name="this environment",
                                 marker={"symbol": "x", "size": 12, "color": "black"},
                                 hovertemplate=f"{format_bandwidth(here[0])}, p = {here[1]}<extra>this environment"
                                               "</extra>"))
    _layout(fig, title, height=520)
    fig.update_layout(xaxis_title="inter-node bandwidth (bytes/s)", yaxis_title="p (workers)", showlegend=False)
    fig.update_xaxes(type="log", exponentformat="SI")
    fig.update_yaxes(type="log", tickvals=list(ps), ticktext=[str(int(p)) for p in ps])
    return fig
