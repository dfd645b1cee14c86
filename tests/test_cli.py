"""Tests of the ``commscope`` command line: ``runners.cli.main(argv)`` in-process, and the installed script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import costmodels as cm
from runners.cli import main

MiB100 = 100 * 2**20


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main(argv)``: exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert err == ""
    return out


def predict_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    return json.loads(run_ok(capsys, "predict", "collective", *argv, "--json"))


# ------------------------------------------------------------------------------------- list
EXPECTED_NAMES = {
    "collectives": cm.collectives,
    "environments": cm.environments,
    "primitives": lambda: list(cm.PRIMITIVES),
    "compressors": cm.compressors,
}


@pytest.mark.parametrize("what", list(EXPECTED_NAMES))
def test_list_json_names_every_entry(capsys: pytest.CaptureFixture[str], what: str) -> None:
    """``list WHAT --json`` is a JSON list of objects whose names are the registered ones, in order."""
    data = json.loads(run_ok(capsys, "list", what, "--json"))
    assert isinstance(data, list)
    assert [d["name"] for d in data] == EXPECTED_NAMES[what]()


@pytest.mark.parametrize("what", list(EXPECTED_NAMES))
def test_list_table_shows_every_entry(capsys: pytest.CaptureFixture[str], what: str) -> None:
    """``list WHAT`` prints a table with a title and every name."""
    out = run_ok(capsys, "list", what)
    assert f"commscope {what}" in out
    for name in EXPECTED_NAMES[what]():
        assert name in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_list_collectives_of_one_primitive(capsys: pytest.CaptureFixture[str]) -> None:
    """``--primitive`` keeps only that primitive's algorithms (lower bound included, flagged as such)."""
    data = json.loads(run_ok(capsys, "list", "collectives", "--primitive", "allgather", "--json"))
    assert [d["name"] for d in data] == cm.collectives("allgather")
    assert {d["primitive"] for d in data} == {"allgather"}
    assert [d["name"] for d in data if d["lower_bound"]] == ["lower_bound_allgather"]
    domains = {d["name"]: d["domain"] for d in data}
    assert domains["recursive_doubling_allgather"] == "p a power of two"
    assert domains["ring_allgather"] == "any p"


# ------------------------------------------------------------------------------------- show
def test_show_collective(capsys: pytest.CaptureFixture[str]) -> None:
    """``show ring_allreduce`` prints its primitive, formula, domain and source."""
    out = run_ok(capsys, "show", "ring_allreduce")
    c = cm.collective("ring_allreduce")
    lines = out.splitlines()
    assert lines[0] == f"ring_allreduce (allreduce): {c.description}"
    assert f"T = {c.expr}" in out
    assert "domain: any p" in out
    assert f"source: {c.source}" in out


def test_show_collective_with_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    """``show parameter_server`` documents its parameter k and default."""
    out = run_ok(capsys, "show", "parameter_server")
    assert "parameter k:" in out and "default k = p" in out


def test_show_environment_prints_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``show 10GbE`` prints the preset as environment JSON that loads back to the same environment."""
    out = run_ok(capsys, "show", "10GbE")
    assert cm.Environment.from_json(out) == cm.environment("10GbE")


# ---------------------------------------------------------------------------------- predict
RING_ARGS = ("--algorithm", "ring_allreduce", "--env", "10GbE", "--p", "64", "--size", "100MiB")


def test_predict_table_has_time_and_bus_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows the time in us, algbw and busbw of ring allreduce on 10GbE."""
    out = run_ok(capsys, "predict", "collective", *RING_ARGS)
    t = cm.collective("ring_allreduce").time(MiB100, 64, cm.environment("10GbE"))
    algbw = MiB100 / t / 1e9
    assert "predicted on 10GbE" in out
    for column in ("algorithm", "time (us)", "vs best", "algbw (GB/s)", "busbw (GB/s)"):
        assert column in out
    row = next(line for line in out.splitlines() if "ring_allreduce" in line)
    cells = [c.strip() for c in re.split(r"[│┃|]", row) if c.strip()]
    assert cells == ["ring_allreduce", "64", "100MiB", str(MiB100), f"{t * 1e6:.2f}", "best", f"{algbw:.3f}",
                     f"{algbw * 2 * 63 / 64:.3f}"]


