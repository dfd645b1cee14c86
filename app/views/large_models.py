"""Large models: ranked parallel plans of a transformer on a GPU cluster, the selected plan's communication per
group, pipeline timeline, memory and three-layer attribution, and Narayanan et al. 2021's Table 1 predicted."""

from __future__ import annotations

from functools import partial

import streamlit as st

import costmodels as cm
from app import exports, urlstate
from app.cli_commands import llm_command
from app.data_llm import (
    COMPUTE,
    DEFAULT_COMPUTE,
    DEFAULT_ENV,
    DEFAULT_MODEL,
    answer,
    attribution_table,
    best_plan_switches,
    chrome_trace,
    env_choices,
    group_table,
    memory_table,
    model_choices,
    plan_result,
    published_table,
    ranked_plans,
    timeline_table,
)
from app.figures_llm import (
    attribution_figure,
    communication_figure,
    memory_figure,
    pipeline_figure,
    published_figure,
)
from app.urlstate import Param

URL = {"llm_model": Param("str", options=model_choices), "llm_gpus": Param("int", 8, 16384),
       "llm_env": Param("str", options=env_choices), "llm_memory": Param("float", 8, 1024),
       "llm_top": Param("int", 1, 50), "llm_scan": Param("bool"),
       "llm_compute": Param("str", options=tuple(COMPUTE))}


@st.cache_data(show_spinner="searching every plan ...", max_entries=64)
def _ranked(model: str, gpus: int, env: str, memory_gib: float | None, top: int, compute: str):
    try:
        return ranked_plans(model, gpus, env, memory_gib, top, compute), ""
    except cm.CommscopeError as exc:
        return None, str(exc)


@st.cache_data(show_spinner=False, max_entries=64)
def _switches(model: str, gpus: int, env: str, device_memory: float, compute: str):
    return best_plan_switches(model, gpus, env, device_memory, compute)


@st.cache_data(show_spinner=False, max_entries=128)
def _detail(model: str, env: str, plan: tuple, compute: str):
    r = plan_result(model, env, dict(plan), compute)
    return {"summary": r.summary(), "groups": group_table(r), "events": timeline_table(r),
            "attribution": attribution_table(r, compute), "memory": memory_table([r]), "bubble": r.bubble,
            "bubble_fraction": r.bubble_fraction, "schedule": r.plan.schedule, "m": r.plan.micro_batches}


@st.cache_data(show_spinner=False, max_entries=8)
def _trace(model: str, env: str, plan: tuple, compute: str) -> str:
    """The plan's pipeline as a Chrome trace (made when the download is clicked)."""
    return chrome_trace(plan_result(model, env, dict(plan), compute))


@st.cache_resource(show_spinner=False, max_entries=64)
def _figures(model: str, env: str, plan: tuple, compute: str):
    d = _detail(model, env, plan, compute)
    return (communication_figure(d["groups"], "communication per group (busy on the busiest stage; exposed)"),
            pipeline_figure(d["events"], f"pipeline of one iteration ({d['schedule']}, {d['m']:g} micro-batches)"),
            attribution_figure(d["attribution"], "three-layer attribution"))


@st.cache_resource(show_spinner=False, max_entries=64)
def _memory_figure(args: tuple):
    ranked = _ranked(*args)[0]
    return memory_figure(ranked["memory"], "memory per GPU of the ranked plans")


@st.cache_data(show_spinner=False)
def _published(compute: str):
    return published_table(compute)


@st.cache_resource(show_spinner=False)
def _published_figure(compute: str):
    return published_figure(_published(compute)[0], f"Narayanan et al. 2021 Table 1: predicted ({compute}) vs "
                                                     "published")


urlstate.restore(URL)
st.title("Large models")
if (problem := urlstate.problems()):
    st.warning(problem)
st.caption("Parallel plans (tensor with sequence, context, pipeline, data with ZeRO, expert parallelism) priced "
           "through the environment's collective library on the links each group crosses (`costmodels.llm`).")

models, envs = model_choices(), env_choices()
c1, c2, c3, c4, c5 = st.columns([1, 1, 2, 1, 1])
model = c1.selectbox("model", models, index=models.index(DEFAULT_MODEL), key="llm_model")
gpus = int(c2.number_input("GPUs", min_value=8, max_value=16384, value=1024, step=8, key="llm_gpus"))
env_name = c3.selectbox("environment", envs, index=envs.index(DEFAULT_ENV), key="llm_env")
memory_gib = float(c4.number_input("device memory (GiB)", min_value=8, max_value=1024, value=80, step=8,
                                   key="llm_memory"))
top = int(c5.number_input("plans shown", min_value=1, max_value=50, value=10, step=1, key="llm_top"))
computes = list(COMPUTE)
compute = st.radio("compute", computes, index=computes.index(DEFAULT_COMPUTE), horizontal=True, key="llm_compute",
                   help="0.48 of the device's peak FLOP/s for every kernel (Megatron-LM's single-GPU figure), or the "
                        "kernel model: each GEMM by its shape at the device's measured matmul ceiling, element-wise "
                        "work at HBM bandwidth (A100 and H100; costmodels/llm/kernels.py)")
urlstate.publish(["llm_model", "llm_gpus", "llm_env", "llm_memory", "llm_top", "llm_scan", "llm_compute"])
env = cm.environment(env_name)
st.caption(f"**{env_name}**: {env.summary()}. **{model}**: {cm.llm(model).description}, "
           f"{cm.llm(model).params / 1e9:.3g} B parameters.")

