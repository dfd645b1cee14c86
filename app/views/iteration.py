"""Iteration: iteration time, throughput and scaling efficiency versus p, one iteration's timeline and breakdown."""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

import costmodels as cm
from app import compare, exports, guards, urlstate
from app.cli_commands import iteration_commands, needs_env_file
from app.data_iteration import (
    AUTO,
    CHEAPEST,
    breakdowns,
    chrome_trace_json,
    communication_stats,
    compressor_conflicts,
    compressor_spec,
    load_model,
    model_choices,
    p_values,
    ranking_at,
    reference_profiles,
    scaling_curves,
    simulate_iteration,
    terms_text,
    timeline_table,
)
from app.data_iteration import breakdown as breakdown_table
from app.data_uncertainty import ci_environments, ci_text, scaling_band
from app.figures_iteration import METRIC_LABELS, breakdown_figure, gantt_figure, scaling_figure
from app.sidebar import environment_picker, library_select
from app.text import md
from app.urlstate import Param
from costmodels.schedules import COMPRESSIBLE

DEFAULT_SCHEDULES = ["bsp", "wfbp", "fusion", "dear"]
INT_PARAMETERS = {"bits": (2, 16), "rank": (1, 1024)}
URL = {
    "iter_model": Param("str", options=model_choices),
    "iter_schedules": Param("list", options=cm.schedules),
    "iter_compressor": Param("str", options=lambda: ["none", *cm.compressors()]),
    "iter_range": Param("range", 0, 16),
    "iter_dense": Param("bool"),
    "iter_metric": Param("str", options=tuple(METRIC_LABELS)),
    "iter_library": Param("str", options=cm.libraries),
    "iter_collective": Param("str", options=lambda: [AUTO, CHEAPEST,
                                                     *cm.collectives("allreduce", include_bounds=False)]),
    "iter_band": Param("bool"),
    "iter_schedule": Param("str", options=cm.schedules),
    "iter_p": Param("int", 1, 65536),
}
SHOWN = [k for k in URL if k != "iter_band"]


@st.cache_data(show_spinner=False, max_entries=128)
def _curves(model: str, env_json: str, schedules: tuple[str, ...], compressor: str | None, collective: str,
            lo: int, hi: int, dense: bool):
    env = cm.Environment.from_json(env_json)
    return scaling_curves(load_model(model), env, p_values(lo, hi, dense=dense), schedules, compressor, collective)


@st.cache_data(show_spinner=False, max_entries=64)
def _band(model: str, env_json: str, schedules: tuple[str, ...], compressor: str | None, collective: str,
          lo: int, hi: int, dense: bool):
    """The curves with each metric at both ends of the fitted parameters' 95% CIs."""
    env = cm.Environment.from_json(env_json)
    low, high = ci_environments(env)
    ps, prof = p_values(lo, hi, dense=dense), load_model(model)
    return scaling_band(_curves(model, env_json, schedules, compressor, collective, lo, hi, dense)[0],
                        *(scaling_curves(prof, e, ps, schedules, compressor, collective)[0] for e in (low, high)))


@st.cache_data(show_spinner=False, max_entries=128)
def _ranking(model: str, env_json: str, schedules: tuple[str, ...], compressor: str | None, collective: str, p: int):
    """The schedules (and bsp, for the speedup) ranked at p."""
    names = tuple(dict.fromkeys([*schedules, "bsp"]))
    curves, _ = scaling_curves(load_model(model), cm.Environment.from_json(env_json), [p], names, compressor,
                               collective)
    ranked = ranking_at(curves, p)
    return ranked[ranked["schedule"].map(lambda n: n.split(" + ")[0]).isin(schedules)].reset_index(drop=True)


@st.cache_data(show_spinner=False, max_entries=128)
def _iteration(model: str, env_json: str, schedule: str, p: int, compressor: str | None, collective: str):
    """Everything the page shows of one simulated iteration, or the error message."""
    prof = load_model(model)
    try:
        r = simulate_iteration(prof, cm.Environment.from_json(env_json), p, schedule, compressor, collective)
    except cm.CommscopeError as exc:
        return None, str(exc)
    return {
        "events": timeline_table(r.timeline), "breakdown": breakdown_table(r, prof),
        "stats": communication_stats(r, prof),
        "iteration_time": r.iteration_time, "throughput": r.throughput,
        "scaling_efficiency": r.scaling_efficiency, "speedup": r.speedup, "details": dict(r.details),
    }, ""


@st.cache_data(show_spinner=False, max_entries=16)
def _trace(model: str, env_json: str, schedule: str, p: int, compressor: str | None, collective: str) -> str:
    """The iteration's Chrome trace (made when the download is clicked)."""
    r = simulate_iteration(load_model(model), cm.Environment.from_json(env_json), p, schedule, compressor, collective)
    return chrome_trace_json(r, f"commscope {schedule} p={p}")


