"""Environments: fit alpha, beta (gamma where identifiable) to measured collective records, inspect the fit,
and use the fitted environment on every page (the sidebar's "fitted" source)."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import costmodels as cm
from app import exports, urlstate
from app.cli_commands import fit_command
from app.data_measured import FitTables, collective_summary, fit_tables, model_curves
from app.figures_measured import fit_figure, residual_figure
from app.sidebar import FITTED_KEY, choose, environment_picker
from app.text import md
from app.uploads import reference_records, results_uploader
from app.urlstate import Param
from costmodels.analysis import default_candidates
from costmodels.errors import CommscopeError
from runners.measure.fit import as_run_by, records_backend

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {"reference": "bundled reference run", "upload": "uploaded results files"}
STATISTICS = {"mean": "mean of the per-iteration times", "median": "median time of each record"}
METHODS = {"two": "two regimes (Hockney): alpha below 64 KiB, beta and gamma from 256 KiB (as commscope validate fits)",
           "one": "one least-squares fit over the sizes chosen"}
# what commscope validate fits (runners/validate/suite.py): ring allreduce and allgather, as the records' backend runs
# them (gloo's allgather: runners.measure.fit.RUN_BY), auto for the rest (gloo's reduce-scatter is an allreduce of the
# whole buffer), in two regimes, to the mean message time
VALIDATE_ALGORITHMS = {"allreduce": "ring_allreduce", "allgather": "ring_allgather"}
URL = {"envs_source": Param("str", options=tuple(SOURCES)), "envs_link": Param("str"),
       "envs_primitives": Param("list", options=tuple(cm.PRIMITIVES)),
       "envs_statistic": Param("str", options=tuple(STATISTICS)), "envs_gamma": Param("str", options=("auto", "0")),
       "envs_method": Param("str", options=tuple(METHODS)), "envs_axis": Param("str", options=("log", "linear")),
       **{f"envs_algo_{q}": Param("str", options=lambda q=q: ["auto", *default_candidates(q)]) for q in cm.PRIMITIVES}}


@st.cache_data(show_spinner=False, max_entries=64)
def _fit(key: str, primitives: tuple[str, ...], algorithms: tuple[str, ...], statistic: str, gamma: str,
         min_bytes: int, name: str, _records: list[dict], method: str = "one") -> FitTables | str:
    """The fit's tables, or the reason it failed (cached per source, choices and name)."""
    from runners.measure.fit import fit, fit_two_regimes

    try:
        if method == "two":
            return fit_tables(fit_two_regimes(_records, list(primitives), list(algorithms), statistic=statistic,
                                              name=name))
        return fit_tables(fit(_records, list(primitives), list(algorithms), statistic=statistic, gamma=gamma,
                              min_bytes=min_bytes, name=name))
    except CommscopeError as exc:
        return str(exc)


@st.cache_data(show_spinner=False, max_entries=64)
def _curves(residuals: pd.DataFrame, env_json: str, algorithms: tuple[tuple[str, str], ...], label: str
            ) -> pd.DataFrame:
    return model_curves(residuals, cm.Environment.from_json(env_json), dict(algorithms), label=label)


@st.cache_resource(show_spinner=False, max_entries=64)
def _figures(sig: str, log: bool, band: float, _residuals: pd.DataFrame, _curves: pd.DataFrame
             ) -> tuple[go.Figure, go.Figure]:
    """The fit and residual figures (identified by ``sig``); cached as objects, never modified."""
    return fit_figure(_residuals, _curves, log=log), residual_figure(_residuals, band=band)


def _html(fig: go.Figure) -> partial[str]:
    """The figure as a standalone HTML page, made when the download is clicked."""
    return partial(exports.offline_html, fig)


def _safe(name: str) -> str:
    """A file name made of the name's letters, digits, dots, dashes and underscores."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "environment"


def _use(name: str, env_json: str) -> None:
    """Store the fitted environment for the sidebar and make it the sidebar's choice."""
    st.session_state.setdefault(FITTED_KEY, {})[name] = env_json
    choose(env_mode="fitted", env_fitted=name)
    st.session_state["envs_used"] = name


urlstate.restore(URL)
env = environment_picker()
st.title("Fit an environment")
if (problem := urlstate.problems()):
    st.warning(problem)
st.caption("Least squares on the relative error of the chosen algorithms' cost models against measured collective "
           "times (`runners.measure.fit`, as `commscope fit` runs it), every parameter >= 0, with 95% confidence "
           "intervals.")

