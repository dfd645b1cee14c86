"""The app: figure builders without Streamlit, and the page through Streamlit's AppTest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import costmodels as cm

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from streamlit.testing.v1 import AppTest

from app.data import collective_curves, crossover_table
from app.figures import collective_figure

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def test_collective_curves_skip_points_outside_the_domain() -> None:
    sizes = np.geomspace(1e3, 1e9, 7)
    df = collective_curves(["ring_allreduce", "rabenseifner_allreduce"], 6, cm.environment("10GbE"), sizes)
    assert set(df["algorithm"]) == {"ring_allreduce", "lower_bound_allreduce"}  # rabenseifner needs 2^k
    ring = df[df["algorithm"] == "ring_allreduce"]
    assert np.allclose(ring["time_s"], cm.collective("ring_allreduce").time(sizes, 6, cm.environment("10GbE")))
    assert np.allclose(ring["busbw_GBps"], sizes / ring["time_s"] * 2 * 5 / 6 / 1e9)


def test_crossover_table() -> None:
    df = crossover_table(["ring_allreduce", "recursive_doubling_allreduce", "ring_allgather"], 8,
                         cm.environment("10GbE"), 2.0**40)
    assert len(df) == 1  # allgather is a different primitive
    row = df.iloc[0]
    x = cm.crossover("ring_allreduce", "recursive_doubling_allreduce", p=8, env=cm.environment("10GbE"))
    assert row["bytes"] == pytest.approx(x.sizes[0]) and row["faster below"] == "recursive_doubling_allreduce"


def test_collective_figure_traces_and_axes() -> None:
    sizes = np.geomspace(1e3, 1e9, 13)
    df = collective_curves(["ring_allreduce", "double_binary_tree_allreduce"], 64, cm.environment("IB-HDR"), sizes)
    fig = collective_figure(df, "time_s")
    names = [tr.name for tr in fig.data]
    assert names == ["ring_allreduce", "double_binary_tree_allreduce", "lower_bound_allreduce"]
    assert fig.data[2].line.dash == "dash" and fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert collective_figure(df, "busbw_GBps").layout.yaxis.type == "linear"
    with pytest.raises(ValueError, match="unknown metric"):
        collective_figure(df, "speed")


def _chart(at: AppTest) -> dict:
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    return json.loads(charts[0].proto.spec)


def _names(spec: dict) -> list[str]:
    return [tr["name"] for tr in spec["data"]]


@pytest.fixture
def page() -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    assert not at.exception, at.exception
    return at


def test_page_renders_plot_formulas_and_crossovers(page: AppTest) -> None:
    spec = _chart(page)
    assert "ring_allreduce" in _names(spec) and "lower_bound_allreduce" in _names(spec)
    assert any("T = " in latex.value for latex in page.latex)
    assert len(page.dataframe) == 1  # the crossover table
    assert not page.error


@pytest.mark.parametrize(
    ("change", "check"),
    [
        (lambda at: at.number_input(key="coll_p").set_value(8), lambda a, b: a != b),
        (lambda at: at.radio(key="coll_metric").set_value("busbw_GBps"), lambda a, b: a != b),
        (lambda at: at.checkbox(key="coll_bound").uncheck(), lambda a, b: "lower_bound_allreduce" not in _names(b)),
        (lambda at: at.select_slider(key="coll_range").set_value((4, 20)), lambda a, b: a != b),
        (lambda at: at.sidebar.selectbox(key="env_preset").set_value("IB-NDR"), lambda a, b: a != b),
        (lambda at: at.sidebar.radio(key="env_mode").set_value("custom"), lambda a, b: a != b),
    ],
)
def test_changing_a_control_changes_the_plot(page: AppTest, change, check) -> None:
    before = _chart(page)
    change(page)
    page.run()
    assert not page.exception, page.exception
    assert check(before, _chart(page))


def test_primitive_switch_and_power_of_two_warning(page: AppTest) -> None:
    page.selectbox(key="coll_primitive").set_value("allgather").run()
    assert not page.exception
    assert "ring_allgather" in _names(_chart(page))
    page.selectbox(key="coll_primitive").set_value("allreduce").run()
    page.multiselect(key="coll_algorithms_allreduce").set_value(["ring_allreduce", "rabenseifner_allreduce"]).run()
    page.number_input(key="coll_p").set_value(6).run()
    assert not page.exception
    assert any("rabenseifner_allreduce" in w.value for w in page.warning)


def test_custom_two_level_environment(page: AppTest) -> None:
    page.sidebar.radio(key="env_mode").set_value("custom").run()
    page.sidebar.number_input(key="env_gpus").set_value(8).run()
    assert not page.exception
    page.multiselect(key="coll_algorithms_allreduce").set_value(["ring_allreduce", "hierarchical_allreduce"]).run()
    page.number_input(key="coll_p").set_value(64).run()
    assert "hierarchical_allreduce" in _names(_chart(page))
    page.number_input(key="coll_p").set_value(12).run()  # not a multiple of 8 GPUs per node
    assert any("hierarchical_allreduce" in w.value for w in page.warning)


def test_two_level_preset_defaults_include_hierarchical() -> None:
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["env_preset"] = "8xH100-NVLink+IB-NDR"
    at.run()
    assert not at.exception and "hierarchical_allreduce" in _names(_chart(at))


def test_parameter_server_control(page: AppTest) -> None:
    page.multiselect(key="coll_algorithms_allreduce").set_value(["parameter_server"]).run()
    before = _chart(page)
    page.number_input(key="coll_k").set_value(2).run()
    assert not page.exception and _chart(page) != before


def test_sidebar_choice_survives_page_switches() -> None:
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    at.sidebar.radio(key="env_mode").set_value("fitted").run()
    fitted = at.sidebar.selectbox(key="env_fitted")
    choice = fitted.options[-1]
    fitted.set_value(choice).run()
    assert not at.exception
    for page in ("views/iteration.py", "views/environments.py", "views/collectives.py"):
        at.switch_page(page).run()
        assert not at.exception, at.exception
        assert at.sidebar.radio(key="env_mode").value == "fitted", page
        assert at.sidebar.selectbox(key="env_fitted").value == choice, page
    at.sidebar.radio(key="env_mode").set_value("custom").run()
    at.sidebar.slider(key="env_alpha").set_value(55.0).run()
    at.switch_page("views/iteration.py").run()
    assert at.sidebar.slider(key="env_alpha").value == 55.0


def test_measured_points_and_their_markers() -> None:
    from app.data import measured_points
    from runners import reference

    recs = reference.records("100mbit")
    pts = measured_points(recs, "allreduce")
    mine = [r for r in recs if r["kind"] == "collective" and r["config"]["op"] == "allreduce"]
    assert len(pts) == len(mine) and set(pts["p"]) == {4} and set(pts["network"]) == {"100mbit"}
    assert sorted(pts["time_s"]) == sorted(r["result"]["time_s"] for r in mine)
    assert measured_points(recs, "all_to_all").empty
    sizes = np.geomspace(1e3, 1e7, 9)
    curves = collective_curves(["ring_allreduce"], 4, cm.environment("10GbE"), sizes)
    fig = collective_figure(curves, "time_s", measured=pts)
    marks = [tr for tr in fig.data if tr.mode == "markers"]
    assert len(marks) == 1 and marks[0].name.startswith("measured p=4 (100mbit")
    assert len(marks[0].x) == len(pts) and marks[0].error_y.array is not None


def test_page_overlays_the_reference_sweep(page: AppTest) -> None:
    page.radio(key="coll_measured").set_value("reference").run()
    page.selectbox(key="coll_measured_link").set_value("1gbit").run()
    page.number_input(key="coll_p").set_value(4).run()
    assert not page.exception, page.exception
    names = _names(_chart(page))
    assert any(n.startswith("measured p=4 (1gbit") for n in names)
    page.selectbox(key="coll_primitive").set_value("broadcast").run()
    assert not page.exception and any("no broadcast records" in i.value for i in page.info)
