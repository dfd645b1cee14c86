"""Convergence: bounds versus T for chosen algorithms and constants, with simulated runs overlaid."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

import convergence as cv
from app.data_convergence import (
    CONSTANTS,
    LOWER_BOUND_NOTE,
    SIM_D,
    SIM_HORIZONS,
    bound_curves,
    bound_info,
    check_constants,
    constants_for,
    constants_needed,
    iterations_table,
    simulated_points,
)
from app.figures_convergence import bound_figure
from app.sidebar import environment_picker

DEFAULT = ["sgd", "local_sgd", "dpsgd", "topk", "arjevani"]
Constants = tuple[tuple[str, float], ...]  # hashable for st.cache_data


@st.cache_data(show_spinner=False, max_entries=256)
def _curves(names: tuple[str, ...], constants: Constants, lo: int, hi: int) -> pd.DataFrame:
    return bound_curves(names, dict(constants), np.geomspace(10.0**lo, 10.0**hi, 24 * (hi - lo) + 1))


@st.cache_data(show_spinner=False, max_entries=256)
def _iterations(names: tuple[str, ...], constants: Constants, eps: float) -> pd.DataFrame:
    return iterations_table(names, dict(constants), eps)


@st.cache_data(show_spinner="Simulating...", max_entries=256)
def _simulated(name: str, constants: Constants) -> tuple[pd.DataFrame, pd.DataFrame]:
    return simulated_points([name], dict(constants))


@st.cache_data(show_spinner=False, max_entries=64)
def _info(name: str) -> dict:
    return bound_info(name)


def _sim_constants(name: str, constants: dict[str, float]) -> Constants:
    """What a bound's simulation depends on: its own constants and the number of workers."""
    mine = constants_for(name, constants)
    if "n" in constants:
        mine["n"] = constants["n"]
    return tuple(sorted(mine.items()))


environment_picker()  # the shared sidebar (the bounds do not depend on the environment)
st.title("Convergence bounds")
st.caption("Upper bounds on the average squared gradient norm (and the other metrics named below) after T "
           "iterations, each at the step size that minimises it; the lower bound of Arjevani et al. dashed. "
           "Markers: simulated runs on a heterogeneous quadratic with the same constants.")

c1, c2 = st.columns([3, 1])
names = c1.multiselect("bounds", cv.bounds(), default=DEFAULT, key="conv_bounds")
eps = float(c2.number_input("eps (target of the metric)", min_value=1e-12, max_value=1e6, value=1e-2,
                            format="%.3e", key="conv_eps"))
c3, c4 = st.columns([3, 1])
lo, hi = c3.select_slider("iterations T", options=list(range(0, 13)), value=(0, 6),
                          format_func=lambda e: f"10^{e}", key="conv_T")
simulate = c4.checkbox("overlay simulated runs", value=True, key="conv_sim")

if not names:
    st.info("Choose at least one bound.")
    st.stop()
if hi <= lo:
    st.warning("The range of T is empty: move the right handle past the left one.")
    st.stop()

st.subheader("Constants")
constants: dict[str, float] = {}
cols = st.columns(4)
for i, k in enumerate(constants_needed(names)):
    spec = CONSTANTS[k]
    col = cols[i % 4]
    if spec.integer:
        constants[k] = float(col.number_input(spec.label, int(spec.low), int(spec.high), int(spec.default), step=1,
                                              help=spec.help, key=f"conv_{k}"))
    else:
        constants[k] = float(col.number_input(spec.label, float(spec.low), float(spec.high), float(spec.default),
                                              step=spec.step, format="%.4g", help=spec.help, key=f"conv_{k}"))
problems = check_constants(names, constants)
for problem in problems:
    st.warning(problem)
if problems:
    st.stop()

key = tuple(sorted(constants.items()))
try:
    curves = _curves(tuple(names), key, lo, hi)
    table = _iterations(tuple(names), key, eps)
except cv.CommscopeError as e:
    st.warning(f"These constants do not fit the chosen bounds: {e}")
    st.stop()
missing = [n for n in names if n not in set(curves["bound"])]
if missing:
    st.warning(f"Nothing to draw for {', '.join(missing)} in this range of T with these constants"
               + (" (the lower bound holds only below L Delta / 14592)." if "arjevani" in missing else "."))

points, summaries = pd.DataFrame(), []
if simulate:
    frames = []
    for name in names:
        pts, summary = _simulated(name, _sim_constants(name, constants))
        frames.append(pts)
        summaries.append(summary)
    points = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not points.empty:
        points = points[(points["T"] >= 10.0**lo) & (points["T"] <= 10.0**hi)]

fig = bound_figure(curves, points if simulate else None, eps, title=f"bounds versus iterations, eps = {eps:g}")
st.plotly_chart(fig, width="stretch", key="conv_chart")
if "arjevani" in names:
    st.caption(f"arjevani: {LOWER_BOUND_NOTE}, where it holds (eps <= L Delta / 14592).")

data = pd.concat([curves.assign(source="bound"),
                  points.rename(columns={"metric": "value"}).assign(source="simulated") if len(points) else None])
d1, d2, d3 = st.columns(3)
d1.download_button("figure data (CSV)", partial(data.to_csv, index=False), file_name="convergence_bounds.csv",
                   mime="text/csv", key="conv_dl_csv")
d2.download_button("figure (HTML)", partial(fig.to_html, include_plotlyjs="cdn"), file_name="convergence_bounds.html",
                   mime="text/html", key="conv_dl_html")
d3.download_button("iterations to eps (CSV)", partial(table.to_csv, index=False),
                   file_name="convergence_iterations.csv",
                   mime="text/csv", key="conv_dl_iterations")

st.subheader(f"Iterations to eps = {eps:g}")
st.dataframe(table, hide_index=True, width="stretch", column_config={
    "iterations": st.column_config.NumberColumn(format="%.6g"),
    "stochastic gradients": st.column_config.NumberColumn(format="%.4g"),
    "step at that T": st.column_config.NumberColumn(format="%.4g"),
})

if simulate:
    st.subheader("Simulated runs")
    sims = pd.concat(summaries, ignore_index=True)
    st.dataframe(sims, hide_index=True, width="stretch",
                 column_config={"min tightness": st.column_config.NumberColumn(format="%.3g")})
    st.caption(f"Each run: n workers on a {SIM_D}-coordinate quadratic with exactly these L, sigma, zeta, mu and "
               f"Delta (or D0), horizons T = {', '.join(map(str, SIM_HORIZONS))}, each with the step its bound uses. "
               "gap, delta and omega take the nearest value such a problem allows (a topology, k of d coordinates, "
               "QSGD levels, a rank): 'differs' lists those. Tightness = bound / simulated (>= 1 when it holds).")

st.subheader("The bounds")
for name in names:
    info = _info(name)
    st.markdown(f"**{name}** ({info['setting']}, {info['kind']} bound on `{info['metric']}`): {info['description']}.")
    st.latex(info["latex"])
    with st.expander(f"{name}: assumptions, source and derivation"):
        st.markdown("**Assumptions**\n\n" + "\n".join(f"- {a}" for a in info["assumptions"]))
        st.markdown(f"**Source**: {info['source']}")
        st.markdown(f"**Derivation**: {info['derivation']}")
