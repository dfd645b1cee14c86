"""``commscope constants`` (runners.constants, convergence.measured_constants): measured problem constants
against closed forms on linear regression, compressors' delta / omega against hand-worked values and their
definitions' worst cases, the record and its round trip into time-to-accuracy's constants, and the CLI."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from convergence.measured_constants import (  # noqa: E402
    compressor_constants_from_records,
    constants_from_records,
    sign_constants_from_records,
)
from costmodels.errors import CommscopeError  # noqa: E402
from runners import results as rs  # noqa: E402
from runners.cli import main  # noqa: E402
from runners.constants import compressors as comp  # noqa: E402
from runners.constants import summary  # noqa: E402
from runners.constants.checkpoint import Setting, measure  # noqa: E402
from runners.constants.comm import Group  # noqa: E402
from runners.constants.noise import per_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ linear regression: closed forms
def regression(n: int = 240, d: int = 6, seed: int = 0) -> tuple[Any, Any, Any]:
    """X with well separated column scales (so power iteration converges fast), y = X w* + noise, w0."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * np.array([3.0, 1.5, 1.0, 0.7, 0.5, 0.3])[:d]
    y = x @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n)
    return x, y, rng.standard_normal(d)


def mse(out: Any, target: Any) -> Any:
    """f(w) = mean_s (x_s.w - y_s)^2: per-sample gradient 2 (x_s.w - y_s) x_s, Hessian 2 X^T X / n."""
    return torch.nn.functional.mse_loss(out.squeeze(-1), target)


def linear(w: np.ndarray) -> Any:
    model = torch.nn.Linear(len(w), 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor(w).view(1, -1))
    return model


