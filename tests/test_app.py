"""The app: figure builders without Streamlit, and the page through Streamlit's AppTest."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import costmodels as cm

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from streamlit.testing.v1 import AppTest

from app.data import band_table, collective_curves, crossover_table, library_curve
from app.figures import band_edges, collective_figure

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
    assert len(page.dataframe) == 2  # what the library runs (its bands), the crossover table
    assert not page.error


@pytest.mark.parametrize(
    ("change", "check"),
    [
        (lambda at: at.number_input(key="coll_p").set_value(8), lambda a, b: a != b),
        (lambda at: at.radio(key="coll_metric").set_value("time_s"), lambda a, b: a != b),  # busbw by default
        (lambda at: at.checkbox(key="coll_bound").uncheck(), lambda a, b: "lower_bound_allreduce" not in _names(b)),
        (lambda at: at.select_slider(key="coll_range").set_value((4, 20)), lambda a, b: a != b),
        (lambda at: at.sidebar.selectbox(key="env_preset").set_value("IB-NDR"), lambda a, b: a != b),
        (lambda at: at.sidebar.radio(key="env_mode").set_value("custom"), lambda a, b: a != b),
        (lambda at: at.selectbox(key="coll_library").set_value("nccl"), lambda a, b: "library: nccl" in _names(b)),
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
    at.sidebar.selectbox(key="env_library").set_value("nccl").run()
    at.sidebar.checkbox(key="env_sharp").check().run()
    at.switch_page("views/iteration.py").run()
    assert at.sidebar.slider(key="env_alpha").value == 55.0
    assert at.sidebar.selectbox(key="env_library").value == "nccl" and at.sidebar.checkbox(key="env_sharp").value
    assert at.selectbox(key="iter_collective").format_func("auto") == "auto (nccl)"


def test_measured_points_and_their_markers() -> None:
    from app.data import measured_points
    from runners import reference

    recs = reference.records("200mbit")
    pts = measured_points(recs, "allreduce")
    mine = [r for r in recs if r["kind"] == "collective" and r["config"]["op"] == "allreduce"]
    assert len(pts) == len(mine) and set(pts["p"]) == {4} and set(pts["network"]) == {"200mbit"}
    assert sorted(pts["time_s"]) == sorted(r["result"]["time_s"] for r in mine)
    assert measured_points(recs, "all_to_all").empty
    sizes = np.geomspace(1e3, 1e7, 9)
    curves = collective_curves(["ring_allreduce"], 4, cm.environment("10GbE"), sizes)
    fig = collective_figure(curves, "time_s", measured=pts)
    marks = [tr for tr in fig.data if tr.mode == "markers"]
    assert len(marks) == 1 and marks[0].name.startswith("measured p=4 (200mbit")
    assert len(marks[0].x) == len(pts) and marks[0].error_y.array is not None


def test_page_overlays_the_reference_sweep(page: AppTest) -> None:
    page.radio(key="coll_measured").set_value("reference").run()
    page.selectbox(key="coll_measured_link").set_value("2500mbit").run()
    page.number_input(key="coll_p").set_value(4).run()
    assert not page.exception, page.exception
    names = _names(_chart(page))
    assert any(n.startswith("measured p=4 (2500mbit") for n in names)
    page.selectbox(key="coll_primitive").set_value("broadcast").run()
    assert not page.exception and any("no broadcast records" in i.value for i in page.info)


# ------------------------------------------------------------------------ the collective library
SIZES = np.geomspace(2.0**10, 2.0**32, 177)  # the page's default range: 8 sizes per octave


def _bands(spec: dict) -> list[str]:
    """The band labels drawn over the size axis (annotations), left to right."""
    return [a["text"] for a in spec["layout"].get("annotations", []) if a.get("name") == "band"]


def test_library_curve_is_what_the_library_chooses() -> None:
    env = cm.environment("8xH100-NVLink+IB-NDR")
    curve, _ = library_curve("allreduce", 64, env, SIZES)
    want = cm.choose("allreduce", SIZES, 64, env)
    assert set(curve["algorithm"]) == {"library: nccl"} and set(curve["kind"]) == {"library"}
    assert np.allclose(curve["time_s"], want.time) and np.allclose(curve["busbw_GBps"],
                                                                   SIZES / want.time * 2 * 63 / 64 / 1e9)
    labels = [f"{a}/{p}" for a, p in zip(want.algorithm, want.protocol, strict=True)]
    assert list(curve["choice"]) == labels and list(curve["channels"]) == list(want.channels)
    gloo, _ = library_curve("allreduce", 64, env, SIZES, "gloo")  # another library on the same links
    assert set(gloo["algorithm"]) == {"library: gloo"} and not np.allclose(gloo["time_s"], curve["time_s"])
    assert np.allclose(gloo["time_s"], cm.choose("allreduce", SIZES, 64, env.with_(library="gloo")).time)


def test_library_curve_edge_cases() -> None:
    env = cm.environment("10GbE")
    one, _ = library_curve("allreduce", 1, env, SIZES, "nccl")
    assert one.empty  # one rank sends nothing: nothing to draw
    gossip, choice = library_curve("gossip", 8, env, SIZES, "nccl")  # NCCL has no rule: priced as ideal
    assert choice.library == "ideal" and set(gossip["algorithm"]) == {"library: ideal"}


@pytest.mark.parametrize(("preset", "library"), [("10GbE", "gloo"), ("10GbE", "nccl"), ("8xH100-NVLink+IB-NDR", "nccl"),
                                                  ("IB-NDR", "mpich"), ("NVLink-H100", "nccl")])
def test_band_table_follows_choice_bands(preset: str, library: str) -> None:
    _, choice = library_curve("allreduce", 8 if preset == "NVLink-H100" else 64, cm.environment(preset), SIZES,
                              library)
    bands = cm.choice_bands(SIZES, choice)
    table = band_table(SIZES, choice)
    assert list(zip(table["from_bytes"], table["to_bytes"], table["choice"], strict=True)) == bands
    assert list(table["from"]) == [cm.format_size(b[0]) for b in bands]
    first = table.iloc[0]
    assert first["channels"] == str(int(choice.channels[0]))
    assert first["algorithm"] == str(choice.algorithm[0])


def test_figure_draws_the_bands_and_the_library_curve() -> None:
    env = cm.environment("NVLink-A100")
    curve, choice = library_curve("allreduce", 8, env, SIZES)
    bands = cm.choice_bands(SIZES, choice)
    assert len(bands) >= 3
    fig = collective_figure(curve, "busbw_GBps", bands=bands)
    assert [tr.name for tr in fig.data] == ["library: nccl"] and fig.data[0].line.width == 3
    assert [c[1] for c in fig.data[0].customdata] == list(curve["choice"])  # the choice is in the hover
    shapes = fig.layout.shapes
    assert [s.name for s in shapes] == [b[2] for b in bands] == _bands(fig.to_plotly_json())
    assert shapes[0].x0 == SIZES[0] and shapes[-1].x1 == SIZES[-1]
    assert all(a.x1 == b.x0 for a, b in pairwise(shapes))  # they tile the axis
    same = {s.name: s.fillcolor for s in shapes}
    assert all(s.fillcolor == same[s.name] for s in shapes) and len(set(same.values())) == len(same)
    assert band_edges([(1.0, 4.0, "a"), (16.0, 64.0, "b")]) == [(1.0, 8.0, "a"), (8.0, 64.0, "b")]
    assert not collective_figure(curve, "time_s").layout.shapes  # no bands asked, none drawn


def test_page_draws_the_library_choice(page: AppTest) -> None:
    spec = _chart(page)  # 10GbE: gloo, one ring whatever the size
    assert "library: gloo" in _names(spec) and _bands(spec) == ["gloo_ring_allreduce"]
    page.selectbox(key="coll_library").set_value("nccl").run()
    assert not page.exception, page.exception
    spec = _chart(page)
    _, choice = library_curve("allreduce", 64, cm.environment("10GbE"), SIZES, "nccl")
    assert _bands(spec) == [b[2] for b in cm.choice_bands(SIZES, choice)] and len(_bands(spec)) > 1
    shown = next(d.value for d in page.dataframe if "choice" in d.value.columns)
    assert list(shown["choice"]) == _bands(spec)
    assert any("NCCL" in c.value for c in page.caption)  # the library's description and source
    # how NCCL's model fares against the shipped published measurements over the page's sizes, from them
    from runners import reference

    notes = [i.value for i in page.info if "published measurements" in i.value]
    assert len(notes) == 1 and "busbw" in notes[0]
    for label, r in reference.published_regimes("nccl").items():
        assert (label in notes[0]) == (r["low"] < SIZES[-1] and r["high"] > SIZES[0])
    page.selectbox(key="coll_library").set_value("gloo").run()  # nothing published is priced by gloo
    assert not any("published measurements" in i.value for i in page.info)
    page.selectbox(key="coll_library").set_value("nccl").run()
    page.multiselect(key="coll_algorithms_allreduce").set_value([]).run()  # the library's curve alone
    assert not page.exception and _names(_chart(page)) == ["library: nccl"]


def test_page_library_follows_the_environment(page: AppTest) -> None:
    assert page.selectbox(key="coll_library").value == "gloo"
    page.selectbox(key="coll_library").set_value("mpich").run()
    page.number_input(key="coll_p").set_value(16).run()
    assert page.selectbox(key="coll_library").value == "mpich"  # a page choice holds ...
    page.sidebar.selectbox(key="env_preset").set_value("IB-NDR").run()
    assert page.selectbox(key="coll_library").value == "nccl"  # ... until the environment's library changes
    assert "library: nccl" in _names(_chart(page))


def test_page_one_rank_and_unruled_primitive(page: AppTest) -> None:
    page.number_input(key="coll_p").set_value(1).run()
    assert not page.exception and not _bands(_chart(page))
    assert any("one rank sends nothing" in c.value for c in page.caption)
    page.number_input(key="coll_p").set_value(8).run()
    page.selectbox(key="coll_primitive").set_value("gossip").run()
    assert not page.exception and "library: ideal" in _names(_chart(page))
    assert any("no rule for gossip" in c.value for c in page.caption)


CUSTOM = [  # (sidebar control, value), applied in turn to a custom environment; each must change the chart
    ("env_library", "nccl"), ("env_link", "nvlink"), ("env_link", "network"), ("env_cc", 70),
    ("env_oversub", 2.0), ("env_leaf", 64), ("env_sharp", True), ("env_gpus", 8), ("env_intra_link", "pcie"),
    ("env_nics", 8), ("env_leaf", 4), ("env_rail", True), ("env_intra_link", "nvlink"), ("coll_p", 8),
    ("env_nvls", True),
]


def test_custom_library_and_fabric_each_change_the_chart(page: AppTest) -> None:
    page.sidebar.radio(key="env_mode").set_value("custom").run()
    assert page.sidebar.selectbox(key="env_library").value == "ideal"
    assert not page.sidebar.get("checkbox") or "env_nvls" not in [c.key for c in page.sidebar.checkbox]
    for key, value in CUSTOM:
        before = _chart(page)
        if key == "coll_p":
            page.number_input(key=key).set_value(value).run()
        else:
            widget = next(w for kind in ("selectbox", "number_input", "checkbox") for w in page.sidebar.get(kind)
                          if w.key == key)
            widget.set_value(value).run()
        assert not page.exception, (key, page.exception)
        assert _chart(page) != before, key
    env_caption = page.sidebar.caption[-1].value
    assert "nccl" in env_caption and "fat tree 2:1 above 4 nodes per leaf" in env_caption
    assert "nvls/Simple" in _bands(_chart(page))


def test_custom_fabric_shows_only_what_the_levels_mean(page: AppTest) -> None:
    page.sidebar.radio(key="env_mode").set_value("custom").run()
    keys = lambda: {w.key for kind in ("selectbox", "number_input", "checkbox")  # noqa: E731
                    for w in page.sidebar.get(kind)}
    assert {"env_oversub", "env_sharp"} <= keys() and not {"env_leaf", "env_nics", "env_nvls"} & keys()
    page.sidebar.selectbox(key="env_link").set_value("nvlink").run()  # one NVLink node: no fat tree, NVLS
    assert "env_nvls" in keys() and not {"env_oversub", "env_sharp"} & keys()
    page.sidebar.selectbox(key="env_link").set_value("network").run()
    page.sidebar.number_input(key="env_gpus").set_value(4).run()
    assert {"env_intra_link", "env_nics", "env_nvls"} <= keys() and "env_rail" not in keys()
    page.sidebar.number_input(key="env_oversub").set_value(4.0).run()
    page.sidebar.number_input(key="env_nics").set_value(4).run()
    assert {"env_leaf", "env_rail"} <= keys()
    page.sidebar.number_input(key="env_gpus").set_value(2).run()  # fewer GPUs than NICs: NICs follow
    assert not page.exception and page.sidebar.number_input(key="env_nics").value == 2


def test_no_download_reruns_the_page() -> None:
    """Every download button in the app passes ``on_click="ignore"``: a click that also reran the script could
    drop the deferred data the click asks for (Streamlit registers each button's callable anew on every run), and a
    download has nothing to recompute. Found by reading the app's source, so a new button without it fails here."""
    import ast

    missing = []
    for path in sorted((Path(__file__).parent.parent / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "download_button":
                on_click = [k.value for k in node.keywords if k.arg == "on_click"]
                if not (on_click and isinstance(on_click[0], ast.Constant) and on_click[0].value == "ignore"):
                    missing.append(f"{path.name}:{node.lineno}")
    assert missing == [], f"download buttons that rerun the page: {missing}"


def test_reruns_add_the_repository_to_sys_path_once() -> None:
    # Streamlit executes app/main.py again on every interaction; each run used to insert the repository root into
    # sys.path once more (after 10 runs, 10 copies, and importlib.metadata listed commscope 10 more times)
    import sys

    at = AppTest.from_file(MAIN, default_timeout=60).run()
    assert not at.exception, at.exception
    root = str(Path(MAIN).resolve().parent.parent)
    copies = sys.path.count(root)
    for _ in range(3):
        at.run()
    assert sys.path.count(root) == copies == 1
