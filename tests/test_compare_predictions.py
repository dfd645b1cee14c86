"""tools/compare_predictions.py: the same kept runs predicted before and after a change, side by side."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scripts import load_script

from runners import reference

ROOT = Path(reference.__file__).parents[2]


def _tool():
    return load_script("tools/compare_predictions.py")


def _copy(root: Path, run: str = "validation-run6") -> Path:
    root.mkdir()
    shutil.copy(reference.run_dir(run) / "validation.jsonl", root / "validation.jsonl")  # a run directory of one
    return root


def test_a_run_against_itself_moves_nothing(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    _copy(before / "run6")
    _copy(after / "run6")
    res = _tool().compare(before, after)
    (row,) = res["runs"]
    assert row["before"] == row["after"]
    # validation-run6 (shipped, README): (b) median 2.3%, max 11.2%, winner 6 of 6
    assert row["before"]["cells"] == 54 and row["before"]["winners"] == 6 and row["before"]["winner_cells"] == 6
    assert row["before"]["median"] == pytest.approx(0.023, abs=0.0005)
    assert row["before"]["max"] == pytest.approx(0.112, abs=0.0005)
    assert res["median_worse"] == res["max_worse"] == 0
    assert res["max_within_goal"] == {"before": 1, "after": 1} and res["winners"] == {"before": 6, "after": 6}


def test_a_worse_cell_is_counted(tmp_path: Path) -> None:
    # one cell's (b) error set to +50%: the run's max goes from 11.2% to 50%, beyond the 0.5-point slack and the 15%
    # goal; its median moves by at most one cell's rank (under the 0.3-point slack here: 2.3% -> 2.5%)
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    _copy(before / "run6")
    run = _copy(after / "run6")
    lines = (run / "validation.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["result"]["error_calibrated"] = 0.5
    rec["result"]["predicted_calibrated_s"] = 1.5 * rec["result"]["measured_s"]
    lines[0] = json.dumps(rec)
    (run / "validation.jsonl").write_text("\n".join(lines) + "\n")
    res = _tool().compare(before, after)
    (row,) = res["runs"]
    assert row["after"]["max"] == pytest.approx(0.5)
    assert res["max_worse"] == 1 and res["max_within_goal"] == {"before": 1, "after": 0}
    assert res["median_worse"] == 0
    # the sweep-only prediction (a) was not touched
    assert _tool().compare(before, after, "sweep")["max_worse"] == 0


def test_the_table_says_what_the_rule_is_checked_against(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    test_a_worse_cell_is_counted(tmp_path)
    assert _tool().main([str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    out = capsys.readouterr().out
    assert "run6: median  2.3% ->  2.5%, max 11.2% -> 50.0%, winners 6 -> 6 of 6" in out
    assert "max worse by more than 0.5% on 1 of 1" in out and "runs with max <= 15%: 1 -> 0" in out


@pytest.mark.parametrize(("args", "message"), [
    (["{tmp}/nowhere", "{tmp}/after"], "nowhere is not a directory"),
    (["{tmp}/empty", "{tmp}/after"], "holds no finished validation run"),
    (["{tmp}/other", "{tmp}/after"], "share no run"),
    (["{tmp}/before", "{tmp}/after", "--prediction", "best"], "unknown prediction 'best'; allowed: sweep, "
                                                               "calibrated, defaults"),
    (["{tmp}/before", "{tmp}/after", "--median-slack", "-1"], "--median-slack must be a finite fraction >= 0"),
])
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               message: str) -> None:
    for d in ("before", "after", "empty", "other"):
        (tmp_path / d).mkdir()
    _copy(tmp_path / "before" / "run6")
    _copy(tmp_path / "after" / "run6")
    _copy(tmp_path / "other" / "run5", "validation-run5")
    assert _tool().main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: ") and message in err and err.count("\n") == 1
