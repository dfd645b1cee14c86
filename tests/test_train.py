"""Training runs (runners.training.runner, ``commscope train``): real two-rank gloo jobs on the mlp, and CLI errors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners import results as rs
from runners.cli import main

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("forward_s", "backward_s", "exposed_comm_s", "compression_s", "update_s")


def run_train(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "runners.cli", "train", "--nproc", "2", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def loaded(path: Path) -> list[dict]:
    data = rs.load(path)
    assert not data.bad, [str(b) for b in data.bad]
    return data.records


@pytest.mark.multiprocess
@pytest.mark.parametrize(("algorithm", "option"), [("wfbp", []), ("dear", []), ("topk", ["--option", "density=0.1"])])
def test_iteration_record_with_breakdown(tmp_path: Path, algorithm: str, option: list[str]) -> None:
    out = tmp_path / "r.jsonl"
    job = run_train("--algorithm", algorithm, "--model", "mlp", "--iterations", "5", "--warmup", "1", *option,
                    "--out", str(out))
    assert job.returncode == 0, job.stderr[-3000:]
    assert "[5/5]" in job.stdout and "samples/s" in job.stdout
    (rec,) = loaded(out)
    c, x, run = rec["config"], rec["result"], rec["run"]
    assert rec["kind"] == "iteration" and rec["source"] == "torchrun"
    assert (c["algorithm"], c["model"], c["batch_size"], c["world_size"], c["iterations"], c["warmup"],
            c["threads"]) == (algorithm, "mlp", 32, 2, 5, 1, 1)
    if algorithm == "topk":
        assert c["options"] == {"density": 0.1, "seed": 0}
    assert (run["backend"], run["world_size"], len(run["devices"])) == ("gloo", 2, 2)
    assert len(x["times"]) == 5 and all(t > 0 for t in x["times"])
    assert x["time_p10_s"] <= x["time_s"] <= x["time_p90_s"] <= max(x["times"])
    # each iteration's mean over ranks is at most its maximum, so their medians keep that order
    assert 0 < x["time_rank_mean_s"] <= x["time_s"]
    assert math.isclose(x["throughput_samples_per_s"], 2 * 32 / x["time_s"])
    assert all(x[p] >= 0 for p in PARTS) and x["forward_s"] > 0 and x["backward_s"] > 0
    assert sum(x[p] for p in PARTS) <= 2 * max(x["times"])
    if algorithm == "topk":
        assert x["compression_s"] > 0
    # the record says the ranks' malloc settings and counts their training threads' page faults per step
    # (runners/torchrun/allocator.py; the heap still grows over the first timed steps of so short a run)
    assert set(run["malloc"]) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    assert 0 <= x["minor_faults_per_step"] < 10000


@pytest.mark.multiprocess
def test_convergence_records_loss_decreases(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    job = run_train("--algorithm", "wfbp", "--model", "mlp", "--iterations", "30", "--warmup", "0", "--lr", "0.1",
                    "--convergence", "--dataset", "gaussian_mixture", "--eval-every", "10", "--out", str(out))
    assert job.returncode == 0, job.stderr[-3000:]
    recs = loaded(out)
    conv = [r for r in recs if r["kind"] == "convergence"]
    assert [r["result"]["step"] for r in conv] == [0, 10, 20, 30]
    assert all(r["config"]["dataset"] == "gaussian_mixture" and r["config"]["world_size"] == 2 for r in conv)
    losses = [r["result"]["loss"] for r in conv]
    assert losses[-1] < losses[0] - 0.05, losses
    assert conv[-1]["result"]["test_loss"] < conv[0]["result"]["test_loss"]
    assert conv[-1]["result"]["accuracy"] > conv[0]["result"]["accuracy"]
    times = [r["result"]["time_s"] for r in conv]
    assert times == sorted(times)
    (it,) = [r for r in recs if r["kind"] == "iteration"]
    assert it["config"]["data"] == "gaussian_mixture" and len(it["result"]["times"]) == 30


@pytest.mark.multiprocess
def test_a_diverging_run_is_recorded_with_its_step_and_exits_3(tmp_path: Path) -> None:
    """lr 10^4: the loss overflows within a few steps. Every rank stops at the same evaluation (no hang, no rank
    failing alone), the divergence is a record with its step, and ``commscope train`` exits 3 saying so."""
    out = tmp_path / "r.jsonl"
    job = run_train("--algorithm", "wfbp", "--model", "mlp", "--iterations", "40", "--warmup", "0", "--lr", "1e4",
                    "--convergence", "--eval-every", "2", "--timeout", "30", "--out", str(out), timeout=60)
    assert job.returncode == 3, job.stderr[-3000:]
    said = [line for line in job.stderr.splitlines() if line.startswith("commscope:")]
    assert len(said) == 1 and said[0].startswith("commscope: training diverged at step ") and str(out) in said[0]
    recs = loaded(out)
    conv = [r["result"] for r in recs if r["kind"] == "convergence"]
    assert conv[-1]["diverged"] and all(not c.get("diverged") for c in conv[:-1])
    step = conv[-1]["step"]
    assert 0 < step <= conv[-1]["evaluated_at"] < 40 and str(step) in said[0]
    assert math.isfinite(conv[-1]["loss"]) and conv[-1]["loss_step"] == conv[-2]["step"]
    (it,) = [r["result"] for r in recs if r["kind"] == "iteration"]
    assert it["diverged"] and it["diverged_step"] == step and it["iterations_timed"] == conv[-1]["evaluated_at"]
    assert len(it["times"]) == it["iterations_timed"] and it["loss_last"] is None


@pytest.mark.multiprocess
def test_a_timing_run_that_diverges_says_so_after_the_timed_loop(tmp_path: Path) -> None:
    """Without --convergence nothing is communicated inside the timed loop: the ranks agree once it is over (local
    SGD: the ranks' losses go non-finite at different steps; the first one counts)."""
    out = tmp_path / "r.jsonl"
    job = run_train("--algorithm", "local_sgd", "--model", "mlp", "--iterations", "12", "--warmup", "2", "--lr",
                    "1e4", "--timeout", "30", "--out", str(out), timeout=60)
    assert job.returncode == 3, job.stderr[-3000:]
    (it,) = [r["result"] for r in loaded(out)]
    assert it["diverged"] and 0 < it["diverged_step"] <= 14 and len(it["times"]) == it["iterations_timed"] == 12
    assert it["loss_last"] is None and f"diverged at step {it['diverged_step']} " in job.stderr


def test_dry_run_forwards_options(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                  tmp_path: Path) -> None:
    monkeypatch.delenv("COMMSCOPE_NNODES", raising=False)
    code = main(["train", "--nproc", "3", "--algorithm", "DEAR", "--model", "resnet_small", "--iterations", "7",
                 "--option", "buffer_bytes=1024", "--convergence", "--out", str(tmp_path / "r.jsonl"), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert ("--standalone --nnodes 1 --nproc_per_node 3 -m runners.training.runner --algorithm dear "
            "--model resnet_small") in out
    assert "--option buffer_bytes=1024" in out and "--convergence" in out and "--dataset gratings32" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--algorithm", "nope", "--model", "mlp"], "unknown training technique 'nope'"),
    (["--algorithm", "dear", "--model", "mlpp"], "unknown model 'mlpp'"),
    (["--algorithm", "topk", "--model", "mlp", "--option", "densty=0.1"], "technique topk has no option 'densty'"),
    (["--algorithm", "topk", "--model", "mlp", "--option", "density=lots"], "--option density of topk must be"),
    (["--algorithm", "topk", "--model", "mlp", "--option", "density"], "--option must look like KEY=VALUE"),
    (["--algorithm", "dear", "--model", "mlp", "--iterations", "0"], "--iterations must be an integer >= 1"),
    (["--algorithm", "dear", "--model", "mlp", "--lr", "0"], "--lr must be a number > 0"),
    (["--algorithm", "dear", "--model", "mlp", "--dataset", "gaussian_mixture"], "add --convergence"),
    (["--algorithm", "dear", "--model", "mlp", "--convergence", "--dataset", "mnist"], "unknown data set 'mnist'"),
    (["--algorithm", "dear", "--model", "mlp", "--backend", "mpi"], "unknown --backend"),
])
def test_cli_errors_are_one_line_with_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             message: str) -> None:
    code = main(["train", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and message in err


def test_rank_side_errors_without_torchrun(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.training import runner as train

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert train.main(["--algorithm", "dear", "--model", "mlp", "--iterations", "2", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: ") and "--bogus" in err
    assert train.main(["--algorithm", "dear", "--model", "mlp", "--iterations", "2"]) == 2
    assert "run this under torchrun" in capsys.readouterr().err


def test_replicas_that_differ_are_evaluated_on_their_average() -> None:
    """local SGD and D-PSGD keep a model per rank between synchronisations; their bounds describe the average, so
    the convergence record's test loss is the averaged model's: every floating parameter and buffer averaged over
    the ranks (two simulated ranks here: the other rank's tensors are added by the fake all-reduce)."""
    import types

    import torch

    from runners.training import technique
    from runners.training.runner.loop import _averaged

    assert technique("local_sgd").replicas_differ and technique("dpsgd").replicas_differ
    assert not technique("wfbp").replicas_differ and not technique("qsgd").replicas_differ
    mine = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    other = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    with torch.no_grad():
        for t in other.parameters():
            t.add_(1.0)
        other[1].running_mean.fill_(4.0)
    theirs = iter([*other.parameters(), *other.buffers()])

    def all_reduce(t: torch.Tensor) -> None:
        t.add_(next(theirs))

    ctx = types.SimpleNamespace(torch=torch, world=2, dist=types.SimpleNamespace(all_reduce=all_reduce))
    avg = _averaged(ctx, mine)
    for a, m, o in zip(avg.parameters(), mine.parameters(), other.parameters(), strict=True):
        assert torch.allclose(a, (m + o) / 2)
    assert torch.allclose(avg[1].running_mean, torch.full((2,), 2.0))  # (0 + 4) / 2
    assert avg[1].num_batches_tracked == mine[1].num_batches_tracked  # integer buffers are left alone
    assert not torch.equal(next(avg.parameters()), next(mine.parameters()))  # a copy: the rank's model unchanged


@pytest.mark.multiprocess
def test_local_sgd_convergence_records_say_they_evaluate_the_average(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    job = run_train("--algorithm", "local_sgd", "--model", "mlp", "--iterations", "10", "--warmup", "0", "--lr",
                    "0.1", "--option", "H=1000", "--convergence", "--dataset", "gaussian_mixture", "--eval-every",
                    "5", "--out", str(out))
    assert job.returncode == 0, job.stderr[-3000:]
    conv = [r["result"] for r in loaded(out) if r["kind"] == "convergence"]
    assert [c["step"] for c in conv] == [0, 5, 10]
    assert all(c["evaluated"] == "the model averaged over the ranks" and math.isfinite(c["test_loss"]) for c in conv)
    assert [c["time_s"] for c in conv] == sorted(c["time_s"] for c in conv)