@st.cache_data(show_spinner=False, max_entries=128)
def _breakdowns(model: str, env_json: str, p: int, schedules: tuple[str, ...], compressor: str | None,
                collective: str):
    return breakdowns(load_model(model), cm.Environment.from_json(env_json), p, schedules, compressor, collective)


# Figures are cached as objects (building one validates every property: tens of ms each), shared by reruns
# and sessions: they are only drawn and exported, never changed.
@st.cache_resource(show_spinner=False, max_entries=64)
def _curves_figure(args: tuple, metric: str, title: str, band: bool, pin_id: int | None, _pin):
    curves = _band(*args) if band else _curves(*args)[0]
    return scaling_figure(curves, metric, title=title, pinned=_pin)


@st.cache_resource(show_spinner=False, max_entries=64)
def _gantt_figure(args: tuple, title: str):
    one = _iteration(*args)[0]
    return gantt_figure(one["events"], title=title, iteration_time=one["iteration_time"])


@st.cache_resource(show_spinner=False, max_entries=64)
def _breakdown_figure(args: tuple):
    return breakdown_figure(_breakdowns(*args)[0], title="iteration time = forward + backward + exposed communication")


urlstate.restore(URL)
env = environment_picker()
env_json = env.to_json()
st.title("Training iteration")
st.caption(f"Environment **{md(env.name)}**: {md(env.summary())}. Its {terms_text(env)}"
           + ("." if env.has_terms else " (overlap is free; set them in the sidebar's custom environment)."))
if (problem := urlstate.problems()):
    st.warning(problem)

# ------------------------------------------------------------------------------------ controls
models = model_choices()
c1, c2, c3 = st.columns([1, 2, 1])
model = c1.selectbox("model profile", models, index=models.index("resnet50"), key="iter_model")
schedules = c2.multiselect("schedules", cm.schedules(), default=DEFAULT_SCHEDULES, key="iter_schedules")
comp_name = c3.selectbox("compressor", ["none", *cm.compressors()], key="iter_compressor")
parameter = None
if comp_name != "none":
    entry = cm.compressor(comp_name)
    if entry.parameter in INT_PARAMETERS:
        lo_q, hi_q = INT_PARAMETERS[entry.parameter]
        parameter = float(c3.number_input(entry.parameter, lo_q, hi_q, int(entry.default), step=1,
                                          key=f"iter_cparam_{comp_name}"))
    elif entry.parameter is not None:
        parameter = float(c3.number_input(entry.parameter, 1e-6, 1.0, float(entry.default), step=0.001,
                                          format="%g", key=f"iter_cparam_{comp_name}"))
compressor = compressor_spec(comp_name, parameter)

prof = load_model(model)
st.caption(f"**{md(prof.name)}** ({md(prof.origin)}, {md(prof.device)}, {md(prof.dtype)}): {len(prof)} tensors, "
           f"{prof.params / 1e6:.3g} M parameters, {cm.format_size(prof.grad_bytes)} of gradients, "
           f"batch {prof.batch_size} per worker, forward + backward {prof.compute_s * 1e3:.4g} ms.")

c4, c5, c6 = st.columns([2, 1, 1])
lo, hi = c4.select_slider("p range (workers, log2)", options=list(range(0, 17)), value=(1, 12),
                          format_func=lambda e: str(2**e), key="iter_range")
dense = c4.checkbox("also p = 3·2^k", value=False, key="iter_dense",
                    help="Worker counts that are not powers of two: algorithms that need a power of two (recursive "
                         "halving/doubling) are then out, so the curves zigzag.")
metric = c5.radio("y axis", list(METRIC_LABELS), format_func=METRIC_LABELS.get, key="iter_metric")
library = library_select(c6, "iter_library", env)
if library != env.library:  # the page's choice of library prices every message the schedules send
    env_json = env.with_(library=library).to_json()
fitted = env.metadata.get("algorithms")
auto_label = "auto (fitted)" if fitted else f"auto ({library})"
collective = c6.selectbox(
    "collective", [AUTO, CHEAPEST, *cm.collectives("allreduce", include_bounds=False)],
    format_func=lambda c: {AUTO: auto_label, CHEAPEST: "cheapest per message"}.get(c, c), key="iter_collective",
    help="The algorithm that carries the messages. 'auto' uses the algorithms a fitted environment was fitted "
         "with, else what the environment's collective library runs (NCCL, gloo, MPICH); 'cheapest' takes the "
         "cheapest registered algorithm at every size, which no library does. The ps schedule always uses the "
         "parameter server.")
band = ci_environments(env) is not None and c5.checkbox(
    "95% CI band", value=True, key="iter_band",
    help=f"From the fitted parameters' 95% confidence intervals ({ci_text(env)}): each curve at both ends.")

