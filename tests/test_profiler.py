"""Model zoo, generated data sets, the layer-wise profiler and ``commscope profile``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import costmodels as cm  # noqa: E402
from runners import results as rs  # noqa: E402
from runners._extras import MissingExtraError  # noqa: E402
from runners.cli import main  # noqa: E402
from runners.training import profiler, zoo  # noqa: E402
from runners.training.profiler.build import _backward_split  # noqa: E402

TORCH_ONLY = ["mlp", "resnet_small", "gpt_small"]
SMALL = {"mlp": {}, "resnet_small": {"blocks": "1,1,1", "width": 8}, "gpt_small": {"depth": 1, "dim": 32, "seq": 16}}
FAST = {"warmup": 1, "iterations": 3, "threads": 1}


# ------------------------------------------------------------------------------------- zoo
def test_zoo_names_every_model() -> None:
    assert zoo.models() == ["mlp", "resnet_small", "gpt_small", "gpt_wide", "resnet50", "vgg16", "bert-base", "gpt2"]
    assert set(TORCH_ONLY) <= set(zoo.models(available_only=True))
    for name in zoo.models():
        e = zoo.model(name)
        assert e.description and callable(e.builder) and callable(e.example_batch) and callable(e.loss_fn)


@pytest.mark.parametrize("name", TORCH_ONLY)
def test_torch_only_models_train_one_step(name: str) -> None:
    e = zoo.model(name)
    net = e.builder(seed=0, **SMALL[name])
    x, y = e.example_batch(4, **SMALL[name])
    loss = e.loss_fn(net(x), y)
    assert loss.ndim == 0 and math.isfinite(float(loss.detach()))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


@pytest.mark.parametrize("name", TORCH_ONLY)
def test_batches_and_weights_are_deterministic(name: str) -> None:
    e = zoo.model(name)
    a, b = e.example_batch(3, **SMALL[name]), e.example_batch(3, **SMALL[name])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = e.example_batch(3, torch.Generator().manual_seed(7), **SMALL[name])
    assert not torch.equal(a[0], c[0])
    w1, w2 = e.builder(seed=3, **SMALL[name]).state_dict(), e.builder(seed=3, **SMALL[name]).state_dict()
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    state = torch.random.get_rng_state()
    e.builder(seed=3, **SMALL[name])
    assert torch.equal(state, torch.random.get_rng_state())  # a seeded build leaves the caller's RNG alone


def test_options_are_converted_and_checked() -> None:
    net = zoo.model("mlp").builder(widths="64,32", classes="5", in_features=8)
    shapes = [tuple(p.shape) for p in net.parameters()]
    assert shapes == [(64, 8), (64,), (32, 64), (32,), (5, 32), (5,)]
    with pytest.raises(cm.CommscopeError, match="no option depth; its options: in_features=32, widths=256,256"):
        zoo.model("mlp").builder(depth=3)
    with pytest.raises(cm.CommscopeError, match="widths must be positive integers"):
        zoo.model("mlp").builder(widths="0,4")
    with pytest.raises(cm.CommscopeError, match="multiple of heads"):
        zoo.model("gpt_small").builder(dim=30, heads=4)
    with pytest.raises(cm.UnknownNameError, match="unknown model 'nope'"):
        zoo.model("nope")


@pytest.mark.parametrize(("name", "package"), [("resnet50", "torchvision"), ("vgg16", "torchvision"),
                                               ("bert-base", "transformers"), ("gpt2", "transformers")])
def test_optional_models_name_their_missing_package(monkeypatch: pytest.MonkeyPatch, name: str, package: str) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed
    e = zoo.model(name)
    assert not e.available() and e.requires == (package,)
    with pytest.raises(MissingExtraError, match=f"model {name} needs the package {package}, which is not installed"):
        e.builder()


@pytest.mark.parametrize("name", ["resnet50", "vgg16", "bert-base", "gpt2"])
def test_optional_models_build_where_installed(name: str) -> None:
    e = zoo.model(name)
    if not e.available():
        pytest.skip(f"{e.requires[0]} is not installed here")
    opts = {"image_size": 32} if e.requires == ("torchvision",) else {"seq": 8}
    net = e.builder(seed=0, **opts)
    x, y = e.example_batch(2, **opts)
    e.loss_fn(net(x), y).backward()


# ------------------------------------------------------------------------------- data sets
@pytest.mark.parametrize("name", ["gaussian_mixture", "gratings32", "markov_text"])
def test_datasets_are_deterministic_and_split(name: str) -> None:
    a, b = zoo.dataset(name, seed=1, size=64), zoo.dataset(name, seed=1, size=64)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, zoo.dataset(name, seed=2, size=64).inputs)
    assert not torch.equal(a.inputs, zoo.dataset(name, seed=1, split="test", size=64).inputs)
    x, y = a
    assert len(a) == 64 and x.shape[0] == y.shape[0] == 64
    assert int(y.min()) >= 0 and int(y.max()) < a.classes


def test_datasets_pair_with_their_models() -> None:
    for name in TORCH_ONLY:
        e = zoo.model(name)
        x, y = zoo.dataset(e.dataset, size=8)
        e.loss_fn(e.builder(seed=0)(x), y).backward()
    text = zoo.dataset("markov_text", size=8)
    assert 0 < text.info["optimal_loss"] < math.log(256)


def test_shard_gives_equal_disjoint_shards() -> None:
    data = zoo.dataset("gaussian_mixture", size=103)
    shards = [zoo.shard(data, r, 4) for r in range(4)]
    assert [len(s) for s in shards] == [25] * 4
    rows = torch.cat([s.inputs for s in shards])
    assert len({tuple(r.tolist()) for r in rows}) == 100  # disjoint
    x0, y0 = zoo.shard((data.inputs, data.targets), 1, 4)
    assert torch.equal(x0, shards[1].inputs) and torch.equal(y0, shards[1].targets)
    for rank, world in ((4, 4), (-1, 2), (0, 0)):
        with pytest.raises(cm.CommscopeError, match="rank"):
            zoo.shard(data, rank, world)


# -------------------------------------------------------------------------------- profiler
@pytest.fixture(scope="module")
def profiles() -> dict[str, cm.ModelProfile]:
    return {name: profiler.profile_model(name, 8, **FAST, **SMALL[name]) for name in ("mlp", "resnet_small")}


@pytest.mark.parametrize("name", ["mlp", "resnet_small"])
def test_profile_layers_are_parameter_tensors_in_execution_order(profiles: dict, name: str) -> None:
    prof = profiles[name]
    net = zoo.model(name).builder(**SMALL[name])
    expected = [(n, p.numel(), tuple(p.shape)) for n, p in net.named_parameters()]  # registered = run order here
    assert [(x.name, x.params, x.shape) for x in prof.layers] == expected
    assert prof.params == sum(p.numel() for p in net.parameters())
    assert prof.grad_bytes == 4 * prof.params and prof.dtype == "float32" and prof.origin == "measured"
    assert prof.batch_size == 8
    weights = [x for x in prof.layers if x.name.endswith("weight")]
    assert all(x.forward_s > 0 for x in weights)
    assert all(x.forward_s == 0 for x in prof.layers if x.name.endswith("bias"))  # a module's time goes to its weight
    assert prof.forward_s > 0 and prof.backward_s > 0 and all(x.backward_s >= 0 for x in prof.layers)


@pytest.mark.parametrize("name", ["mlp", "resnet_small"])
def test_profile_states_overhead_and_conditions(profiles: dict, name: str) -> None:
    prof = profiles[name]
    o, meta = prof.metadata["overhead"], prof.metadata
    assert o["unhooked_iteration_s"] > 0 and o["layer_sum_s"] > 0
    assert o["overhead_s"] == pytest.approx(o["layer_sum_s"] - o["unhooked_iteration_s"])
    assert o["per_forward_hook_s"] >= 0 and o["per_backward_hook_s"] >= 0 and o["corrected"]
    assert o["reported_sum_s"] == pytest.approx(prof.compute_s)
    assert "Profiler overhead" in prof.source and "MEASURED" in prof.source
    assert meta["threads"] == 1 and meta["device"] == "cpu" and meta["torch"] == torch.__version__
    assert meta["batch_size"] == 8 and meta["iterations"] == 3 and meta["warmup"] == 1
    assert "1 thread" in prof.device


def test_profile_round_trips_and_feeds_the_cost_models(profiles: dict, tmp_path: Path) -> None:
    prof = profiles["resnet_small"]
    path = prof.save(tmp_path / "p.json")
    loaded = cm.load_profile(path)
    assert loaded == prof and loaded.metadata == json.loads(json.dumps(prof.metadata))
    r = cm.simulate(loaded, cm.environment("10GbE"), 4, "wfbp")
    assert r.iteration_time >= loaded.compute_s > 0
    s = cm.sweep(loaded, [cm.environment("10GbE"), cm.environment("100GbE")], p=[2, 4], schedule="dear")
    assert np.all(np.isfinite(s.scaling_efficiency))


def test_profile_restores_threads() -> None:
    before = torch.get_num_threads()
    profiler.profile_model("mlp", 4, warmup=0, iterations=1, threads=1, widths="8")
    assert torch.get_num_threads() == before


class _Reordered(torch.nn.Module):
    """Registered b, a, head; runs a, b, then head whose weight is tied to a's."""

    def __init__(self) -> None:
        super().__init__()
        self.b = torch.nn.Linear(6, 6)
        self.a = torch.nn.Embedding(10, 6)
        self.head = torch.nn.Linear(6, 10, bias=False)
        self.head.weight = self.a.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.b(self.a(idx))))


