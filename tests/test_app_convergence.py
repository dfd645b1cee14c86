"""The Convergence and Time-to-accuracy pages: table and figure builders, and the pages through AppTest."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import convergence as cv
import costmodels as cm

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
from app_pages import chart_specs, open_page
from streamlit.testing.v1 import AppTest

from app.data_convergence import (
    CONSTANTS,
    bound_curves,
    bound_info,
    check_constants,
    constants_for,
    constants_needed,
    iterations_table,
    simulated_points,
    simulation_setup,
)
from app.data_tta import technique_spec, tta_sentence, tta_table, winner_table
from app.figures_convergence import bound_figure, tta_bar_figure, winner_map_figure

NAMES = ["sgd", "local_sgd", "topk", "arjevani"]


def _defaults(names: list[str]) -> dict[str, float]:
    return {k: float(CONSTANTS[k].default) for k in constants_needed(names)}


# ------------------------------------------------------------------------------------ convergence data
def test_constants_needed_are_those_of_the_chosen_bounds() -> None:
    assert constants_needed(["sgd", "async_sgd"]) == ["L", "sigma", "Delta", "zeta", "n", "tau"]  # async: zeta as noise
    assert constants_needed(["arjevani"]) == ["L", "sigma", "Delta", "n"]  # drawn per n queries
    assert constants_needed(["signsgd"]) == ["Delta", "n", "L1", "sigma1"]
    assert constants_for("sgd", {"L": 2.0, "H": 8.0, "n": 4.0}) == {"L": 2.0, "n": 4.0}
    assert check_constants(["sgd"], {"L": 1.0, "mu": 5.0}) == []  # sgd does not take mu
    assert "mu = 5" in check_constants(["sgd_sc"], {"L": 1.0, "mu": 5.0})[0]


def test_bound_curves_equal_each_bounds_own_value() -> None:
    c = _defaults(NAMES)
    t = np.geomspace(1, 1e6, 25)
    df = bound_curves(NAMES, c, t)
    assert list(dict.fromkeys(df["bound"])) == NAMES
    for name in ("sgd", "local_sgd", "topk"):
        rows = df[df["bound"] == name]
        assert np.allclose(rows["T"], t)
        assert np.allclose(rows["value"], cv.bound(name).value(t, **constants_for(name, c)), rtol=1e-12)
    sgd = df[df["bound"] == "sgd"].set_index("T")["value"]
    assert sgd[100.0] == pytest.approx(math.sqrt(2) / 20)  # 2 sigma sqrt(2 L Delta / (n T)) at n = 16, T = 100
    # the lower bound at n T queries, only where it holds (eps <= L Delta / 14592)
    lower = df[df["bound"] == "arjevani"]
    assert (lower["kind"] == "lower").all() and (lower["value"] <= 1 / 14592).all()
    expected = cv.bound("arjevani").value(lower["T"].to_numpy() * 16, L=1.0, sigma=1.0, Delta=1.0)
    assert np.allclose(lower["value"], expected)


def test_iterations_table_equals_iterations_to() -> None:
    c = _defaults(NAMES)
    df = iterations_table(NAMES, c, 1e-2).set_index("bound")
    for name in ("sgd", "local_sgd", "topk"):
        assert df.loc[name, "iterations"] == cv.bound(name).iterations_to(1e-2, **constants_for(name, c))
    assert df.loc["local_sgd", "iterations"] == 13043  # the README's and the package docstring's number
    assert df.loc["sgd", "iterations"] == 5000 and df.loc["sgd", "stochastic gradients"] == 5000 * 16
    assert math.isnan(df.loc["arjevani", "iterations"]) and "14592" in df.loc["arjevani", "note"]
    low = iterations_table(["arjevani"], c, 1e-5).iloc[0]
    assert low["stochastic gradients"] == pytest.approx(cv.bound("arjevani").queries_to(1e-5, L=1, sigma=1, Delta=1))
    assert low["iterations"] == math.ceil(low["stochastic gradients"] / 16)
    never = iterations_table(["sgd_sc"], {**_defaults(["sgd_sc"]), "sigma": 1.0}, 1e-12).iloc[0]
    assert never["iterations"] == cv.bound("sgd_sc").iterations_to(1e-12, **constants_for("sgd_sc",
                                                                                           _defaults(["sgd_sc"])))


def test_bound_info_has_latex_assumptions_source_and_derivation() -> None:
    info = bound_info("local_sgd")
    b = cv.bound("local_sgd")
    assert info["latex"].startswith(r"\begin{aligned}B(\gamma, T) &= " + sp.latex(b.in_step))
    assert r"\gamma_{\max} &= " + sp.latex(b.step_max) in info["latex"] and sp.latex(b.disagreement) in info["latex"]
    assert bound_info("sgd")["latex"].count(r"\\") == 2  # B, gamma, gamma_max
    assert len(bound_info("choco_sgd")["latex"]) < 1000  # its long factors abbreviated as P_0, P_1
    assert any(a.startswith("H (local steps)") for a in info["assumptions"])
    assert any("(default 0)" in a for a in info["assumptions"])  # zeta
    assert "Koloskova" in info["source"] and info["derivation"]


def test_simulation_setup_reproduces_the_constants() -> None:
    c = {**_defaults(["local_sgd", "dpsgd", "topk", "qsgd", "powersgd"]), "zeta": 0.5, "Delta": 3.0, "n": 8.0}
    s = simulation_setup("local_sgd", c)
    got = s.problem.constants()
    for k in ("L", "sigma", "zeta", "Delta", "n"):
        assert got[k] == pytest.approx(c[k], rel=1e-9)
    assert s.params == {"H": 8}
    assert simulation_setup("dpsgd", {**c, "gap": 0.3}).params == {"topology": "ring"}  # ring at n = 8: 0.35
    assert simulation_setup("dpsgd", {**c, "gap": 1.0}).params == {"topology": "complete"}
    assert simulation_setup("topk", {**c, "delta": 0.25}).params == {"density": 0.25}
    assert simulation_setup("qsgd", {**c, "omega": 2.0}).params == {"levels": 2}  # min(16/4, 4/2) = 2
    assert simulation_setup("powersgd", {**c, "delta": 0.5}).params == {"rank": 2}  # 4 x 4: delta = r / 4
    sc = simulation_setup("sgd_sc", {**_defaults(["sgd_sc"]), "D0": 2.0, "mu": 0.2})
    assert sc.problem.constants()["D0"] == pytest.approx(2.0) and sc.problem.mu == pytest.approx(0.2)
    sign = simulation_setup("signsgd", _defaults(["signsgd"]))
    assert sign.problem.constants()["L1"] == pytest.approx(4.0) and sign.problem.constants()["sigma1"] == 4.0
    assert simulation_setup("arjevani", c).problem is None
    assert "64" in simulation_setup("sgd", {**c, "n": 128.0}).reason


def test_simulated_points_are_those_of_cv_simulate() -> None:
    c = _defaults(["sgd", "topk", "arjevani"])
    pts, summary = simulated_points(["sgd", "topk", "arjevani"], c, horizons=(10, 100), replicas=4)
    setup = simulation_setup("sgd", c)
    r = cv.simulate("sgd", setup.problem, T=[10, 100], replicas=4, seed=0)
    sgd = pts[pts["bound"] == "sgd"]
    assert np.allclose(sgd["metric"], r.metric) and np.allclose(sgd["bound_at_simulated"], r.bound)
    assert np.allclose(sgd["bound_at_simulated"], cv.bound("sgd").value([10.0, 100.0], **constants_for("sgd", c)))
    assert (pts["tightness"] >= 1).all()  # the bounds hold
    rows = summary.set_index("bound")
    assert rows.loc["topk", "parameters"] == "density=0.25" and rows.loc["topk", "differs"] == ""
    assert not rows.loc["arjevani", "simulated"]
    sign, why = simulated_points(["signsgd"], _defaults(["signsgd"]), horizons=(10,), replicas=2)
    assert len(sign) == 1 and why.iloc[0]["simulated"] and sign.iloc[0]["tightness"] >= 1


def test_bound_figure_traces_axes_and_eps() -> None:
    c = _defaults(NAMES)
    curves = bound_curves(NAMES, c, np.geomspace(1, 1e6, 25))
    pts, _ = simulated_points(["sgd"], c, horizons=(10, 100), replicas=2)
    fig = bound_figure(curves, pts, eps=1e-2)
    names = [tr.name for tr in fig.data]
    assert names == [*NAMES, "sgd (simulated)", "eps"]
    assert fig.data[3].line.dash == "dash" and fig.data[4].mode == "markers"
    assert fig.data[4].marker.color == fig.data[0].line.color  # a run in its bound's colour
    assert list(fig.data[5].y) == [1e-2, 1e-2]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [tr.name for tr in bound_figure(curves).data] == NAMES


# ------------------------------------------------------------------------------------ time to accuracy
SPECS = ["sgd", "local_sgd:8", "async_sgd", "topk:0.01"]


def test_technique_spec() -> None:
    assert technique_spec("sgd") == "sgd" and technique_spec("local_sgd", 16) == "local_sgd:16"
    assert technique_spec("topk", 0.001) == "topk:0.001" and technique_spec("dpsgd", "torus") == "dpsgd:torus"


def test_tta_table_equals_time_to_accuracy() -> None:
    env = cm.environment("10GbE")
    df = tta_table("resnet50", env, 32, 1e-3, SPECS, {"sigma": 2.0})
    r = cv.time_to_accuracy("resnet50", env, 32, 1e-3, SPECS, sigma=2.0)
    assert sorted(df["technique"]) == sorted(r.algorithms)
    for row in df.itertuples():
        i = r.index(row.technique)
        assert row.seconds == pytest.approx(float(r.seconds[i, 0]))
        assert row.iterations == float(r.iterations[i, 0])
    assert list(df["seconds"]) == sorted(df["seconds"]) and df.iloc[0]["winner"]
    sentence = tta_sentence(df, "resnet50", "10GbE", 32, 1e-3)
    assert f"**{df.iloc[0]['technique']}**" in sentence and f"runner-up {df.iloc[1]['technique']}" in sentence
    fig = tta_bar_figure(df)
    assert list(fig.data[0].y) == list(df["technique"]) and fig.layout.xaxis.type == "log"


def test_winner_map_cells_name_the_fastest_technique() -> None:
    env = cm.environment("10GbE")
    bws, ps = np.geomspace(1e8, 1e11, 7), [2, 8, 32, 128]
    df = winner_table("resnet50", env, bws, ps, 1e-3, SPECS, {})
    assert len(df) == len(bws) * len(ps) * len(SPECS)
    winners = set()
    for (bw, p), cell in df.groupby(["bandwidth_Bps", "p"]):
        fastest = cell.loc[cell["seconds"].idxmin(), "technique"]
        assert (cell["winner"] == fastest).all(), (bw, p)
        winners.add(fastest)
    assert len(winners) > 1  # the map is not one colour
    one = df[(df["p"] == 32) & np.isclose(df["bandwidth_Bps"], bws[3])].set_index("technique")["seconds"]
    direct = tta_table("resnet50", env.with_(beta=1 / bws[3]), 32, 1e-3, SPECS, {}).set_index("technique")["seconds"]
    assert np.allclose(one.sort_index(), direct.sort_index(), rtol=1e-9)
    fig = winner_map_figure(df, here=(env.bandwidth, 32))
    heat = fig.data[0]
    assert len(heat.x) == len(bws) + 1 and len(heat.y) == len(ps) + 1  # cell edges
    ticks = list(heat.colorbar.ticktext)
    z = np.asarray(heat.z)
    cell = df[(df["p"] == ps[2]) & np.isclose(df["bandwidth_Bps"], bws[0])].iloc[0]
    assert ticks[int(z[2, 0])] == cell["winner"]
    assert fig.layout.xaxis.type == "log" and fig.data[1].name == "this environment"


# ------------------------------------------------------------------------------------ the pages
_specs = chart_specs
_page = open_page


@pytest.fixture
def conv() -> AppTest:
    return _page("views/convergence.py")


@pytest.fixture
def tta() -> AppTest:
    return _page("views/time_to_accuracy.py")


def test_convergence_page_renders(conv: AppTest) -> None:
    (spec,) = _specs(conv)
    names = [tr["name"] for tr in spec["data"]]
    assert {"sgd", "arjevani", "sgd (simulated)", "eps"} <= set(names)
    assert len(conv.latex) == len(conv.multiselect(key="conv_bounds").value)
    assert len(conv.dataframe) == 2 and len(conv.expander) >= 5
    assert not conv.warning and not conv.error
    assert [d.proto.label for d in conv.get("download_button")] == ["figure data (CSV)", "figure (HTML, works offline)",
                                                                    "iterations to eps (CSV)"]
    keys = {w.key for w in conv.number_input if w.key != "conv_eps"}
    assert keys == {f"conv_{k}" for k in constants_needed(conv.multiselect(key="conv_bounds").value)}


@pytest.mark.parametrize(
    "change",
    [
        lambda at: at.multiselect(key="conv_bounds").set_value(["sgd", "qsgd"]),
        lambda at: at.number_input(key="conv_eps").set_value(1e-3),
        lambda at: at.select_slider(key="conv_T").set_value((1, 4)),
        lambda at: at.checkbox(key="conv_sim").uncheck(),
        lambda at: at.number_input(key="conv_L").set_value(2.0),
        lambda at: at.number_input(key="conv_sigma").set_value(0.5),
        lambda at: at.number_input(key="conv_Delta").set_value(4.0),
        lambda at: at.number_input(key="conv_zeta").set_value(0.5),
        lambda at: at.number_input(key="conv_n").set_value(4),
        lambda at: at.number_input(key="conv_H").set_value(2),
        lambda at: at.number_input(key="conv_gap").set_value(0.5),
        lambda at: at.number_input(key="conv_delta").set_value(0.5),
    ],
)
def test_convergence_controls_change_the_chart(conv: AppTest, change) -> None:
    before = _specs(conv)
    change(conv).run()
    assert not conv.exception, conv.exception
    assert _specs(conv) != before


def test_convergence_page_constant_widgets_follow_the_bounds(conv: AppTest) -> None:
    conv.multiselect(key="conv_bounds").set_value(["async_sgd", "qsgd"]).run()
    keys = {w.key for w in conv.number_input}
    assert {"conv_tau", "conv_omega"} <= keys and "conv_H" not in keys and "conv_gap" not in keys
    conv.number_input(key="conv_tau").set_value(3).run()
    conv.number_input(key="conv_omega").set_value(8.0).run()
    assert not conv.exception
    sims = conv.dataframe[1].value.set_index("bound")
    assert sims.loc["qsgd", "parameters"] == "levels=1" and sims.loc["async_sgd", "parameters"] == "tau=3"


def test_convergence_page_bad_combinations_warn(conv: AppTest) -> None:
    conv.multiselect(key="conv_bounds").set_value(["sgd_sc", "sgd"]).run()
    conv.number_input(key="conv_mu").set_value(5.0).run()
    assert not conv.exception
    assert any("mu = 5" in w.value for w in conv.warning) and not conv.get("plotly_chart")
    conv.select_slider(key="conv_T").set_value((3, 3)).run()
    assert not conv.exception and any("range of T" in w.value for w in conv.warning)
    conv.multiselect(key="conv_bounds").set_value([]).run()
    assert not conv.exception and any("at least one bound" in i.value for i in conv.info)


def test_time_to_accuracy_page_renders(tta: AppTest) -> None:
    bar, heat = _specs(tta)
    assert bar["data"][0]["type"] == "bar" and heat["data"][0]["type"] == "heatmap"
    assert heat["layout"]["xaxis"]["type"] == "log"
    assert set(heat["data"][0]["colorbar"]["ticktext"]) <= set(bar["data"][0]["y"]) | {"-"}
    assert len(tta.dataframe) == 2 and not tta.warning and not tta.error  # the ranking, every technique
    assert len(tta.get("download_button")) == 4  # CSV and HTML of the bar chart and of the map
    assert "reaches eps = 0.001 first" in tta.markdown[0].value


@pytest.mark.parametrize(
    "change",
    [
        lambda at: at.selectbox(key="tta_model").set_value("gpt2"),
        lambda at: at.number_input(key="tta_eps").set_value(1e-2),
        lambda at: at.number_input(key="tta_p").set_value(8),
        lambda at: at.multiselect(key="tta_techniques").set_value(["sgd", "local_sgd"]),
        lambda at: at.select_slider(key="tta_p_range").set_value((4, 64)),
        lambda at: at.select_slider(key="tta_bw_range").set_value((9.0, 10.0)),
        lambda at: at.number_input(key="tta_param_local_sgd").set_value(64),
        lambda at: at.number_input(key="tta_sigma").set_value(4.0),
        lambda at: at.sidebar.selectbox(key="env_preset").set_value("IB-NDR"),
    ],
)
def test_time_to_accuracy_controls_change_the_charts(tta: AppTest, change) -> None:
    before = _specs(tta)
    change(tta).run()
    assert not tta.exception, tta.exception
    assert _specs(tta) != before


def test_time_to_accuracy_page_empty_choices(tta: AppTest) -> None:
    tta.select_slider(key="tta_p_range").set_value((8, 8)).run()
    assert not tta.exception and any("range" in w.value for w in tta.warning)
    assert len(_specs(tta)) == 1  # the table's chart still shows
    tta.multiselect(key="tta_techniques").set_value([]).run()
    assert not tta.exception and any("at least one technique" in i.value for i in tta.info)


# ------------------------------------------------------------- ratio to SGD, units, schedules, measured constants
def test_tta_table_has_the_ratio_to_sgd_the_schedule_and_a_ranking_in_words() -> None:
    from app.data_tta import ranking_sentence

    env = cm.environment("10GbE")
    df = tta_table("resnet50", env, 32, 1e-3, SPECS, {})
    r = cv.time_to_accuracy("resnet50", env, 32, 1e-3, SPECS)
    sgd = float(r.seconds[r.index("sgd"), 0])
    for row in df.itertuples():
        assert row.ratio_to_sgd == pytest.approx(row.seconds / sgd) and row.schedule == r.schedules[r.index(row.name)]
    assert df.attrs["source"].startswith("unit constants")
    words = ranking_sentence(df)
    ranked = df.sort_values("ratio_to_sgd")["technique"].tolist()
    assert "Ranked by time to eps over SGD's" in words and words.index(ranked[0]) < words.index(ranked[-1])
    assert "Add **sgd**" in ranking_sentence(tta_table("resnet50", env, 32, 1e-3, ["local_sgd"], {}))
    fig = tta_bar_figure(df, metric="ratio_to_sgd")
    assert list(fig.data[0].x) == pytest.approx(list(df["ratio_to_sgd"])) and "ratio" in fig.layout.xaxis.title.text


def _constants_file(directory: Path) -> Path:
    from test_cli_tta import write_constants

    directory.mkdir(parents=True, exist_ok=True)
    return write_constants(directory / "constants.jsonl")


def test_tta_table_with_measured_records(tmp_path: Path) -> None:
    from app.data_tta import shipped_constants

    assert shipped_constants(tmp_path) == ([], [])
    records, files = shipped_constants(_constants_file(tmp_path / "run").parent)
    assert files == ["constants.jsonl"] and records[0]["kind"] == "constants"
    df = tta_table("resnet50", cm.environment("10GbE"), 32, 1e-3, ["sgd", "topk:0.5"], {"L": 2.0}, records)
    assert df.attrs["constants"]["L"] == 2.0 and df.attrs["constants"]["Delta"] == 2.3
    assert "measured on mlp" in df.attrs["source"]
    assert "delta = 0.7 measured" in df.set_index("name").loc["topk", "note"]


def test_time_to_accuracy_page_shows_ratio_to_sgd_by_default_with_units_and_schedules(tta: AppTest) -> None:
    bar, heat = _specs(tta)
    assert tta.radio(key="tta_show").value == "time / SGD's (ratio)"
    assert tta.radio(key="tta_constants").value.startswith("unit")
    assert "SGD's" in bar["layout"]["xaxis"]["title"]["text"] and "(ratio" in bar["layout"]["xaxis"]["title"]["text"]
    for axis in (bar["layout"]["xaxis"], heat["layout"]["xaxis"], heat["layout"]["yaxis"]):
        assert "(" in axis["title"]["text"], axis["title"]  # a unit on every numeric axis
    ranking, df = tta.dataframe[0].value, tta.dataframe[1].value  # the ranking first, every technique in an expander
    assert list(ranking.columns) == ["rank", "technique", "time", "seconds", "behind_best_pct", "speedup_over_sgd"]
    assert "schedule" in df and set(df["schedule"]) >= {"fusion", "fusion + topk:0.01"}
    assert "Ranked by time to eps over SGD's" in tta.markdown[1].value
    assert any("Constants: L = 1" in c.value for c in tta.caption)
    tta.radio(key="tta_show").set_value("time to eps (seconds)").run()
    assert not tta.exception and "(s, log scale)" in _specs(tta)[0]["layout"]["xaxis"]["title"]["text"]


def test_time_to_accuracy_page_measured_constants(tta: AppTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    import app.data_tta

    monkeypatch.setattr(app.data_tta, "SHIPPED_DIR", tmp_path / "empty")
    before = _specs(tta)
    tta.radio(key="tta_constants").set_value("measured (shipped run or upload)").run()
    assert not tta.exception, tta.exception
    box = tta.checkbox(key="tta_shipped")
    assert box.disabled and "none ships yet" in box.label
    assert any("No measured constants yet" in i.value for i in tta.info) and _specs(tta) == before
    monkeypatch.setattr(app.data_tta, "SHIPPED_DIR", _constants_file(tmp_path / "shipped").parent)
    tta.run()
    assert not tta.exception, tta.exception
    box = tta.checkbox(key="tta_shipped")
    assert not box.disabled and "constants.jsonl" in box.label
    box.check().run()  # checked by default on a fresh page; the widget kept its state from the empty directory
    assert not tta.exception, tta.exception
    assert any("measured on mlp" in c.value for c in tta.caption)
    assert _specs(tta) != before


def test_uploaded_constants_records_pass_the_upload_check(tmp_path: Path) -> None:
    from app.uploads import parse_uploads

    data = _constants_file(tmp_path).read_bytes()
    up = parse_uploads([("constants.jsonl", data)])
    assert not up.refused and not up.bad and len(up.of_kind("constants")) == 1
    r = cv.time_to_accuracy("resnet50", "10GbE", 8, 1e-3, ["sgd"], up.of_kind("constants"))
    assert r.constants["L"] == 3.0