if compressor and collective not in (AUTO, CHEAPEST) and cm.compressor(comp_name).primitive != "allreduce":
    st.info(f"{compressor} sends its gradients by {cm.compressor(comp_name).primitive}, which the allreduce "
            f"algorithm {collective} cannot carry: choose 'auto' or 'cheapest' as the collective.")
conflicts = compressor_conflicts(schedules, compressor)
if conflicts:
    st.warning(f"Compressor {compressor} cannot run with {', '.join(conflicts)}: compression runs on top of "
               f"{', '.join(COMPRESSIBLE)} only. {'They are' if len(conflicts) > 1 else 'It is'} left out of the "
               "curves and shown uncompressed below.")
ps = p_values(lo, hi, dense=dense) if hi >= lo else []
grads = [x.grad_bytes for x in prof.layers if x.grad_bytes > 0]
guards.show(env, sizes=[min(grads), prof.grad_bytes] if grads else None, p=ps)  # per-tensor messages .. one buffer
stem = f"{prof.name}_{env.name}"

# ------------------------------------------------------------------------------------- curves
if not schedules:
    st.info("Choose at least one schedule to plot against p.")
elif hi < lo:
    st.warning("The p range is empty.")
else:
    curve_args = (model, env_json, tuple(schedules), compressor, collective, lo, hi, dense)
    curves, problems = _curves(*curve_args)
    for problem in problems:
        if problem.schedule not in conflicts:
            st.warning(problem.describe(ps))
    here = f"{prof.name}, {env.name}" + (f", {compressor}" if compressor else "")
    pin = compare.pinned("iteration")
    fig = _curves_figure(curve_args, metric, here, band, id(pin[1]) if pin else None, pin[1] if pin else None)
    st.plotly_chart(fig, width="stretch", key="iter_curves")
    compare.controls("iteration", here, curves)
    if band:
        st.caption(f"Bands: each curve at both ends of the fitted parameters' 95% confidence intervals "
                   f"({ci_text(env)}).")
    d1, d2, _ = st.columns([1, 1, 3])
    meta = {"what": "iteration time, throughput and scaling efficiency versus p (commscope app, Iteration)",
            "model": prof.name, "environment": f"{env.name}: {env.summary()}", "p": f"{ps[0]}-{ps[-1]}",
            "compressor": compressor, "collective": collective, "library": library}
    d1.download_button("curves (CSV)", partial(exports.csv_with_header, curves, meta),
                       file_name=exports.file_name(f"{stem}_scaling", "csv", None, (ps[0], ps[-1])),
                       mime="text/csv", key="iter_dl_curves_csv", on_click="ignore")
    d2.download_button("curves (HTML, works offline)", partial(exports.offline_html, fig),
                       file_name=exports.file_name(f"{stem}_scaling", "html", None, (ps[0], ps[-1])),
                       mime="text/html", key="iter_dl_curves_html", on_click="ignore")


def _ranking_table(where, model: str, env_json: str, schedules: list[str], compressor: str | None, collective: str,
                   p: int) -> None:
    """The schedules ranked at p (time, throughput, % behind the best, speedup over bsp), in ``where``."""
    if not schedules:
        return
    ranked = _ranking(model, env_json, tuple(schedules), compressor, collective, p)
    where.markdown(f"**Ranking at p = {p}**" + (f" (best: **{ranked['schedule'].iloc[0]}**)" if len(ranked) else ""))
    where.dataframe(ranked, hide_index=True, width="stretch", key="iter_ranking", column_config={
        "rank": st.column_config.NumberColumn("rank", format="%d"),
        "iteration_ms": st.column_config.NumberColumn("iteration (ms)", format="%.4g"),
        "throughput": st.column_config.NumberColumn("throughput (samples/s)", format="%.4g"),
        "behind_best_pct": st.column_config.NumberColumn("behind the best (%)", format="+%.1f"),
        "speedup_over_bsp": st.column_config.NumberColumn("speedup over bsp (x)", format="%.3g")})


