"""The app's shared helpers without Streamlit: palette, exports, URL state parsing, CLI commands, CI bands."""

from __future__ import annotations

import datetime as dt
import io
import re
import shlex

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")

import costmodels as cm
from app import cli_commands, exports, palette
from app.data import collective_curves, crossover_marks, crossover_table
from app.data_iteration import ranking_at, scaling_curves
from app.data_measured import parameter_table
from app.data_tta import ranking_table, tta_table
from app.data_uncertainty import ci_environments, collective_band, scaling_band
from app.figures import collective_figure, size_ticks
from app.figures_convergence import tta_bar_figure
from app.figures_iteration import scaling_figure
from app.urlstate import Param, fmt, parse
from runners import reference
from runners.cli import main

FITTED = cm.Environment.load(reference.VALIDATION_DIR / "1gbit-2x2" / "environment.json")
SIZES = np.geomspace(2.0**10, 2.0**30, 81)


# ------------------------------------------------------------------------------------------ palette
def test_one_colour_per_technique_on_every_figure() -> None:
    curves, _ = scaling_curves(cm.profile("resnet50"), cm.environment("10GbE"), [8, 16], ["bsp", "dear", "wfbp"])
    lines = {tr.name: tr.line.color for tr in scaling_figure(curves).data}
    tta = tta_table("resnet50", cm.environment("10GbE"), 32, 1e-3, ["sgd", "local_sgd", "dpsgd"], {})
    bars = tta_bar_figure(tta).data[0]
    bar_colors = {palette.base_name(y): c for y, c in zip(bars.y, bars.marker.color, strict=True)}
    assert lines["dear"] == palette.color("dear") and lines["bsp"] == palette.color("sgd") == bar_colors["sgd"]
    assert bar_colors["local_sgd"] == palette.color("local_sgd:16") == palette.color("local_sgd (flatten)")
    assert len({palette.color(n) for n in palette.TECHNIQUES}) == len(palette.TECHNIQUES)  # all distinct
    names = cm.collectives("allreduce", include_bounds=False)  # no two algorithms of one primitive alike
    assert len({palette.color(n) for n in names}) == len(names)
    assert palette.color("someone's own") == palette.color("someone's own")  # stable for unknown names
    fig = collective_figure(collective_curves(names[:3], 8, cm.environment("10GbE"), SIZES), "time_s")
    assert [tr.line.color for tr in fig.data[:3]] == [palette.color(n) for n in names[:3]]


