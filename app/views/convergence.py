"""Convergence: bounds versus T for chosen algorithms and constants, with simulated runs overlaid."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

import convergence as cv
from app import exports, urlstate
from app.cli_commands import convergence_command
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
from app.urlstate import Param

DEFAULT = ["sgd", "local_sgd", "dpsgd", "topk", "arjevani"]
Constants = tuple[tuple[str, float], ...]  # hashable for st.cache_data
URL = {"conv_bounds": Param("list", options=cv.bounds), "conv_eps": Param("float", 1e-12, 1e6),
       "conv_T": Param("range", 0, 12), "conv_sim": Param("bool"),
       **{f"conv_{k}": Param("int" if c.integer else "float", c.low, c.high) for k, c in CONSTANTS.items()}}


@st.cache_data(show_spinner=False, max_entries=256)
def _curves(names: tuple[str, ...], constants: Constants, lo: int, hi: int) -> pd.DataFrame:
    return bound_curves(names, dict(constants), np.geomspace(10.0**lo, 10.0**hi, 24 * (hi - lo) + 1))


@st.cache_data(show_spinner=False, max_entries=256)
def _iterations(names: tuple[str, ...], constants: Constants, eps: float) -> pd.DataFrame:
    return iterations_table(names, dict(constants), eps)


@st.cache_data(show_spinner="Simulating...", max_entries=256)
def _simulated(name: str, constants: Constants) -> tuple[pd.DataFrame, pd.DataFrame]:
    return simulated_points([name], dict(constants))


@st.cache_resource(show_spinner=False, max_entries=64)
def _figure(names: tuple[str, ...], constants: Constants, lo: int, hi: int, eps: float, simulate: bool):
    """The bounds' figure with the simulated runs (built once per inputs, shared, never modified), and its data."""
    curves = _curves(names, constants, lo, hi)
    points = pd.DataFrame()
    if simulate:
        frames = [_simulated(name, _sim_constants(name, dict(constants)))[0] for name in names]
        points = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if not points.empty:
            points = points[(points["T"] >= 10.0**lo) & (points["T"] <= 10.0**hi)]
    fig = bound_figure(curves, points if simulate else None, eps, title=f"bounds versus iterations, eps = {eps:g}")
    data = pd.concat([curves.assign(source="bound"),
                      points.rename(columns={"metric": "value"}).assign(source="simulated") if len(points) else None])
    return fig, data


@st.cache_data(show_spinner=False, max_entries=64)
def _info(name: str) -> dict:
    return bound_info(name)


def _sim_constants(name: str, constants: dict[str, float]) -> Constants:
    """What a bound's simulation depends on: its own constants and the number of workers."""
    mine = constants_for(name, constants)
    if "n" in constants:
        mine["n"] = constants["n"]
    return tuple(sorted(mine.items()))


urlstate.restore(URL)
environment_picker()  # the shared sidebar (the bounds do not depend on the environment)
st.title("Convergence bounds")
st.caption("Upper bounds on the average squared gradient norm (and the other metrics named below) after T "
           "iterations, each at the step size that minimises it; the lower bound of Arjevani et al. dashed. "
           "Markers: simulated runs on a heterogeneous quadratic with the same constants.")
if (problem := urlstate.problems()):
    st.warning(problem)

c1, c2 = st.columns([3, 1])
names = c1.multiselect("bounds", cv.bounds(), default=DEFAULT, key="conv_bounds")
eps = float(c2.number_input("eps (target of the metric)", min_value=1e-12, max_value=1e6, value=1e-2,
                            format="%.3e", key="conv_eps"))
c3, c4 = st.columns([3, 1])
lo, hi = c3.select_slider("iterations T", options=list(range(0, 13)), value=(0, 6),
                          format_func=lambda e: f"10^{e}", key="conv_T")
simulate = c4.checkbox("overlay simulated runs", value=True, key="conv_sim")

if not names:
    urlstate.publish(["conv_bounds", "conv_eps", "conv_T", "conv_sim"])
    st.info("Choose at least one bound.")
    st.stop()
if hi <= lo:
    urlstate.publish(["conv_bounds", "conv_eps", "conv_T", "conv_sim"])
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
urlstate.publish(["conv_bounds", "conv_eps", "conv_T", "conv_sim", *[f"conv_{k}" for k in constants]])
problems = check_constants(names, constants)
for problem in problems:
    st.warning(problem)
if problems:
    st.stop()

key = tuple(sorted(constants.items()))
try:
    curves = _curves(tuple(names), key, lo, hi)
except cv.CommscopeError as e:
    st.warning(f"These constants do not fit the chosen bounds: {e}")
    st.stop()
missing = [n for n in names if n not in set(curves["bound"])]
if missing:
    st.warning(f"Nothing to draw for {', '.join(missing)} in this range of T with these constants"
               + (" (the lower bound holds only below L Delta / 14592)." if "arjevani" in missing else "."))

fig, data = _figure(tuple(names), key, lo, hi, eps, simulate)  # drawn before the iterations to eps are counted
st.plotly_chart(fig, width="stretch", key="conv_chart")
if "arjevani" in names:
    st.caption(f"arjevani: {LOWER_BOUND_NOTE}, where it holds (eps <= L Delta / 14592).")
try:
    table = _iterations(tuple(names), key, eps)
except cv.CommscopeError as e:
    st.warning(f"These constants do not fit the chosen bounds: {e}")
    st.stop()

meta = {"what": "convergence bounds versus iterations (commscope app, Convergence)", "eps": f"{eps:g}",
        "constants": ", ".join(f"{k} = {v:g}" for k, v in constants.items())}
d1, d2, d3 = st.columns(3)
d1.download_button("figure data (CSV)", partial(exports.csv_with_header, data, meta),
                   file_name=exports.file_name("convergence_bounds", "csv", None, None, f"eps{eps:g}"),
                   mime="text/csv", key="conv_dl_csv", on_click="ignore")
d2.download_button("figure (HTML, works offline)", partial(exports.offline_html, fig),
                   file_name=exports.file_name("convergence_bounds", "html", None, None, f"eps{eps:g}"),
                   mime="text/html", key="conv_dl_html", on_click="ignore")
d3.download_button("iterations to eps (CSV)", partial(exports.csv_with_header, table, meta),
                   file_name=exports.file_name("convergence_iterations", "csv", None, None, f"eps{eps:g}"),
                   mime="text/csv", key="conv_dl_iterations", on_click="ignore")
with st.expander("equivalent CLI command (copy with the icon at its right)"):
    st.code(convergence_command(names, eps, constants), language="bash", wrap_lines=True)

st.subheader(f"Iterations to eps = {eps:g}")
st.dataframe(table, hide_index=True, width="stretch", column_config={
    "iterations": st.column_config.NumberColumn(format="%.6g"),
    "stochastic gradients": st.column_config.NumberColumn(format="%.4g"),
    "step at that T": st.column_config.NumberColumn(format="%.4g"),
})

if simulate:
    st.subheader("Simulated runs")
    sims = pd.concat([_simulated(name, _sim_constants(name, constants))[1] for name in names], ignore_index=True)
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
