"""What a technique did per timed step (its messages, ByteScheduler's batches and negotiation seconds): counted by
the runner, kept in the iteration record as ``counters``, and set beside the model's price in validate's report.

Hand example: two ranks; rank 0 counted 7 and 9 batches over its two timed steps (0.10 and 0.14 s negotiating),
rank 1 6 and 10 (0.08 and 0.16 s): 8 batches and 0.12 s per step, the mean over steps then ranks. The model prices
one negotiation at p = 2 on alpha = 1 ms, beta = 1 us/B as one broadcast of the 47-byte mask: 1 ms + 47 us =
1.047 ms; measured, 0.12 s / 8 = 15 ms per batch.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import costmodels as cm
from runners.training.runner.loop import _counters_over_ranks
from runners.validate.prediction import _counted
from runners.validate.report import markdown, negotiation_lines, table_rows

RANK_STEPS = [[{"partitions": 47.0, "batches": 7.0, "negotiation_s": 0.10},
               {"partitions": 47.0, "batches": 9.0, "negotiation_s": 0.14}],
              [{"partitions": 47.0, "batches": 6.0, "negotiation_s": 0.08},
               {"partitions": 47.0, "batches": 10.0, "negotiation_s": 0.16}]]


class _SumOverRanks:
    """A stand-in for torch.distributed over two ranks: all_reduce(SUM) adds what the other rank holds."""

    class ReduceOp:
        SUM = "sum"

    def __init__(self, other: list[float]) -> None:
        self.other = other

    def all_reduce(self, x, op) -> None:
        import torch

        assert op == "sum"
        x += torch.tensor(self.other, dtype=x.dtype)


def test_counters_are_the_mean_over_steps_then_ranks() -> None:
    import torch

    # rank 1's per-step means, in sorted key order (batches, negotiation_s, partitions): 8, 0.12, 47
    ctx = SimpleNamespace(torch=torch, dist=_SumOverRanks([8.0, 0.12, 47.0]), world=2, device="cpu")
    got = _counters_over_ranks(ctx, RANK_STEPS[0])  # rank 0's: 8, 0.12, 47
    assert got == pytest.approx({"batches": 8.0, "negotiation_s": 0.12, "partitions": 47.0}, rel=1e-12)
    assert _counters_over_ranks(ctx, [{}, {}]) == {}  # nothing counted: no all-reduce, no key


def test_validate_keeps_the_counters_and_prices_one_negotiation() -> None:
    env = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)
    reps = [{"result": {"counters": {"partitions": 47.0, "batches": 7.0, "negotiation_s": 0.105}}},
            {"result": {"counters": {"partitions": 47.0, "batches": 9.0, "negotiation_s": 0.135}}},
            {"result": {}}]  # a repetition made before the counters: left out
    got = _counted(reps, "bytescheduler", env, 2)
    assert got["counters"] == pytest.approx({"partitions": 47.0, "batches": 8.0, "negotiation_s": 0.12}, rel=1e-12)
    assert got["negotiation_priced_s"] == pytest.approx(1.047e-3, rel=1e-9)
    assert "negotiation_priced_s" not in _counted(reps, "wfbp", env, 2)
    assert _counted([{"result": {}}], "bytescheduler", env, 2) == {}


def _record(technique: str, result_extra: dict) -> dict:
    return {"config": {"technique": technique, "options": {}, "environment": "200mbit", "world_size": 2,
                       "model": "resnet_small"},
            "result": {"measured_s": 0.4, "spread": 0.01, "predicted_s": 0.38, "error": -0.05, **result_extra}}


def test_the_report_sets_measured_negotiations_beside_the_price() -> None:
    recs = [_record("bytescheduler", {"counters": {"partitions": 47.0, "batches": 8.0, "negotiation_s": 0.12},
                                      "negotiation_priced_s": 1.047e-3}),
            _record("wfbp", {"counters": {"messages": 47.0}})]
    rows = table_rows(recs)
    # 120 ms of negotiation per step over 8 batches: 15 ms a batch; 1.047 ms priced
    assert rows[0]["batches_per_step"] == 8.0 and rows[0]["negotiation_ms_per_batch"] == pytest.approx(15.0)
    assert rows[0]["negotiation_priced_ms"] == pytest.approx(1.047)
    assert math.isnan(rows[1]["batches_per_step"]) and math.isnan(rows[1]["negotiation_ms_per_batch"])
    zero = table_rows([_record("bytescheduler", {"counters": {"batches": 0.0, "negotiation_s": 0.0}})])[0]
    assert math.isnan(zero["negotiation_ms_per_batch"])  # no batch counted: no seconds per batch, not a 0/0
    lines = negotiation_lines(rows)
    assert lines[-1] == "| 200mbit | resnet_small | 8.0 | 15.00 | 1.05 |"  # 120 ms / 8 batches; 1.047 ms priced
    assert "| 200mbit | resnet_small | 8.0 | 15.00 | 1.05 |" in markdown(rows, "commscope validate")
    assert negotiation_lines(table_rows([_record("bytescheduler", {})])) == []  # runs before the counters


def test_the_app_sets_the_shipped_negotiations_beside_their_price() -> None:
    from app.data_measured import validation_frame
    from app.data_validation import negotiation_table
    from runners import reference

    # validation-run5 (2026-11-29) is the first shipped run with the counters: at 200 Mbit/s on resnet_small
    # 0.11889 s of negotiation over 7.698 batches per step = 15.44 ms per batch, against 1.44 ms priced
    table = negotiation_table(validation_frame(reference.validation_records("validation-run5")))
    assert len(table) == 6 and list(table.columns) == ["environment", "model", "batches per step",
                                                       "measured ms per batch", "priced ms per batch",
                                                       "measured / priced"]
    row = table.iloc[0]
    assert (row["environment"], row["model"]) == ("200mbit", "resnet_small")
    assert (round(row["batches per step"], 1), round(row["measured ms per batch"], 2),
            round(row["priced ms per batch"], 2)) == (7.7, 15.44, 1.44)
    assert (table["measured / priced"] > 6).all()  # 7.3x to 43x on the six cells
    assert negotiation_table(validation_frame(reference.validation_records())).empty  # runs before the counters
