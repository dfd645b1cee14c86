"""The Large models page: its data and figures without Streamlit, and the page through Streamlit's AppTest."""

from __future__ import annotations

import json
import time

import pytest

import costmodels as cm
from costmodels.llm import PlanResult, llms

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")

from app_pages import chart_specs, open_page

from app.data_llm import (
    answer,
    attribution_table,
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

ENV = "8xH100-NVLink+IB-NDR"


@pytest.fixture(scope="module")
def ranked() -> dict:
    return ranked_plans("llama3-8b", 16, ENV, 80.0, 5)


@pytest.fixture(scope="module")
def result() -> PlanResult:
    return plan_result("gpt3-175b", ENV, {"tp": 8, "pp": 16, "dp": 8, "global_batch": 1536})


def test_choices() -> None:
    assert model_choices() == llms()
    envs = env_choices()
    assert ENV in envs and "8xA100-NVLink+IB-HDR" in envs and "10GbE" not in envs


def test_ranked_plans_are_the_planners(ranked: dict) -> None:
    best = cm.best_plans("llama3-8b", 16, ENV, k=5)
    t = ranked["table"]
    assert list(t["plan"]) == [b.plan.label() for b in best] and list(t["rank"]) == [1, 2, 3, 4, 5]
    assert t["vs_best"].iloc[0] == 0 and (t["vs_best"].diff().dropna() >= 0).all()
    assert 0 < ranked["fitting"] <= ranked["valid"] and ranked["device_memory"] == 80 * 2**30
    assert set(ranked["memory"]["part"]) == {"weights", "gradients", "optimizer", "activations"}


def test_one_plan_tables(result: PlanResult) -> None:
    groups = group_table(result)
    assert set(groups["group"]) == {"tp", "pp", "dp"} and (groups["busy_s"] > 0).all()
    tp = groups[groups["group"] == "tp"].iloc[0]
    assert tp["busy_s"] == pytest.approx(tp["time_s"] * tp["calls"] * 192)  # per micro-batch x 192 micro-batches
    events = timeline_table(result)
    assert set(events["stream"]) == {f"stage {i}" for i in range(16)} and (events["duration_s"] > 0).all()
    trace = json.loads(chrome_trace(result))
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    att = attribution_table(result)
    assert list(att["layer"]) == ["compute", "strategy", "library", "network"]
    assert att.set_index("layer")["seconds"]["compute"] == pytest.approx(result.compute)
    mem = memory_table([result])
    assert mem["gib"].sum() == pytest.approx(mem["total_gib"].iloc[0])


def test_oom_is_flagged_in_the_memory_figure() -> None:
    r = plan_result("gpt3-175b", ENV, {"tp": 8, "pp": 2, "dp": 64, "micro_batch": 4, "global_batch": 1536})
    assert r.oom
    fig = memory_figure(memory_table([r]))
    assert any(a.text == "OOM" for a in fig.layout.annotations)
    assert len(fig.data) == 4


def test_figures(result: PlanResult, ranked: dict) -> None:
    assert len(communication_figure(group_table(result)).data) == 3  # allreduce, send_recv, exposed
    assert {t.name for t in pipeline_figure(timeline_table(result)).data} == {"forward", "backward"}
    assert len(attribution_figure(attribution_table(result)).data[0].x) == 4
    assert len(memory_figure(ranked["memory"]).data) == 4


def test_answer_in_words(ranked: dict) -> None:
    text = answer("llama3-8b", 16, ENV, ranked["table"], [])
    assert text.startswith("best plan for llama3-8b on 16 GPUs") and "MFU" in text and "stays the same" in text
    sw = [{"bandwidth_Bps": 17e9, "from": "a", "to": "b"}, {"bandwidth_Bps": 200e9, "from": "b", "to": "c"}]
    text = answer("llama3-8b", 16, ENV, ranked["table"], sw)
    assert "changes at 17 GB/s per NIC (now 48 GB/s): below it, a." in text


def test_published_table() -> None:
    df, words = published_table()
    assert len(df) == 10 and (df["published_tflops"] > 0).all() and (df["predicted_tflops"] > 0).all()
    assert "median absolute error" in words
    fig = published_figure(df)
    assert len(fig.data[1].x) == 10


# ----------------------------------------------------------------------------------- the page
def test_page_renders_fast_and_answers_in_words() -> None:
    at = open_page("views/large_models.py")
    assert at.title[0].value == "Large models"
    assert at.success[0].value.startswith("best plan for gpt3-175b on 1,024 GPUs on 8xH100-NVLink+IB-NDR")
    assert "GB/s per NIC" not in at.success[0].value  # the bandwidth scan runs on request only
    specs = chart_specs(at)
    assert len(specs) == 5  # memory, communication, pipeline, attribution, published
    best = cm.best_plans("gpt3-175b", 1024, ENV, k=10)
    assert list(at.dataframe[0].value["plan"]) == [b.plan.label() for b in best]
    times = []
    for _ in range(3):
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    assert min(times) < 0.5, times
    at.checkbox(key="llm_scan").check().run()
    assert "GB/s per NIC" in at.success[0].value and not at.exception


def test_page_controls_change_the_answer() -> None:
    at = open_page("views/large_models.py")
    at.selectbox(key="llm_model").set_value("llama3-8b")
    at.number_input(key="llm_gpus").set_value(64).run()
    assert not at.exception, at.exception
    assert at.success[0].value.startswith("best plan for llama3-8b on 64 GPUs")
    second = at.dataframe[0].value["plan"].iloc[1]
    at.selectbox(key="llm_plan").set_value(second).run()
    assert not at.exception, at.exception
    assert any(second in m.value for m in at.markdown)


def test_page_says_when_nothing_fits() -> None:
    at = open_page("views/large_models.py")
    at.number_input(key="llm_gpus").set_value(8)
    at.number_input(key="llm_memory").set_value(8).run()
    assert not at.exception, at.exception
    assert "fits in 8" in at.warning[0].value


def test_kernel_model_is_the_apis_and_shown_on_the_page() -> None:
    """'kernel model' ranks as cm.llm's search(achieved=None) does, prices the published table as
    published.compare(achieved=None), and the page's control, CLI command and answer follow it."""
    from costmodels.llm import llm, search
    from costmodels.llm import published as llm_published

    kernel = ranked_plans("gpt3-175b", 1024, ENV, 80.0, 3, "kernel model")
    want = search(llm("gpt3-175b"), 1024, cm.environment(ENV), device_memory=80 * 2**30, achieved=None).best(3)
    assert list(kernel["table"]["plan"]) == [b.plan.label() for b in want]
    assert list(kernel["table"]["iteration_s"]) == pytest.approx([b.iteration_time for b in want], rel=1e-12)
    fixed = ranked_plans("gpt3-175b", 1024, ENV, 80.0, 3)
    assert kernel["table"]["iteration_s"].iloc[0] != pytest.approx(fixed["table"]["iteration_s"].iloc[0], rel=1e-3)
    df, words = published_table("kernel model")
    assert list(df["predicted_tflops"]) == pytest.approx([c.predicted for c in llm_published.compare(achieved=None)])
    assert "compute priced as kernel model" in words
    r = plan_result("gpt3-175b", ENV, {"tp": 8, "pp": 16, "dp": 8, "global_batch": 1536}, "kernel model")
    assert attribution_table(r, "kernel model")["meaning"].iloc[0] == "kernels by shape"

    at = open_page("views/large_models.py")
    at.radio(key="llm_compute").set_value("kernel model").run()
    assert not at.exception, at.exception
    assert list(at.dataframe[0].value["plan"])[:3] == list(kernel["table"]["plan"])
    assert any("--achieved kernel" in c.value for c in at.code)
    assert any("compute priced as kernel model" in m.value for m in at.markdown)