args = (model, gpus, env_name, memory_gib, top, compute)
ranked, error = _ranked(*args)
if ranked is None or ranked["table"].empty:
    st.warning(error or f"no plan of {model} on {gpus} GPUs fits in {memory_gib:g} GiB per GPU")
    st.stop()

# the bandwidth scan re-plans 17 bandwidths (0.3-0.5 s cold): on request, and last (its answer and list fill
# their places when the rest of the page, plots included, is drawn)
scan = st.checkbox("find the inter-node bandwidths where the best plan changes (a scan of about a second)",
                   key="llm_scan")
answer_slot = st.empty()
answer_slot.success(answer(model, gpus, env_name, ranked["table"], None))

# ------------------------------------------------------------------------------------ ranked plans
st.subheader("Ranked plans")
st.caption(f"{ranked['fitting']:,} of {ranked['valid']:,} valid plans fit in {memory_gib:g} GiB per GPU; "
           f"the {len(ranked['table'])} fastest:")
table = ranked["table"]
st.dataframe(table.assign(vs_best=table["vs_best"] * 100, mfu=table["mfu"] * 100), hide_index=True,
             width="stretch", column_config={
                 "iteration_s": st.column_config.NumberColumn("iteration (s)", format="%.3f"),
                 "vs_best": st.column_config.NumberColumn("vs best (%)", format="+%.2f"),
                 "mfu": st.column_config.NumberColumn("MFU (%)", format="%.1f"),
                 "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
                 "memory_gib": st.column_config.NumberColumn("GiB/GPU", format="%.1f"),
                 "bubble_s": st.column_config.NumberColumn("bubble (s)", format="%.3f"),
                 "exposed_comm_s": st.column_config.NumberColumn("exposed comm (s)", format="%.3f")})
meta = {"what": f"parallel plans of {model} ranked by iteration time (commscope app, Large models; compute: "
                f"{compute})",
        "environment": f"{env_name}: {env.summary()}", "p": f"{gpus} GPUs", "device memory": f"{memory_gib:g} GiB"}
st.download_button("ranked plans (CSV)", partial(exports.csv_with_header, table, meta),
                   file_name=exports.file_name(f"{model}_plans", "csv", env_name, gpus), mime="text/csv",
                   key="llm_dl_plans", on_click="ignore")
with st.expander("equivalent CLI command (copy with the icon at its right)"):
    st.code(llm_command(model, gpus, env_name, memory_gib, top, kernel=compute != DEFAULT_COMPUTE), language="bash",
            wrap_lines=True)
switch_slot = st.empty()
if scan:
    switch_slot.caption("scanning the inter-node bandwidth ...")
st.plotly_chart(_memory_figure(args), width="stretch", key="llm_memory_fig")

# ------------------------------------------------------------------------------------ one plan
st.subheader("One plan")
labels = list(table["plan"])
chosen = st.selectbox("plan", labels, key="llm_plan")
plan = tuple(sorted(ranked["plans"][labels.index(chosen if chosen in labels else labels[0])].items()))
detail = _detail(model, env_name, plan, compute)
comm_fig, gantt_fig, attribution_fig = _figures(model, env_name, plan, compute)
st.markdown(detail["summary"])
st.plotly_chart(comm_fig, width="stretch", key="llm_comm_fig")
st.dataframe(detail["groups"].drop(columns=["bytes"]), hide_index=True, width="stretch")
st.plotly_chart(gantt_fig, width="stretch", key="llm_gantt_fig")
st.caption(f"bubble {detail['bubble']:.3g} s ({detail['bubble_fraction']:.1%} of the iteration).")
st.download_button("pipeline Chrome trace (JSON)", partial(_trace, model, env_name, plan, compute),
                   file_name=exports.file_name(f"{model}_pipeline", "json", env_name, gpus),
                   mime="application/json", key="llm_dl_trace",
                   help="Opens in chrome://tracing or ui.perfetto.dev.", on_click="ignore")
a1, a2 = st.columns([1, 1])
a1.plotly_chart(attribution_fig, width="stretch", key="llm_attr_fig")
att = detail["attribution"]
a2.dataframe(att.assign(share=att["share"] * 100), hide_index=True, width="stretch",
             column_config={"seconds": st.column_config.NumberColumn("seconds", format="%.3f"),
                            "share": st.column_config.NumberColumn("share (%)", format="%.1f")})

# ------------------------------------------------------------------------------------ published
st.subheader("Published: Megatron-LM (Narayanan et al. 2021, Table 1)")
published, words = _published(compute)
st.markdown(words)
p1, p2 = st.columns([1, 1])
p1.plotly_chart(_published_figure(compute), width="stretch", key="llm_published_fig")
p2.dataframe(published.assign(error=published["error"] * 100), hide_index=True, width="stretch",
             column_config={"published_tflops": st.column_config.NumberColumn("published TFLOP/s", format="%.0f"),
                            "predicted_tflops": st.column_config.NumberColumn("predicted TFLOP/s", format="%.0f"),
                            "error": st.column_config.NumberColumn("error (%)", format="%+.1f")})

# ------------------------------------------------------------------------------------ the scan, last
if scan:
    switches = _switches(model, gpus, env_name, ranked["device_memory"], compute)
    answer_slot.success(answer(model, gpus, env_name, ranked["table"], switches))
    if switches:
        switch_slot.markdown("**What would change the best plan** (inter-node bandwidth per NIC scaled 1/16x to 16x, "
                             f"now {1 / env.beta / 1e9:.3g} GB/s):\n"
                             + "\n".join(f"- from {s['bandwidth_Bps'] / 1e9:.3g} GB/s: {s['to']}" for s in switches))
    else:
        switch_slot.empty()
