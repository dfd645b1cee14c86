"""Predicted vs measured: the validation records (shipped reference run, or uploaded results files) with their
three predictions, regimes and error attribution, and published collective measurements beside the
collective-library model."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

import costmodels as cm
from app import exports, guards, urlstate
from app.data_measured import (
    BASELINE,
    EFFICIENCY_METRICS,
    efficiency_frame,
    environment_json,
    environments_from_records,
    error_table,
    fit_quality,
    parameter_table,
    repredict,
    validation_frame,
)
from app.data_uncertainty import ci_environments, prediction_band
from app.data_validation import (
    SHORT,
    accuracy_table,
    available,
    cell_table,
    contributions,
    has_attribution,
    negotiation_table,
    percent_columns,
    prediction_view,
    ranking,
    regime_table,
    verdict,
    winner_cells,
)
from app.figures_measured import (
    contributions_figure,
    efficiency_figure,
    parameter_figure,
    scatter_figure,
)
from app.published_view import published_section
from app.sidebar import environment_picker
from app.uploads import results_uploader
from app.urlstate import Param
from runners.reference import DEFAULT_RUN, RUNS

SOURCES = {"reference": "bundled reference run", "upload": "uploaded results files",
           "published": "published collectives (nccl-tests tables)"}
PREDICTIONS = {"recorded": "as recorded (each link's fitted environment)", "sidebar": "the sidebar's environment"}
URL = {"meas_source": Param("str", options=tuple(SOURCES)),
       "meas_predictions": Param("str", options=tuple(PREDICTIONS)),
       "meas_axes": Param("str", options=("log", "linear")), "meas_band": Param("int", 0, 50),
       "meas_layout": Param("str", options=("symbols", "panels")),
       "meas_prediction": Param("str", options=("sweep", "calibrated", "defaults")), "meas_ci": Param("bool"),
       "meas_run": Param("str", options=tuple(RUNS))}


@st.cache_data(show_spinner=False)
def _reference(run: str) -> tuple[list[dict], dict[str, dict]]:
    """A shipped validation run's records and each link's fitted environment (link -> dict)."""
    from runners import reference

    envs = {}
    for link in reference.environments(run):
        path = reference.run_dir(run) / link / "environment.json"
        if path.exists():
            envs[link] = json.loads(path.read_text())
    return reference.validation_records(run), envs


@st.cache_data(show_spinner=False, max_entries=16)
def _frame(key: str, _records: list[dict]) -> pd.DataFrame:
    return validation_frame(_records)


@st.cache_data(show_spinner=False, max_entries=32)
def _answers(sig: str, _view: pd.DataFrame) -> dict:
    """The page's answers for ``_view`` (identified by ``sig``): the predictions it holds, their ranking, accuracy
    per environment, fastest technique per cell, regimes, per-cell attribution and contributions."""
    keys = available(_view)
    return {"keys": keys, "ranking": ranking(_view, keys), "accuracy": accuracy_table(_view, keys),
            "winners": winner_cells(_view, keys), "regimes": regime_table(_view), "cells": cell_table(_view, keys),
            "has_attribution": has_attribution(_view), "contributions": contributions(_view)}


@st.cache_data(show_spinner=False, max_entries=32)
def _prediction_view(sig: str, key: str, _view: pd.DataFrame) -> pd.DataFrame:
    return prediction_view(_view, key)


@st.cache_resource(show_spinner=False, max_entries=32)
def _contributions(sig: str, _contrib: pd.DataFrame) -> go.Figure:
    return contributions_figure(_contrib)


@st.cache_data(show_spinner=False, max_entries=32)
def _repredicted(env_json: str, run: str) -> pd.DataFrame:
    """A shipped run's records predicted again in another environment, on each link's measured profile."""
    from runners import reference

    records, _ = _reference(run)
    profiles = {}
    for link in {r["config"]["environment"] for r in records}:
        for model, path in reference.profiles(link, run).items():
            profiles[(link, model)] = cm.load_profile(path)
    return repredict(records, profiles, cm.Environment.from_json(env_json))


@st.cache_data(show_spinner="Predicting each record at its link's CI ends ...", max_entries=16)
def _ci_band(predictions: str, env_json: str, run: str) -> pd.DataFrame:
    """Prediction (a) of a shipped run's records at both ends of the 95% CIs (each link's fitted ones, or the
    sidebar environment's): predicted_lo_s and predicted_hi_s per row of the page's frame."""
    records, envs = _reference(run)
    if predictions == "sidebar":
        low, high = ci_environments(cm.Environment.from_json(env_json))
        a, b = (_repredicted(e.to_json(), run)["predicted_s"].to_numpy(dtype=float) for e in (low, high))
        return pd.DataFrame({"predicted_lo_s": np.fmin(a, b), "predicted_hi_s": np.fmax(a, b)})
    from runners import reference

    profiles = {(link, model): cm.load_profile(path) for link in envs
                for model, path in reference.profiles(link, run).items()}
    return prediction_band(records, profiles, envs)


@st.cache_data(show_spinner=False, max_entries=16)
def _environment_tables(key: str, _envs: dict[str, dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return parameter_table(_envs), fit_quality(_envs)


@st.cache_resource(show_spinner=False, max_entries=64)
def _scatter(sig: str, log: bool, band: float, panels: bool, _view: pd.DataFrame) -> go.Figure:
    """The scatter of ``_view`` (identified by ``sig``); figures are cached as objects, never modified."""
    return scatter_figure(_view, log=log, band=band, panels=panels)


@st.cache_resource(show_spinner=False, max_entries=64)
def _efficiency(sig: str, metric: str, baseline: str, _view: pd.DataFrame) -> tuple[pd.DataFrame, go.Figure]:
    eff = efficiency_frame(_view, metric, baseline)
    return eff, efficiency_figure(eff, metric, baseline)


@st.cache_resource(show_spinner=False, max_entries=16)
def _parameters(key: str, _params: pd.DataFrame) -> go.Figure:
    return parameter_figure(_params)


def _multiselect(where, label: str, options: list[str], key: str) -> list[str]:
    """A multiselect of every option at first, and again whenever the options change (another source's names)."""
    if st.session_state.get(f"{key}_of") != options:
        st.session_state[key] = options
    st.session_state[f"{key}_of"] = options
    return where.multiselect(label, options, key=key)


def _html(fig: go.Figure) -> partial[str]:
    """The figure as a standalone HTML page, made when the download is clicked."""
    return partial(exports.offline_html, fig)


def _percent(columns: list[str]) -> dict:
    return {c: st.column_config.NumberColumn(c, format="percent") for c in columns}


urlstate.restore(URL)
env = environment_picker()
st.title("Predicted vs measured")
if (problem := urlstate.problems()):
    st.warning(problem)

source = st.radio("results", list(SOURCES), format_func=SOURCES.get, horizontal=True, key="meas_source")
urlstate.publish(["meas_source", "meas_predictions", "meas_axes", "meas_band", "meas_layout", "meas_prediction",
                  "meas_ci", "meas_run"])
if source == "published":
    published_section()
    st.stop()
run = "validation"
if source == "reference":
    from runners.reference import COMMAND
    st.session_state.setdefault("meas_run", DEFAULT_RUN)  # the newest run first (runners.reference.DEFAULT_RUN)
    run = st.radio("run", list(RUNS), format_func=RUNS.get, key="meas_run", horizontal=True, help="Runs of the "
                   "same command on hosts of the same kind: a model change is judged on every run, so that what fits "
                   "one run's noise shows on the others.")
    records, envs = _reference(run)
    key = f"reference:{run}"
    st.caption(f"A shipped reference run: 4 gloo ranks on CPU behind emulated links, one per rank, or 2 per "
               f"node on the two-level cluster (`{COMMAND}`), two models. Each prediction uses the environment "
               "fitted to that environment's own collective sweep and the model profiled in the same run.")
else:
    up = results_uploader("meas_upload")
    if up is None:
        st.info("Upload results files holding `validation` records (`commscope validate` writes them to "
                "`validation.jsonl`); `environment` records, if any, add the fitted links' parameters.")
        st.stop()
    records, envs = up.records, environments_from_records(up.records)
    key = f"upload:{up.digest}"
    if not any(r["kind"] == "validation" for r in records):
        kinds = sorted({r["kind"] for r in records})
        st.warning(f"No `validation` records in the upload (found: {', '.join(kinds) or 'none'}). Fit "
                   "collective records on the Environments page.")
        st.stop()

predictions = "recorded"
if source == "reference":
    predictions = st.radio("predictions from", list(PREDICTIONS), format_func=PREDICTIONS.get, horizontal=True,
                           key="meas_predictions")
if predictions == "sidebar":
    frame = _repredicted(env.to_json(), run)
    st.caption(f"Predicted again in **{env.name}** ({env.summary()}) on each link's measured model profile.")
    guards.show(env, p=sorted(set(frame["p"])))
else:
    frame = _frame(key, records)

all_envs = list(dict.fromkeys(frame["environment"]))
all_techs = list(dict.fromkeys(frame["technique"]))
c1, c2 = st.columns(2)
chosen_envs = _multiselect(c1, "environments", all_envs, "meas_envs")
chosen_techs = _multiselect(c2, "techniques", all_techs, "meas_techniques")
view = frame[frame["environment"].isin(chosen_envs) & frame["technique"].isin(chosen_techs)]
if view.empty:
    st.info("Choose at least one environment and one technique.")
    st.stop()

sig = "|".join([key, predictions, env.to_json() if predictions == "sidebar" else "", *chosen_envs, "/",
                *chosen_techs])
answers = _answers(sig, view)
keys = answers["keys"]

# ------------------------------------------------------------------------------------------ answers
st.subheader("Which prediction is right")
st.caption("(a) the sweep-fitted environment alone; (b) interference and overhead calibrated on the environment's "
           "other techniques (the cell's own technique left out); (c) the shipped default terms. error = predicted / "
           "measured - 1; *within spread*: errors no larger than the measurement's own spread (half the range over "
           "repetitions, or half the 10th-90th percentile range), which the model cannot be asked to beat."
           if len(keys) > 1 else "These records carry prediction (a) only: the sweep-fitted environment (or the "
           "sidebar's). Records of `commscope validate` since issue 16 add (b) calibrated and (c) shipped defaults.")
st.markdown(verdict(answers["ranking"]))
for col, row in zip(st.columns(len(keys)), answers["ranking"].to_dict("records"), strict=True):
    col.metric(f"fastest predicted right, {row['prediction']}", f"{row['fastest right']} of {row['contests']}",
               help="(environment, model) cells whose fastest technique the prediction names, or names one within "
                    "the measured spread of it (runners.validate.winners; local SGD is not in the contest)")
accuracy = answers["accuracy"]
st.dataframe(accuracy, hide_index=True, width="stretch", key="meas_accuracy",
             column_config=_percent(percent_columns(accuracy)))
r1, r2 = st.columns([2, 3])
r1.markdown("**Regimes**: measured communication share of the bsp iteration")
r1.dataframe(answers["regimes"], hide_index=True, width="stretch", key="meas_regimes",
             column_config=_percent(["comm_share_bsp"]))
r2.markdown("**Fastest technique** per (environment, model); beside a pick that is not the fastest, its measured time "
            "over the fastest's (what running the pick costs)")
r2.dataframe(answers["winners"], hide_index=True, width="stretch", key="meas_winners")

# ------------------------------------------------------------------------------------------ scatter
st.subheader("Iteration time: predicted against measured")
chosen = st.radio("prediction", keys, format_func=SHORT.get, key="meas_prediction",
                  horizontal=True) if len(keys) > 1 else "sweep"
sig = f"{sig}|{chosen}"
pview = _prediction_view(sig, chosen, view)


@st.fragment
def scatter_section(sig: str, chosen: str, pview: pd.DataFrame, can_band: bool, predictions: str, env_json: str,
                    meta: dict, env_part: str, run: str) -> None:
    """The scatter, its controls and downloads: a fragment, so that its controls rerun only this part."""
    c3, c4, c5, c6 = st.columns(4)
    axes = c3.radio("axes", ["log", "linear"], horizontal=True, key="meas_axes")
    band = c4.slider("error band (+-%)", 0, 50, 10, step=1, key="meas_band")
    layout = c5.radio("environments as", ["symbols", "panels"], horizontal=True, key="meas_layout")
    ci = can_band and c6.checkbox("95% CI of (a)", value=True, key="meas_ci",
                                  help="Vertical bars: prediction (a) made again at both ends of the fitted alpha, "
                                       "beta and gamma's 95% confidence intervals (each link's, or the sidebar "
                                       "environment's).")
    urlstate.publish(["meas_source", "meas_predictions", "meas_axes", "meas_band", "meas_layout", "meas_prediction",
                      "meas_ci", "meas_run"])
    shown = pview.join(_ci_band(predictions, env_json if predictions == "sidebar" else "", run)) if ci else pview
    fig = _scatter(f"{sig}|{ci}", axes == "log", band / 100, layout == "panels", shown)
    st.plotly_chart(fig, width="stretch", key="meas_scatter")
    st.caption("One marker per cell (technique, environment, model, p); the horizontal bars span the measured "
               "spread, and a marker is open where the error is within it. Below the y = x line the model is "
               "optimistic." + (" Vertical bars: prediction (a) at both ends of the fitted 95% CIs." if ci else ""))
    d1, d2 = st.columns(2)
    d1.download_button("data (CSV)", partial(exports.csv_with_header, shown, meta),
                       file_name=exports.file_name("predicted_vs_measured", "csv", env_part, None),
                       mime="text/csv", key="meas_dl_scatter_csv", on_click="ignore")
    d2.download_button("figure (HTML, works offline)", _html(fig),
                       file_name=exports.file_name("predicted_vs_measured", "html", env_part, None),
                       mime="text/html", key="meas_dl_scatter_html", on_click="ignore")


scatter_section(sig, chosen, pview,
                source == "reference" and chosen == "sweep" and (predictions == "recorded"
                                                                 or ci_environments(env) is not None),
                predictions, env.to_json(),
                {"what": f"predicted ({SHORT[chosen]}) against measured iteration time (commscope app, Predicted vs "
                         "measured)",
                 "environment": ", ".join(chosen_envs) + (f"; predicted in {env.name}: {env.summary()}"
                                                          if predictions == "sidebar" else ""),
                 "p": ", ".join(map(str, sorted(set(pview["p"])))), "records": key},
                env.name if predictions == "sidebar" else "+".join(chosen_envs), run)
unpredicted = pview[pview["predicted_s"].isna()]
if len(unpredicted):
    st.warning(f"{len(unpredicted)} record(s) without prediction {SHORT[chosen]}: " + "; ".join(
        f"{r.technique} on {r.environment} ({r.how})" for r in unpredicted.itertuples()))

# ------------------------------------------------------------------------------------- attribution
st.subheader("Which term accounts for the error")
if not answers["has_attribution"]:
    st.caption("These records name no term (records of `commscope validate` since issue 16 do).")
else:
    st.caption("A term's contribution is what the prediction loses without it; the gap (measured - predicted) "
               "goes to the largest one, with the change of that contribution that closes it (\"bandwidth +18%\": "
               "the bandwidth term would have to cost 18% more). *missing term*: the gap exceeds every "
               "contribution (compute, or a cost the model lacks).")
    st.dataframe(cells := answers["cells"], hide_index=True, width="stretch", key="meas_cells",
                 column_config=_percent(percent_columns(cells)))
    st.plotly_chart(_contributions(sig, answers["contributions"]), width="stretch", key="meas_contrib")
if not (negotiations := negotiation_table(view)).empty:  # runs that kept the runner's counters
    st.markdown("**ByteScheduler's negotiations, measured beside priced** (each waits for the slowest rank)")
    st.dataframe(negotiations.round(2), hide_index=True, width="stretch", key="meas_negotiations")

# -------------------------------------------------------------------------------------- error table
st.subheader("Errors")
st.caption(f"Prediction {SHORT[chosen]}: error = predicted / measured - 1 (median and max of its absolute value; "
           "the mean keeps its sign).")
by_tech, by_env = error_table(pview, "technique"), error_table(pview, "environment")
pct = _percent(["median_abs_error", "max_abs_error", "mean_error"])
e1, e2 = st.columns(2)
e1.dataframe(by_tech, hide_index=True, width="stretch", column_config=pct, key="meas_err_tech")
e2.dataframe(by_env, hide_index=True, width="stretch", column_config=pct, key="meas_err_env")
errors_csv = pd.concat([by_tech.rename(columns={"technique": "group"}).assign(by="technique"),
                        by_env.rename(columns={"environment": "group"}).assign(by="environment")])
FILE_META = {"environment": ", ".join(chosen_envs), "records": key, "prediction": SHORT[chosen]}
st.download_button("errors (CSV)", partial(exports.csv_with_header, errors_csv,
                                           {"what": "prediction errors (commscope app)", **FILE_META}),
                   file_name=exports.file_name("prediction_errors", "csv", "+".join(chosen_envs)), mime="text/csv",
                   key="meas_dl_errors", on_click="ignore")
with st.expander("every record"):
    st.dataframe(pview, hide_index=True, width="stretch", column_config=_percent(
        ["error", "abs_error", "spread", "comm_share_bsp", "error_calibrated", "stderr_calibrated", "error_defaults",
         "term_change"]))

# -------------------------------------------------------------------------------------- efficiency
st.subheader("Efficiency: predicted beside measured")
f1, f2 = st.columns(2)
metric = f1.selectbox("metric", list(EFFICIENCY_METRICS), format_func=lambda m: EFFICIENCY_METRICS[m][0],
                      key="meas_eff_metric")
baseline = BASELINE
if metric == "speedup":
    baseline = f2.selectbox("baseline", chosen_techs, index=chosen_techs.index(BASELINE) if BASELINE in chosen_techs
                            else 0, key="meas_baseline")
f2.caption(EFFICIENCY_METRICS[metric][1])
eff, eff_fig = _efficiency(sig, metric, baseline, pview)
st.plotly_chart(eff_fig, width="stretch", key="meas_eff")
g1, g2 = st.columns(2)
g1.download_button("data (CSV)", partial(exports.csv_with_header, eff, {"what": f"{metric}, predicted and measured",
                                                                     **FILE_META}),
                   file_name=exports.file_name(f"efficiency_{metric}", "csv", "+".join(chosen_envs)), mime="text/csv",
                   key="meas_dl_eff_csv", on_click="ignore")
g2.download_button("figure (HTML, works offline)", _html(eff_fig),
                   file_name=exports.file_name(f"efficiency_{metric}", "html", "+".join(chosen_envs)),
                   mime="text/html", key="meas_dl_eff_html", on_click="ignore")

# ----------------------------------------------------------------------------- fitted environments
st.subheader("Fitted environment of each link")
if not envs:
    st.info("No fitted environments in these results (`environment` records); fit one on the Environments page.")
    st.stop()
params, quality = _environment_tables(key, envs)
st.caption("alpha, beta, gamma fitted to each link's collective sweep, with 95% confidence intervals "
           "(Student's t on the Jacobian at the solution). nominal_beta is the emulated link's rate with its "
           "framing overhead, where the run recorded it.")
st.dataframe(params, hide_index=True, width="stretch", key="meas_params",
             column_config={c: st.column_config.NumberColumn(c, format="%.4g")
                            for c in ("value", "ci95_low", "ci95_high")})
st.dataframe(quality, hide_index=True, width="stretch", key="meas_quality",
             column_config={**_percent(["rms_rel_error", "median_rel_error", "max_rel_error"]),
                            **{c: st.column_config.NumberColumn(c, format="%.4g")
                               for c in ("r2", "fitted_beta", "nominal_beta")}})
for link, env_dict in envs.items():  # each link's fit, guarded (the ranks it ran on: the records' p)
    p_used = sorted(set(frame.loc[frame["environment"] == link, "p"]))
    guards.show(cm.Environment.from_dict(dict(env_dict)), p=p_used)
param_fig = _parameters(key, params)
st.plotly_chart(param_fig, width="stretch", key="meas_param_chart")
h1, h2, h3 = st.columns(3)
h1.download_button("parameters (CSV)", partial(exports.csv_with_header, params,
                                               {"what": "each link's fitted parameters", **FILE_META}),
                   file_name=exports.file_name("fitted_parameters", "csv", "+".join(envs)),
                   mime="text/csv", key="meas_dl_params", on_click="ignore")
link = h2.selectbox("environment JSON of", list(envs), key="meas_env_link", label_visibility="collapsed")
h3.download_button(f"{link} environment (JSON)", environment_json(envs[link]), file_name=f"environment_{link}.json",
                   mime="application/json", key="meas_dl_env_json", on_click="ignore")