def test_predict_json_matches_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    """--json gives time_s of the cost model, algbw = bytes/time and busbw = algbw * 2(p-1)/p."""
    data = predict_json(capsys, *RING_ARGS)
    env = cm.environment("10GbE")
    assert cm.Environment.from_dict(data["environment"]) == env
    (row,) = data["results"]
    assert row["algorithm"] == "ring_allreduce" and row["p"] == 64
    assert row["bytes"] == MiB100 and row["size"] == "100MiB"
    assert row["time_s"] == cm.collective("ring_allreduce").time(104857600, 64, env)
    assert row["algbw_GBps"] == pytest.approx(MiB100 / row["time_s"] / 1e9, rel=1e-15)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 63 / 64, rel=1e-12)


def test_predict_several_sizes_ranks_and_algorithms(capsys: pytest.CaptureFixture[str]) -> None:
    """Repeated --size/--p and comma-separated algorithms give one row per (p, algorithm, size)."""
    data = predict_json(capsys, "-a", "ring_allreduce,rabenseifner_allreduce", "--env", "IB-EDR",
                        "-p", "4", "-p", "16", "-s", "1K", "-s", "1MB", "-s", "1G")
    rows = data["results"]
    assert len(rows) == 2 * 2 * 3
    assert [(r["p"], r["algorithm"], r["bytes"]) for r in rows[:6]] == [
        (4, a, b) for a in ("ring_allreduce", "rabenseifner_allreduce") for b in (1024, 10**6, 2**30)
    ]
    env = cm.environment("IB-EDR")
    for r in rows:
        assert r["time_s"] == pytest.approx(cm.collective(r["algorithm"]).time(r["bytes"], r["p"], env), rel=1e-14)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("-b", "1K", "-e", "1M", "-f", "4"), [2**10, 2**12, 2**14, 2**16, 2**18, 2**20]),
        (("--min-size", "8", "--max-size", "1K"), [8 * 2**i for i in range(8)]),
        (("-s", "3", "-b", "1K", "-e", "4K"), [3, 1024, 2048, 4096]),
    ],
    ids=["factor-4", "default-factor-2", "size-plus-range"],
)
def test_predict_size_range(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: list[int]) -> None:
    """-b/-e/-f give nccl-tests' geometric range of sizes: one row each."""
    rows = predict_json(capsys, "-a", "ring_allreduce", "--env", "10GbE", "-p", "8", *argv)["results"]
    assert [r["bytes"] for r in rows] == expected
    times = [r["time_s"] for r in rows]
    assert times == sorted(times)


def test_predict_auto_picks_the_cheapest(capsys: pytest.CaptureFixture[str]) -> None:
    """``-a auto --library ideal`` reports cm.cheapest's algorithm and time at each size (several algorithms win
    somewhere); without --library, 10GbE's own library (gloo) would run its ring at every size."""
    argv = ("-a", "auto", "--library", "ideal", "--env", "10GbE", "-p", "64", "-b", "1K", "-e", "1G", "-f", "4")
    rows = predict_json(capsys, *argv)["results"]
    env = cm.environment("10GbE")
    sizes = [r["bytes"] for r in rows]
    best = cm.cheapest("allreduce", sizes, 64, env)
    assert [r["algorithm"] for r in rows] == list(best.algorithm)
    assert [r["time_s"] for r in rows] == [float(x) for x in best.time]
    assert len({r["algorithm"] for r in rows}) >= 2


