"""The training thread's page faults in validate's report (runners/validate/prediction.py ``_counted``,
runners/validate/report.py ``fault_figures`` and ``fault_lines``), by hand.

Hand example: ByteScheduler's two repetitions faulted 1,300 and 1,500 pages a step: 1,400 on average, at least
1,400 x 3.0 us = 4.2 ms of a 0.4 s iteration, a share of 1.05%, below the 2% the report lists; flattened BSP's
6,500 pages are 19.5 ms of 0.4 s, 4.9%: listed.
"""

from __future__ import annotations

import math

import pytest

import costmodels as cm
from runners.validate.prediction import _counted
from runners.validate.report import fault_figures, fault_lines, markdown, table_rows


def test_validate_keeps_the_faults_per_step_with_or_without_counters() -> None:
    env = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)
    reps = [{"result": {"minor_faults_per_step": 1300.0, "counters": {"batches": 8.0}}},
            {"result": {"minor_faults_per_step": 1500.0}},
            {"result": {}}]  # a repetition made before the counter: left out
    got = _counted(reps, "fusion", env, 4)
    assert got["minor_faults_per_step"] == pytest.approx(1400.0) and got["counters"] == {"batches": 8.0}
    assert _counted([{"result": {"minor_faults_per_step": 0}}], "fusion", env, 4) == {"minor_faults_per_step": 0.0}
    assert _counted([{"result": {}}], "fusion", env, 4) == {}


def _record(technique: str, options: dict, faults: float | None) -> dict:
    extra = {} if faults is None else {"minor_faults_per_step": faults}
    return {"config": {"technique": technique, "options": options, "environment": "200mbit", "world_size": 4,
                       "model": "resnet_small"},
            "result": {"measured_s": 0.4, "spread": 0.01, "predicted_s": 0.38, "error": -0.05, **extra}}


def test_the_report_lists_the_cells_whose_faults_cost_two_percent() -> None:
    assert fault_figures({"minor_faults_per_step": 1400.0, "measured_s": 0.4}) == pytest.approx(
        {"minor_faults_per_step": 1400.0, "fault_share": 0.0105})
    rows = table_rows([_record("bytescheduler", {}, 1400.0), _record("bsp", {"flatten": True}, 6500.0),
                       _record("wfbp", {}, None)])
    assert rows[1]["fault_share"] == pytest.approx(0.04875) and math.isnan(rows[2]["fault_share"])
    lines = fault_lines(rows)
    assert lines[1].startswith("Page faults of the training thread") and len(lines) == 6
    assert lines[-1] == "| bsp (flatten) | 200mbit | resnet_small | 6500 | 19.5 | 4.9% |"
    assert "| bsp (flatten) | 200mbit | resnet_small | 6500 |" in markdown(rows, "test")
    assert fault_lines(rows[:1]) == [] and fault_lines(rows[2:]) == []  # 1.05%: below; none counted: nothing
