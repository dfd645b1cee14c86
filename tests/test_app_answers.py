"""Answers at a glance, through Streamlit's AppTest: URL state, A against B, CI bands, guards, CLI commands."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from app_pages import MAIN, chart_specs, open_page, values
from streamlit.testing.v1 import AppTest

FITTED = "reference 1gbit-2x2 (4 CPU ranks, emulated link)"


def _page(path: str, query: dict[str, str] | None = None) -> AppTest:
    """The app opened on ``path`` with ``query`` in its URL (as a shared link opens it)."""
    at = AppTest.from_file(MAIN, default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    if path != "views/collectives.py":
        at.switch_page(path).run()
        assert not at.exception, at.exception
    return at


def _names(at: AppTest, key: str) -> list[str]:
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == key)
    return [tr.get("name", "") for tr in spec["data"]]


def _fitted(at: AppTest) -> AppTest:
    at.sidebar.radio(key="env_mode").set_value("fitted").run()
    at.sidebar.selectbox(key="env_fitted").set_value(FITTED).run()
    assert not at.exception, at.exception
    return at


# ------------------------------------------------------------------------------------------ URL state
def test_a_link_opens_the_collectives_page_as_it_was() -> None:
    at = _page("views/collectives.py", {"env_mode": "preset", "env_preset": "IB-NDR", "coll_p": "16",
                                        "coll_primitive": "allgather", "coll_metric": "time_s",
                                        "coll_algorithms_allgather": "ring_allgather", "coll_library": "nccl"})
    assert at.sidebar.selectbox(key="env_preset").value == "IB-NDR"
    assert at.number_input(key="coll_p").value == 16 and at.radio(key="coll_metric").value == "time_s"
    assert at.multiselect(key="coll_algorithms_allgather").value == ["ring_allgather"]
    assert at.selectbox(key="coll_library").value == "nccl"
    assert {"ring_allgather", "library: nccl"} <= set(_names(at, "coll_chart"))
    at.number_input(key="coll_p").set_value(32).run()  # the page writes its state back to the URL
    assert at.query_params["coll_p"] == "32" and at.query_params["env_preset"] == "IB-NDR"
    assert at.number_input(key="coll_p").value == 32  # the URL it wrote is not applied again


def test_a_bad_link_value_is_named_and_the_rest_applied() -> None:
    at = _page("views/collectives.py", {"coll_p": "lots", "coll_metric": "time_s", "env_preset": "nowhere"})
    (warning,) = [w.value for w in at.warning if "Link parameters" in w.value]
    assert "coll_p='lots' (not a number)" in warning and "env_preset='nowhere' (not one of the choices)" in warning
    assert at.number_input(key="coll_p").value == 64 and at.radio(key="coll_metric").value == "time_s"
    assert not at.error


@pytest.mark.parametrize(("path", "query", "key", "value"), [
    ("views/iteration.py", {"iter_p": "8", "iter_schedules": "bsp,dear"}, "iter_p", 8),
    ("views/time_to_accuracy.py", {"tta_p": "8", "tta_model": "gpt2"}, "tta_p", 8),
    ("views/convergence.py", {"conv_eps": "0.001"}, "conv_eps", 0.001),
    ("views/large_models.py", {"llm_gpus": "512"}, "llm_gpus", 512),
])
def test_every_page_reads_its_link(path: str, query: dict[str, str], key: str, value) -> None:
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    at.switch_page(path)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    assert at.number_input(key=key).value == value
    assert at.query_params[key] == str(value)


# ------------------------------------------------------------------------------------------ A against B
def test_pin_a_and_compare_with_b_on_the_iteration_page() -> None:
    at = open_page("views/iteration.py")
    at.button(key="iteration_pin").click().run()
    at.sidebar.selectbox(key="env_preset").set_value("IB-NDR").run()
    assert not at.exception, at.exception
    names = _names(at, "iter_curves")
    assert "A: bsp" in names and "B: bsp" in names and len(names) == 2 * 4
    assert any("**A** = resnet50, 10GbE" in c.value and "**B** = resnet50, IB-NDR" in c.value for c in at.caption)
    spec = chart_specs(at)[0]
    a = next(tr for tr in spec["data"] if tr["name"] == "A: dear")
    b = next(tr for tr in spec["data"] if tr["name"] == "B: dear")
    assert a["line"]["dash"] == "dash" and a["line"]["color"] == b["line"]["color"]
    assert values(a["y"]) != values(b["y"])
    at.button(key="iteration_unpin").click().run()
    assert "A: bsp" not in _names(at, "iter_curves")


def test_pin_a_and_compare_with_b_on_the_collectives_page() -> None:
    at = open_page("views/collectives.py")
    at.button(key="collectives_pin").click().run()
    at.number_input(key="coll_p").set_value(8).run()
    names = _names(at, "coll_chart")
    assert "A: ring_allreduce" in names and "B: ring_allreduce" in names and "A: library: gloo" in names


# ------------------------------------------------------------------------------------------ bands, guards
def test_a_fitted_environment_brings_bands_and_guards_to_collectives() -> None:
    at = _fitted(open_page("views/collectives.py"))
    spec = chart_specs(at)[0]
    assert [tr["meta"] for tr in spec["data"]].count("band") >= 2
    warned = [w.value for w in at.warning]
    assert any("used at p = 64, 16x the largest p it was measured on (4)" in w for w in warned)
    assert any("used at sizes up to 4GiB" in w for w in warned)  # measured up to 16 MiB
    at.checkbox(key="coll_band").uncheck().run()
    assert "band" not in [tr["meta"] for tr in chart_specs(at)[0]["data"]]
    at.number_input(key="coll_p").set_value(4).run()
    assert not any("far outside" in w.value and "p =" in w.value for w in at.warning)


def test_a_fitted_environment_brings_bands_to_iteration_and_the_answers() -> None:
    at = _fitted(open_page("views/iteration.py"))
    names = _names(at, "iter_curves")
    assert "bsp (CI low)" in names and "bsp (CI high)" in names
    ranking = next(d.value for d in at.dataframe if "speedup_over_bsp" in d.value.columns)
    assert ranking["rank"].iloc[0] == 1 and ranking["behind_best_pct"].iloc[0] == 0


def test_measured_page_draws_the_ci_of_prediction_a() -> None:
    at = open_page("views/measured.py")
    points = [tr for tr in chart_specs(at)[0]["data"] if tr.get("meta") == "points"]
    assert points and all(tr["error_y"]["type"] == "data" for tr in points)
    at.checkbox(key="meas_ci").uncheck().run()
    assert all(not tr.get("error_y") for tr in chart_specs(at)[0]["data"] if tr.get("meta") == "points")


def test_every_page_offers_its_command() -> None:
    for path, start in [("views/collectives.py", "commscope predict collective"),
                        ("views/iteration.py", "commscope predict iteration"),
                        ("views/convergence.py", "commscope predict convergence"),
                        ("views/time_to_accuracy.py", "commscope predict tta"),
                        ("views/large_models.py", "commscope plan llm"),
                        ("views/environments.py", "commscope fit")]:
        at = open_page(path)
        assert any(c.value.startswith(start) for c in at.code), path