def closed_forms(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
    r = x @ w - y
    per_sample = 2 * r[:, None] * x
    grad = per_sample.mean(axis=0)
    return {"loss": float((r**2).mean()), "L": float(np.linalg.eigvalsh(2 * x.T @ x / len(x)).max()),
            "sigma2": float(((per_sample - grad) ** 2).sum(axis=1).mean()), "grad": grad}


def setting(x: np.ndarray, y: np.ndarray, **kw: Any) -> Setting:
    base = {"noise_samples": len(x), "hvp_samples": len(x), "power_iterations": 200, "draws": 4}
    return Setting(mse, torch.tensor(x), torch.tensor(y), len(x), 16, 0.01, **{**base, **kw})


def test_linear_regression_matches_closed_forms() -> None:
    x, y, w = regression()
    want = closed_forms(x, y, w)
    out, grad, theta = measure(linear(w), setting(x, y), Group(), 0)
    assert out["loss"] == pytest.approx(want["loss"], rel=1e-9)
    assert grad.numpy() == pytest.approx(want["grad"], rel=1e-9)
    assert theta.numpy() == pytest.approx(w)
    assert out["power"]["abs"] == pytest.approx(want["L"], rel=1e-3) and out["power"]["converged"]
    assert out["power"]["rayleigh"] == pytest.approx(want["L"], rel=1e-3)  # convex: the top curvature is positive
    assert out["sigma2_sample"] == pytest.approx(want["sigma2"], rel=1e-9)
    # a secant of a quadratic along the gradient is ||H g|| / ||g||: between the extreme eigenvalues
    assert 0 < out["secant_local"] <= want["L"] * (1 + 1e-9)
    # batches of 16 from 240 samples: sigma^2 / 16 x 224 / 239 in expectation; 4 draws measure it roughly
    assert per_batch(want["sigma2"], 16, 240) == pytest.approx(want["sigma2"] / 16 * 224 / 239)
    assert 0.2 < out["sigma2_batch_measured"] / per_batch(want["sigma2"], 16, 240) < 3
    assert out["zeta"] == {"raw": 0.0, "bias": 0.0, "zeta2": 0.0}  # one rank


def test_measuring_leaves_the_model_as_it_was() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(64, 4, generator=gen), torch.randint(0, 3, (64,), generator=gen)
    s = Setting(torch.nn.functional.cross_entropy, xs, ys, 64, 16, 0.1, noise_samples=32, hvp_samples=32,
                power_iterations=3, draws=2, compressors=["topk:0.5", "qsgd:4"])
    out, _, _ = measure(model, s, Group(), 0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "sigma2_sample" not in out and out["sigma2_batch_measured"] > 0  # BatchNorm: per batch only
    assert any("BatchNorm" in n for n in out["notes"])


def _zeta_rank(rank: int, world: int, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    from runners.training import zoo

    xs, ys = zoo.shard((torch.tensor(x), torch.tensor(y)), rank, world)
    s = Setting(mse, xs, ys, len(xs), 8, 0.01, noise_samples=0, hvp_samples=len(xs), power_iterations=200, draws=2)
    out, _, _ = measure(linear(w), s, Group(), 0)
    return {"zeta": out["zeta"], "loss": out["loss"], "L": out["power"]["abs"]}


@pytest.mark.multiprocess
def test_heterogeneity_across_real_shards_matches_closed_form() -> None:
    from runners.training.launch import run_ranks

    x, y, w = regression(n=120)
    y[1::2] += 3.0  # rank 1's shard (odd samples) is shifted: heterogeneous shards
    got = run_ranks(_zeta_rank, 2, x, y, w, timeout=120)
    grads = [closed_forms(x[r::2], y[r::2], w)["grad"] for r in range(2)]
    mean = sum(grads) / 2
    want = sum(float(((g - mean) ** 2).sum()) for g in grads) / 2
    assert want > 1.0
    for r in got:
        assert r["zeta"]["zeta2"] == pytest.approx(want, rel=1e-9) and r["zeta"]["bias"] == 0.0
        assert r["loss"] == pytest.approx(closed_forms(x, y, w)["loss"], rel=1e-9)
        assert r["L"] == pytest.approx(closed_forms(x, y, w)["L"], rel=1e-3)  # the global Hessian


# ------------------------------------------------------------------------------ compressors
def ratios(label: str, g: Any, draws: int = 1, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    return comp.measure(label, [g.double()], [("w", g.numel(), shape or (g.numel(),))], draws,
                        torch.Generator().manual_seed(1))


def test_topk_closed_form_on_a_hand_made_vector() -> None:
    g = torch.tensor([4.0, -3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    # k = ceil(0.25 x 8) = 2 keeps 4 and -3: error 2^2 + 1^2 = 5 of ||g||^2 = 30, delta = 25/30
    assert ratios("topk:0.25", g)["overall"] == [pytest.approx(5 / 30)]
    assert comp.worst_case("topk:0.25", [("w", 8, (8,))])["overall"] == 2 / 8


@pytest.mark.parametrize("seed", range(5))
def test_topk_delta_is_at_least_k_over_d(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(1000, generator=gen) * torch.rand(1000, generator=gen) ** 3  # heavy-tailed magnitudes
    for q in (0.001, 0.01, 0.1):
        k = math.ceil(1000 * q)
        assert 1 - ratios(f"topk:{q}", g)["overall"][0] >= k / 1000 - 1e-12


def test_randomk_omega_and_delta_in_expectation() -> None:
    g = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    r = ratios("randomk:0.1", g, draws=400)
    # unscaled (with error feedback): E||C(g) - g||^2 = (1 - k/d) ||g||^2; unbiased (d/k) C: omega = d/k - 1 = 9
    assert 1 - r["overall"][0] == pytest.approx(0.1, rel=0.05)
    assert r["scaled_overall"][0] == pytest.approx(9.0, rel=0.1)
    wc = comp.worst_case("randomk:0.1", [("w", 1000, (1000,))])
    assert wc["overall"] == pytest.approx(0.1) and wc["scaled_overall"] == pytest.approx(9.0)


def test_unbiased_quantisers_and_scaled_sign_against_their_definitions() -> None:
    g = torch.randn(4096, generator=torch.Generator().manual_seed(2))
    d = g.numel()
    assert ratios("qsgd:4", g, draws=16)["overall"][0] <= min(d / 49, math.sqrt(d) / 7)  # s = 7 levels
    assert ratios("terngrad", g, draws=16)["overall"][0] <= math.sqrt(d) - 1
    # EF-signSGD: ||C(g) - g||^2 / ||g||^2 = 1 - ||g||_1^2 / (d ||g||^2) exactly
    want = 1 - float(g.abs().sum()) ** 2 / (d * float((g * g).sum()))
    assert ratios("ef_signsgd", g)["overall"][0] == pytest.approx(want, rel=1e-5)
    assert 1 - ratios("fp16", g)["overall"][0] >= 1 - 2.0**-22
    assert ratios("signsgd", g) == {} and comp.constant_of("signsgd") is None


def test_powersgd_recovers_a_low_rank_gradient_and_passes_vectors() -> None:
    # a fixed draw: float32 rounding of the rank-1 reconstruction leaves a squared relative error of ~1e-13
    # (seed 1: 9.7e-14), and an unseeded draw once came to 1.02e-10
    gen = torch.Generator().manual_seed(1)
    u, v = torch.randn(32, 1, generator=gen), torch.randn(1, 48, generator=gen)
    assert ratios("powersgd:1", (u @ v).reshape(-1), draws=2, shape=(32, 48))["overall"][0] < 1e-10
    assert ratios("powersgd:1", torch.randn(32), shape=(32,))["overall"][0] == 0.0  # vectors go uncompressed
    full_rank = torch.randn(32, 48, generator=torch.Generator().manual_seed(3)).reshape(-1)
    assert 1 - ratios("powersgd:4", full_rank, draws=4, shape=(32, 48))["overall"][0] >= 0.5 * 4 / 32


# --------------------------------------------------------------------------- record and round trip
def point(step: int, rank: int, power: float, s2: float, zeta2: float, loss: float, ratio: float) -> dict[str, Any]:
    return {"step": step, "rank": rank, "loss": loss, "power": {"abs": power, "rayleigh": power, "iterations": 9,
                                                                "converged": True},
            "secant_local": power / 2, "sigma2_sample": s2, "sigma2_batch_measured": s2 / 10, "sigma1_batch": 5.0,
            "zeta": {"raw": zeta2, "bias": 0.0, "zeta2": zeta2}, "seconds": 0.1, "notes": [],
            "compressors": {"topk:0.5": {"overall": [ratio, ratio], "tensors": [[ratio, ratio]]}}}


def hand_record(model: str = "mlp") -> dict[str, Any]:
    """Two checkpoints, two ranks: L 2 then 3; sigma_1^2 (4, 6) then (8, 10); zeta^2 0.5 then 1.5."""
    points = [[point(0, 0, 2.0, 4.0, 0.5, 2.3, 0.2), point(0, 1, 2.0, 6.0, 0.5, 2.3, 0.4)],
              [point(5, 0, 3.0, 8.0, 1.5, 2.0, 0.3), point(5, 1, 3.0, 10.0, 1.5, 2.0, 0.3)]]
    tensors = [("w", 16, (16,))]
    result = {"checkpoints": [0, 5], "L": summary.smoothness(points, [1.0]), "sigma": summary.noise(points, 8, 101),
              "sigma1": {"value": 5.0}, "zeta": summary.heterogeneity(points, 2), "Delta": summary.gap(points, None),
              "compressors": {"topk:0.5": summary.compressor(points, "topk:0.5", tensors),
                              "signsgd": summary.compressor(points, "signsgd", tensors)}}
    config = {"model": model, "dataset": "gaussian_mixture", "batch_size": 8, "world_size": 2, "steps": 5}
    return rs.record("constants", config, result, rs.run_info("gloo", 2, 2, ["cpu", "cpu"]))


def test_record_validates_and_round_trips(tmp_path: Path) -> None:
    rec = hand_record()
    path = tmp_path / "c.jsonl"
    rs.append(path, [rec, rs.record("iteration", {"algorithm": "sgd", "model": "mlp", "batch_size": 8},
                                    {"time_s": 0.1}, rec["run"])])
    loaded = rs.load(path)
    assert not loaded.bad and [r["kind"] for r in loaded.records] == ["constants", "iteration"]
    c = constants_from_records(loaded.records)
    s2 = [per_batch(5.0, 8, 101), per_batch(9.0, 8, 101)]  # rank means per checkpoint, per batch of 8
    assert c == pytest.approx({"L": 3.0, "sigma": math.sqrt(sum(s2) / 2), "Delta": 2.3, "zeta": 1.0})
    assert constants_from_records(loaded.records, worst=True)["sigma"] == pytest.approx(math.sqrt(s2[1]))
    assert constants_from_records(loaded.records, batch_size=32)["sigma"] == pytest.approx(
        math.sqrt(per_batch(7.0, 32, 101)))
    topk = compressor_constants_from_records(loaded.records)
    assert topk == {"topk:0.5": {"delta": pytest.approx(0.7), "worst_case": 0.5, "constant": "delta"}}
    assert compressor_constants_from_records(loaded.records, worst=True)["topk:0.5"]["delta"] == pytest.approx(0.6)
    assert sign_constants_from_records(loaded.records) == {"sigma1": 5.0}
    import convergence as cv

    r = cv.time_to_accuracy("resnet50", "10GbE", 8, 1e-2, ["sgd", "dpsgd"], **c)
    assert dict(r.constants) == pytest.approx(c) and np.isfinite(r.seconds).all()


def test_l_is_the_largest_lower_bound() -> None:
    pts = [[point(0, 0, 2.0, 4.0, 0.5, 2.3, 0.2)], [point(5, 0, 3.0, 8.0, 1.5, 2.0, 0.3)]]
    assert summary.smoothness(pts, [1.0])["value"] == 3.0  # power iteration above every secant
    steep = summary.smoothness(pts, [4.0])
    assert steep["value"] == 4.0 and "max secant" in steep["used"]
    pts[1][0]["power"] = pts[0][0]["power"] = None  # Hessian-vector products failed
    assert summary.smoothness(pts, [1.0])["value"] == 1.5 and "failed" in summary.smoothness(pts, [1.0])["used"]


def test_round_trip_errors() -> None:
    with pytest.raises(CommscopeError, match="no 'constants' records"):
        constants_from_records([])
    with pytest.raises(CommscopeError, match="several models"):
        constants_from_records([hand_record("mlp"), hand_record("gpt_small")])
    assert constants_from_records([hand_record("mlp"), hand_record("gpt_small")], model="mlp")["L"] == 3.0
    with pytest.raises(CommscopeError, match="batch_size must be a positive integer"):
        constants_from_records([hand_record()], batch_size=0)
    bad = hand_record()
    bad["result"]["L"]["value"] = None
    with pytest.raises(CommscopeError, match="no usable L"):
        constants_from_records([bad])
    with pytest.raises(rs.RecordError, match=r"result\.zeta is missing"):
        rs.validate({**bad, "result": {k: v for k, v in bad["result"].items() if k != "zeta"}})


# ---------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "mlpp"], "unknown --model 'mlpp'"),
    (["--model", "mlp", "--ranks", "0"], "--ranks must be an integer >= 1, got 0"),
    (["--model", "mlp", "--compressors", "topk,zip"], "--compressors 'zip': unknown compressor 'zip'"),
    (["--model", "mlp", "--compressors", "topk:2"], "density must be a density in (0, 1]"),
    (["--model", "mlp", "--steps", "2", "--checkpoints", "5"], "--checkpoints 5 needs at least 4 --steps, got 2"),
    (["--model", "mlp", "--technique", "dpsgd"], "--technique 'dpsgd' cannot be measured"),
    (["--model", "mlp", "--dataset", "mnist"], "unknown --dataset 'mnist'"),
    (["--model", "mlp", "--draws", "1"], "--draws must be an integer >= 2, got 1"),
    (["--model", "mlp", "--batch-size", "5000"], "--batch-size 5000 is larger than a rank's shard (4096 samples"),
    (["--model", "resnet50"], "no paired data set; give --dataset"),
])
def test_cli_errors_are_one_line_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str],
                                             message: str) -> None:
    if argv == ["--model", "resnet50"] and not __import__("importlib").util.find_spec("torchvision"):
        message = "needs torchvision"
    code = main(["constants", "--dry-run", "--out", str(tmp_path / "c.jsonl"), *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and message in err, err


def test_cli_refuses_an_unwritable_out_and_forwards_options(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    assert main(["constants", "--model", "mlp", "--out", str(tmp_path / "nope" / "c.jsonl")]) == 2
    assert "directory" in capsys.readouterr().err
    assert main(["constants", "--model", "mlp", "--out", str(tmp_path)]) == 2
    assert "it is a directory" in capsys.readouterr().err
    code = main(["constants", "--model", "mlp", "--ranks", "3", "--compressors", "topk:0.1,qsgd", "--steps", "8",
                 "--out", str(tmp_path / "c.jsonl"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "--nproc_per_node 3 -m runners.constants --model mlp --dataset gaussian_mixture" in out
    assert "--compressors topk:0.1,qsgd:8" in out and "--steps 8" in out


def test_rank_side_without_torchrun_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.constants.entry import main as rank_main

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    out = tmp_path / "c.jsonl"
    out.write_text("kept\n")
    assert rank_main(["--model", "mlp", "--out", str(out)]) == 2
    assert "run this under torchrun" in capsys.readouterr().err and out.read_text() == "kept\n"


@pytest.mark.multiprocess
def test_two_rank_run_writes_a_record_that_time_to_accuracy_reads(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    job = subprocess.run([sys.executable, "-m", "runners.cli", "constants", "--model", "mlp", "--ranks", "2",
                          "--steps", "4", "--checkpoints", "2", "--samples", "512", "--noise-samples", "128",
                          "--hvp-samples", "64", "--power-iterations", "5", "--draws", "2",
                          "--compressors", "topk,randomk,qsgd,signsgd", "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert job.returncode == 0, job.stderr[-3000:]
    assert "L          =" in job.stdout and "topk:0.01" in job.stdout
    (rec,) = rs.load(out).records
    c, x = rec["config"], rec["result"]
    assert (rec["kind"], c["model"], c["dataset"], c["world_size"], x["checkpoints"]) == (
        "constants", "mlp", "gaussian_mixture", 2, [0, 4])
    assert x["zeta"]["zeta2"] > 0 and x["zeta"]["bias"][0] > 0  # 512 of 4096 samples per shard: bias removed
    assert x["sigma"]["sigma2"] == pytest.approx(x["sigma"]["sigma2_per_sample"] / 32 * 4064 / 4095, rel=0.3)
    topk = x["compressors"]["topk:0.01"]
    assert topk["constant"] == "delta" and topk["value"] >= topk["worst_case"] > 0
    assert x["compressors"]["signsgd"]["constant"] is None
    constants = constants_from_records([rec])
    assert constants["zeta"] > 0 and constants["L"] > 0 and constants["Delta"] > 2  # cross-entropy of 10 classes