def test_profile_follows_execution_and_counts_tied_tensors_once() -> None:
    net = _Reordered()
    idx = torch.randint(0, 10, (4, 3))
    prof = profiler.profile_model(net, 4, warmup=0, iterations=2, threads=1, inputs=(idx, idx),
                           loss_fn=zoo.classification_loss, name="tied")
    assert prof.name == "tied" and [x.name for x in prof.layers] == ["a.weight", "b.weight", "b.bias"]
    assert prof.params == sum(p.numel() for p in net.parameters()) == 60 + 42
    with pytest.raises(cm.CommscopeError, match="needs inputs"):
        profiler.profile_model(net, 4)
    with pytest.raises(cm.CommscopeError, match="zoo models only"):
        profiler.profile_model(net, 4, inputs=(idx, idx), loss_fn=zoo.classification_loss, width=3)


def test_backward_split_is_a_monotone_envelope() -> None:
    # ready times (s after backward start) per layer position, out of order for positions 1 and 2
    bwd, fired = _backward_split([(3, 1.0), (1, 2.0), (2, 3.5), (0, 5.0)], {0: 0, 1: 1, 2: 2, 3: 3}, 4,
                                 t_forward=0.0, t_backward=6.0)
    assert fired.all() and bwd.sum() == pytest.approx(6.0) and (bwd >= 0).all()
    assert list(np.cumsum(bwd[::-1])[::-1]) == pytest.approx([6.0, 3.5, 3.5, 1.0])