def test_predict_auto_other_primitive(capsys: pytest.CaptureFixture[str]) -> None:
    """``--primitive`` chooses among that primitive's algorithms for ``-a auto``."""
    rows = predict_json(capsys, "-a", "auto", "--library", "ideal", "--primitive", "allgather", "--env", "IB-EDR",
                        "-p", "12", "-s", "1M")["results"]
    assert rows[0]["algorithm"] in cm.collectives("allgather", include_bounds=False)
    assert rows[0]["algorithm"] != "recursive_doubling_allgather"  # p = 12 is not a power of two


def test_predict_auto_shows_the_library_choice(capsys: pytest.CaptureFixture[str]) -> None:
    """``-a auto`` on an NCCL environment reports NCCL's algorithm, protocol and channels per size
    (NVLink-A100, p = 8: ring/LL at 8 B, 15.0 us, ring/Simple at 1 GiB; tests/test_libraries.py works them out)."""
    rows = predict_json(capsys, "-a", "auto", "--env", "NVLink-A100", "-p", "8", "-s", "8", "-s", "1G")["results"]
    assert [(r["library"], r["algorithm"], r["protocol"]) for r in rows] == [("nccl", "ring", "LL"),
                                                                             ("nccl", "ring", "Simple")]
    assert rows[0]["time_s"] == pytest.approx(15.0e-6, rel=1e-4) and rows[1]["channels"] == 12
    gloo = predict_json(capsys, "-a", "auto", "--env", "NVLink-A100", "--library", "gloo", "-p", "8", "-s", "1M")
    assert gloo["results"][0]["algorithm"] == "gloo_ring_allreduce" and gloo["environment"]["library"] == "gloo"


def test_predict_library_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "collective", "-a", "auto", "--env", "10GbE", "-p", "8", "-s", "1M",
                 "--library", "openmpi"]) == 2
    assert "--library must be one of ideal, gloo, mpich, nccl, got 'openmpi'" in capsys.readouterr().err
    assert main(["predict", "collective", "-a", "ring_allreduce", "--env", "10GbE", "-p", "8", "-s", "1M",
                 "--library", "nccl"]) == 2
    assert "--library chooses the algorithm of 'auto': add -a auto" in capsys.readouterr().err


def test_predict_timing_adds_the_benchmarks_host_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    # 8x H200 at 32 KiB: NCCL's ring/LL takes 15.41 us on the device; one call timed alone on an idle device
    # prints 15.41 + 25 = 40.41 us (costmodels/harness.py), what the shipped one-call table measured (39.8 us)
    args = ("-a", "auto", "--env", "NVLink-H100", "-p", "8", "-s", "32KiB")
    queued, alone = predict_json(capsys, *args), predict_json(capsys, *args, "--timing", "one_call_idle_device")
    assert queued["timing"] == "back_to_back" and alone["timing"] == "one_call_idle_device"
    (q,), (a,) = queued["results"], alone["results"]
    assert a["time_s"] == pytest.approx(q["time_s"] + 25e-6) and q["time_s"] == pytest.approx(15.41e-6, abs=0.01e-6)
    assert a["busbw_GBps"] == pytest.approx(1.75 * 32768 / a["time_s"] / 1e9)
    # p = 1 calls nothing: no overhead is added to a time of 0
    (one,) = predict_json(capsys, "-a", "ring_allreduce", "--env", "NVLink-H100", "-p", "1", "-s", "1M",
                          "--timing", "one_call_idle_device")["results"]
    assert one["time_s"] == 0.0
    assert "each time holds 25 us" in run_ok(capsys, "predict", "collective", *args, "--timing",
                                                             "one_call_idle_device")
    assert main(["predict", "collective", *args, "--timing", "nccl-tests"]) == 2
    assert ("--timing must be one of back_to_back, one_call_idle_device, got 'nccl-tests'"
            in capsys.readouterr().err)


