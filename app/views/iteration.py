"""Iteration: iteration time, throughput and scaling efficiency versus p, one iteration's timeline and breakdown."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import costmodels as cm
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
    scaling_curves,
    simulate_iteration,
    terms_text,
    timeline_table,
)
from app.data_iteration import breakdown as breakdown_table
from app.figures_iteration import METRIC_LABELS, breakdown_figure, gantt_figure, scaling_figure
from app.sidebar import environment_picker, library_select
from costmodels.schedules import COMPRESSIBLE

DEFAULT_SCHEDULES = ["bsp", "wfbp", "fusion", "dear"]
INT_PARAMETERS = {"bits": (2, 16), "rank": (1, 1024)}


@st.cache_data(show_spinner=False, max_entries=128)
def _curves(model: str, env_json: str, schedules: tuple[str, ...], compressor: str | None, collective: str,
            lo: int, hi: int, dense: bool):
    env = cm.Environment.from_json(env_json)
    return scaling_curves(load_model(model), env, p_values(lo, hi, dense=dense), schedules, compressor, collective)


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
        "stats": communication_stats(r, prof), "trace": chrome_trace_json(r, f"commscope {schedule} p={p}"),
        "iteration_time": r.iteration_time, "throughput": r.throughput,
        "scaling_efficiency": r.scaling_efficiency, "speedup": r.speedup, "details": dict(r.details),
    }, ""


@st.cache_data(show_spinner=False, max_entries=128)
def _breakdowns(model: str, env_json: str, p: int, schedules: tuple[str, ...], compressor: str | None,
                collective: str):
    return breakdowns(load_model(model), cm.Environment.from_json(env_json), p, schedules, compressor, collective)


# Figures are cached as objects (building one validates every property: tens of ms each), shared by reruns
# and sessions: they are only drawn and exported, never changed.
@st.cache_resource(show_spinner=False, max_entries=64)
def _curves_figure(args: tuple, metric: str, title: str, p_mark: int | None):
    return scaling_figure(_curves(*args)[0], metric, title=title, p_mark=p_mark)


@st.cache_resource(show_spinner=False, max_entries=64)
def _gantt_figure(args: tuple, title: str):
    one = _iteration(*args)[0]
    return gantt_figure(one["events"], title=title, iteration_time=one["iteration_time"])


@st.cache_resource(show_spinner=False, max_entries=64)
def _breakdown_figure(args: tuple):
    return breakdown_figure(_breakdowns(*args)[0], title="iteration time = forward + backward + exposed communication")


env = environment_picker()
env_json = env.to_json()
st.title("Training iteration")
st.caption(f"Environment **{env.name}**: {env.summary()}. Its {terms_text(env)}"
           + ("." if env.has_terms else " (overlap is free; set them in the sidebar's custom environment)."))

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
st.caption(f"**{prof.name}** ({prof.origin}, {prof.device}, {prof.dtype}): {len(prof)} tensors, "
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
    env = env.with_(library=library)
    env_json = env.to_json()
fitted = env.metadata.get("algorithms")
auto_label = "auto (fitted)" if fitted else f"auto ({env.library})"
collective = c6.selectbox(
    "collective", [AUTO, CHEAPEST, *cm.collectives("allreduce", include_bounds=False)],
    format_func=lambda c: {AUTO: auto_label, CHEAPEST: "cheapest per message"}.get(c, c), key="iter_collective",
    help="The algorithm that carries the messages. 'auto' uses the algorithms a fitted environment was fitted "
         "with, else what the environment's collective library runs (NCCL, gloo, MPICH); 'cheapest' takes the "
         "cheapest registered algorithm at every size, which no library does. The ps schedule always uses the "
         "parameter server.")

if compressor and collective not in (AUTO, CHEAPEST) and cm.compressor(comp_name).primitive != "allreduce":
    st.info(f"{compressor} sends its gradients by {cm.compressor(comp_name).primitive}, which the allreduce "
            f"algorithm {collective} cannot carry: choose 'auto' or 'cheapest' as the collective.")
conflicts = compressor_conflicts(schedules, compressor)
if conflicts:
    st.warning(f"Compressor {compressor} cannot run with {', '.join(conflicts)}: compression runs on top of "
               f"{', '.join(COMPRESSIBLE)} only. {'They are' if len(conflicts) > 1 else 'It is'} left out of the "
               "curves and shown uncompressed below.")

# ------------------------------------------------------------------------------------- curves
p_mark = int(st.session_state.get("iter_p", 64))
if not schedules:
    st.info("Choose at least one schedule to plot against p.")
elif hi < lo:
    st.warning("The p range is empty.")
else:
    curve_args = (model, env_json, tuple(schedules), compressor, collective, lo, hi, dense)
    curves, problems = _curves(*curve_args)
    for problem in problems:
        if problem.schedule not in conflicts:
            st.warning(problem.describe(p_values(lo, hi, dense=dense)))
    title = f"{prof.name}, {env.name}" + (f", {compressor}" if compressor else "")
    fig = _curves_figure(curve_args, metric, title, p_mark if 2**lo <= p_mark <= 2**hi else None)
    st.plotly_chart(fig, width="stretch", key="iter_curves")
    d1, d2, _ = st.columns([1, 1, 3])
    stem = f"{prof.name}_{env.name}_scaling".replace(" ", "_")
    d1.download_button("curves (CSV)", lambda: curves.to_csv(index=False), file_name=f"{stem}.csv",
                       mime="text/csv", key="iter_dl_curves_csv")
    d2.download_button("curves (HTML)", lambda: fig.to_html(include_plotlyjs="cdn"), file_name=f"{stem}.html",
                       mime="text/html", key="iter_dl_curves_html")

# ------------------------------------------------------------------------------ one iteration
st.subheader("One iteration")
names = cm.schedules()
c7, c8, _ = st.columns([1, 1, 2])
schedule = c7.selectbox("schedule", names, index=names.index("fusion"), key="iter_schedule")
p = int(c8.number_input("p (workers)", min_value=1, max_value=65536, value=64, step=1, key="iter_p"))
sched = cm.schedule(schedule)
st.caption(f"**{sched.name}**: {sched.description}. Source: {sched.source}")
one_comp = compressor
if compressor and schedule not in COMPRESSIBLE:
    st.warning(f"{schedule} cannot carry a compressor ({compressor}): compression runs on top of "
               f"{', '.join(COMPRESSIBLE)} only. Its timeline is shown uncompressed.")
    one_comp = None
one_args = (model, env_json, schedule, p, one_comp, collective)
one, error = _iteration(*one_args)
if one is None:
    st.warning(f"{schedule} at p = {p}: {error}")
else:
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("iteration time", f"{one['iteration_time'] * 1e3:.4g} ms")
    m2.metric("throughput (samples/s)", f"{one['throughput']:,.0f}")
    m3.metric("scaling efficiency", f"{one['scaling_efficiency']:.1%}")
    m4.metric("speedup", f"{one['speedup']:.4g}x")
    gantt = _gantt_figure(one_args, f"{schedule} on p = {p}" + (f", {one_comp}" if one_comp else ""))
    st.plotly_chart(gantt, width="stretch", key="iter_gantt")
    if schedule in ("bytescheduler", "dear"):
        st.caption("Steady state: the window between two consecutive forward starts (communication of the "
                   "previous iteration overlaps this forward).")
    elif schedule == "local_sgd":
        st.caption(f"The step that averages the model (every {one['details'].get('H')} steps); the iteration time "
                   "is amortised over the steps.")
    stem = f"{prof.name}_{schedule}_p{p}".replace(" ", "_")
    d3, d4, d5, _ = st.columns([1, 1, 1, 1])
    events = one["events"]
    d3.download_button("timeline (CSV)", lambda: events.to_csv(index=False), file_name=f"{stem}_timeline.csv",
                       mime="text/csv", key="iter_dl_events_csv")
    d4.download_button("timeline (HTML)", lambda: gantt.to_html(include_plotlyjs="cdn"),
                       file_name=f"{stem}_timeline.html", mime="text/html", key="iter_dl_gantt_html")
    trace = one["trace"]
    d5.download_button("Chrome trace (JSON)", lambda: trace, file_name=f"{stem}_trace.json",
                       mime="application/json", key="iter_dl_trace",
                       help="Opens in chrome://tracing or ui.perfetto.dev, beside a measured torch.profiler trace.")

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