source = st.radio("results", list(SOURCES), format_func=SOURCES.get, horizontal=True, key="envs_source")
if source == "reference":
    from runners import reference

    links = reference.environments()
    link = st.selectbox("link of the reference run", links, index=links.index("1gbit") if "1gbit" in links else 0,
                        key="envs_link")
    records = reference_records(link)
    key, default_name = f"reference:{link}", f"fitted:{link}"
else:
    up = results_uploader("envs_upload")
    if up is None:
        st.info("Upload results files holding `collective` records (`commscope bench` writes them; nccl-tests logs "
                "are imported with `commscope bench --import`).")
        st.stop()
    records = up.records
    key, default_name = f"upload:{up.digest}", "fitted:upload"

summary = collective_summary(records)
if summary.empty:
    st.warning("No `collective` records to fit.")
    st.stop()
with st.expander(f"{int(summary['records'].sum())} collective record(s)"):
    st.dataframe(summary, hide_index=True, width="stretch")

present = [q for q in cm.PRIMITIVES if q in set(summary["primitive"])]
if not present:
    st.warning(f"No collective records of a modelled primitive (found: {', '.join(sorted(set(summary['primitive'])))}; "
               f"modelled: {', '.join(cm.PRIMITIVES)}).")
    st.stop()
method = st.radio("method", list(METHODS), horizontal=True, key="envs_method", format_func=METHODS.get,
                  help="A shaped link's token bucket lets mid-size messages through at line rate, which pulls a "
                       "one-piece fit's beta below the sustained rate; the two-regime fit takes each parameter where "
                       "it dominates (commscope validate uses it; on a link whose token bucket the records name, one "
                       "fit over every size with the bucket in the model).")
c1, c2, c3 = st.columns([2, 1, 1])
primitives = c1.multiselect("primitives fitted together (one link)", present, default=present, key="envs_primitives")
has_times = any(isinstance(r["result"].get("times"), list) for r in records if r["kind"] == "collective")
statistic = c2.radio("time of a record", list(STATISTICS), index=0 if has_times else 1, format_func=STATISTICS.get,
                     key="envs_statistic")
gamma = c3.radio("gamma", ["auto", "0"], format_func=lambda g: {"auto": "fit where identifiable",
                                                                 "0": "fixed at 0"}[g], key="envs_gamma",
                  disabled=method == "two", help="one fit only: two regimes fit gamma with beta where identifiable")
if not primitives:
    st.info("Choose at least one primitive.")
    st.stop()
cols = st.columns(len(primitives))
algorithms = []
for col, q in zip(cols, primitives, strict=True):
    options = ["auto", *default_candidates(q)]
    validated = as_run_by(VALIDATE_ALGORITHMS.get(q), records_backend(records))
    default = options.index(validated) if validated in options else 0
    algorithms.append(col.selectbox(f"{q} algorithm", options, index=default, key=f"envs_algo_{q}",
                                    help="auto fits every registered algorithm and keeps the best (AIC); the "
                                         "default is what commscope validate fits"))
sizes = sorted({int(r["config"]["bytes"]) for r in records if r["kind"] == "collective"})
c4, c5 = st.columns(2)
min_bytes = sizes[0]
if len(sizes) > 1:
    min_bytes = c4.select_slider("smallest message fitted", options=sizes, value=sizes[0], format_func=cm.format_size,
                                 disabled=method == "two", help="one fit only: two regimes take every size",
                                 key="envs_min_bytes")
name = c5.text_input("name", value=default_name, max_chars=80, key="envs_name").strip() or default_name

PUBLISHED = ["envs_source", *(["envs_link"] if source == "reference" else []), "envs_primitives", "envs_statistic",
             "envs_gamma", "envs_method", "envs_axis", *[f"envs_algo_{q}" for q in primitives]]
urlstate.publish(PUBLISHED)
result = _fit(key, tuple(primitives), tuple(algorithms), statistic, gamma, int(min_bytes), name, records, method)
if isinstance(result, str):
    st.error(f"Cannot fit: {result}")
    st.stop()
fitted = cm.Environment.from_json(result.environment_json)

# ---------------------------------------------------------------------------------- parameters
st.subheader("Fitted parameters")
st.markdown(f"**{md(result.name)}**: {md(result.summary)}")
if result.verdict:
    st.caption(result.verdict)
q = result.quality
m1, m2, m3, m4 = st.columns(4)
m1.metric("records", f"{int(q['records'])}")
m2.metric("RMS relative error", f"{q['rms_rel_error']:.1%}")
m3.metric("max relative error", f"{q['max_rel_error']:.1%}")
m4.metric("R^2", f"{q['r2']:.4f}")
st.dataframe(result.parameters, hide_index=True, width="stretch", key="envs_params",
             column_config={c: st.column_config.NumberColumn(c, format="%.4g")
                            for c in ("value", "ci95_low", "ci95_high")})
