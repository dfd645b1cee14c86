"""``commscope predict llm`` and ``commscope plan llm``: outputs, --json / --csv validity and one-line errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

import costmodels as cm
from runners.cli import main

GPT = ("--model", "gpt3-175b", "--gpus", "1024", "--env", "8xH100-NVLink+IB-NDR")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert err == ""
    return out


@pytest.fixture(scope="module")
def predicted() -> dict[str, Any]:
    """``predict llm --json`` of GPT-3 175B tp8 pp16 on 1,024 H100s (in-process, captured by hand)."""
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["predict", "llm", *GPT, "--tp", "8", "--pp", "16", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_predict_llm_json_matches_the_api(predicted: dict[str, Any]) -> None:
    r = cm.plan("gpt3-175b", gpus=1024, env="8xH100-NVLink+IB-NDR", tp=8, pp=16)
    assert predicted["label"] == r.plan.label() and predicted["plan"]["dp"] == 8
    assert predicted["iteration_time_s"] == pytest.approx(r.iteration_time)
    assert predicted["mfu"] == pytest.approx(r.mfu) and predicted["tokens_per_s"] == pytest.approx(r.tokens_per_s)
    assert predicted["oom"] is False and predicted["memory_bytes"]["total"] < predicted["device_memory_bytes"]
    assert {g["group"] for g in predicted["groups"]} == {"tp", "pp", "dp"}
    for g in predicted["groups"]:
        assert g["nbytes"] > 0 and g["time"] > 0 and g["algorithm"] and g["protocol"]
    att = predicted["attribution"]
    assert set(att["shares"]) == {"compute", "strategy", "library", "network"}
    assert att["strategy_s"] == pytest.approx(r.exposed_comm + r.bubble)
    assert predicted["bubble_fraction"] == pytest.approx(r.bubble / r.iteration_time)


def test_predict_llm_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "predict", "llm", *GPT, "--tp", "8", "--pp", "16")
    for text in ("tp8 pp16 1f1b dp8", "s, MFU", "tokens/s", "GiB of 80 GiB", "bubble", "communication per group",
                 "allreduce", "send_recv", "three-layer attribution", "strategy", "library", "network"):
        assert text in out, text
    assert "OUT OF MEMORY" not in out


def test_predict_llm_flags_oom_and_writes_a_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "pipeline.json"
    out = run_ok(capsys, "predict", "llm", *GPT, "--tp", "8", "--pp", "2", "--micro-batch", "4", "--trace",
                 str(trace))
    assert "OUT OF MEMORY" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_predict_llm_options_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run_ok(capsys, "predict", "llm", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--sp",
                             "--pp", "4", "--v", "5", "--zero", "1", "--recompute", "selective", "--global-batch",
                             "256", "--json"))
    p = data["plan"]
    assert (p["tp"], p["sp"], p["pp"], p["v"], p["schedule"], p["zero"], p["recompute"], p["global_batch"]) == (
        8, True, 4, 5, "interleaved", 1, "selective", 256)
    assert {"reduce_scatter", "allgather"} <= {g["primitive"] for g in data["groups"]}


@pytest.fixture(scope="module")
def planned() -> dict[str, Any]:
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan", "llm", *GPT, "--top", "5", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_plan_llm_json_is_ranked_and_names_the_switches(planned: dict[str, Any]) -> None:
    best = cm.best_plans("gpt3-175b", 1024, "8xH100-NVLink+IB-NDR", k=5)
    rows = planned["plans"]
    assert [r["plan"] for r in rows] == [b.plan.label() for b in best]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    times = [r["iteration_s"] for r in rows]
    assert times == sorted(times) and rows[0]["vs_best"] == 0.0
    assert rows[1]["vs_best"] == pytest.approx(times[1] / times[0] - 1)
    assert all(r["memory_gib"] * 2**30 <= planned["device_memory_bytes"] for r in rows)
    assert 0 < planned["fitting_plans"] <= planned["valid_plans"]
    assert planned["switches"] and all(s["bandwidth_Bps"] > 0 and s["from"] != s["to"] for s in planned["switches"])


def test_plan_llm_table_and_csv(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_ok(capsys, "plan", "llm", "--model", "llama3-8b", "--gpus", "16", "--top", "3")
    assert "vs best" in out and "best" in out and "what would change the best plan" in out
    assert "valid plans fit in 80 GiB" in out
    text = run_ok(capsys, "plan", "llm", "--model", "llama3-8b", "--gpus", "16", "--top", "3", "--no-switch", "--csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 3 and rows[0]["rank"] == "1" and float(rows[0]["vs_best"]) == 0.0
    assert "what would change" not in text


def test_plan_llm_device_memory_limits_the_plans(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(run_ok(capsys, "plan", "llm", "--model", "llama3-8b", "--gpus", "16", "--device-memory",
                             "40GiB", "--top", "50", "--no-switch", "--json"))
    assert data["device_memory_bytes"] == 40 * 2**30 and data["switches"] is None
    assert all(r["memory_gib"] <= 40 for r in data["plans"])


@pytest.mark.parametrize(("argv", "needle"), [
    (("predict", "llm", "--model", "gpt4", "--gpus", "8"), "--model must be one of gpt3-175b"),
    (("predict", "llm", "--model", "gpt3-175b", "--gpus", "8", "--env", "nope"), "--env: unknown environment"),
    (("predict", "llm", *GPT, "--tp", "3"), "--gpus 1024 must be a multiple of --tp x --cp x --pp (3)"),
    (("predict", "llm", *GPT, "--tp", "8", "--pp", "16", "--schedule", "foo"),
     "--schedule must be one of gpipe, 1f1b, interleaved, zb-h1, got 'foo'"),
    (("predict", "llm", *GPT, "--recompute", "some"), "--recompute must be one of none, selective, full"),
    (("predict", "llm", *GPT, "--zero", "4"), "--zero must be 0, 1, 2 or 3, got 4"),
    (("predict", "llm", *GPT, "--tp", "8", "--dp", "3"), "= 24, not --gpus 1024"),
    (("predict", "llm", *GPT, "--tp", "16"), "tp (16) must fit in a node (8 GPUs)"),
    (("predict", "llm", *GPT, "--tp", "x"), "'--tp'"),
    (("predict", "llm", *GPT, "--achieved", "1.5"), "--achieved must be a number in (0, 1] or 'kernel', got '1.5'"),
    (("predict", "llm", *GPT, "--achieved", "nan"), "--achieved must be a number in (0, 1] or 'kernel'"),
    (("predict", "llm", *GPT, "--achieved", "kernels"), "got 'kernels'"),
    (("predict", "llm", *GPT, "--achieved", "kernel", "--attention", "flash"),
     "--attention must be one of fused, materialized, got 'flash'"),
    (("predict", "llm", *GPT, "--attention", "materialized"), "--attention applies to --achieved kernel only"),
    (("predict", "llm", *GPT, "--achieved", "kernel", "--loss", "bf16"),
     "--loss must be one of fp32, fp16, fused, got 'bf16'"),
    (("plan", "llm", *GPT, "--loss", "fused"), "--loss applies to --achieved kernel only"),
    (("predict", "llm", *GPT, "--micro-batch", "0"), "--micro-batch must be a positive integer, got 0"),
    (("plan", "llm", "--model", "gpt3-175b", "--gpus", "8", "--device-memory", "10GiB", "--no-switch"),
     "no plan of gpt3-175b on 8 GPUs fits in 10.0 GiB"),
    (("plan", "llm", "--model", "gpt3-175b", "--gpus", "8", "--device-memory", "abc"), "--device-memory: cannot"),
    (("plan", "llm", "--model", "llama3-8b", "--gpus", "8", "--top", "0"), "--top must be a positive integer"),
    (("plan", "llm", "--model", "llama3-8b", "--gpus", "8", "--json", "--csv"), "--json or --csv, not both"),
])
def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], needle: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("commscope: error: "), err
    assert needle in lines[0]
    assert "Traceback" not in err


def test_kernel_model_from_the_command_line_is_the_api_s(capsys: pytest.CaptureFixture[str]) -> None:
    """--achieved kernel [--attention materialized] prices the plan as costmodels.llm.plan(achieved=None) does, and
    differs from the fixed fraction (GPT-3 175B tp8 pp16 on 1,024 H100s)."""
    from costmodels.llm import llm, plan

    argv = ("predict", "llm", *GPT, "--tp", "8", "--pp", "16", "--json")
    fixed = json.loads(run_ok(capsys, *argv))
    for attention in ("fused", "materialized"):
        got = json.loads(run_ok(capsys, *argv, "--achieved", "kernel", "--attention", attention))
        want = plan(llm("gpt3-175b"), 1024, cm.environment("8xH100-NVLink+IB-NDR"), tp=8, pp=16, achieved=None,
                    attention=attention)
        assert got["iteration_time_s"] == pytest.approx(want.iteration_time, rel=1e-12)
        assert got["iteration_time_s"] != pytest.approx(fixed["iteration_time_s"], rel=1e-3)
    times = {}
    for loss in ("fp32", "fp16", "fused"):  # the cross-entropy's kernels (costmodels.llm.kernels.LOSS_BYTES)
        times[loss] = json.loads(run_ok(capsys, *argv, "--achieved", "kernel", "--loss", loss))["iteration_time_s"]
        want = plan(llm("gpt3-175b"), 1024, cm.environment("8xH100-NVLink+IB-NDR"), tp=8, pp=16, achieved=None,
                    loss=loss)
        assert times[loss] == pytest.approx(want.iteration_time, rel=1e-12)
    assert times["fused"] < times["fp16"] < times["fp32"]
    out = run_ok(capsys, "predict", "llm", *GPT, "--tp", "8", "--pp", "16", "--achieved", "kernel")
    assert "kernels by shape (kernel model)" in out
    ranked = json.loads(run_ok(capsys, "plan", "llm", *GPT, "--achieved", "kernel", "--no-switch", "--top", "3",
                               "--json"))
    assert len(ranked["plans"]) == 3


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert "llm" in run_ok(capsys, "predict", "--help")
    assert "llm" in run_ok(capsys, "plan", "--help")
