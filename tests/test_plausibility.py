"""Plausibility guards of fits (runners.measure.fit.plausibility) and their lines in ``commscope fit``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_fit import cli, synth, write

import costmodels as cm
from runners.measure import fit as fitting
from runners.measure.fit.plausibility import facts, fit_warnings, plausibility, use_warnings

ROOT = Path(__file__).resolve().parents[1]
SIZES = [2**k for k in range(8, 27)]  # what synth measures: 256 B .. 64 MiB, p = 2 and 4


@pytest.fixture(scope="module")
def good() -> fitting.FitResult:
    return fitting.fit(synth("ring_allreduce", reps=2), "allreduce", "ring_allreduce")


def test_a_good_fit_used_where_it_was_measured_says_nothing(good: fitting.FitResult) -> None:
    assert plausibility(good) == []
    assert plausibility(good, sizes=SIZES, p=[2, 4, 8]) == []
    assert plausibility(good.environment, sizes=SIZES, p=[4]) == []  # the environment carries the same facts
    assert good.environment.metadata["bytes_range"] == [256, 2**26]


def test_an_environment_that_was_not_fitted_gives_no_warnings() -> None:
    assert facts(cm.environment("10GbE")) is None
    assert plausibility(cm.environment("10GbE"), sizes=[1, 2**40], p=[2, 10**6]) == []
    assert plausibility(None) == []


def test_faster_than_the_configured_link_names_both_rates() -> None:
    net = {"rate": "800mbit", "expected_beta_s_per_byte": 10e-9, "qdisc": {"tbf": {"burst_bytes": 400_000}}}
    res = fitting.fit(synth("ring_allreduce", reps=2, network=net), "allreduce", "ring_allreduce", burst=0)
    (line,) = [w for w in fit_warnings(res) if "faster than the wire" in w]
    assert "fitted bandwidth 0.12" in line and "1.25x the link's configured rate (800mbit" in line
    assert "0.1 GB/s" in line and "400,000 B" in line
    # a nominal rate the caller gives is a second yardstick
    plain = fitting.fit(synth("ring_allreduce", reps=2), "allreduce", "ring_allreduce")
    (nominal,) = fit_warnings(plain, nominal_beta=16e-9)
    assert "2.00x the link's nominal rate: 0.0625 GB/s" in nominal
    assert fit_warnings(plain, nominal_beta=8e-9) == []  # at the wire: plausible


def test_rms_error_above_15_percent_is_named() -> None:
    noisy = fitting.fit(synth("ring_allreduce", reps=2, noise=0.3, seed=3), "allreduce", "ring_allreduce")
    (line,) = [w for w in fit_warnings(noisy) if w.startswith("RMS")]
    assert f"RMS relative error {noisy.rms_rel_error:.1%} is above 15%" in line


def test_a_confidence_interval_that_includes_zero_is_named() -> None:
    env = cm.Environment(alpha=1e-5, beta=1e-9, gamma=1e-10, metadata={"parameters": {
        "alpha": {"value": 1e-5, "status": "fitted", "ci95": [8e-6, 1.2e-5]},
        "gamma": {"value": 1e-10, "status": "fitted", "ci95": [0.0, 7.77e-9]},
        "beta": {"value": 1e-9, "status": "fitted", "ci95": [-1e-10, 2e-9]}}})
    lines = fit_warnings(env)
    assert lines == ["beta's 95% confidence interval [-0.1 ns/B, 2 ns/B] includes zero: the measurements do not "
                     "tell beta from 0",
                     "gamma's 95% confidence interval [0 ns/B, 7.77 ns/B] includes zero: the measurements do not "
                     "tell gamma from 0"]


def test_use_far_outside_the_sizes_and_p_measured(good: fitting.FitResult) -> None:
    lines = use_warnings(good, sizes=[16, 2**34], p=[64])
    assert lines == [
        "used at sizes up to 16GiB, 256x the largest size it was measured on (64MiB): far outside the fit",
        "used at sizes down to 16B, 1/16 of the smallest size it was measured on (256B): far outside the fit",
        "used at p = 64, 16x the largest p it was measured on (2, 4): far outside the fit"]
    assert use_warnings(good, sizes=[2**29], p=[16]) == []  # within a decade of sizes and 4x of p
    # a fit whose metadata predates bytes_range: the caller gives the measured sizes
    old = good.environment.with_(metadata={k: v for k, v in good.environment.metadata.items() if k != "bytes_range"})
    assert use_warnings(old, sizes=[2**34]) == []
    assert "16GiB" in use_warnings(old, sizes=[2**34], measured_sizes=(256, 2**26))[0]


def test_the_shipped_reference_fits_are_guarded() -> None:
    env = cm.Environment.load(ROOT / "runners" / "reference" / "validation" / "1gbit-2x2" / "environment.json")
    lines = plausibility(env, p=[64])
    assert any(w.startswith("RMS relative error 16.6% is above 15%") for w in lines)
    # the reduction cost it could not see is fixed at 0 by the fit's nested-model rule, so it is no longer
    # guarded as an undetermined parameter (its interval used to include 0)
    gamma = env.metadata["parameters"]["gamma"]
    assert env.gamma == 0.0 and gamma["status"] == "not identifiable" and "must lower it by 2" in gamma["note"]
    assert not any(w.startswith("gamma's 95% confidence interval") for w in lines)
    assert lines[-1] == "used at p = 64, 16x the largest p it was measured on (4): far outside the fit"


def test_a_gloo_fit_used_past_its_records_at_32_mib_warns_of_the_fresh_buffers(good: fitting.FitResult) -> None:
    # the shipped 2.5 Gbit/s fit: gloo, records 16 B .. 16 MiB
    env = cm.Environment.load(ROOT / "runners" / "reference" / "validation-run5" / "2500mbit" / "environment.json")
    assert env.library == "gloo" and env.metadata["bytes_range"] == [16, 2**24]
    (line,) = [w for w in use_warnings(env, sizes=[2**20, 2**25]) if "fresh buffer" in w]
    assert line.startswith("used at sizes up to 32MiB: from 32MiB on, PyTorch's gloo all_gather and reduce_scatter")
    assert "records (up to 16MiB)" in line
    # 2**25 - 1 B is still served from the heap (the threshold rises to it): no line; 48 MiB is 3x, within a decade
    assert use_warnings(env, sizes=[2**25 - 1]) == []
    assert len(use_warnings(env, sizes=[48 * 2**20])) == 1
    # another library, or a gloo fit whose records reach 32 MiB (it has seen the regime): no line
    assert use_warnings(env.with_(library="nccl"), sizes=[2**25]) == []
    assert use_warnings(env, sizes=[2**25], measured_sizes=(16, 2**26)) == []
    assert good.environment.library == "gloo" and use_warnings(good, sizes=[2**25]) == []  # records to 64 MiB


def test_cli_fit_prints_the_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    net = {"rate": "800mbit", "expected_beta_s_per_byte": 10e-9}
    src = write(tmp_path / "r.jsonl", synth("ring_allreduce", reps=2, noise=0.3, seed=3, network=net))
    code, out, err = cli(capsys, "fit", str(src), "--algorithm", "ring_allreduce")
    assert code == 0 and err == ""
    flat = " ".join(out.split())  # rich wraps long lines
    assert "warning: fitted bandwidth" in flat and "faster than the wire" in flat
    assert "warning: RMS relative error" in flat and "is above 15%" in flat
    assert "note: implausible" not in flat  # said once, by the warning
    code, out, _ = cli(capsys, "fit", str(src), "--algorithm", "ring_allreduce", "--json")
    data = json.loads(out)
    assert code == 0 and any("faster than the wire" in w for w in data["warnings"])
    assert data["fit"]["bytes_range"] == [256, 2**26]


def test_cli_fit_two_regimes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "r.jsonl", synth("ring_allreduce", reps=2))
    code, out, _ = cli(capsys, "fit", str(src), "--method", "two", "--json")
    data = json.loads(out)
    assert code == 0 and "two regimes" in data["environment"]["metadata"]["method"] and data["warnings"] == []
    assert data["environment"]["alpha"] == pytest.approx(30e-6, rel=0.05)
    code, _, err = cli(capsys, "fit", str(src), "--method", "two", "--min-size", "1KiB")
    assert code == 2 and "--min-size and --gamma apply to --method one" in err and err.count("\n") == 1
    code, _, err = cli(capsys, "fit", str(src), "--method", "three")
    assert code == 2 and "--method must be 'one' or 'two', got 'three'" in err


def test_a_gloo_fit_with_measured_host_buffers_warns_of_the_allgather_alone() -> None:
    # the reduce-scatter's fresh clone is priced once host_fault is measured (host_buffers.py); the all-gather's
    # fresh output, whose faults overlap its receives, is not
    env = cm.Environment.load(ROOT / "runners" / "reference" / "validation-run5" / "2500mbit" / "environment.json")
    (line,) = [w for w in use_warnings(env.with_(host_copy=1.9e-10, host_fault=7.5e-10), sizes=[2**25])
               if "fresh buffer" in w]
    assert "PyTorch's gloo all_gather gathers into a fresh buffer" in line
    assert "reduce_scatter's fresh clone is, at the measured host_fault" in line
    (bare,) = [w for w in use_warnings(env, sizes=[2**25]) if "fresh buffer" in w]
    assert "commscope bench host-buffers" in bare
