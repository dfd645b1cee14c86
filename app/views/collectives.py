"""Collectives: time and bus bandwidth versus message size for chosen algorithms, p and environment, with
what a collective library (NCCL, gloo, MPICH) runs at each size, and measured or published sweep points."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import streamlit as st

import costmodels as cm
from app import compare, exports, guards, urlstate
from app.cli_commands import collective_command, needs_env_file
from app.data import (
    band_table,
    citations,
    collective_curves,
    crossover_marks,
    crossover_table,
    library_curve,
    measured_points,
)
from app.data_uncertainty import ci_environments, ci_text, collective_band
from app.figures import collective_figure
from app.sidebar import choose, environment_picker, initial, library_select
from app.text import md
from app.uploads import published_records, reference_records, results_uploader
from app.urlstate import Param

DEFAULTS = {
    "allreduce": ["ring_allreduce", "rabenseifner_allreduce_general", "double_binary_tree_allreduce"],
    "reduce_scatter": ["ring_reduce_scatter", "recursive_halving_reduce_scatter"],
    "allgather": ["ring_allgather", "bruck_allgather"],
    "all_to_all": ["pairwise_all_to_all", "bruck_all_to_all"],
}


URL = {
    "coll_primitive": Param("str", options=tuple(cm.PRIMITIVES)),
    **{f"coll_algorithms_{q}": Param("list", options=cm.collectives(q, include_bounds=False)) for q in cm.PRIMITIVES},
    "coll_p": Param("int", 1, 65536),
    "coll_range": Param("range", 0, 40),
    "coll_metric": Param("str", options=("busbw_GBps", "time_s")),
    "coll_bound": Param("bool"),
    "coll_band": Param("bool"),
    "coll_library": Param("str", options=cm.libraries),
}


@st.cache_data(show_spinner=False, max_entries=256)
def _curves(algorithms: tuple[str, ...], p: int, env_json: str, lo: int, hi: int, bound: bool, k: int | None):
    env = cm.Environment.from_json(env_json)
    sizes = np.geomspace(2.0**lo, 2.0**hi, 8 * (hi - lo) + 1)
    params = {} if k is None else {"k": k}
    return collective_curves(algorithms, p, env, sizes, lower_bound=bound, params=params)


@st.cache_data(show_spinner=False, max_entries=128)
def _with_band(curves: pd.DataFrame, p: int, env_json: str, k: int | None) -> pd.DataFrame:
    return collective_band(curves, p, cm.Environment.from_json(env_json), {} if k is None else {"k": k})


@st.cache_resource(show_spinner=False, max_entries=64)
def _figure(sig: str, metric: str, title: str, _curves: pd.DataFrame, _measured, _bands, _marks, _pin, _pin_label):
    """The figure (identified by ``sig``): built once per inputs and shared, never modified."""
    return collective_figure(_curves, metric, title=title, measured=_measured, bands=_bands, crossovers=_marks,
                             pinned=_pin, pinned_label=_pin_label)


@st.cache_data(show_spinner=False, max_entries=256)
def _library(primitive: str, p: int, env_json: str, lo: int, hi: int, library: str):
    """The library's curve, its bands and their table; or the error message where it cannot price this."""
    sizes = np.geomspace(2.0**lo, 2.0**hi, 8 * (hi - lo) + 1)
    try:
        curve, choice = library_curve(primitive, p, cm.Environment.from_json(env_json), sizes, library)
    except cm.CommscopeError as exc:
        return None, [], None, str(exc)
    return curve, cm.choice_bands(sizes, choice), band_table(sizes, choice), choice.library


@st.cache_data(show_spinner=False, max_entries=64)
def _published_check(library: str, lo: int, hi: int) -> str | None:
    """How the library's model compares with the shipped published measurements over the page's sizes."""
    from runners import reference

    return reference.published_check(library, np.geomspace(2.0**lo, 2.0**hi, hi - lo + 1))


def _published_chosen() -> None:
    """A published system sets the page to its environment (the sidebar's preset), world size and primitive."""
    if st.session_state.get("coll_measured") != "published":
        return
    systems = _published_systems()
    system = st.session_state.get("coll_published_system")
    if system not in systems:
        system = st.session_state["coll_published_system"] = next(iter(systems))
    env_name, p, op = systems[system]
    choose(env_mode="preset", env_preset=env_name)
    st.session_state["coll_p"] = p
    st.session_state["coll_primitive"] = op


@st.cache_data(show_spinner=False)
def _published_systems() -> dict[str, tuple[str, int, str]]:
    """Published system -> (its environment preset, world size, primitive)."""
    out: dict[str, tuple[str, int, str]] = {}
    for r in published_records():
        out.setdefault(r["system"], (r["environment"], int(r["run"]["world_size"]), r["config"]["op"]))
    return out


@st.cache_data(show_spinner=False, max_entries=64)
def _formula(name: str) -> tuple[str, str, str, str]:
    """An algorithm's name, description with its domain, LaTeX and source (sympy's printing takes ms each)."""
    c = cm.collective(name)
    return c.name, f"{c.description}. Domain: {c.domain.describe()}.", c.latex(), c.source