def test_predict_with_algorithm_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    """``--param k=4`` reaches parameter_server (and changes its time from the default k = p)."""
    env = cm.environment("10GbE")
    ps = cm.collective("parameter_server")
    (row,) = predict_json(capsys, "-a", "parameter_server", "--env", "10GbE", "-p", "8", "-s", "1M",
                          "--param", "k=4")["results"]
    assert row["time_s"] == pytest.approx(ps.time(2**20, 8, env, k=4), rel=1e-14)
    assert row["time_s"] != pytest.approx(ps.time(2**20, 8, env), rel=1e-6)


def test_predict_custom_alpha_beta(capsys: pytest.CaptureFixture[str]) -> None:
    """--alpha/--beta (no --env) build a one-level environment with gamma 0."""
    data = predict_json(capsys, "-a", "ring_allreduce", "--alpha", "1e-5", "--beta", "1e-9", "-p", "4", "-s", "1000")
    env = data["environment"]
    assert (env["alpha"], env["beta"], env["gamma"], env["gpus_per_node"]) == (1e-5, 1e-9, 0.0, 1)
    (row,) = data["results"]
    assert row["time_s"] == pytest.approx(2 * 3 * 1e-5 + 2 * 3 / 4 * 1000 * 1e-9, rel=1e-12)


def test_predict_preset_with_override(capsys: pytest.CaptureFixture[str]) -> None:
    """--alpha on top of --env replaces only the preset's alpha."""
    data = predict_json(capsys, "-a", "ring_allreduce", "--env", "IB-EDR", "--alpha", "1e-3", "-p", "4", "-s", "1M")
    assert cm.Environment.from_dict(data["environment"]) == cm.environment("IB-EDR").with_(alpha=1e-3)


