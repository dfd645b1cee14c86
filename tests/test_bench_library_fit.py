"""bench/bench_library_fit.py: the sweep fit's error per (environment, primitive) beside the sweep's own standard
error (issue 15, item 6)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script

from runners import reference

ROOT = Path(reference.__file__).parents[2]


def _bench():
    return load_script("bench/bench_library_fit.py")


def test_each_pair_reports_its_sweeps_uncertainty() -> None:
    bench = _bench()
    run = reference.run_dir("validation-run6")
    res = bench.measure(run)
    assert res["of"] == 9 and res["met"] == 8  # the held-out run with 100 iterations below 4 MiB
    for pair in res["pairs"].values():
        assert 0 <= pair["median_beyond_2se"] <= pair["median"] and 0 < pair["median_standard_error"] < 0.1
    # 2500mbit/allreduce by hand: the records' relative standard errors at 64 KiB .. 16 MiB (s / sqrt(k) / mean of
    # their timed iterations), their median
    from runners import results

    statistic = json.loads((run / "2500mbit" / "plan.json").read_text())["fit_statistic"]
    assert statistic == "chain"  # a mean: s / sqrt(k) / mean, without the median's sqrt(pi / 2)
    recs = [r for r in results.load(run / "2500mbit" / "records.jsonl").of_kind("collective")
            if r["config"]["op"] == "allreduce" and r["config"]["bytes"] >= 65536]
    se = [np.std(r["result"]["times"], ddof=1) / np.sqrt(len(r["result"]["times"])) / np.mean(r["result"]["times"])
          for r in recs]
    assert len(se) == 5 and res["pairs"]["2500mbit/allreduce"]["median_standard_error"] == pytest.approx(np.median(se))
    # the three sizes below 4 MiB took 100 iterations, 4 and 16 MiB 10
    assert sorted(len(r["result"]["times"]) for r in recs) == [10, 10, 100, 100, 100]


def test_without_a_directory_every_shipped_run_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("goal met in ") == len(reference.RUNS)
    # each run's own count, as measure() gives it (validation-run6: 8 of 9, the test above)
    counts = ", ".join(f"{run} {bench.measure(reference.run_dir(run))['met']} of 9" for run in reference.RUNS)
    assert out.rstrip().splitlines()[-1] == f"every run: {counts}"
    assert "validation-run6 8 of 9" in counts


def test_a_missing_directory_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert _bench().main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err == f"commscope: error: {tmp_path / 'nowhere'} is not a directory\n"
