"""Narayanan et al. 2021 (SC'21) Table 1 predicted on Selene's preset, with nothing fitted to the table."""

from __future__ import annotations

import numpy as np
import pytest
from scripts import load_script

from costmodels.llm import published, published_llama3
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


def _errors(**options) -> tuple[np.ndarray, str]:
    rows = published.compare(**options)
    errors = np.array([c.error for c in rows])
    report = ", ".join(f"{c.row['params_B']}B {c.predicted:.0f} vs {c.published:.0f} ({c.error:+.1%})" for c in rows)
    return errors, report


def test_predicted_tflops_per_gpu_within_30_percent():
    """Every row within 30%; the small models (no pipeline) within 10%."""
    assert ACHIEVED == 0.48, "the achieved fraction comes from an independent source; never fit it to this table"
    errors, report = _errors()
    assert np.all(np.abs(errors) <= 0.30), report
    assert np.all(np.abs(errors[:4]) <= 0.10), report


@pytest.mark.xfail(strict=True, reason="median error 12.8% (goal 10%): the achieved fraction of peak is one "
                   "constant (0.48), below what the pipeline rows need (the 1T row's published 163 TFLOP/s is 52% "
                   "of peak, above 0.48 with any bubble and communication); the kernel model (achieved=None) has the "
                   "right trend but its GEMM ceiling (CUDA 12.1, 2023) over-predicts the runs' 2020 software")
def test_median_error_meets_goal():
    errors, report = _errors()
    assert np.median(np.abs(errors)) <= GOAL, report


def test_kernel_model_over_predicts_table1_evenly():
    """With the kernel model (GEMMs by shape at the 2023 matmul ceiling, element-wise work by bytes) every row is
    over-predicted by 10-30%, within 15 points of each other (the single fraction: -26.5% to +8.3%): the trend
    over model size is right, the level is that of a newer software stack than the runs' (module docstring)."""
    errors, report = _errors(achieved=None)
    assert np.all((errors > 0.10) & (errors < 0.30)), report
    assert errors.max() - errors.min() < 0.15, report
    before, _ = _errors()
    assert errors.max() - errors.min() < (before.max() - before.min()) / 2, report


@pytest.mark.xfail(strict=True, reason="kernel model: median error 17.9% on Table 1, every row over-predicted (the "
                   "GEMM ceiling is a CUDA 12.1 measurement; the runs used the PyTorch 20.12 container, CUDA 11.1)")
def test_kernel_model_median_error_meets_goal():
    errors, report = _errors(achieved=None)
    assert np.median(np.abs(errors)) <= GOAL, report


# ------------------------------------------------------------------ Dubey et al. 2024 (Llama 3 405B), Table 4
def test_llama3_table_transcribed_with_citation():
    t = published_llama3.table()
    assert "Llama 3 Herd" in t["citation"] and "Table 4" in t["citation"]
    assert [(r["gpus"], r["cp"], r["tflops_per_gpu"]) for r in t["rows"]] == [(8192, 1, 430), (16384, 1, 400),
                                                                             (16384, 16, 380)]
    for row in t["rows"]:  # the table's own arithmetic
        assert row["tp"] * row["cp"] * row["pp"] * row["dp"] == row["gpus"]
        tokens = row["dp"] * row["batch_per_dp"] * row["seq_len"]
        assert abs(tokens / 2**20 - row["tokens_per_batch_M"]) < 0.05 * row["tokens_per_batch_M"]
        assert abs(100 * row["tflops_per_gpu"] / t["common"]["peak_tflops"] - row["mfu_percent"]) < 1.0


def test_llama3_rows_are_under_predicted_by_the_single_achieved_fraction():
    """Every row predicted below the published TFLOPs per GPU, within 40%, whatever the unprinted virtual stages:
    the 0.48 achieved fraction (a V100 figure of 2020) is far below what H100 GEMMs of hidden size 16,384 reach
    (the published 430 TFLOPs is 43% of peak *after* the bubble and the exposed communication)."""
    rows = published_llama3.compare()
    report = ", ".join(f"{c.row['gpus']} GPUs cp{c.row['cp']}: {c.predicted:.0f} [{c.low:.0f}-{c.high:.0f}] vs "
                       f"{c.published:.0f} ({c.error:+.1%})" for c in rows)
    for c in rows:
        assert c.low <= c.predicted <= c.high, report
        assert -0.40 <= c.error < 0.0 and c.high < c.published, report


@pytest.mark.xfail(strict=True, reason="Llama 3 Table 4 under-predicted by 28-35% (v = 2) with the default single "
                   "achieved fraction (0.48), where H100 GEMMs at hidden 16,384 reach about 0.8 of peak; the kernel "
                   "model meets the goal (test_llama3_kernel_model_meets_goal)")
def test_llama3_median_error_meets_goal():
    errors = np.array([c.error for c in published_llama3.compare()])
    assert np.median(np.abs(errors)) <= GOAL


def test_llama3_kernel_model_meets_goal():
    """With the kernel model (GEMMs by shape at the H100's measured matmul ceiling, FlashAttention fused, the
    element-wise work by bytes; nothing fitted) the median error is within the goal, every row within 10% at
    v = 2 and the published value inside the range over the unprinted virtual stages."""
    rows = published_llama3.compare(achieved=None)
    report = ", ".join(f"{c.row['gpus']} GPUs cp{c.row['cp']}: {c.predicted:.0f} [{c.low:.0f}-{c.high:.0f}] vs "
                       f"{c.published:.0f} ({c.error:+.1%})" for c in rows)
    errors = np.array([c.error for c in rows])
    assert np.median(np.abs(errors)) <= GOAL and np.all(np.abs(errors) <= 0.10), report
    assert all(c.low <= c.published <= c.high for c in rows), report


def test_published_llm_records_are_in_sync_with_the_tables():
    from pathlib import Path

    from runners import results

    root = Path(__file__).resolve().parents[1]
    tool = load_script("tools/make_published_llm_records.py")
    assert tool.main(["--check"]) == 0, "run tools/make_published_llm_records.py"
    loaded = results.load(root / "runners" / "reference" / "published" / "llm_records.jsonl")
    assert not loaded.bad and len(loaded.records) == 13
    assert {r["origin"] for r in loaded.records} == {"published"}
    assert {r["table"] for r in loaded.records} == {"narayanan2021-table1", "dubey2024-llama3-table4"}
    assert all(r["citation"]["source"] and r["result"]["tflops_per_gpu"] > 0 for r in loaded.records)
