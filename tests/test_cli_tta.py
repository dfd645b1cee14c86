"""``commscope predict tta``: the legend of its marks, the schedule priced, the ratio to SGD beside the seconds,
``--constants FILE.jsonl`` (measured "constants" records) and its errors (one ``commscope: error:`` line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_tta import constants_record

from convergence.tta import time_to_accuracy
from runners import results as rs
from runners.cli import main

BASE = ["predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", "32", "--eps", "1e-3"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_constants(path: Path, **kw: object) -> Path:
    """A valid results-store file holding one hand-made "constants" record (see test_tta.constants_record)."""
    rec = constants_record(**kw)  # type: ignore[arg-type]
    run = rs.run_info("gloo", 2, 2, ["cpu", "cpu"])
    rs.append(path, [rs.record("constants", {**rec["config"], "world_size": 2, "steps": 5}, rec["result"], run)])
    return path


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # one table row per line


def test_table_has_schedule_ratio_to_sgd_and_a_legend_for_each_mark(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *BASE, "-a", "sgd,local_sgd,topk,async_sgd,signsgd", "--constant", "L1=1",
                         "--constant", "sigma1=1")
    assert code == 0 and err == "", err
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "local_sgd", "topk", "async_sgd", "signsgd"],
                         L1=1.0, sigma1=1.0)
    assert "schedule priced" in out and "time / SGD's" in out and "s / iteration" in out
    for label, schedule in zip(r.algorithms, r.schedules, strict=True):
        line = next(x for x in out.splitlines() if x.startswith(f"│ {label}"))
        assert schedule in line, (label, line)
    local = next(x for x in out.splitlines() if x.startswith("│ local_sgd"))
    assert f"{r.seconds[1, 0] / r.seconds[0, 0]:.3g}x" in local  # the ratio to sgd beside the seconds
    winner = r.algorithms[int(r.winner[0])]
    assert f"│ {winner} *" in out and "│ signsgd !^" in out
    legend = {x.strip()[0] for x in out.splitlines() if x.startswith("  ") and x.strip()[1:2] == ":"}
    assert legend == {"*", "!", "^", "-"}  # every mark printed, and no other, is explained
    assert "constants: L = 1, sigma = 1, Delta = 1, zeta = 0" in out and "unit constants" in out


def test_without_sgd_the_ratio_is_a_dash_and_the_legend_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *BASE, "-a", "local_sgd,dpsgd")
    rows = [x for x in out.splitlines() if x.startswith("│ ")]
    assert code == 0 and len(rows) == 2 and all("│ -" in x for x in rows)
    assert "  -: no ratio: the reference (sgd" in out and "  *: " in out and "  !: " not in out


def test_constants_file_is_used_and_explicit_flags_override(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    path = write_constants(tmp_path / "c.jsonl")
    code, out, err = run(capsys, *BASE, "-a", "sgd,topk:0.5,topk", "--constants", str(path))
    assert code == 0 and err == "", err
    rec = rs.load(path).records
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "topk:0.5", "topk"], rec)
    assert f"{r.iterations[0, 0]:,.0f}" in out and "measured on mlp" in out
    assert "│ topk (density=0.5) m" in out and "  m: its compressor's delta / omega was measured" in out
    assert "note: topk (density=0.5): delta = 0.7 measured" in out
    code, out, _ = run(capsys, *BASE, "-a", "sgd", "--constants", str(path), "--L", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["constants"]["L"] == 1.0 and data["constants"]["Delta"] == 2.3
    assert data["results"][0]["schedule"] == "fusion" and data["results"][0]["ratio_to_sgd"] == 1.0
    assert data["constants_source"].startswith("measured on mlp")


def bad_line(tmp_path: Path) -> Path:
    path = write_constants(tmp_path / "bad.jsonl")
    with path.open("a") as f:
        f.write("{not json\n")
    return path


def no_constants(tmp_path: Path) -> Path:
    path = tmp_path / "it.jsonl"
    rs.append(path, [rs.record("iteration", {"algorithm": "sgd", "model": "mlp", "batch_size": 8}, {"time_s": 0.1},
                               rs.run_info("gloo", 2, 2, ["cpu", "cpu"]))])
    return path


def negative_l(tmp_path: Path) -> Path:
    return write_constants(tmp_path / "neg.jsonl", L=-1.0)


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda tmp: tmp / "missing.jsonl", "missing.jsonl: no results file"),
    (bad_line, "bad.jsonl: line 2: not JSON"),
    (no_constants, "it.jsonl: holds no 'constants' records"),
    (negative_l, "neg.jsonl: record 0: a constants record has no usable L"),
])
def test_constants_file_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, make,
                                                   fragment: str) -> None:
    code, out, err = run(capsys, *BASE, "-a", "sgd", "--constants", str(make(tmp_path)))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commscope: error: --constants ")
    assert fragment in err, err


def test_delta_is_still_refused_as_a_constant(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *BASE, "-a", "topk", "--constant", "delta=0.5")
    assert out == ""
    assert code == 2 and err.startswith("commscope: error: delta is set by each algorithm")
