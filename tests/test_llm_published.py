"""Narayanan et al. 2021 (SC'21) Table 1 predicted on Selene's preset, with nothing fitted to the table."""

from __future__ import annotations

import numpy as np
import pytest

from costmodels.llm import published
from costmodels.llm.iteration import ACHIEVED

GOAL = 0.10  # issue 18: median error <= 10% on achieved TFLOP/s per GPU


def test_table_transcribed_with_citation():
    t = published.table()
    assert "Narayanan" in t["citation"] and "Table 1" in t["citation"]
    assert len(t["rows"]) == 10
    last = t["rows"][-1]
    assert (last["hidden"], last["layers"], last["tp"], last["pp"], last["gpus"], last["tflops_per_gpu"]) == (
        25600, 128, 8, 64, 3072, 163)
    for row in t["rows"]:  # the table's own arithmetic: aggregate = per GPU x GPUs, within its rounding
        assert abs(row["tflops_per_gpu"] * row["gpus"] / 1e3 - row["aggregate_pflops"]) < 0.01 * row["aggregate_pflops"]


def _errors() -> tuple[np.ndarray, str]:
    rows = published.compare()
    errors = np.array([c.error for c in rows])
    report = ", ".join(f"{c.row['params_B']}B {c.predicted:.0f} vs {c.published:.0f} ({c.error:+.1%})" for c in rows)
    return errors, report


def test_predicted_tflops_per_gpu_within_30_percent():
    """Every row within 30%; the small models (no pipeline) within 10%."""
    assert ACHIEVED == 0.48, "the achieved fraction comes from an independent source; never fit it to this table"
    errors, report = _errors()
    assert np.all(np.abs(errors) <= 0.30), report
    assert np.all(np.abs(errors[:4]) <= 0.10), report


@pytest.mark.xfail(strict=True, reason="median error 12.8% (goal 10%): the achieved fraction of peak is one constant "
                   "(0.48), while Megatron's kernels reach more of the A100's peak as the hidden size grows (Section "
                   "5.1); the pipeline rows (39B-1T) are under-predicted by 11-27%")
def test_median_error_meets_goal():
    errors, report = _errors()
    assert np.median(np.abs(errors)) <= GOAL, report