def test_predict_environment_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--env FILE.json loads an environment written by Environment.save (here a two-level one)."""
    env = cm.environment("8xH100-NVLink+IB-NDR").with_(name="lab", beta=1 / 20e9, nics_per_node=2)
    path = env.save(tmp_path / "lab.json")
    data = predict_json(capsys, "-a", "hierarchical_allreduce,ring_allreduce", "--env", str(path), "-p", "32",
                        "-s", "64MiB")
    assert cm.Environment.from_dict(data["environment"]) == env
    for row in data["results"]:
        expected = cm.collective(row["algorithm"]).time(64 * 2**20, 32, env)
        assert row["time_s"] == pytest.approx(expected, rel=1e-14)
    assert {r["algorithm"] for r in data["results"]} == {"hierarchical_allreduce", "ring_allreduce"}


# ------------------------------------------------------------------------------- bad input
PREDICT = ("predict", "collective")
BAD_INPUT = {
    "unknown-algorithm": ((*PREDICT, "-a", "ring_allreduse", "--env", "10GbE", "-p", "4", "-s", "1M"),
                          "ring_allreduse"),
    "unknown-env": ((*PREDICT, "-a", "ring_allreduce", "--env", "11GbE", "-p", "4", "-s", "1M"), "11GbE"),
    "missing-env-file": ((*PREDICT, "-a", "ring_allreduce", "--env", "/nonexistent/env.json", "-p", "4", "-s", "1M"),
                         "/nonexistent/env.json"),
    "bad-size-unit": ((*PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "4", "-s", "100MiBB"), "100MiBB"),
    "p-zero": ((*PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "0", "-s", "1M"), "got 0"),
    "p-not-integer": ((*PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "2.5", "-s", "1M"), "--p"),
    "p-not-power-of-two": ((*PREDICT, "-a", "rabenseifner_allreduce", "--env", "10GbE", "-p", "12", "-s", "1M"),
                           "power of two"),
    "missing-algorithm": ((*PREDICT, "--env", "10GbE", "-p", "4", "-s", "1M"), "--algorithm"),
    "unknown-command": (("frobnicate",), "frobnicate"),
    "malformed-param": ((*PREDICT, "-a", "parameter_server", "--env", "10GbE", "-p", "4", "-s", "1M",
                         "--param", "k4"), "k4"),
    "param-not-a-number": ((*PREDICT, "-a", "parameter_server", "--env", "10GbE", "-p", "4", "-s", "1M",
                            "--param", "k=four"), "four"),
    "bad-param-value": ((*PREDICT, "-a", "parameter_server", "--env", "10GbE", "-p", "4", "-s", "1M",
                         "--param", "k=0"), "k must be"),
    "no-size": ((*PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "4"), "--size"),
    "no-env": ((*PREDICT, "-a", "ring_allreduce", "-p", "4", "-s", "1M"), "--env"),
    "negative-alpha": ((*PREDICT, "-a", "ring_allreduce", "--alpha", "-1e-6", "--beta", "1e-9", "-p", "4",
                        "-s", "1M"), "alpha must be >= 0"),
    "empty-range": ((*PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "4", "-b", "1M", "-e", "1K"),
                    "smaller than min size"),
    "unknown-list": (("list", "algorithms"), "algorithms"),
    "unknown-show": (("show", "nope"), "nope"),
}


@pytest.mark.parametrize(("argv", "fragment"), list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                     fragment: str) -> None:
    """Bad input exits with 2 and exactly one line ``commscope: error: ...`` naming the problem."""
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("commscope: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in err + out


def test_unknown_param_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    """``--param q=4`` for an algorithm without a parameter q is an error, as it is in the library."""
    code, _, err = run(capsys, *PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "4", "-s", "1M",
                       "--param", "q=4")
    assert code == 2 and err.startswith("commscope: error:")


def _strict_json(text: str) -> Any:
    def reject(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=reject)


def test_predict_json_on_one_rank_is_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    """--json output is standard JSON even when the predicted time is 0."""
    data = _strict_json(run_ok(capsys, *PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "1", "-s", "1M",
                               "--json"))
    assert data["results"][0]["time_s"] == 0.0


# ---------------------------------------------------------------------------- installed script
def _script() -> str:
    here = Path(sys.executable).parent
    path = shutil.which("commscope", path=str(here)) or shutil.which("commscope")
    assert path, f"the commscope script is not installed (looked in {here} and on PATH)"
    return path


def test_installed_script(tmp_path: Path) -> None:
    """The ``commscope`` console script predicts like the library and reports bad input in one line."""
    env = {**os.environ, "COLUMNS": "160"}
    ok = subprocess.run([_script(), *PREDICT, *RING_ARGS, "--json"], capture_output=True, text=True, env=env,
                        cwd=tmp_path, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    (row,) = json.loads(ok.stdout)["results"]
    assert row["time_s"] == cm.collective("ring_allreduce").time(MiB100, 64, cm.environment("10GbE"))

    bad = subprocess.run([_script(), *PREDICT, "-a", "ring_allreduce", "--env", "10GbE", "-p", "0", "-s", "1M"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert bad.returncode == 2
    assert bad.stdout == ""
    (line,) = bad.stderr.splitlines()
    assert line.startswith("commscope: error: p must be") and line.endswith("got 0")


# ------------------------------------------------------------------------------ predict iteration
def test_predict_iteration_json_matches_the_api(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "--p", "4,8",
                 "--schedule", "wfbp,dear", "--json")
    rows = json.loads(out)["results"]
    assert [(r["schedule"], r["p"]) for r in rows] == [("wfbp", 4), ("wfbp", 8), ("dear", 4), ("dear", 8)]
    expected = cm.simulate(cm.profile("resnet50"), cm.environment("10GbE"), 8, "dear").iteration_time
    assert rows[3]["iteration_s"] == pytest.approx(expected)


def test_predict_iteration_table_options_and_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "it.json"
    out = run_ok(capsys, "predict", "iteration", "--model", "bert-base", "--env", "IB-EDR", "-p", "16",
                 "--schedule", "fusion", "--option", "bucket_bytes=4MiB", "--trace", str(trace))
    assert "fusion" in out and "samples/s" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "allreduce" for e in events)


def test_predict_iteration_boolean_options(capsys: pytest.CaptureFixture[str]) -> None:
    """``--option NAME=true|false`` is a boolean (ByteScheduler's negotiation, bsp's flatten), as in the API."""
    rows = json.loads(run_ok(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8",
                             "--schedule", "bytescheduler", "--option", "negotiation=TRUE", "--json"))["results"]
    want = cm.simulate(cm.profile("resnet50"), cm.environment("10GbE"), 8, "bytescheduler", negotiation=True)
    assert rows[0]["iteration_s"] == pytest.approx(want.iteration_time)
    rows = json.loads(run_ok(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8",
                             "--schedule", "bsp", "--option", "flatten=false", "--json"))["results"]
    want = cm.simulate(cm.profile("resnet50"), cm.environment("10GbE"), 8, "bsp")
    assert rows[0]["iteration_s"] == pytest.approx(want.iteration_time)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "resnet50", "--env", "10GbE", "-p", "4", "--schedule", "bytescheduler", "--option",
          "negotiation=yes"], "negotiation must be True or False, got 'yes'"),
        (["--model", "resnet5", "--env", "10GbE", "-p", "4"], "unknown model profile 'resnet5'"),
        (["--model", "resnet50", "--env", "10GbE", "-p", "4", "--schedule", "wfbq"], "unknown schedule 'wfbq'"),
        (["--model", "resnet50", "--env", "10GbE", "-p", "four"], "--p must be positive integers"),
        (["--model", "resnet50", "--env", "10GbE", "-p", "4", "--option", "bucket_bytes=4MiB"],
         "--option bucket_bytes: no chosen schedule has it"),
        (["--model", "resnet50", "--env", "10GbE", "-p", "4", "--schedule", "fusion", "--option", "bucket_bytes=-1"],
         "bucket_bytes must be a positive number of bytes"),
    ],
)
def test_predict_iteration_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    code, out, err = run(capsys, "predict", "iteration", *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commscope: error:")
    assert fragment in err


def test_predict_iteration_with_compressors(capsys: pytest.CaptureFixture[str]) -> None:
    rows = json.loads(run_ok(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8",
                             "--compressor", "topk:0.01,fp16", "--json"))["results"]
    assert [r["compressor"] for r in rows] == ["topk:0.01", "fp16"]
    expected = cm.simulate(cm.profile("resnet50"), cm.environment("10GbE"), 8, "wfbp", compressor="fp16")
    assert rows[1]["iteration_s"] == pytest.approx(expected.iteration_time)
    code, _, err = run(capsys, "predict", "iteration", "--model", "resnet50", "--env", "10GbE", "-p", "8",
                       "--schedule", "dear", "--compressor", "topk:0.01")
    assert code == 2 and "compression runs on top of the schedules" in err


def test_a_command_writing_one_document_never_replaces_a_results_file(tmp_path: Path, capsys) -> None:
    # `commscope profile --out r.jsonl` once replaced a sweep's 11 records with the profile; a results file is only
    # ever appended to, so every command that replaces its output refuses one, before any work
    from runners import reference
    from runners.cli.common import check_writable, holds_records

    shipped = reference.VALIDATION_DIR / "2500mbit" / "records.jsonl"
    recs = tmp_path / "r.jsonl"
    recs.write_bytes(b"\n" + b"".join(shipped.read_bytes().splitlines(keepends=True)[:3]))  # a blank line first
    before = recs.read_bytes()
    for argv in (["profile", "--model", "mlp", "--batch-size", "4", "--out", str(recs)],
                 ["calibrate", str(shipped), "--out", str(recs)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("commscope: error: ") and "holds commscope results records" in err, err
        assert len(err.strip().splitlines()) == 1 and recs.read_bytes() == before
    assert holds_records(recs)
    other = tmp_path / "profile.json"  # a document the command wrote before is replaced as ever
    other.write_text(json.dumps({"schema": "commscope.model_profile/1"}))
    check_writable(other, "the profile")
    for text in ("", "not json\n", "[1, 2]\n"):
        other.write_text(text)
        assert not holds_records(other)
    assert not holds_records(tmp_path / "missing.jsonl")
