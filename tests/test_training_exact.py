"""Exact techniques: after k SGD steps on 2 and 4 gloo ranks, the parameters equal single-process SGD.

Each world size runs every technique on three models inside one ``run_ranks`` call: an MLP, a
small convolutional net (no BatchNorm, which would differ across shards), and a model with a frozen
layer, an unused layer and a bare bias vector used in the root module's forward.
"""

from __future__ import annotations

import numpy as np
import pytest

import convergence as cv
import costmodels as cm
from costmodels.errors import CommscopeError
from runners.training import technique, techniques
from runners.training.launch import run_ranks

pytestmark = pytest.mark.multiprocess

EXACT = ["bsp", "wfbp", "fusion", "mgwfbp", "bytescheduler", "dear", "zero", "fsdp"]
LR, STEPS, BATCH = 0.1, 3, 8
RTOL, ATOL = 1e-5, 1e-6

# (label, technique, options): small buckets and partitions so that every path has several
CONFIGS = [
    ("bsp", "bsp", {}),
    ("bsp-flat", "bsp", {"flatten": True}),
    ("wfbp", "wfbp", {}),
    ("fusion", "fusion", {"bucket_cap_mb": 0.0005}),
    ("mgwfbp", "mgwfbp", {}),
    ("bytescheduler", "bytescheduler", {"partition_bytes": 64, "credit_bytes": 256}),
    ("dear", "dear", {"buffer_bytes": 100}),
    ("zero", "zero", {"bucket_bytes": 150, "allgather_bucket_bytes": 400}),
    ("fsdp", "fsdp", {"unit_bytes": 200}),
]


def _models() -> dict:
    import torch
    from torch import nn

    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(1, 3, 3), nn.Conv2d(3, 4, 3)
            self.head = nn.Linear(4 * 4 * 4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1))

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.frozen = nn.Linear(6, 6).requires_grad_(False)
            self.lin = nn.Linear(6, 3)
            self.unused = nn.Linear(3, 3)
            self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(torch.tanh(self.frozen(x))) + self.bias

    return {
        "mlp": (lambda: nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 2)),
                (5,), 2),
        "cnn": (CNN, (1, 8, 8), 2),
        "odd": (Odd, (6,), 3),
    }


def _data(name: str) -> tuple:
    import torch

    _, shape, out = _models()[name]
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, *shape, generator=g), torch.randn(BATCH, out, generator=g)


def _build(name: str):
    import torch

    torch.manual_seed(0)
    return _models()[name][0]()


def _reference(name: str) -> dict[str, np.ndarray]:
    """Single-process SGD on the whole batch."""
    import torch

    model = _build(name)
    x, y = _data(name)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def _train(rank: int, world_size: int, name: str, tech: str, options: dict, group=None, device: str = "cpu"):
    import torch

    model = _build(name).to(device)
    x, y = _data(name)
    per = BATCH // world_size
    xs, ys = x[rank * per:(rank + 1) * per].to(device), y[rank * per:(rank + 1) * per].to(device)
    if tech == "fusion" and name == "odd":
        options = {**options, "find_unused_parameters": True}
    trainer = technique(tech).build(model, LR, group, **options)
    results = [trainer.step(xs, ys, torch.nn.functional.mse_loss) for _ in range(STEPS)]
    params = {n: t.numpy() for n, t in trainer.full_parameters().items()}
    trainer.close()
    return params, results, dict(trainer.equivalents)


def _all_techniques(rank: int, world_size: int) -> dict:
    import torch.distributed as dist

    out: dict = {}
    for name in ("mlp", "cnn", "odd"):
        for label, tech, options in CONFIGS:
            out[label, name] = _train(rank, world_size, name, tech, options)
    # MG-WFBP with a profile of the model: zero backward times merge everything into one bucket
    model = _build("mlp")
    layers = [cm.Layer(n, p.numel(), 4.0 * p.numel(), 0.0, 0.0) for n, p in model.named_parameters()]
    prof = cm.ModelProfile("mlp", tuple(layers), "cpu", "float32", 4, "estimated", "test")
    out["mgwfbp-profile", "mlp"] = _train(rank, world_size, "mlp", "mgwfbp", {"profile": prof})
    out["names"] = [n for n, _ in model.named_parameters()]
    out["groups"] = technique("mgwfbp").build(_build("mlp"), LR, profile=prof).groups
    slow = cm.ModelProfile("mlp", tuple(cm.Layer(x.name, x.params, x.grad_bytes, 1.0, 1.0) for x in layers),
                           "cpu", "float32", 4, "estimated", "test")
    out["groups_slow"] = technique("mgwfbp").build(_build("mlp"), LR, profile=slow, env="10GbE").groups
    # DeAR and ZeRO through the equivalents used where a backend lacks the single-tensor collectives
    saved = {k: getattr(dist, k) for k in ("reduce_scatter_single", "reduce_scatter_tensor",
                                           "all_gather_single", "all_gather_into_tensor") if hasattr(dist, k)}

    def refuse(*_a, **_k):
        raise RuntimeError("not supported by this backend")

    try:
        for k in saved:
            setattr(dist, k, refuse)
        out["dear-equivalent", "mlp"] = _train(rank, world_size, "mlp", "dear", {"buffer_bytes": 300})
        out["zero-equivalent", "odd"] = _train(rank, world_size, "odd", "zero", {"bucket_bytes": 300})
    finally:
        for k, v in saved.items():
            setattr(dist, k, v)
    return out