@st.cache_data(show_spinner=False, max_entries=256)
def _crossovers(algorithms: tuple[str, ...], p: int, env_json: str, hi: int, k: int | None):
    return crossover_table(algorithms, p, cm.Environment.from_json(env_json), 2.0**hi,
                           params={} if k is None else {"k": k})


urlstate.restore(URL)
env = environment_picker()
st.title("Collective algorithms")
st.caption(f"Environment **{md(env.name)}**: {md(env.summary())}")
if (problem := urlstate.problems()):
    st.warning(problem)

c1, c2, c3 = st.columns([1, 2, 1])
primitive = c1.selectbox("primitive", list(cm.PRIMITIVES), key="coll_primitive", **initial("coll_primitive", index=0))
choices = cm.collectives(primitive, include_bounds=False)
default = DEFAULTS.get(primitive, choices)[:4]
if primitive == "allreduce" and env.two_level:  # on one level it is the ring, drawn twice
    default = [*default, "hierarchical_allreduce"]
algo_key = f"coll_algorithms_{primitive}"
algorithms = c2.multiselect("algorithms", choices, key=algo_key, **initial(algo_key, default=default))
p = int(c3.number_input("p (ranks)", min_value=1, max_value=65536, step=1, key="coll_p",
                       **initial("coll_p", value=64)))
c4, c5, c6 = st.columns([2, 1, 1])
lo, hi = c4.select_slider("message size range", options=list(range(0, 41)), key="coll_range",
                          format_func=lambda e: cm.format_size(2**e), value=(10, 32))
metric = c5.radio("y axis", ["busbw_GBps", "time_s"], key="coll_metric",
                  format_func=lambda m: {"time_s": "time", "busbw_GBps": "bus bandwidth"}[m],
                  help="Bus bandwidth (nccl-tests' busbw): what the links carry, comparable across primitives and p.")
bound = c6.checkbox("lower bound", key="coll_bound", **initial("coll_bound", value=True))
library = library_select(c6, "coll_library", env)
corners = ci_environments(env)
show_band = corners is not None and c5.checkbox(
    "95% CI band", key="coll_band", **initial("coll_band", value=True),
    help=f"From the fitted parameters' 95% confidence intervals ({ci_text(env)}): each curve at both ends.")
k = None
if "parameter_server" in algorithms:
    k = int(st.number_input("parameter servers k", 1, 65536, value=p, key="coll_k"))
urlstate.publish(["coll_primitive", algo_key, "coll_p", "coll_range", "coll_metric", "coll_bound", "coll_library",
                  *(["coll_band"] if corners else [])])

if hi <= lo:
    st.warning("The size range is empty: move the right handle past the left one.")
    st.stop()

with st.expander("measured sweep points", expanded=st.session_state.get("coll_measured") == "published"):
    source = st.radio("overlay", ["none", "reference", "upload", "published"], horizontal=True, key="coll_measured",
                      on_change=_published_chosen,
                      format_func={"none": "none", "reference": "the bundled reference run",
                                   "upload": "uploaded results files",
                                   "published": "published measurements (nccl-tests)"}.get)
    records: list = []
    measured_key = source
    if source == "reference":
        from runners import reference

        links = reference.environments()
        link = st.selectbox("link of the reference run", links, key="coll_measured_link")
        records = reference_records(link)
        measured_key += f":{link}"
    elif source == "upload":
        up = results_uploader("coll_upload")
        records = up.records if up is not None else []
        measured_key += f":{up.digest if up is not None else ''}"
    elif source == "published":
        systems = _published_systems()
        system = st.selectbox("published system", list(systems), key="coll_published_system",
                              on_change=_published_chosen,
                              help="Choosing one sets the sidebar to its environment preset, p to its world "
                                   "size and the primitive to the one it measured.")
        records = [r for r in published_records() if r["system"] == system]
        measured_key += f":{system}"
        if (env.name, p) != systems[system][:2]:
            st.caption(f"{system} ran on **{systems[system][0]}** at p = {systems[system][1]}; the page now "
                       f"draws {env.name} at p = {p}.")
            st.button(f"back to {systems[system][0]} at p = {systems[system][1]}", key="coll_published_back",
                      on_click=_published_chosen)
measured = measured_points(records, primitive) if records else None
if measured is not None:
    if measured.empty:
        st.info(f"The loaded results hold no {primitive} records.")
    else:
        ps = sorted(set(measured["p"]))
        note = "" if ps == [p] else f" (the model is drawn at p = {p}; set p to compare like with like)"
        st.caption(f"Measured points: {len(measured)} {primitive} record(s) at p = {', '.join(map(str, ps))}"
                   f"{note}.")

env_json = env.to_json()
curves = _curves(tuple(algorithms), p, env_json, lo, hi, bound, k)
missing = [a for a in algorithms if a not in set(curves["algorithm"])]
if missing:
    st.warning(f"Not defined at p = {p}: {', '.join(missing)} (see the domains below).")