for line in result.warnings:  # the plausibility guards, each naming its number
    st.warning(f"Fit **{md(result.name)}**: {md(line)}", icon=":material/warning:")
for note in result.notes:  # "implausible" notes are said by the guards above
    if not note.startswith("implausible"):
        st.caption(note)
if len(result.ranking):
    with st.expander("candidate algorithms (auto)"):
        st.dataframe(result.ranking, hide_index=True, width="stretch")

# ---------------------------------------------------------------------------------- use, export
ps = sorted(set(result.residuals["p"]))
meta = {"what": f"fit of {result.name} (commscope app, Environments)", "environment": f"{result.name}: "
        f"{fitted.summary()}", "p": ", ".join(map(str, ps)), "records": key}


def _name(what: str, ext: str) -> str:
    return exports.file_name(what, ext, result.name, ps[0] if len(ps) == 1 else (ps[0], ps[-1]))


@st.fragment
def figures_section(result: FitTables, env_json: str, env_name: str, fit_sig: str) -> None:
    """The fit and residual figures with their controls and downloads: a fragment, so that the controls rerun only
    this part of the page."""
    st.subheader("Measured against the fitted model")
    g1, g2, g3 = st.columns(3)
    log = g1.radio("time axis", ["log", "linear"], horizontal=True, key="envs_axis") == "log"
    compare = g2.checkbox(f"also the sidebar's environment ({env_name})", value=True, key="envs_compare")
    band = g3.slider("error band (+-%)", 0, 50, 10, key="envs_band")
    urlstate.publish(PUBLISHED)
    algos = tuple(result.algorithms.items())
    curves = _curves(result.residuals, result.environment_json, algos, "fitted")
    if compare:
        curves = pd.concat([curves, _curves(result.residuals, env_json, algos, env_name)], ignore_index=True)
    fig, res_fig = _figures(f"{fit_sig}|{env_json if compare else ''}", log, band / 100, result.residuals, curves)
    st.plotly_chart(fig, width="stretch", key="envs_fit_chart")
    st.plotly_chart(res_fig, width="stretch", key="envs_residual_chart")
    b5, b6, b7 = st.columns(3)
    b5.download_button("fit figure (HTML, works offline)", _html(fig), file_name=_name("fit", "html"),
                       mime="text/html", key="envs_dl_fit_html", on_click="ignore")
    b6.download_button("residual figure (HTML, works offline)", _html(res_fig),
                       file_name=_name("fit_residuals", "html"), mime="text/html", key="envs_dl_res_html",
                       on_click="ignore")
    b7.download_button("curves (CSV)", partial(exports.csv_with_header, curves, meta),
                       file_name=_name("fit_curves", "csv"), mime="text/csv", key="envs_dl_curves", on_click="ignore")


figures_section(result, env.to_json(), env.name, "|".join([key, *primitives, *algorithms, statistic, gamma,
                                                           str(min_bytes), method, result.name]))
st.subheader("Use and export")
b1, b2, b3, b4 = st.columns(4)
b1.button("use in the sidebar", key="envs_use", type="primary", on_click=_use, args=(result.name,
                                                                                     result.environment_json),
          help="adds it to the sidebar's \"fitted\" environments and selects it there, for every page")
b2.download_button("environment (JSON)", result.environment_json, file_name=f"{_safe(result.name)}.json",
                   mime="application/json", key="envs_dl_json", on_click="ignore")
b3.download_button("residuals (CSV)", partial(exports.csv_with_header, result.residuals, meta),
                   file_name=_name("fit_residuals", "csv"), mime="text/csv", key="envs_dl_residuals", on_click="ignore")
b4.download_button("parameters (CSV)", partial(exports.csv_with_header, result.parameters, meta),
                   file_name=_name("fit_parameters", "csv"), mime="text/csv", key="envs_dl_params", on_click="ignore")
if source == "reference":
    path = reference.VALIDATION_DIR / link / "records.jsonl"
    files = [str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)]
else:
    files = ["results.jsonl"]  # the uploaded files, saved
with st.expander("equivalent CLI command (copy with the icon at its right)"):
    st.code(fit_command(files, primitives, algorithms, statistic, gamma, int(min_bytes), method, result.name),
            language="bash", wrap_lines=True)
if st.session_state.get("envs_used") == result.name:
    st.success(f"**{md(result.name)}** is in the sidebar's fitted environments and selected there.")
st.caption(f"Saved environments load with `cm.Environment.load(path)` and `commscope ... --env path`. Fitted: "
           f"{fitted.summary()}")