# ------------------------------------------------------------------------------------------ exports
def test_offline_html_loads_nothing_from_another_host() -> None:
    fig = collective_figure(collective_curves(["ring_allreduce"], 8, cm.environment("10GbE"), SIZES), "time_s")
    html = exports.offline_html(fig)
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html, flags=re.I)
    external = [t for t in tags if re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", t, flags=re.I)]
    assert tags and not external, external
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js is inside the page


def test_csv_has_a_metadata_header_and_integer_sizes() -> None:
    df = collective_curves(["ring_allreduce"], 8, cm.environment("10GbE"), np.geomspace(1000.0, 1e6, 7))
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    text = exports.csv_with_header(df, {"what": "allreduce", "environment": "10GbE: x", "p": 8}, now=when)
    head = [line for line in text.splitlines() if line.startswith("#")]
    assert head[:3] == ["# what: allreduce", "# environment: 10GbE: x", "# p: 8"]
    assert head[3].startswith("# commscope: ") and head[4] == "# date: 2026-01-02T03:04:05Z"
    back = pd.read_csv(io.StringIO(text), comment="#")
    assert back["bytes"].dtype.kind == "i" and list(back["bytes"]) == [round(x) for x in df["bytes"]]
    assert ",1000," in text and "1000.0" not in text


def test_file_names_carry_environment_and_p() -> None:
    assert exports.file_name("allreduce", "csv", "10GbE", 64) == "allreduce_10GbE_p64.csv"
    name = exports.file_name("scaling", "html", "fitted:1gbit-2x2", (2, 4096))
    assert name == "scaling_fitted_1gbit-2x2_p2-4096.html"
    assert exports.file_name("x/../y", "json") == "x_.._y.json"


# ------------------------------------------------------------------------------------------ URL state
@pytest.mark.parametrize(("param", "text", "value"), [
    (Param("int", 1, 100), "64", 64), (Param("float", 0, 1), "0.25", 0.25), (Param("bool"), "1", True),
    (Param("list", options=["a", "b"]), "b,a", ["b", "a"]), (Param("range", 0, 40), "10,32", (10, 32)),
    (Param("frange", options=[8.0, 8.25]), "8,8.25", (8.0, 8.25)), (Param("str", options=[80, 90]), "90", 90),
])
def test_url_values_round_trip(param: Param, text: str, value) -> None:
    assert parse(param, text) == value and parse(param, fmt(value)) == value


@pytest.mark.parametrize(("param", "text", "why"), [
    (Param("int", 1, 100), "abc", "not a number"), (Param("int", 1, 100), "1000", "outside"),
    (Param("int", 1, 100), "2.5", "not an integer"), (Param("float", 0, 1), "nan", "not a finite number"),
    (Param("list", options=["a"]), "a,z", "unknown z"), (Param("str", options=["a"]), "z", "not one of"),
    (Param("range", 0, 4), "1", "two numbers"), (Param("bool"), "yes", "not 1 or 0"),
])
def test_bad_url_values_say_why(param: Param, text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse(param, text)


# ------------------------------------------------------------------------------------------ CLI commands
def _run(capsys: pytest.CaptureFixture[str], command: str) -> str:
    words = shlex.split(command.split("  #")[0])
    assert words[0] == "commscope"
    code = main(words[1:])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_the_commands_the_pages_offer_run(capsys: pytest.CaptureFixture[str], monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(reference.VALIDATION_DIR.parents[2])  # the shipped files' paths are relative to the repo
    env = cm.environment("10GbE")
    out = _run(capsys, cli_commands.collective_command(env, "allreduce", ["ring_allreduce"], 8, 10, 20, "nccl"))
    assert "ring_allreduce" in out and "--library nccl" in cli_commands.collective_command(
        env, "allreduce", [], 8, 10, 20, "nccl")
    iteration = cli_commands.iteration_commands(env, "resnet50", None, [2, 4], ["bsp", "dear"], "fp16", "auto",
                                                env.library, "dear", 4).splitlines()
    assert "--schedule bsp --compressor fp16" in iteration[0] and "--trace iteration.json" in iteration[1]
    assert "--compressor" not in iteration[1]  # dear carries no compressor: its timeline is uncompressed
    trace = tmp_path / "it.json"
    assert "bsp" in _run(capsys, iteration[0]) and "dear" in _run(capsys, iteration[1].replace("iteration.json",
                                                                                              str(trace)))
    assert trace.exists()
    tta = cli_commands.tta_command(FITTED, "resnet50", 8, 1e-3, ["sgd", "local_sgd:16"], {"sigma": 2.0})
    assert "--env runners/reference/validation/1gbit-2x2/environment.json" in tta and "--sigma 2" in tta
    assert "local_sgd" in _run(capsys, tta)
    conv = cli_commands.convergence_command(["sgd", "local_sgd"], 1e-2, {"L": 2.0, "H": 4.0, "kappa": 3.0})
    assert "--L 2 --H 4 --constant kappa=3" in conv
    assert "sgd" in _run(capsys, cli_commands.convergence_command(["sgd", "local_sgd"], 1e-2, {"L": 2.0, "H": 4.0}))
    assert "tp" in _run(capsys, cli_commands.llm_command("llama3-8b", 64, "8xH100-NVLink+IB-NDR", 80, 3))
    fit = cli_commands.fit_command(["runners/reference/validation/200mbit/records.jsonl"], ["allreduce"],
                                   ["ring_allreduce"], "mean", "auto", 16, "two", "fitted:200mbit")
    assert "--method two" in fit and "--min-size" not in fit
    assert "ring_allreduce" in _run(capsys, fit.replace(" --out fitted_200mbit.json", ""))
    custom = cm.Environment(alpha=1e-5, beta=1e-9)
    assert cli_commands.needs_env_file(cli_commands.tta_command(custom, "resnet50", 8, 1e-3, ["sgd"], {}))
    cheap = cli_commands.iteration_commands(env, "resnet50", None, [2], ["bsp"], None, "cheapest", "ideal", "bsp", 2)
    assert "# 'cheapest per message' has no flag" in cheap and "prices with ideal" in cheap


# ------------------------------------------------------------------------------------------ answers
def test_crossovers_equal_the_cost_models_and_are_marked() -> None:
    env = cm.environment("10GbE")
    table = crossover_table(["ring_allreduce", "double_binary_tree_allreduce"], 64, env, 2.0**32)
    exact = cm.crossover("ring_allreduce", "double_binary_tree_allreduce", p=64, env=env, n_max=2.0**32)
    assert table["bytes"].iloc[0] == pytest.approx(exact.sizes[0], rel=1e-8)
    assert table["faster below"].iloc[0] == exact.cheaper_below
    marks = crossover_marks(table, 1.0, 2.0**32)
    fig = collective_figure(collective_curves(["ring_allreduce"], 64, env, SIZES), crossovers=marks)
    assert [s.x0 for s in fig.layout.shapes if s.name == "crossover"] == [marks[0][0]]
    assert crossover_marks(table, 1.0, marks[0][0] / 2) == []  # outside the drawn range: not marked


def test_size_axis_in_binary_units() -> None:
    vals, text = size_ticks(2**10, 2**32)
    assert "1KiB" in text and "1MiB" in text and "1GiB" in text and vals[0] == 2**10
    fig = collective_figure(collective_curves(["ring_allreduce"], 8, cm.environment("10GbE"), SIZES), "busbw_GBps")
    assert "1MiB" in fig.layout.xaxis.ticktext and fig.data[0].customdata[0][0] == "1KiB"  # hover in KiB too


def test_iteration_ranking_at_p() -> None:
    curves, _ = scaling_curves(cm.profile("resnet50"), cm.environment("10GbE"), [16], ["bsp", "wfbp", "dear"])
    r = ranking_at(curves, 16).set_index("schedule")
    t = curves.set_index("schedule")["iteration_time_s"]
    assert list(r["rank"]) == [1, 2, 3] and r["behind_best_pct"].iloc[0] == 0
    assert r.loc["dear", "speedup_over_bsp"] == pytest.approx(t["bsp"] / t["dear"])
    assert r.loc["wfbp", "behind_best_pct"] == pytest.approx((t["wfbp"] / t.min() - 1) * 100)
    assert ranking_at(curves, 7).empty


def test_tta_ranking_table() -> None:
    table = tta_table("resnet50", cm.environment("10GbE"), 32, 1e-3, ["sgd", "local_sgd", "dpsgd"], {})
    r = ranking_table(table)
    assert list(r["rank"]) == list(range(1, len(r) + 1)) and r["behind_best_pct"].iloc[0] == 0
    sgd = table.set_index("technique").loc["sgd", "seconds"]
    row = r[r["technique"].str.startswith("local_sgd")].iloc[0]
    assert row["speedup_over_sgd"] == pytest.approx(sgd / row["seconds"])


def test_ci_bands_bracket_the_fitted_prediction() -> None:
    low, high = ci_environments(FITTED)
    params = FITTED.metadata["parameters"]
    assert low.alpha == params["alpha"]["ci95"][0] and high.beta == params["beta"]["ci95"][1]
    assert low.intra_alpha == FITTED.intra_alpha  # not identifiable: not varied
    assert ci_environments(cm.environment("10GbE")) is None
    curves = collective_band(collective_curves(["ring_allreduce"], 8, FITTED, SIZES), 8, FITTED)
    assert (curves["time_lo_s"] <= curves["time_s"]).all() and (curves["time_s"] <= curves["time_hi_s"]).all()
    assert (curves["time_hi_s"] > curves["time_lo_s"] * 1.01).all()
    fig = collective_figure(curves, "busbw_GBps")
    assert [tr.meta for tr in fig.data] == ["band", "band", "algorithm", "lower bound"]
    prof = cm.profile("resnet50")
    base, _ = scaling_curves(prof, FITTED, [4, 8], ["bsp"])
    band = scaling_band(base, *(scaling_curves(prof, e, [4, 8], ["bsp"])[0] for e in (low, high)))
    assert (band["iteration_time_s_lo"] <= band["iteration_time_s"]).all()
    assert (band["iteration_time_s"] <= band["iteration_time_s_hi"]).all()


def test_burst_bytes_is_listed_with_the_parameters() -> None:
    table = parameter_table({"1gbit-2x2": FITTED.to_dict()}).set_index("parameter")
    assert table.loc["burst_bytes", "readable"] == "500,000 B" and table.loc["burst_bytes", "unit"] == "B"


def test_algorithms_equal_up_to_rounding_do_not_cross_at_every_size() -> None:
    env = cm.Environment.load(reference.VALIDATION_DIR / "1gbit-2x2" / "environment.json")
    table = crossover_table(["ring_allreduce", "rabenseifner_allreduce_general", "double_binary_tree_allreduce"], 4,
                            env, 2.0**32)
    a, b = table["algorithm A"], table["algorithm B"]
    pair = table[(a == "ring_allreduce") & (b == "rabenseifner_allreduce_general")]
    assert len(pair) <= 1  # equal on 4 ranks (was hundreds of "crossovers" from rounding)
    assert len(crossover_marks(table, 2.0**10, 2.0**32)) <= 3
