"""bench/bench_bytescheduler_trace.py's analysis on a hand-made trace of two ranks and one partition.

Steps start at 0, 1, ..., 5 s on both ranks (WARMUP = 4: the timed step is [4, 5)). Rank 0's gradient is ready at
4.20 s, its broadcast runs 4.25-4.30 s, it issues at 4.30 s; rank 1's gradient is ready at 4.25 s, it issues at
4.32 s; the all-reduce completes at 4.50 s on both. Priced at 0.1 s:
- batches 1 per step, negotiation 50 ms; skew 4.25 - 4.20 = 50 ms; issued 4.32 - 4.25 = 70 ms after the last ready;
- service from 4.32 (the last issue) to 4.50: 180 ms against 100 priced, both ranks computing beside it (no
  forward pre-hook wait overlaps it): 1.8 x its price, 80 ms over.
"""

from __future__ import annotations

import pytest
from scripts import load_script

BENCH = load_script("bench/bench_bytescheduler_trace.py")


def _rank(ready: float, issue: float, bcast: tuple[float, float] | None) -> dict:
    events = [[float(i), "step", i, 0.0] for i in range(6)]
    events += [[ready, "ready", 0, 0.0], [issue, "issue", 0, 0.0], [4.5, "done", 0, 0.0], [5.05, "apply", 0, 5.0]]
    if bcast:
        events.append([bcast[1], "bcast", bcast[0], 1.0])
    return {"param_of_partition": [0], "bytes": [4], "events": events, "late": [[0.0, 0.001], [0.05, 0.051]]}


def test_analysis_by_hand() -> None:
    assert BENCH.WARMUP == 4
    got = BENCH.analyse([_rank(4.2, 4.3, (4.25, 4.3)), _rank(4.25, 4.32, None)], [0.1], 1)
    assert got["period_ms"] == pytest.approx(1000.0)
    assert got["batches_per_step"] == 1.0
    assert got["negotiation_ms"]["median"] == pytest.approx(50.0)
    assert got["rendezvous_rank0_broadcast_ms_by_lateness"] == pytest.approx({"0 ms": 1.0, "50 ms": 51.0})
    assert got["ready_skew_ms_median"] == pytest.approx(50.0)
    assert got["issue_after_last_ready_ms"]["median"] == pytest.approx(70.0)
    assert got["link_busy_ms_per_step"] == pytest.approx(180.0)
    assert got["link_priced_ms_per_step"] == pytest.approx(100.0)
    assert got["link_idle_waiting_for_issue_ms_per_step"] == 0.0  # nothing before it to wait behind
    assert got["by_ranks_computing"] == {"2": {"messages": 1, "service_over_price_median": pytest.approx(1.8),
                                               "excess_ms_per_step": pytest.approx(80.0)}}


def test_a_rank_waiting_in_a_pre_hook_is_not_computing() -> None:
    # rank 1 waits in a forward pre-hook from 4.32 to 4.50 s: only rank 0 computes beside the message
    waiting = _rank(4.25, 4.32, None)
    waiting["events"].append([4.5, "apply", 0, 4.32])
    got = BENCH.analyse([_rank(4.2, 4.3, (4.25, 4.3)), waiting], [0.1], 1)
    assert list(got["by_ranks_computing"]) == ["1"]
