"""Time to accuracy: each technique's time to eps over SGD's (or in seconds), the schedule that prices it, unit or
measured constants (a shipped convergence run or an uploaded "constants" file), and who wins over bandwidth x p."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import costmodels as cm
from app import exports, guards, urlstate
from app.cli_commands import needs_env_file, tta_command
from app.data_tta import (
    SHIPPED_DIR,
    TECHNIQUES,
    UNITS,
    format_bandwidth,
    ranking_sentence,
    ranking_table,
    shipped_constants,
    technique_parameter,
    technique_spec,
    tta_sentence,
    tta_table,
    winner_table,
)
from app.figures_convergence import tta_bar_figure, winner_map_figure
from app.sidebar import environment_picker
from app.uploads import results_uploader
from app.urlstate import Param
from convergence.topology import TOPOLOGIES
from convergence.tta import DEFAULT_CONSTANTS

DEFAULT = ["sgd", "local_sgd", "async_sgd", "ssp", "dpsgd", "qsgd", "topk", "powersgd"]
P_OPTIONS = [2**k for k in range(1, 12)]
BW_OPTIONS = [round(6 + k / 4, 2) for k in range(4 * 7 + 1)]  # log10 bytes/s: 1 MB/s .. 10 TB/s
PROBLEM = {  # the problem constants time to accuracy takes (n, tau, H, s, gap, delta, omega: the techniques')
    "L": ("L (smoothness)", 1e-6, 1e6, 0.1),
    "sigma": ("sigma (gradient noise)", 1e-9, 1e6, 0.1),
    "Delta": ("Delta = f(x0) - f*", 1e-9, 1e9, 0.1),
    "zeta": ("zeta (heterogeneity)", 0.0, 1e6, 0.1),
}
Items = tuple[tuple[str, float], ...]
UNIT, MEASURED = "unit (L = sigma = Delta = 1)", "measured (shipped run or upload)"
SHOW = {"time / SGD's (ratio)": "ratio_to_sgd", "time to eps (seconds)": "seconds"}
URL = {
    "tta_model": Param("str", options=cm.profiles),
    "tta_eps": Param("float", 1e-12, 1e6),
    "tta_p": Param("int", 1, 4096),
    "tta_techniques": Param("list", options=TECHNIQUES),
    "tta_p_range": Param("range", options=P_OPTIONS),
    "tta_bw_range": Param("frange", options=BW_OPTIONS),
    "tta_show": Param("str", options=tuple(SHOW)),
    "tta_constants": Param("str", options=(UNIT, MEASURED)),
    **{f"tta_{k}": Param("float", low, high) for k, (_, low, high, _) in PROBLEM.items()},
}


@st.cache_data(show_spinner=False, max_entries=256)
def _table(model: str, env_json: str, p: int, eps: float, specs: tuple[str, ...], constants: Items,
           source: str, _records: list[dict[str, Any]] | None) -> pd.DataFrame:
    """``source`` names the records (the cache key: the shipped files or the upload's digest)."""
    return tta_table(model, cm.Environment.from_json(env_json), p, eps, specs, dict(constants), _records)


@st.cache_data(show_spinner="Computing the winner map...", max_entries=64)
def _map(model: str, env_json: str, bw: tuple[float, float], pr: tuple[int, int], eps: float,
         specs: tuple[str, ...], constants: Items, source: str, _records: list[dict[str, Any]] | None
         ) -> pd.DataFrame:
    bandwidths = np.geomspace(10.0 ** bw[0], 10.0 ** bw[1], round(8 * (bw[1] - bw[0])) + 1)
    ps = [q for q in P_OPTIONS if pr[0] <= q <= pr[1]]
    return winner_table(model, cm.Environment.from_json(env_json), bandwidths, ps, eps, specs, dict(constants),
                        _records)


@st.cache_resource(show_spinner=False, max_entries=64)
def _bar(model: str, env_json: str, p: int, eps: float, specs: tuple[str, ...], constants: Items, source: str,
         show: str, title: str, _table: pd.DataFrame):
    """The bar chart of the table (built once per inputs, shared, never modified)."""
    return tta_bar_figure(_table, title=title, metric=show)


@st.cache_resource(show_spinner=False, max_entries=32)
def _heat(model: str, env_json: str, bw: tuple[float, float], pr: tuple[int, int], eps: float, specs: tuple[str, ...],
          constants: Items, source: str, p: int, _grid: pd.DataFrame):
    """The winner map's figure (built once per inputs, shared, never modified)."""
    env = cm.Environment.from_json(env_json)
    return winner_map_figure(_grid, here=(env.bandwidth, p), title=f"fastest to eps = {eps:g}: {model}")


@st.cache_data(show_spinner=False)
def _shipped(directory: str) -> tuple[list[dict[str, Any]], list[str]]:
    return shipped_constants(directory)


def _measured_records() -> tuple[str, list[dict[str, Any]] | None]:
    """The measured "constants" records chosen (shipped or uploaded) and a cache key naming them; (why not, None)
    when there are none yet."""
    shipped, files = _shipped(str(SHIPPED_DIR))
    use_shipped = st.checkbox(
        f"use the shipped run ({', '.join(files)})" if files else
        "use the shipped run: none ships yet (runners/reference/convergence/*.jsonl holds no 'constants' records)",
        value=bool(files), disabled=not files, key="tta_shipped")
    if use_shipped and files:
        return "shipped:" + ",".join(files), shipped
    up = results_uploader("tta_upload", "constants records (JSON lines of kind 'constants', commscope constants)")
    records = [] if up is None else up.of_kind("constants")
    if up is not None and not records:
        st.warning("The uploaded files hold no records of kind 'constants' (commscope constants writes them).")
    return ("upload:" + up.digest, records) if up is not None and records else ("none", None)


def _parameter_widget(name: str, parameter: str, default: Any) -> Any:
    label, key = f"{name}: {parameter}", f"tta_param_{name}"
    if parameter == "topology":
        names = TOPOLOGIES.names()
        return st.selectbox(label, names, index=names.index(default), key=key)
    if parameter == "density":
        return st.number_input(label, 1e-6, 1.0, float(default), step=0.001, format="%.4g", key=key)
    bounds = {"H": (1, 4096), "s": (0, 64), "bits": (2, 16), "rank": (1, 1024)}.get(parameter, (1, 4096))
    return st.number_input(label, bounds[0], bounds[1], int(default), step=1, key=key)


urlstate.restore(URL)
env = environment_picker()
st.title("Time to accuracy")
st.caption(f"Environment **{env.name}**: {env.summary()}. Seconds to eps = the iterations a technique's convergence "
           "bound needs x the cost model's time of one of its iterations. Bounds are worst-case guarantees: the "
           "winner is the technique whose guarantee is met first.")
if (problem := urlstate.problems()):
    st.warning(problem)

c1, c2, c3 = st.columns(3)
profiles = cm.profiles()
model = c1.selectbox("model", profiles, index=profiles.index("resnet50"), key="tta_model")
eps = float(c2.number_input("eps (average squared gradient norm)", min_value=1e-12, max_value=1e6, value=1e-3,
                            format="%.3e", key="tta_eps"))
p = int(c3.number_input("p (workers) of the table", min_value=1, max_value=4096, value=32, step=1, key="tta_p"))
techniques = st.multiselect("techniques", list(TECHNIQUES), default=DEFAULT, key="tta_techniques")

c6, c7 = st.columns(2)
show = SHOW[c6.radio("show", list(SHOW), horizontal=True, key="tta_show")]
mode = c7.radio("constants", [UNIT, MEASURED], horizontal=True, key="tta_constants")
source, records = "unit", None
if mode == MEASURED:
    source, records = _measured_records()
    if records is None:
        st.info("No measured constants yet: upload a 'constants' JSON lines file (commscope constants --out FILE). "
                "Unit constants are used meanwhile.")

specs: list[str] = []
constants: dict[str, float] = {}
with st.expander("technique parameters and problem constants"):
    cols = st.columns(4)
    i = 0
    for name in techniques:
        parameter, default = technique_parameter(name)
        if parameter is None:
            specs.append(technique_spec(name))
            continue
        with cols[i % 4]:
            specs.append(technique_spec(name, _parameter_widget(name, parameter, default)))
        i += 1
    st.caption("Problem constants (n, tau, H, s, gap, delta and omega follow from p and each technique). With "
               "measured constants, a value changed here overrides the measured one.")
    cols = st.columns(4)
    for j, (k, (label, low, high, step)) in enumerate(PROBLEM.items()):
        v = float(cols[j].number_input(label, low, high, DEFAULT_CONSTANTS[k], step=step, format="%.4g",
                                       key=f"tta_{k}"))
        if v != DEFAULT_CONSTANTS[k]:
            constants[k] = v
urlstate.publish(["tta_model", "tta_eps", "tta_p", "tta_techniques", "tta_p_range", "tta_bw_range", "tta_show",
                  "tta_constants", *[f"tta_{k}" for k in constants]])

if not techniques:
    st.info("Choose at least one technique.")
    st.stop()

items = tuple(sorted(constants.items()))
env_json = env.to_json()
st.subheader(f"Time to eps = {eps:g} with p = {p}")
try:
    table = _table(model, env_json, p, eps, tuple(specs), items, source, records)
except cm.CommscopeError as e:
    st.warning(f"Cannot compute the time to accuracy: {e}")
    st.stop()
if show == "ratio_to_sgd" and not np.isfinite(table["ratio_to_sgd"].astype(float)).any():
    st.info("The ratio to SGD needs sgd among the techniques: showing seconds.")
    show = "seconds"
bar = _bar(model, env_json, p, eps, tuple(specs), items, source, show, f"{model} on {env.name}, p = {p}", table)
st.plotly_chart(bar, width="stretch", key="tta_bar")
st.markdown(tta_sentence(table, model, env.name, p, eps))
st.markdown(ranking_sentence(table))
guards.show(env, p=[p])
used = ", ".join(f"{k} = {v:.4g}" for k, v in table.attrs["constants"].items())
st.caption(f"Constants: {used}; {table.attrs['source']}.")
never = table.loc[~np.isfinite(table["seconds"].astype(float)), "technique"].tolist()
if never:
    st.info(f"Never reach eps = {eps:g} (their bound stays above it): {', '.join(never)}.")
st.markdown(f"**Ranking at p = {p}**")
st.dataframe(ranking_table(table), hide_index=True, width="stretch", key="tta_ranking", column_config={
    "rank": st.column_config.NumberColumn("rank", format="%d"),
    "time": st.column_config.TextColumn("time to eps"),
    "seconds": st.column_config.NumberColumn("time to eps (s)", format="%.4g"),
    "behind_best_pct": st.column_config.NumberColumn("behind the best (%)", format="+%.1f"),
    "speedup_over_sgd": st.column_config.NumberColumn("speedup over sgd (x)", format="%.3g")})
order = ["technique", "schedule", "ratio_to_sgd", "time", "seconds", "iterations", "seconds_per_iteration",
         "ratio_to_best", "bound", "note"]
if show == "seconds":
    order = ["technique", "schedule", "time", "seconds", "ratio_to_sgd", *order[5:]]
text = {k: st.column_config.TextColumn(UNITS[k][0], help=UNITS[k][1]) for k in ("technique", "schedule", "bound",
                                                                                 "time")}
numbers = {k: st.column_config.NumberColumn(UNITS[k][0], help=UNITS[k][1], format=f)
           for k, f in (("iterations", "%.4g"), ("seconds_per_iteration", "%.4g"), ("seconds", "%.4g"),
                        ("ratio_to_sgd", "%.3gx"), ("ratio_to_best", "%.3gx"))}
with st.expander("every technique: iterations, seconds per iteration, bound"):
    st.dataframe(table, hide_index=True, width="stretch", column_order=order, column_config={**text, **numbers},
                 key="tta_table")
meta = {"what": f"time to eps = {eps:g} per technique (commscope app, Time to accuracy)", "model": model,
        "environment": f"{env.name}: {env.summary()}", "p": p, "constants": f"{used}; {table.attrs['source']}"}
d1, d2 = st.columns(2)
d1.download_button("table (CSV)", partial(exports.csv_with_header, table, meta),
                   file_name=exports.file_name(f"tta_{model}", "csv", env.name, p), mime="text/csv",
                   key="tta_dl_table_csv", on_click="ignore")
d2.download_button("bar chart (HTML, works offline)", partial(exports.offline_html, bar),
                   file_name=exports.file_name(f"tta_{model}", "html", env.name, p), mime="text/html",
                   key="tta_dl_table_html", on_click="ignore")
shipped_files = _shipped(str(SHIPPED_DIR))[1] if source.startswith("shipped") else []
command = tta_command(env, model, p, eps, specs, constants,
                     str((SHIPPED_DIR / shipped_files[0]).relative_to(SHIPPED_DIR.parents[2])) if shipped_files else
                     ("constants.jsonl" if source.startswith("upload") else None))
with st.expander("equivalent CLI command (copy with the icon at its right)"):
    st.code(command, language="bash", wrap_lines=True)
    if needs_env_file(command):
        st.download_button("env.json", env_json, file_name="env.json", mime="application/json", key="tta_dl_env",
                           on_click="ignore")


@st.fragment
def winner_map(model: str, env_json: str, p: int, eps: float, specs: tuple[str, ...], items: tuple, source: str,
               records: list | None) -> None:
    """Who wins over bandwidth x p: a fragment, so that its ranges rerun only the map."""
    env = cm.Environment.from_json(env_json)
    st.subheader("Which technique wins")
    st.caption(f"Over the inter-node bandwidth and p, at the environment's latency alpha = {env.alpha * 1e6:.3g} us "
               "(intra-node links, compute and the problem constants unchanged). The cross marks this environment.")
    c4, c5 = st.columns(2)
    plo, phi = c4.select_slider("p range of the map", options=P_OPTIONS, value=(2, 256), key="tta_p_range")
    blo, bhi = c5.select_slider("bandwidth range of the map", options=BW_OPTIONS, value=(8.0, 11.0),
                                format_func=lambda e: format_bandwidth(10.0**e), key="tta_bw_range")
    urlstate.publish(["tta_model", "tta_eps", "tta_p", "tta_techniques", "tta_p_range", "tta_bw_range", "tta_show",
                      "tta_constants", *[f"tta_{k}" for k, _ in items]])
    if bhi <= blo or phi <= plo:
        st.warning("The map needs a range of bandwidths and of p: move the right handles past the left ones.")
        return
    try:
        grid = _map(model, env_json, (float(blo), float(bhi)), (int(plo), int(phi)), eps, specs, items, source,
                    records)
    except cm.CommscopeError as e:
        st.warning(f"Cannot compute the winner map: {e}")
        return
    heat = _heat(model, env_json, (float(blo), float(bhi)), (int(plo), int(phi)), eps, specs, items, source, p, grid)
    st.plotly_chart(heat, width="stretch", key="tta_map")
    cells = grid.drop_duplicates(["bandwidth_Bps", "p"])["winner"].value_counts()
    st.caption("Cells won: " + ", ".join(f"{k} {v}" for k, v in cells.items()) + ".")
    meta = {"what": f"fastest technique to eps = {eps:g} over bandwidth x p (commscope app, Time to accuracy)",
            "model": model, "environment": f"{env.name}: {env.summary()} (bandwidth varied)"}
    d3, d4 = st.columns(2)
    d3.download_button("map data (CSV)", partial(exports.csv_with_header, grid, meta),
                       file_name=exports.file_name(f"tta_map_{model}", "csv", env.name, (plo, phi)), mime="text/csv",
                       key="tta_dl_map_csv", on_click="ignore")
    d4.download_button("map (HTML, works offline)", partial(exports.offline_html, heat),
                       file_name=exports.file_name(f"tta_map_{model}", "html", env.name, (plo, phi)),
                       mime="text/html", key="tta_dl_map_html", on_click="ignore")


winner_map(model, env_json, p, eps, tuple(specs), items, source, records)
