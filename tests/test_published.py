"""Published collective measurements (runners/reference/published): shipped as records with their citations,
and the NCCL library model held to them where it claims to hold: the bandwidth regime (>= 1 GiB), within 10%.

Below 1 GiB the published tables ramp up more slowly than NCCL's own tuning model (e.g. 8x A100 at 64 MiB:
171.5 GB/s measured, 215.4 predicted); the model is NCCL's, and those sizes are reported, not pinned
(bench/bench_published.py prints every point). Where the model is known to miss in the bandwidth regime the
test is a strict xfail that names the missing term, so that a fix shows up as an XPASS.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scripts import load_script

from runners import reference
from runners.results import validate

BANDWIDTH_REGIME = 2**30
SOURCES = Path(reference.PUBLISHED_DIR) / "sources.json"


def _errors(system: str) -> list[tuple[int, float]]:
    return [(r["bytes"], r["busbw_error"]) for r in reference.published_comparison(system)
            if r["bytes"] >= BANDWIDTH_REGIME]


def test_published_records_are_valid_records_with_citations() -> None:
    recs = reference.published_records()
    assert len(recs) == sum(len(s["points"]) for s in json.loads(SOURCES.read_text())["systems"])
    for r in recs:
        validate(r)
        assert r["origin"] == "published" and r["citation"]["source"] and r["citation"]["url"].startswith("http")
        assert "ddl-benchmarks" not in json.dumps(r) and "Korthikanti" not in json.dumps(r)  # kept aside
    assert reference.published_systems()[:2] == ["8xA100-NVLink (stas00)", "8xH200-NVLink (stas00)"]


def test_the_records_are_what_the_tool_makes_of_the_sources() -> None:
    tool = load_script("tools/make_published_records.py")
    strip = lambda r: {k: v for k, v in r.items() if k not in ("id", "time")}  # noqa: E731
    assert [strip(r) for r in tool.records()] == [strip(r) for r in reference.published_records()]


@pytest.mark.parametrize("system", ["8xA100-NVLink (stas00)", "2x8 H100 (A3 Mega)", "8xH200-NVLink (stas00)",
                                    "8xH200 all_reduce_bench back to back (stas00)",
                                    "8xH200 nccl-tests allreduce sweep (stas00)"])
def test_nccl_model_within_10_percent_of_published_busbw_from_1_gib(system: str) -> None:
    errors = _errors(system)
    assert len(errors) >= 4
    assert all(abs(e) <= 0.10 for _, e in errors), errors


def test_nvls_on_h200_takes_nccls_nvls_graph() -> None:
    # NVLS from 2 MiB, as the author reports; with the NVLS graph's 8 x 40 GB/s (not the 370.8 GB/s of the links)
    # the bandwidth regime is within 4% (it was 12-16% too fast)
    rows = reference.published_comparison("8xH200-NVLink (stas00)")
    assert {r["algorithm"] for r in rows if r["bytes"] >= 2**21} == {"nvls"}
    assert max(abs(e) for _, e in _errors("8xH200-NVLink (stas00)")) < 0.04


def _table(system: str) -> dict[int, dict]:
    return {r["bytes"]: r for r in reference.published_comparison(system)}


def _all_within(system: str, low: int, high: int, tolerance: float = 0.10) -> bool:
    """Whether every point of ``system`` from ``low`` to below ``high`` bytes is within ``tolerance`` busbw."""
    rows = _table(system)
    return all(abs(r["busbw_error"]) <= tolerance for n, r in rows.items() if low <= n < high)


def test_one_call_timing_holds_pytorchs_host_overhead() -> None:
    # The same 8x H200 node timed two ways (runners/reference/published/sources.json): one dist.all_reduce per trial
    # on an idle device, and calls queued back to back. Their difference per call is flat over three decades of
    # size, 17.8-21.6 us from 32 KiB to 128 MiB (e.g. 32 KiB: 1.75 x 32768 B / 1.44 GB/s = 39.8 us against
    # 1.75 x 32768 / 3.15 = 18.2 us, 21.6 us apart; 64 MiB: 338.9 against 318.4 us): an additive host cost, as
    # costmodels.harness prices it (25 us, the source's 20-30 us)
    one, queued = _table("8xH200-NVLink (stas00)"), _table("8xH200 all_reduce_bench back to back (stas00)")
    diffs = [one[n]["measured_s"] - queued[n]["measured_s"] for n in one if 2**15 <= n <= 2**27]
    assert len(diffs) == 13 and 17.5e-6 < min(diffs) and max(diffs) < 22e-6
    assert one[2**15]["measured_s"] - queued[2**15]["measured_s"] == pytest.approx(21.6e-6, abs=0.1e-6)
    # the prediction of a one-call record is the device time plus 25 us; of a queued one, the device time
    for n in one:
        assert one[n]["timing"] == "one_call_idle_device" and queued[n]["timing"] == "back_to_back"
        assert one[n]["predicted_s"] == pytest.approx(one[n]["device_s"] + 25e-6, rel=1e-12)
        assert queued[n]["predicted_s"] == queued[n]["device_s"] == pytest.approx(one[n]["device_s"], rel=1e-12)
    # with it, the one-call table's small payloads are met: 32 KiB, 15.4 + 25 = 40.4 us against 39.8 (-1.4% busbw);
    # without it they were 2.4-2.6x too fast (the +140% median this table had)
    assert one[2**15]["busbw_error"] == pytest.approx(-0.014, abs=0.002)
    assert all(abs(one[n]["busbw_error"]) <= 0.10 for n in (2**15, 2**16, 2**17, 2**18))


def test_the_queued_tables_agree_with_each_other_as_the_author_says() -> None:
    # all_reduce_bench.py's default and nccl-tests on the same node and NCCL: within 2% except 1-16 MiB, where
    # nccl-tests reads 3-7% lower (the author's 'difference' column)
    bench, tests = _table("8xH200 all_reduce_bench back to back (stas00)"), _table("8xH200 nccl-tests allreduce sweep "
                                                                                   "(stas00)")
    gaps = {n: tests[n]["measured_busbw_GBps"] / bench[n]["measured_busbw_GBps"] - 1 for n in bench}
    assert all(abs(g) <= 0.017 for n, g in gaps.items() if not 2**20 <= n <= 2**24)
    assert min(gaps[n] for n in gaps if 2**20 <= n <= 2**24) == pytest.approx(182.03 / 196.56 - 1)  # 8 MiB: -7.4%


NVLS_TABLES = ("8xH200 nccl-tests allreduce sweep (stas00)", "8xH200-NVLink (stas00)",
               "8xH200 all_reduce_bench back to back (stas00)")


def test_nvls_from_four_pipeline_steps_within_10_percent() -> None:
    # With the kernel's pipeline fill and NCCL 2.28's NVLS bandwidth (tests/test_nvls.py), every NVLS point where
    # a channel runs at least four steps (16 MiB to 512 MiB: 4, 8, 8, 16, 32, 64 steps) is within 10% on all three
    # 8x H200 tables (max +9.8%, nccl-tests at 32 MiB); without them the nccl-tests table was +1..+43% (32 MiB:
    # +30.5%)
    for system in NVLS_TABLES:
        rows = _table(system)
        errors = {n: r["busbw_error"] for n, r in rows.items() if 2**24 <= n < 2**30}
        assert len(errors) == 6 and {rows[n]["algorithm"] for n in errors} == {"nvls"}
        assert all(abs(e) <= 0.10 for e in errors.values()), (system, errors)


def test_a_held_out_h100_table_within_10_percent() -> None:
    # nccl-tests issue #290 (8x H100, 128 MiB - 4 GiB), found and transcribed by a helper after the NVLS fill and
    # NCCL 2.28 bandwidth were in, and compared once by a rule written before (median |error| <= 5%, max <= 10%,
    # median below the model without them): +5.7, +6.1, +5.6, -1.4, -0.3, -0.4% (median 1.4%; it was 1.6% with
    # a max of +16.1% at 128 MiB before). 128 MiB by hand: chunk 64 KiB, fill 2 x 128 x 64 KiB / 272 GB/s =
    # 61.7 us, 25 + 134217728 / 272e3 + 61.7 = 580.1 us -> busbw 134217728 / 580.1 us x 14/8 = 404.9 GB/s
    rows = _table("8xH100 nccl-tests allreduce (nccl-tests #290)")
    assert len(rows) == 6 and {r["algorithm"] for r in rows.values()} == {"nvls"}
    assert rows[2**27]["predicted_busbw_GBps"] == pytest.approx(404.9, abs=0.1)
    assert all(abs(r["busbw_error"]) <= 0.10 for r in rows.values())


@pytest.mark.xfail(strict=True, reason="NVLS with one or two pipeline steps per channel (2 to 8 MiB): the fill "
                   "prices each of the kernel's three stages at the balanced pipeline's step time, but a stage that "
                   "runs alone goes faster; -7..-17% busbw against nccl-tests 2.30.7 (2 MiB: -17.4%)")
def test_nvls_mid_sizes_within_10_percent() -> None:
    assert _all_within("8xH200 nccl-tests allreduce sweep (stas00)", 2**21, 2**30)


@pytest.mark.parametrize("op", ["allreduce", "allgather"])
def test_pcie_without_p2p_within_10_percent(op: str) -> None:
    # the preset carries NCCL's SHM rate with both directions busy, 3.9 GB/s, measured on another PCIe 3.0 x16
    # machine (NVIDIA/nccl#384); this machine: allreduce 4.00 (3.9 / 4.00 - 1 = -2.5%), allgather 3.79 at 1 GiB
    # (3.9 / 3.79 - 1 = +2.9%). With cudaMemcpyPeer's one-way 5.7 GB/s it was +42% and +50%
    assert all(abs(e) <= 0.10 for _, e in _errors(f"2xRTX2080Ti-PCIe-noP2P {op}"))


def test_pcie_without_p2p_allreduce_within_5_percent_from_1_mib() -> None:
    rows = _table("2xRTX2080Ti-PCIe-noP2P allreduce")
    errors = [r["busbw_error"] for n, r in rows.items() if n >= 2**20]
    assert len(errors) == 11 and all(-0.05 <= e <= 0 for e in errors), errors  # -3.3 .. -2.4%


@pytest.mark.xfail(strict=True, reason="NCCL allgather on 2 GPUs over SHM runs 15-20% below the allreduce's "
                   "rate each way (3.17 against 3.9 GB/s on nccl#384, 3.2-3.4 against 4.0 here below 1 GiB); one "
                   "bandwidth per environment prices both alike (+15..+22% busbw from 1 MiB to 512 MiB)")
def test_pcie_without_p2p_allgather_mid_sizes_within_10_percent() -> None:
    assert _all_within("2xRTX2080Ti-PCIe-noP2P allgather", 2**20, 2**30)


def test_every_published_point_has_a_prediction() -> None:
    rows = reference.published_comparison()
    assert len(rows) == len(reference.published_records())
    assert all(r["predicted_s"] > 0 and r["library"] == "nccl" for r in rows)


def test_bench_published_summarises_every_point_by_regime(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench/bench_published.py")
    res = bench.measure()
    assert list(res["systems"]) == reference.published_systems()
    for name, s in res["systems"].items():
        errors = [e for _, e in _errors(name)]
        bw = s["regimes"]["bandwidth (>= 1 GiB)"]
        assert bw["points"] == len(errors) and bw["max_abs_error"] == pytest.approx(max(abs(e) for e in errors))
        assert sum(r["points"] for r in s["regimes"].values()) == sum(
            1 for r in reference.published_comparison(name) if math.isfinite(r["busbw_error"]))
    assert bench.main(["--system", "no such system"]) == 2
    assert "commscope: error: unknown published system 'no such system'" in capsys.readouterr().err


def test_h200_nccl_tests_table_each_collective() -> None:
    # the same node's nccl-tests at 16 GiB: NCCL's NVLS graph for the all-reduce (8 channels x 40 GB/s), priced at
    # NCCL 2.28's 8 x 40 x 0.85 = 272 GB/s algBw: 25 us + 2^34 B / 272 GB/s + a fill of 2 x 16 MiB / 272 GB/s =
    # 25 + 63161.9 + 123.4 = 63310.3 us -> algbw 271.38, nccl-tests busbw x 14/8 = 474.9 against 480.0 (NCCL 2.21's
    # 5/6 x 320 = 266.7 gave 466.7); ring for the rest, at the 18 x 20.6 = 370.8 GB/s of NVLink that NCCL models
    # (367.2, 361.4 and 362.9 measured)
    want = {"8xH200 nccl-tests allreduce NVLS (stas00)": ("nvls", 474.9),
            "8xH200 nccl-tests allreduce ring (stas00)": ("ring", 370.8),
            "8xH200 nccl-tests allgather (stas00)": ("ring", 370.8),
            "8xH200 nccl-tests reduce_scatter (stas00)": ("ring", 370.8)}
    for system, (algorithm, busbw) in want.items():
        (row,) = reference.published_comparison(system)
        assert row["algorithm"] == algorithm and row["bytes"] == 2**34
        assert row["predicted_busbw_GBps"] == pytest.approx(busbw, rel=0.002)  # latency: < 0.2% at 16 GiB
        assert abs(row["busbw_error"]) < 0.03


def test_published_regimes_summarise_the_comparison_per_size_regime() -> None:
    import numpy as np

    rows = [r for r in reference.published_comparison() if math.isfinite(r["busbw_error"])]
    regimes = reference.published_regimes("nccl")
    assert list(regimes) == [label for label, _, _ in reference.REGIMES]
    for label, lo, hi in reference.REGIMES:
        errors = [r["busbw_error"] for r in rows if lo <= r["bytes"] < hi]
        r = regimes[label]
        assert r["points"] == len(errors) and r["median_error"] == pytest.approx(float(np.median(errors)))
        assert r["max_abs_error"] == pytest.approx(max(abs(e) for e in errors))
    # the NCCL model: the bandwidth regime is met (median within 1%); at mid sizes the median is +3.0% but the
    # spread is wide (the 8x A100 table's slow ramp, +25..+215%); +37.0% before the NVLS pipeline fill, NCCL 2.28's
    # NVLS bandwidth, the PCIe preset's SHM rate and the #290 table
    assert abs(regimes["bandwidth (>= 1 GiB)"]["median_error"]) < 0.01
    assert regimes["mid (1 MiB - 1 GiB)"]["median_error"] == pytest.approx(0.030, abs=0.005)
    assert regimes["mid (1 MiB - 1 GiB)"]["max_abs_error"] > 1.0
    assert reference.published_regimes("gloo") == {}


def test_published_check_names_the_regimes_of_the_sizes_shown() -> None:
    line = reference.published_check("nccl", [2**20, 2**25])
    assert line is not None and "mid (1 MiB - 1 GiB)" in line and "small" not in line and "bandwidth" not in line
    assert "positive: faster than measured" in line and "busbw +" in line
    both = reference.published_check("nccl", [2**10, 2**31])
    assert "small (< 1 MiB)" in both and "bandwidth (>= 1 GiB)" in both and "mid" not in both
    assert reference.published_check("gloo", [2**20]) is None and reference.published_check("nccl", []) is None


def test_cli_predict_collective_says_how_the_library_fares_against_published(capsys: pytest.CaptureFixture[str]
                                                                              ) -> None:
    from runners.cli import main

    assert main(["predict", "collective", "-a", "auto", "--env", "NVLink-A100", "--library", "nccl", "-p", "8",
                 "-s", "64MiB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["published_check"] == [reference.published_check("nccl", [2**26])]
    assert main(["predict", "collective", "-a", "auto", "--env", "NVLink-A100", "--library", "nccl", "-p", "8",
                 "-s", "64MiB"]) == 0
    assert "published: nccl's model against the shipped published measurements" in " ".join(
        capsys.readouterr().out.split())
    assert main(["predict", "collective", "-a", "ring_allreduce", "--env", "NVLink-A100", "-p", "8", "-s", "64MiB",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["published_check"] == []
