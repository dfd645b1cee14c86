"""bench/bench_fresh_buffers.py: its summaries on hand-made numbers, its in-process measurement, its bad input.

Copies (MiB = 2**20 B): 32 MiB fresh in 16 ms = 16e-3 / 33,554,432 B = 0.4768 ns/B; reused in 2 ms = 0.0596 ns/B;
fresh / reused = 8. Collectives (chain times): all_gather 16 MiB 48 ms = 2.861 ns/B, 32 MiB 120 ms = 3.576 ns/B, so
1.25 times 16 MiB's; a record without ``time_chain_s`` is read at its median (allreduce 16 MiB 84 ms).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).parents[1]
if str(ROOT / "bench") not in sys.path:  # as when the script runs: its directory first on the path (bench/_timing.py)
    sys.path.insert(0, str(ROOT / "bench"))
BENCH = load_script("bench/bench_fresh_buffers.py")
MIB = 2**20


def _record(op: str, mib: int, chain: float | None, median: float, cpu: float) -> dict:
    result = {"time_s": median, "cpu_s": cpu, **({} if chain is None else {"time_chain_s": chain})}
    return {"kind": "collective", "config": {"op": op, "bytes": mib * MIB}, "result": result}


def test_copies_per_byte_and_their_ratio() -> None:
    (row,) = BENCH.summarize_copies([{"mib": 32.0, "fresh_s": 16e-3, "reused_s": 2e-3}])
    assert row["fresh_ns_per_byte"] == pytest.approx(0.4768, abs=1e-4)
    assert row["reused_ns_per_byte"] == pytest.approx(0.0596, abs=1e-4)
    assert row["fresh_over_reused"] == pytest.approx(8.0)


def test_collectives_per_byte_relative_to_16_mib() -> None:
    recs = [_record("allgather", 16, 0.048, 0.050, 0.009), _record("allgather", 32, 0.120, 0.125, 0.035),
            _record("allreduce", 16, None, 0.084, 0.014), {"kind": "environment", "config": {}, "result": {}}]
    rows = BENCH.per_byte_ratios(recs)
    assert [(r["op"], r["mib"]) for r in rows] == [("allgather", 16), ("allgather", 32), ("allreduce", 16)]
    assert rows[1]["per_byte_over_16mib"] == pytest.approx((0.120 / 32) / (0.048 / 16))  # 1.25
    assert rows[1]["ms"] == pytest.approx(120.0) and rows[1]["cpu_ms"] == pytest.approx(35.0)
    assert rows[2]["ms"] == pytest.approx(84.0) and rows[2]["per_byte_over_16mib"] == pytest.approx(1.0)
    # an op without a 16 MiB record has no ratio
    assert BENCH.per_byte_ratios([_record("allgather", 32, 0.12, 0.12, 0.03)])[0]["per_byte_over_16mib"] is None


def test_copy_rows_measures_each_size() -> None:
    rows = BENCH.copy_rows([0.25, 0.5], repeat=3)
    assert [r["mib"] for r in rows] == [0.25, 0.5]
    assert all(r["fresh_s"] > 0 and r["reused_s"] > 0 for r in rows)


@pytest.mark.parametrize("args, says", [(["--sizes", "x"], "--sizes must be positive MiB numbers"),
                                        (["--sizes", "-1"], "--sizes must be positive MiB numbers"),
                                        (["--repeat", "0"], "--repeat must be >= 1 (got 0)")])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_fresh_buffers.py"), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("commscope: error: ") and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