@pytest.mark.parametrize(("kwargs", "match"), [({"batch_size": 0}, "batch size"), ({"iterations": 0}, "iterations"),
                                               ({"warmup": -1}, "warmup"), ({"threads": 0}, "threads"),
                                               ({"device": "tpu"}, "device must be")])
def test_profile_rejects_bad_input(kwargs: dict, match: str) -> None:
    args = {"batch_size": 2, **kwargs}
    with pytest.raises(cm.CommscopeError, match=match):
        profiler.profile_model("mlp", **args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_an_error() -> None:
    with pytest.raises(cm.CommscopeError, match="CUDA is not available"):
        profiler.profile_model("mlp", 2, device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; none is visible")
def test_cuda_profile_uses_events(tmp_path: Path) -> None:
    prof = profiler.profile_model("resnet_small", 16, device="cuda", warmup=2, iterations=5)
    assert "CUDA events" in prof.metadata["timing"] and prof.metadata["device"].startswith("cuda")
    assert prof.device == torch.cuda.get_device_name(0)
    assert all(x.forward_s > 0 for x in prof.layers if x.name.endswith("weight")) and prof.backward_s > 0
    assert cm.load_profile(prof.save(tmp_path / "gpu.json")) == prof
    cm.simulate(prof, cm.environment("10GbE"), 4, "wfbp")


# ------------------------------------------------------------------------------------- CLI
def test_cli_profile_writes_profile_and_record(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, store = tmp_path / "mlp.json", tmp_path / "results.jsonl"
    code = main(["profile", "--model", "mlp", "--batch-size", "4", "--iterations", "2", "--warmup", "0",
                 "--threads", "1", "--option", "widths=16,8", "--out", str(out), "--record", str(store)])
    text, err = capsys.readouterr()
    assert code == 0, err
    assert "net.2.weight" in text and "Profiler overhead" in text and "forward (ms)" in text
    prof = cm.load_profile(out)
    assert prof.params == 32 * 16 + 16 + 16 * 8 + 8 + 8 * 10 + 10
    recs = rs.load(store).of_kind("profile")
    assert len(recs) == 1 and recs[0]["config"]["model"] == "mlp" and recs[0]["config"]["threads"] == 1
    assert cm.ModelProfile.from_dict(recs[0]["result"]) == prof
    assert main(["predict", "iteration", "--model", str(out), "-p", "4", "--env", "10GbE", "--json"]) == 0


def test_cli_profile_times_the_codecs_asked_for(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # one process: a group of one, the technique's own exchange with its message kept local; the cost models then
    # price top-k's encode and decode from the profile, not from memory passes
    out = tmp_path / "mlp.json"
    code = main(["profile", "--model", "mlp", "--batch-size", "4", "--iterations", "3", "--warmup", "1",
                 "--threads", "1", "--codecs", "topk,qsgd", "--out", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    prof = cm.load_profile(out)
    codecs = prof.metadata["codecs"]
    assert sorted(codecs) == ["qsgd:8", "topk:0.01"] and "codec topk:0.01: encode" in text
    assert all(c["ranks"] == 1 and c["encode_s"] > 0 and c["decode_s"] > 0 for c in codecs.values())
    from costmodels.schedules.core import compress

    c = compress(prof, "topk:0.01")
    assert c.profile.backward_s - prof.backward_s == pytest.approx(codecs["topk:0.01"]["encode_s"])
    import torch.distributed as dist

    assert not dist.is_initialized()  # the group of one is torn down


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "nope", "--batch-size", "2"], "unknown model 'nope'"),
    (["--model", "mlp", "--batch-size", "0"], "--batch-size must be from 1 to 1,048,576 samples, got 0"),
    (["--model", "mlp", "--batch-size", "2", "--option", "depth=2"], "model mlp has no option depth"),
    (["--model", "mlp", "--batch-size", "2", "--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
    (["--model", "mlp", "--batch-size", "2", "--codecs", "topk,bsp"],
     "--codecs takes fp16, powersgd, topk, randomk, dgc, qsgd, terngrad, signsgd, ef_signsgd or all, got bsp"),
    (["--model", "mlp", "--batch-size", "2", "--codecs", "topk,"], "--codecs must be comma-separated"),
    (["--model", "mlp", "--batch-size", "2", "--codecs", "all", "--option", "widths=8"], "drop --option or --codecs"),
])
def test_cli_profile_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   argv: list[str], message: str) -> None:
    out = tmp_path / "x.json"
    assert main(["profile", *argv, "--out", str(out)]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("commscope: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cli_profile_cuda_without_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["profile", "--model", "mlp", "--batch-size", "2", "--device", "cuda", "--out",
                 str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and len(err.strip().splitlines()) == 1


def test_cli_profile_missing_package(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    assert main(["profile", "--model", "resnet50", "--batch-size", "2", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("commscope: error: model resnet50 needs the package torchvision, which is not installed; "
                   "install it with: pip install torchvision")