@st.fragment
def one_iteration(model: str, env_json: str, schedules: list[str], compressor: str | None, collective: str,
                  library: str, ps: list[int]) -> None:
    """The ranking at one p, that iteration's timeline and breakdown: a fragment, so that its controls rerun only
    this part of the page."""
    env = cm.Environment.from_json(env_json)
    prof = load_model(model)
    st.subheader("One iteration")
    names = cm.schedules()
    c7, c8, _ = st.columns([1, 1, 2])
    schedule = c7.selectbox("schedule", names, index=names.index("fusion"), key="iter_schedule")
    p = int(c8.number_input("p (workers)", min_value=1, max_value=65536, value=64, step=1, key="iter_p"))
    urlstate.publish(SHOWN + (["iter_band"] if ci_environments(env) is not None else []))
    ranking_box = st.container()  # filled once the timeline is drawn: the plot first, the table beside it
    sched = cm.schedule(schedule)
    st.caption(f"**{sched.name}**: {sched.description}. Source: {sched.source}")
    one_comp = compressor
    if compressor and schedule not in COMPRESSIBLE:
        st.warning(f"{schedule} cannot carry a compressor ({compressor}): compression runs on top of "
                   f"{', '.join(COMPRESSIBLE)} only. Its timeline is shown uncompressed.")
        one_comp = None
    one_args = (model, env_json, schedule, p, one_comp, collective)
    one, error = _iteration(*one_args)
    refs = reference_profiles()
    command = iteration_commands(env, model, str(refs[model]) if model in refs else None, ps, schedules, compressor,
                                 collective, library, schedule, p)
    with st.expander("equivalent CLI command (copy with the icon at its right)"):
        st.code(command, language="bash", wrap_lines=True)
        if needs_env_file(command):
            st.download_button("env.json", env_json, file_name="env.json", mime="application/json",
                               key="iter_dl_env", on_click="ignore")
    if one is None:
        st.warning(f"{schedule} at p = {p}: {error}")
        _ranking_table(ranking_box, model, env_json, schedules, compressor, collective, p)
        return
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("iteration time", f"{one['iteration_time'] * 1e3:.4g} ms")
    m2.metric("throughput (samples/s)", f"{one['throughput']:,.0f}")
    m3.metric("scaling efficiency", f"{one['scaling_efficiency']:.1%}")
    m4.metric("speedup", f"{one['speedup']:.4g}x")
    gantt = _gantt_figure(one_args, f"{schedule} on p = {p}" + (f", {one_comp}" if one_comp else ""))
    st.plotly_chart(gantt, width="stretch", key="iter_gantt")
    _ranking_table(ranking_box, model, env_json, schedules, compressor, collective, p)
    if schedule in ("bytescheduler", "dear"):
        st.caption("Steady state: the window between two consecutive forward starts (communication of the "
                   "previous iteration overlaps this forward).")
    elif schedule == "local_sgd":
        st.caption(f"The step that averages the model (every {one['details'].get('H')} steps); the iteration time "
                   "is amortised over the steps.")
    stem = f"{prof.name}_{schedule}"
    d3, d4, d5, _ = st.columns([1, 1, 1, 1])
    meta = {"what": f"one {schedule} iteration's timeline (commscope app, Iteration)", "model": prof.name,
            "environment": f"{env.name}: {env.summary()}", "p": p, "compressor": one_comp}
    d3.download_button("timeline (CSV)", partial(exports.csv_with_header, one["events"], meta),
                       file_name=exports.file_name(f"{stem}_timeline", "csv", env.name, p), mime="text/csv",
                       key="iter_dl_events_csv", on_click="ignore")
    d4.download_button("timeline (HTML, works offline)", partial(exports.offline_html, gantt),
                       file_name=exports.file_name(f"{stem}_timeline", "html", env.name, p), mime="text/html",
                       key="iter_dl_gantt_html", on_click="ignore")
    d5.download_button("Chrome trace (JSON)", partial(_trace, *one_args),
                       file_name=exports.file_name(f"{stem}_trace", "json", env.name, p), mime="application/json",
                       key="iter_dl_trace",
                       help="Opens in chrome://tracing or ui.perfetto.dev, beside a measured torch.profiler trace.",
                       on_click="ignore")

    # ------------------------------------------------------------------------------ breakdown
    st.subheader(f"Breakdown at p = {p}")
    compared = tuple(dict.fromkeys([*schedules, schedule]))
    breakdown_args = (model, env_json, p, compared, compressor, collective)
    _, bproblems = _breakdowns(*breakdown_args)
    for problem in bproblems:
        if problem.schedule != schedule:
            st.caption(problem.describe([p]))
    st.plotly_chart(_breakdown_figure(breakdown_args), width="stretch", key="iter_breakdown")
    b1, b2 = st.columns(2)
    table = one["breakdown"].assign(ms=lambda d: d["seconds"] * 1e3, share=lambda d: d["share"] * 100)
    total = pd.DataFrame([{"part": "iteration time", "ms": one["iteration_time"] * 1e3, "share": 100.0}])
    b1.markdown(f"**{schedule}**")
    b1.dataframe(pd.concat([table[["part", "ms", "share"]], total], ignore_index=True), hide_index=True,
                 width="stretch", column_config={"ms": st.column_config.NumberColumn("ms", format="%.4g"),
                                                 "share": st.column_config.NumberColumn("share (%)",
                                                                                        format="%.1f")})
    b2.markdown("**communication**")
    b2.dataframe(one["stats"][["quantity", "shown"]], hide_index=True, width="stretch",
                 column_config={"shown": "value"})


one_iteration(model, env_json, schedules, compressor, collective, library, ps)
