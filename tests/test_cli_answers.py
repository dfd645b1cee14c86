"""The command line's answers (issue 19 item 4): "vs best" and ``--sort`` on the predict tables, ``--csv`` beside
``--json``, ``commscope crossover A B``, and ``predict tta``'s marks explained in every output."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

import costmodels as cm
from runners.cli import main

COLLECTIVE = ["predict", "collective", "-a", "ring_allreduce,recursive_doubling_allreduce", "--env", "10GbE",
              "-p", "8", "-p", "64", "-b", "1KiB", "-e", "1GiB", "-f", "32"]
ITERATION = ["predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8,32", "--schedule",
             "bsp,wfbp,dear"]
TTA = ["predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", "8,32", "--eps", "1e-3", "-a",
       "sgd,local_sgd,signsgd", "--constant", "L1=1", "--constant", "sigma1=1"]


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # one table row per line


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    return out


def error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.startswith("commscope: error: ") and err.count("\n") == 1, err
    return err


def json_rows(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    return json.loads(run_ok(capsys, *argv, "--json"))["results"]


def csv_rows(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(run_ok(capsys, *argv, "--csv"))))


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]


# ------------------------------------------------------------------------------------ vs best and --sort
def test_collective_vs_best_is_time_over_the_fastest_at_the_same_p_and_size(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    rows = json_rows(capsys, *COLLECTIVE)
    env = cm.environment("10GbE")
    for r in rows:
        best = min(cm.collective(a).time(r["bytes"], r["p"], env)
                   for a in ("ring_allreduce", "recursive_doubling_allreduce"))
        assert r["vs_best"] == pytest.approx(r["time_s"] / best - 1, abs=1e-12)
    assert {r["vs_best"] == 0 for r in rows} == {True, False}  # each wins somewhere
    out = run_ok(capsys, *COLLECTIVE)
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "vs best" in header and "vs best: how much longer than the fastest algorithm" in out
    cells = {(r[0], r[1], r[2]): r[5] for r in table_rows(out)}
    for r in rows:
        shown = cells[(r["algorithm"], str(r["p"]), r["size"])]
        assert shown == ("best" if r["vs_best"] == 0 else f"+{r['vs_best']:.1%}")


@pytest.mark.parametrize(("key", "field", "descending"), [("time", "time_s", False), ("vs-best", "vs_best", False),
                                                          ("busbw", "busbw_GBps", True), ("size", "bytes", False)])
def test_collective_sort(capsys: pytest.CaptureFixture[str], key: str, field: str, descending: bool) -> None:
    plain = json_rows(capsys, *COLLECTIVE)
    rows = json_rows(capsys, *COLLECTIVE, "--sort", key)
    assert rows == sorted(plain, key=lambda r: r[field], reverse=descending)  # stable: ties keep their order
    table = table_rows(run_ok(capsys, *COLLECTIVE, "--sort", key))
    assert [(t[0], t[1], t[3]) for t in table] == [(r["algorithm"], str(r["p"]), str(r["bytes"])) for r in rows]


def test_iteration_vs_best_and_sort(capsys: pytest.CaptureFixture[str]) -> None:
    rows = json_rows(capsys, *ITERATION, "--sort", "vs-best")
    for r in rows:
        best = min(x["iteration_s"] for x in rows if x["p"] == r["p"])
        assert r["vs_best"] == pytest.approx(r["iteration_s"] / best - 1, abs=1e-12)
    assert [r["vs_best"] for r in rows] == sorted(r["vs_best"] for r in rows)
    assert sum(r["vs_best"] == 0 for r in rows) == 2  # one best per p
    rows = json_rows(capsys, *ITERATION, "--sort", "throughput")
    assert [r["throughput"] for r in rows] == sorted((r["throughput"] for r in rows), reverse=True)
    out = run_ok(capsys, *ITERATION)
    assert "vs best" in out and [t[4] for t in table_rows(out)].count("best") == 2


def test_a_bad_sort_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--sort must be one of time, vs-best, busbw" in error(capsys, *COLLECTIVE, "--sort", "fastest")
    assert "--sort must be one of time, vs-best, throughput" in error(capsys, *ITERATION, "--sort", "busbw")


# ------------------------------------------------------------------------------------------------- --csv
@pytest.mark.parametrize("argv", [COLLECTIVE, ITERATION])
def test_csv_holds_the_json_rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    rows = json_rows(capsys, *argv)
    table = csv_rows(capsys, *argv)
    assert len(table) == len(rows)
    for r, c in zip(rows, table, strict=True):
        assert list(c) == list(r)
        for k, v in r.items():
            assert c[k] == ("" if v is None else str(v))


def test_convergence_and_tta_csv(capsys: pytest.CaptureFixture[str]) -> None:
    conv = ["predict", "convergence", "--eps", "1e-3", "--bound", "sgd,dpsgd"]
    rows, table = json_rows(capsys, *conv), csv_rows(capsys, *conv)
    assert [c["bound"] for c in table] == ["sgd", "dpsgd"]
    assert [float(c["iterations"]) for c in table] == [r["iterations"] for r in rows]
    assert json.loads(table[1]["constants"]) == rows[1]["constants"]
    table = csv_rows(capsys, *TTA)
    assert [(c["p"], c["algorithm"].split()[0], c["marks"]) for c in table] == [
        ("8", "sgd", "*"), ("8", "local_sgd", ""), ("8", "signsgd", "!^"),
        ("32", "sgd", "*"), ("32", "local_sgd", ""), ("32", "signsgd", "!^")]


@pytest.mark.parametrize("argv", [COLLECTIVE, ITERATION, TTA, ["predict", "convergence", "--eps", "1e-3"]])
def test_json_and_csv_together_are_refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert "give --json or --csv, not both" in error(capsys, *argv, "--json", "--csv")


# ---------------------------------------------------------------------------------------- predict tta marks
def test_tta_json_carries_each_rows_marks_and_their_legend(capsys: pytest.CaptureFixture[str]) -> None:
    from runners.cli.predict_convergence import MARKS

    data = json.loads(run_ok(capsys, *TTA, "--json"))
    assert [x["marks"] for x in data["results"]] == ["*", "", "!^", "*", "", "!^"]
    assert data["legend"] == {k: MARKS[k] for k in ("*", "!", "^")}
    text = run_ok(capsys, *TTA)
    for mark, meaning in data["legend"].items():
        assert f"  {mark}: {meaning}" in text
    assert "Marks after a name" in run_ok(capsys, "predict", "tta", "--help")


# ---------------------------------------------------------------------------------------------- crossover
CROSS = ["crossover", "ring_allreduce", "recursive_doubling_allreduce", "--env", "10GbE", "-p", "8,64"]


def test_crossover_prints_the_sizes_of_costmodels_crossover(capsys: pytest.CaptureFixture[str]) -> None:
    env = cm.environment("10GbE")
    out = run_ok(capsys, *CROSS)
    assert "ring_allreduce vs recursive_doubling_allreduce (allreduce) on 10GbE" in out
    assert "crossover size n* = " in out
    for p in (8, 64):
        x = cm.crossover("ring_allreduce", "recursive_doubling_allreduce", p=p, env=env)
        (size,) = x.sizes
        assert (f"p = {p}: they cross at {cm.format_size(size)} ({size:,.0f} B); recursive_doubling_allreduce is "
                f"faster below {cm.format_size(size)}, ring_allreduce above {cm.format_size(size)}") in out
    data = json.loads(run_ok(capsys, *CROSS, "--json"))
    assert data["primitive"] == "allreduce" and data["formula"] == str(
        cm.crossover_expr("ring_allreduce", "recursive_doubling_allreduce"))
    first = data["results"][0]
    assert first["crossovers_bytes"] == cm.crossover("ring_allreduce", "recursive_doubling_allreduce", p=8,
                                                     env=env).sizes
    assert [r["faster"] for r in first["regions"]] == ["recursive_doubling_allreduce", "ring_allreduce"]
    table = csv_rows(capsys, *CROSS)
    assert [(c["p"], c["faster"]) for c in table] == [("8", "recursive_doubling_allreduce"), ("8", "ring_allreduce"),
                                                      ("64", "recursive_doubling_allreduce"), ("64", "ring_allreduce")]
    assert float(table[0]["to_bytes"]) == float(table[1]["from_bytes"]) == first["crossovers_bytes"][0]


def test_crossover_without_a_crossing_in_range_says_who_is_faster(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, *CROSS[:-1], "8", "--max-size", "64KiB")
    assert "p = 8: no crossover between 1B and 64KiB: recursive_doubling_allreduce is faster everywhere" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["ring_allreduce", "ring_allgather", "--env", "10GbE", "-p", "8"], "a crossover compares two algorithms of one"),
    (["ring_allreduce", "recursive_doubling_allreduce", "--env", "10GbE", "-p", "6"], "power of two"),
    (["ring_allreduce", "recursive_doubling_allreduce", "--env", "10GbE", "-p", "8", "-b", "1MiB", "-e", "1KiB"],
     "--min-size must be below --max-size"),
    (["ring_allreduce", "no_such", "--env", "10GbE", "-p", "8"], "unknown collective"),
    (["ring_allreduce", "recursive_doubling_allreduce", "-p", "8"], "give --env"),
])
def test_crossover_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert message in error(capsys, "crossover", *argv)


def test_predict_warns_when_a_fitted_environment_is_used_far_from_its_data(capsys) -> None:
    """Issue 19 item 3 in the CLI: the fit's plausibility guards, one ``commscope: warning:`` line each on stderr
    (the table itself unchanged); a preset carries no fit and gives none."""
    from pathlib import Path

    fitted = Path(__file__).resolve().parents[1] / "runners/reference/validation/200mbit/environment.json"
    for argv in (["predict", "collective", "-a", "ring_allreduce", "-p", "64", "-b", "1KiB", "-e", "1GiB"],
                 ["predict", "iteration", "--model", "resnet50", "--schedule", "wfbp", "-p", "64"]):
        assert main([*argv, "--env", str(fitted)]) == 0
        err = capsys.readouterr().err
        assert "commscope: warning: used at p = 64, 16x the largest p it was measured on (4)" in err, err
        assert main([*argv, "--env", "10GbE"]) == 0
        assert "warning" not in capsys.readouterr().err