def _bad_options(rank: int, world_size: int) -> list[str]:
    import torch

    errors = []
    for tech, options in [("bytescheduler", {"partition_bytes": 1024, "credit_bytes": 512}),
                          ("dear", {"buffer_bytes": 0}), ("zero", {"bucket_bytes": "lots"}),
                          ("mgwfbp", {"env": 3}), ("fusion", {"bucket_cap_mb": -1}), ("bsp", {"flatten": "yes"}),
                          ("mgwfbp", {"profile": cm.profile("resnet50")})]:
        try:
            technique(tech).build(torch.nn.Linear(2, 2), LR, **options)
            errors.append(f"{tech}: no error")
        except CommscopeError as exc:
            errors.append(f"{tech}: {exc}")
    return errors


@pytest.fixture(scope="module")
def references() -> dict[str, dict[str, np.ndarray]]:
    return {name: _reference(name) for name in ("mlp", "cnn", "odd")}


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_exact_technique_equals_single_process_sgd(world_size: int, references: dict) -> None:
    ranks = run_ranks(_all_techniques, world_size, timeout=120.0)
    keys = [k for k in ranks[0] if isinstance(k, tuple)]
    assert {k[0] for k in keys} >= set(EXACT)
    for key in keys:
        label, name = key
        ref = references[name]
        for r, out in enumerate(ranks):
            params, results, _ = out[key]
            assert set(params) == set(ref), key
            for n in ref:
                np.testing.assert_allclose(params[n], ref[n], rtol=RTOL, atol=ATOL,
                                           err_msg=f"{label} on {name}, rank {r}, {n}")
                np.testing.assert_array_equal(params[n], ranks[0][key][0][n], err_msg=f"{label}: ranks differ")
            assert len(results) == STEPS
            for s in results:
                parts = [s.forward, s.backward, s.exposed_comm, s.update]
                assert min(parts) >= -1e-9 and s.total > 0, (key, s)
                assert abs(sum(parts) + s.compression - s.total) < 1e-6, (key, s)
                assert np.isfinite(s.loss)
    # ByteScheduler counts its negotiated batches per step, as deltas: at least one for each step but the last
    # (whose partitions may still be in flight), at most one per partition per step
    for name in ("mlp", "cnn", "odd"):
        for out in ranks:
            steps = out["bytescheduler", name][1]
            batches, parts = [s.extra["batches"] for s in steps], steps[0].extra["partitions"]
            assert min(batches) >= 0 and STEPS - 1 <= sum(batches) <= STEPS * parts, (name, batches)
            assert all(0 <= s.extra["negotiation_s"] < 60 for s in steps)
    # the frozen and unused layers did not move
    odd = ranks[0]["dear", "odd"][0]
    for n in ("frozen.weight", "unused.weight"):
        np.testing.assert_array_equal(odd[n], references["odd"][n])
    # the profile path of MG-WFBP: no backward time -> one bucket; long layers -> one bucket each
    backward = ranks[0]["names"][::-1]
    assert ranks[0]["groups"] == [backward]
    assert ranks[0]["groups_slow"] == [[n] for n in backward]
    eq = ranks[0]["dear", "mlp"][2]
    assert set(eq) == {"reduce_scatter", "all_gather"}
    assert "equivalent" in ranks[0]["dear-equivalent", "mlp"][2]["reduce_scatter"]
    assert "equivalent" in ranks[0]["zero-equivalent", "odd"][2]["all_gather"]


def test_option_values_are_checked() -> None:
    errors = run_ranks(_bad_options, 2)[0]
    assert all("no error" not in e for e in errors), errors
    assert "credit_bytes (512) must be at least one partition" in errors[0]
    assert "buffer_bytes must be a positive number" in errors[1]
    assert "must list the model's trainable parameters" in errors[-1]


def test_unknown_options_are_refused() -> None:
    import torch

    for name in EXACT:
        with pytest.raises(CommscopeError, match=f"technique {name} takes"):
            technique(name).build(torch.nn.Linear(2, 2), LR, no_such_option=1)


def test_exact_techniques_are_registered_under_their_schedules() -> None:
    assert set(EXACT) <= set(techniques())
    for name in EXACT:
        t = technique(name)
        assert t.exact and t.schedule == name and t.bound == "sgd"
        assert t.schedule in cm.schedules() and t.bound in cv.bounds()
        assert "gloo" in t.backends
    exact = [t.name for t in (technique(n) for n in techniques()) if t.exact]
    assert all(technique(n).schedule in cm.schedules() for n in exact)


def _nccl(rank: int, world_size: int) -> dict:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    group = dist.new_group(backend="nccl")
    return {label: _train(rank, world_size, "cnn", tech, options, group, f"cuda:{rank}")[0]
            for label, tech, options in CONFIGS}


@pytest.mark.gpu
def test_exact_techniques_on_nccl(references: dict) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs for NCCL ranks (this host has "
                    f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})")
    ranks = run_ranks(_nccl, 2, timeout=300.0)
    for label, params in ranks[0].items():
        for n, ref in references["cnn"].items():
            np.testing.assert_allclose(params[n], ref, rtol=1e-4, atol=1e-5, err_msg=f"{label}: {n}")