lib_curve, bands, band_rows, priced_by = _library(primitive, p, env_json, lo, hi, library)
if lib_curve is None:
    st.warning(f"{library} cannot price {primitive} at p = {p}: {priced_by}")
elif lib_curve.empty:  # p = 1: nothing is sent
    bands = []
else:
    curves = pd.concat([curves, lib_curve], ignore_index=True)
if show_band:
    curves = _with_band(curves, p, env_json, k)
if not algorithms:
    st.caption("No algorithm chosen: only the library's curve is drawn.")
xo = _crossovers(tuple(algorithms), p, env_json, hi, k)
marks = crossover_marks(xo, 2.0**lo, 2.0**hi)
guards.show(env, sizes=[2.0**lo, 2.0**hi], p=[p])
here = f"{env.name}, p = {p}"
pin = compare.pinned("collectives")
title = f"{primitive} on p = {p}, {env.name}"
sig = "|".join(map(str, [tuple(algorithms), p, env_json, lo, hi, bound, k, library, measured_key, show_band,
                         id(pin[1]) if pin else None]))
fig = _figure(sig, metric, title, curves, measured, tuple(bands), tuple(marks), pin[1] if pin else None,
              pin[0] if pin else "")
st.plotly_chart(fig, width="stretch", key="coll_chart")
pin = compare.controls("collectives", here, curves.drop(columns=["choice", "channels"], errors="ignore"))
if show_band:
    st.caption(f"Bands: each curve at both ends of the fitted parameters' 95% confidence intervals ({ci_text(env)}).")
if marks:
    st.caption("Dotted lines: crossover sizes, where two algorithms cost the same (table below).")
if measured is not None and source == "published":
    timings = {r["config"].get("timing", "back_to_back") for r in records}
    if "one_call_idle_device" in timings:
        h = cm.harness("one_call_idle_device")
        st.caption(f"These points were timed one call at a time on an idle device: each holds PyTorch's host "
                   f"overhead per call, about {h.exposed_host_s * 1e6:.0f} us, which the curves (the library's "
                   f"device time) leave out; `commscope predict collective --timing one_call_idle_device` adds it.")
    for c in [c for c in citations(published_records()) if c["system"] == system]:
        st.caption(f"Published points: {c['source']}; {c['where']}. [{c['url']}]({c['url']})"
                   + (f" Notes: {c['notes']}" if c["notes"] else ""))

d1, d2 = st.columns(2)
table = curves if measured is None or measured.empty else pd.concat(
    [curves, measured.assign(algorithm=measured["label"], primitive=primitive, kind="measured")], ignore_index=True)
meta = {"what": f"{primitive} time and bandwidth versus message size (commscope app, Collectives)",
        "environment": f"{env.name}: {env.summary()}", "p": p, "library": library}
d1.download_button("data (CSV)", partial(exports.csv_with_header, table, meta),
                   file_name=exports.file_name(primitive, "csv", env.name, p), mime="text/csv", key="coll_dl_csv",
                   on_click="ignore")
d2.download_button("figure (HTML, works offline)", partial(exports.offline_html, fig),
                   file_name=exports.file_name(primitive, "html", env.name, p), mime="text/html", key="coll_dl_html",
                   on_click="ignore")
command = collective_command(env, primitive, algorithms, p, lo, hi, library, {} if k is None else {"k": k})
with st.expander("equivalent CLI command (copy with the icon at its right)"):
    st.code(command, language="bash", wrap_lines=True)
    if needs_env_file(command):
        st.download_button("env.json", env_json, file_name="env.json", mime="application/json", key="coll_dl_env",
                           on_click="ignore")

st.subheader(f"What {library} runs")
if lib_curve is None or lib_curve.empty:
    st.caption("Nothing to show: " + ("one rank sends nothing." if lib_curve is not None else
                                      f"{library} cannot price {primitive} at p = {p}."))
else:
    lib = cm.library(priced_by)
    if priced_by != library:
        st.caption(f"{library} has no rule for {primitive}: it is priced as the {priced_by} library would.")
    st.caption(f"**{lib.name}**: {lib.description}. Source: {lib.source}")
    check = _published_check(priced_by, lo, hi)
    if check:
        st.info(check[0].upper() + check[1:] + ". The Predicted vs measured page shows every point.")
    st.dataframe(band_rows.drop(columns=["from_bytes", "to_bytes"]), hide_index=True, width="stretch",
                 key="coll_bands")

st.subheader("Crossover sizes")
if xo.empty:
    st.caption("Choose two algorithms of the same primitive that are defined at this p.")
else:
    st.dataframe(xo.drop(columns=["bytes"]), hide_index=True, width="stretch")

st.subheader("Formulas")
shown = list(dict.fromkeys(algorithms + ([cm.lower_bound(primitive).name] if bound and primitive in
                                          ("allreduce", "reduce_scatter", "allgather", "all_to_all") else [])))
for name in shown:
    title, text, latex, source = _formula(name)
    st.markdown(f"**{title}**: {text}")
    st.latex(latex)
    st.caption(f"Source: {source}")
