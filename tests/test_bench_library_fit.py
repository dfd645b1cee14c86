"""bench/bench_library_fit.py: the sweep fit's error per (environment, primitive) beside the sweep's own standard
error (issue 15, item 6)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from runners import reference

ROOT = Path(reference.__file__).parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_library_fit", ROOT / "bench" / "bench_library_fit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_standard_error_of_a_records_mean_by_hand() -> None:
    bench = _bench()
    # times 1, 2, 3 ms: sample standard deviation 1 ms, over sqrt(3): 0.577 ms
    assert bench.standard_error({"result": {"times": [1e-3, 2e-3, 3e-3]}}) == pytest.approx(1e-3 / np.sqrt(3))
    assert np.isnan(bench.standard_error({"result": {"times": [1e-3]}}))  # one iteration: unknown
    assert np.isnan(bench.standard_error({"result": {}}))


def test_each_pair_reports_its_sweeps_uncertainty() -> None:
    bench = _bench()
    run = reference.run_dir("validation-run6")
    res = bench.measure(run)
    assert res["of"] == 9 and res["met"] == 8  # the held-out run with 100 iterations below 4 MiB
    for pair in res["pairs"].values():
        assert 0 <= pair["median_beyond_2se"] <= pair["median"] and 0 < pair["median_standard_error"] < 0.1
    # 2500mbit/allreduce by hand: the records' relative standard errors at 64 KiB .. 16 MiB, their median
    from runners import results
    from runners.measure.fit.records import record_time

    statistic = json.loads((run / "2500mbit" / "plan.json").read_text())["fit_statistic"]
    recs = [r for r in results.load(run / "2500mbit" / "records.jsonl").of_kind("collective")
            if r["config"]["op"] == "allreduce" and r["config"]["bytes"] >= 65536]
    se = [bench.standard_error(r) / record_time(r, statistic) for r in recs]
    assert len(se) == 5 and res["pairs"]["2500mbit/allreduce"]["median_standard_error"] == pytest.approx(np.median(se))
    # the three sizes below 4 MiB took 100 iterations, 4 and 16 MiB 10
    assert sorted(len(r["result"]["times"]) for r in recs) == [10, 10, 100, 100, 100]
