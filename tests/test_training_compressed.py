"""Compressed, local and gossip training techniques on real gloo ranks: error feedback kept exactly, unbiased
quantisers (their encoders' statistics: test_training_encoders.py), majority vote, local SGD's averaging, D-PSGD's
W @ X, and PyTorch's DDP hooks wired as PyTorch documents them.

Each run_ranks call batches many checks; the ranks return numbers and the assertions run here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import convergence as cv
import costmodels as cm
from costmodels.errors import CommscopeError, UnknownNameError
from runners.training import technique, techniques
from runners.training.launch import run_ranks

torch = pytest.importorskip("torch")

LR = 0.1
STEPS = 4


# ------------------------------------------------------------------------------------------- helpers
def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _batch(rank: int, t: int, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * t + rank)
    return torch.randn(n, 8, generator=g), torch.randn(n, 3, generator=g)


def _mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, y)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def _gather(t: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return torch.stack(out)


class _Probe(torch.nn.Module):
    """``forward(x) = sum(w * x)``: with the loss ``_identity`` the gradient of w is x itself."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * x).sum()


def _identity(out: torch.Tensor, target: object) -> torch.Tensor:
    return out


# ------------------------------------------------------------------------------------ rank functions
def _error_feedback_and_unbiased(rank: int, ws: int) -> dict[str, dict[str, float]]:
    """Per technique: |sum sent + residual - sum lr g|, |applied update - average message|, sparsity."""
    out: dict[str, dict[str, float]] = {}
    for name, opts in (("topk", {"density": 0.1}), ("randomk", {"density": 0.1}), ("dgc", {"density": 0.1}),
                       ("ef_signsgd", {}), ("qsgd", {"bits": 4}), ("terngrad", {})):
        model = _mlp()
        trainer = technique(name).build(model, LR, **opts)
        names = [n for n, _ in model.named_parameters()]
        scaled = torch.zeros_like(_flat(model))
        sent = torch.zeros_like(scaled)
        update_err, ks, nnz = 0.0, 0, 0
        for t in range(STEPS):
            before = _flat(model)
            res = trainer.step(*_batch(rank, t), _mse)
            state = trainer.state_for_check()
            mine = torch.cat([state[f"sent/{n}"].reshape(-1) for n in names])
            scaled += LR * _flat_grad(model)
            sent += mine
            factor = 1.0 if name in ("topk", "randomk", "dgc", "ef_signsgd") else LR  # EF messages carry lr
            update_err = max(update_err, float((before - _flat(model) - factor * _gather(mine).mean(0)).abs().max()))
            nnz = int((mine != 0).sum())
            ks = sum(max(1, math.ceil(0.1 * p.numel())) for p in model.parameters())
        entry = {"update": update_err, "nnz": nnz, "k": ks, "sent_bytes": res.extra["sent_bytes"],
                 "compression": res.compression, "scale": float(scaled.abs().max())}
        if name in ("topk", "randomk", "dgc", "ef_signsgd"):
            residual = torch.cat([state[f"residual/{n}"].reshape(-1) for n in names])
            entry["ef"] = float((sent + residual - scaled).abs().max())
            entry["residual"] = float(residual.abs().max())
        if name == "randomk":  # shared indices: every rank sent the same coordinates
            entry["same_indices"] = float(bool(((_gather(mine) != 0) == (mine != 0)).all()))
        out[name] = entry
    return out


def _local_sgd_spread(rank: int, ws: int, h: int, steps: int) -> list[float]:
    """max over ranks of |x_r - x_0| after each step of local SGD with period h."""
    model = _mlp()
    trainer = technique("local_sgd").build(model, LR, H=h)
    spreads = []
    for t in range(steps):
        trainer.step(*_batch(rank, t), _mse)
        x = _gather(_flat(model))
        spreads.append(float((x - x[0]).abs().max()))
    return spreads


def _gossip(rank: int, ws: int, steps: int) -> dict[str, float]:
    """|x_i after a D-PSGD step - sum_j W_ij (x_j - lr g_j)| with W = convergence.mixing_matrix("ring", ws)."""
    w = cv.mixing_matrix("ring", ws)
    model = _mlp()
    trainer = technique("dpsgd").build(model, LR)
    err, spread = 0.0, 0.0
    for t in range(steps):
        before = _flat(model)
        trainer.step(*_batch(rank, t), _mse)
        pre = _gather(before - LR * _flat_grad(model)).double()
        expected = torch.from_numpy(w[rank]) @ pre
        err = max(err, float((_flat(model).double() - expected).abs().max()))
        x = _gather(_flat(model))
        spread = float((x - x[0]).abs().max())
    return {"err": err, "spread": spread, "neighbours": float(len(trainer.neighbours))}


def _four_ranks(rank: int, ws: int) -> dict[str, object]:
    return {"ef": _error_feedback_and_unbiased(rank, ws), "local": _local_sgd_spread(rank, ws, 3, 6),
            "gossip": _gossip(rank, ws, 2)}


def _synchronous_reference(ws: int, steps: int) -> torch.Tensor:
    """Single-process SGD on the concatenation of every rank's shard."""
    model = _mlp()
    for t in range(steps):
        xs, ys = zip(*(_batch(r, t) for r in range(ws)), strict=True)
        model.zero_grad()
        _mse(model(torch.cat(xs)), torch.cat(ys)).backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad, alpha=LR)
    return _flat(model)


def _fp16(rank: int, ws: int) -> dict[str, float]:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    model = _mlp()
    trainer = technique("fp16").build(model, LR)
    hooked = trainer.ddp._comm_hooks == [(default_hooks.fp16_compress_hook, None)]
    ref = _mlp()
    ref.load_state_dict(model.state_dict())
    x, y = _batch(rank, 0)
    before = _flat(model)
    trainer.step(x, y, _mse)
    _mse(ref(x), y).backward()
    local = _flat_grad(ref)
    half = local.to(torch.float16).div_(ws)  # what the hook documents: cast, divide by p, all-reduce in fp16
    torch.distributed.all_reduce(half)
    got = _flat_grad(model)
    fp32 = local / ws
    torch.distributed.all_reduce(fp32)
    return {"hooked": float(hooked), "err": float((got - half.float()).abs().max()),
            "representable": float(bool((got.half().float() == got).all())),
            "differs_from_fp32": float(bool((got != fp32).any())),
            "update": float((before - _flat(model) - LR * got).abs().max())}


def _powersgd(rank: int, ws: int) -> dict[str, object]:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    model = _mlp()
    trainer = technique("powersgd").build(model, LR, rank=1, start_powerSGD_iter=2)
    state = trainer.hook_state
    out: dict[str, object] = {
        "hooked": [(getattr(h, "hook", None), st) for h, st in trainer.ddp._comm_hooks]
                  == [(powerSGD_hook.powerSGD_hook, state)],  # in BucketsInOrder on gloo
        "state": (state.matrix_approximation_rank, state.start_powerSGD_iter, state.use_error_feedback,
                  state.warm_start, state.process_group),
        "exact_err": [], "vector_err": [], "rank_ratio": [],
    }
    for t in range(4):
        ref = _mlp()
        ref.load_state_dict(model.state_dict())
        x, y = _batch(rank, t)
        trainer.step(x, y, _mse)
        _mse(ref(x), y).backward()
        mean = _gather(_flat_grad(ref)).mean(0)
        got = _flat_grad(model)
        matrices = [p.grad for p in model.parameters() if p.dim() == 2]
        ratios = [float(s[1] / s[0]) for s in (torch.linalg.svdvals(g) for g in matrices)]
        vectors = torch.cat([p.grad for p in model.parameters() if p.dim() == 1])
        mean_vectors = torch.cat([m.reshape(-1) for m, p in zip(mean.split([p.numel() for p in model.parameters()]),
                                                                 model.parameters(), strict=True) if p.dim() == 1])
        out["exact_err"].append(float((got - mean).abs().max()))  # type: ignore[union-attr]
        out["vector_err"].append(float((vectors - mean_vectors).abs().max()))  # type: ignore[union-attr]
        out["rank_ratio"].append(max(ratios))  # type: ignore[union-attr]
    out["iter"] = state.iter
    out["error_dict"] = len(state.error_dict)
    x = _gather(_flat(model))
    out["spread"] = float((x - x[0]).abs().max())
    return out


def _two_ranks(rank: int, ws: int) -> dict[str, object]:
    return {"sync": float((_local_sgd_h1(rank, ws) - _synchronous_reference(ws, 3)).abs().max()),
            "fp16": _fp16(rank, ws), "powersgd": _powersgd(rank, ws), "gossip": _gossip(rank, ws, 2)}


def _local_sgd_h1(rank: int, ws: int) -> torch.Tensor:
    model = _mlp()
    trainer = technique("local_sgd").build(model, LR, H=1)
    for t in range(3):
        trainer.step(*_batch(rank, t), _mse)
    return _flat(model)


SIGN_GRADS = [[1.0, -2.0, 3.0, -1.0, 0.5, 0.0],
              [2.0, 1.0, -1.0, -1.0, -0.5, 0.0],
              [-1.0, -3.0, -2.0, 4.0, 0.0, 0.0]]
# signs per coordinate: (+,+,-) (-,+,-) (+,-,-) (-,-,+) (+,-,0) (0,0,0); coordinate 3 sums to +2 and
# coordinate 2 to 0, but the majority votes -1 on both
SIGN_VOTE = [1.0, -1.0, -1.0, -1.0, 0.0, 0.0]


def _signsgd(rank: int, ws: int) -> dict[str, list[float]]:
    model = _Probe(6)
    trainer = technique("signsgd").build(model, LR)
    trainer.step(torch.tensor(SIGN_GRADS[rank]), None, _identity)
    state = trainer.state_for_check()
    return {"vote": state["vote/w"].tolist(), "sent": state["sent/w"].tolist(), "w": model.w.detach().tolist()}


# ------------------------------------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def four() -> list[dict[str, object]]:
    return run_ranks(_four_ranks, 4)


@pytest.fixture(scope="module")
def two() -> list[dict[str, object]]:
    return run_ranks(_two_ranks, 2)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["topk", "randomk", "dgc", "ef_signsgd"])
def test_error_feedback_keeps_every_residual(four: list[dict], name: str) -> None:
    for r in four:
        e = r["ef"][name]
        assert e["residual"] > 1e-4  # compression left something behind
        # sum_t C(p_t) + e_k == lr * sum_t g_t, to float32 rounding of k additions
        assert e["ef"] <= 1e-6 * max(1.0, e["scale"]) * STEPS, e
        assert e["update"] <= 1e-6, e  # every rank subtracted the average of the ranks' messages
        assert e["compression"] > 0 and e["sent_bytes"] > 0
    if name in ("topk", "randomk"):
        assert all(r["ef"][name]["nnz"] == r["ef"][name]["k"] for r in four)  # exactly k per tensor
    if name == "dgc":
        assert all(0 < r["ef"][name]["nnz"] <= r["ef"][name]["k"] for r in four)
    if name == "randomk":
        assert all(r["ef"][name]["same_indices"] == 1.0 for r in four)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["qsgd", "terngrad"])
def test_unbiased_quantisers_step_lr_times_the_average(four: list[dict], name: str) -> None:
    for r in four:
        assert r["ef"][name]["update"] <= 1e-6


@pytest.mark.multiprocess
def test_local_sgd_averages_every_h_steps(four: list[dict], two: list[dict]) -> None:
    for r in four:  # H = 3 over 6 steps: equal right after steps 3 and 6, different in between
        spreads = r["local"]
        assert spreads[2] == 0.0 and spreads[5] == 0.0
        assert all(spreads[i] > 1e-5 for i in (0, 1, 3, 4))
    assert all(r["sync"] <= 1e-6 for r in two)  # H = 1 is synchronous SGD on the concatenated batch


@pytest.mark.multiprocess
def test_dpsgd_is_one_gossip_step_with_the_ring_mixing_matrix(four: list[dict], two: list[dict]) -> None:
    for r in four:  # ring of 4: two neighbours at 1/3, one rank with weight 0
        assert r["gossip"]["neighbours"] == 2
        assert r["gossip"]["err"] <= 1e-6
        assert r["gossip"]["spread"] > 1e-5
    for r in two:  # n = 2: W = 11^T / 2, exact averaging
        assert r["gossip"]["neighbours"] == 1
        assert r["gossip"]["err"] <= 1e-6
        assert r["gossip"]["spread"] <= 1e-7


@pytest.mark.multiprocess
def test_fp16_hook_is_the_all_reduce_of_fp16_cast_gradients(two: list[dict]) -> None:
    for r in two:
        f = r["fp16"]
        assert f["hooked"] == 1.0  # fp16_compress_hook with the default group, on the DDP model
        assert f["err"] == 0.0  # two ranks: the fp16 sum is the same whatever the order
        assert f["representable"] == 1.0 and f["differs_from_fp32"] == 1.0
        assert f["update"] <= 1e-7


@pytest.mark.multiprocess
def test_powersgd_hook_is_wired_as_pytorch_documents(two: list[dict]) -> None:
    for r in two:
        p = r["powersgd"]
        assert p["hooked"]
        assert p["state"] == (1, 2, True, True, None)
        assert p["iter"] == 4 and p["error_dict"] > 0
        assert all(e <= 1e-6 for e in p["exact_err"][:2])  # plain all-reduce before start_powerSGD_iter
        assert all(e > 1e-4 for e in p["exact_err"][2:])  # then compressed ...
        assert all(q <= 1e-5 for q in p["rank_ratio"][2:])  # ... to rank-1 matrices
        assert all(q > 1e-2 for q in p["rank_ratio"][:2])
        assert all(e <= 1e-6 for e in p["vector_err"])  # vectors travel uncompressed
        assert p["spread"] == 0.0


@pytest.mark.multiprocess
def test_signsgd_majority_vote_by_hand() -> None:
    results = run_ranks(_signsgd, 3)
    lr32 = float(np.float32(LR))
    for r in results:
        assert r["vote"] == SIGN_VOTE
        assert r["w"] == [-lr32 * v for v in SIGN_VOTE]  # w starts at 0: w = -lr * vote
    assert [r["sent"] for r in results] == [np.sign(g).tolist() for g in SIGN_GRADS]


# ----------------------------------------------------------------------------- registry and options
EXPECTED = {  # name: (compressor, bound, schedule)
    "fp16": ("fp16", None, "fusion"), "powersgd": ("powersgd", "powersgd", "fusion"),
    "topk": ("topk", "topk", "fusion"), "randomk": ("randomk", "randomk", "fusion"), "dgc": ("dgc", None, "fusion"),
    "qsgd": ("qsgd", "qsgd", "fusion"), "terngrad": ("terngrad:8", None, "fusion"),  # int8 codes, priced as sent
    "signsgd": ("signsgd:8", "signsgd", "fusion"), "ef_signsgd": ("ef_signsgd:8", "ef_signsgd", "fusion"),
    "local_sgd": (None, "local_sgd", "local_sgd"),
    "dpsgd": (None, "dpsgd", "dpsgd"),
}


def test_techniques_name_their_compressor_bound_and_schedule() -> None:
    assert set(EXPECTED) <= set(techniques())
    for name, (comp, bound, schedule) in EXPECTED.items():
        t = technique(name)
        assert (t.compressor, t.bound, t.schedule, t.exact) == (comp, bound, schedule, False)
        assert comp is None or cm.parse_compressor(comp)[0].name in cm.compressors()
        assert bound is None or bound in cv.bounds()
        assert schedule is None or schedule in cm.schedules()
        if name in ("fp16", "powersgd", "local_sgd", "dpsgd"):
            assert not t.schedule_options
        else:  # one fused message after backward: fusion with a single bucket of everything
            assert t.schedule_options == {"bucket_bytes": 2**60, "first_bucket_bytes": 2**60}
    assert technique("topk").options["density"] == cm.compressor("topk").default
    assert technique("dgc").options["density"] == cm.compressor("dgc").default
    assert technique("qsgd").options["bits"] == cm.compressor("qsgd").default
    assert technique("powersgd").options["rank"] == cm.compressor("powersgd").default
    assert technique("local_sgd").options == {"H": 8}
    assert technique("dpsgd").options == {"topology": "ring"}


@pytest.mark.parametrize(
    ("name", "options", "error", "match"),
    [
        ("topk", {"bogus": 1}, CommscopeError, "technique topk takes density, seed, got bogus"),
        ("fp16", {"rank": 2}, CommscopeError, "technique fp16 takes no options, got rank"),
        ("topk", {"density": 2.0}, CommscopeError, r"density must be a density in \(0, 1\], got 2.0"),
        ("randomk", {"seed": -1}, CommscopeError, "seed must be an integer >= 0, got -1"),
        ("qsgd", {"bits": 1}, CommscopeError, r"bits must be an integer number of bits in \[2, 16\]"),
        ("powersgd", {"rank": 0}, CommscopeError, "rank must be a positive integer rank"),
        ("powersgd", {"start_powerSGD_iter": 1}, CommscopeError, "start_powerSGD_iter must be >= 2"),
        ("powersgd", {"warm_start": "yes"}, CommscopeError, "warm_start must be True or False"),
        ("local_sgd", {"H": 0}, CommscopeError, "H must be an integer >= 1, got 0"),
        ("dpsgd", {"topology": "star"}, UnknownNameError, "star"),
    ],
)
def test_options_are_checked_with_clear_errors(name: str, options: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        technique(name).build(_mlp(), LR, **options)


def test_randomk_indices_depend_on_the_seed_and_the_step() -> None:
    """torch's CPU generator keeps a seed's low 32 bits: ``(seed << 32) + step`` gave every seed the same indices."""
    from runners.training.compressed.error_feedback import RandomK

    def indices(seed: int, step: int) -> list[int]:
        rk = RandomK.__new__(RandomK)  # the index draw alone (no process group needed)
        rk.seed, rk.iteration, rk.device, rk.sizes, rk.ks = seed, step, torch.device("cpu"), [10_000], [20]
        return rk.shared_indices()[0].tolist()

    assert indices(1, 0) == indices(1, 0)  # every rank draws the same coordinates
    assert indices(1, 0) != indices(2, 0) and indices(1, 0) != indices(1, 1)


def test_dpsgd_posts_every_receive_before_any_send(monkeypatch: pytest.MonkeyPatch) -> None:
    # gloo's tcp pair sends a message only after the peer's receive notice, and a rank's notices queue behind
    # its own data: sending first makes the two directions of an exchange cross one after the other
    # (8 MiB each way on two emulated 200 Mbit/s nodes: 694 ms sending first, 351 ms receiving first)
    import torch.distributed as dist

    from runners.training.decentralized import DPSGD

    calls: list[tuple[str, int]] = []

    class _Done:
        def wait(self) -> None:
            pass

    def post(kind: str) -> Any:
        def call(tensor: Any, *args: Any, **kwargs: Any) -> _Done:
            calls.append((kind, kwargs.get("dst", kwargs.get("src"))))
            return _Done()
        return call

    monkeypatch.setattr(dist, "isend", post("send"))
    monkeypatch.setattr(dist, "irecv", post("recv"))
    gossip = object.__new__(DPSGD)
    gossip.model, gossip.group, gossip.self_weight = _mlp(), None, 1 / 3
    gossip.neighbours, gossip.clock = [(3, 1 / 3), (1, 1 / 3)], lambda: 0.0
    assert gossip.communicate()[0]
    assert calls == [("recv", 3), ("recv", 1), ("send", 3), ("send", 1)]


def test_powersgd_buckets_run_one_after_another() -> None:
    # bucket k's hook starts only when bucket k-1's future completes, and each bucket's future carries its own
    # hook's value; reset() starts a new backward (on gloo, PowerSGD's callbacks raced the next bucket's first
    # all-reduce: ddp_hooks.py)
    from runners.training.compressed.ddp_hooks import BucketsInOrder

    started: list[int] = []
    inner: dict[int, torch.futures.Future] = {}

    def hook(state: object, bucket: int) -> torch.futures.Future:
        started.append(bucket)
        inner[bucket] = torch.futures.Future()
        return inner[bucket]

    ordered = BucketsInOrder(hook)
    futs = [ordered(None, b) for b in range(3)]
    assert started == [0]
    inner[0].set_result(torch.tensor([10.0]))
    assert started == [0, 1] and futs[0].value().item() == 10.0 and not futs[1].done()
    inner[1].set_result(torch.tensor([11.0]))
    assert started == [0, 1, 2] and futs[1].value().item() == 11.0
    inner[2].set_exception(RuntimeError("gloo failed"))
    with pytest.raises(RuntimeError, match="gloo failed"):
        futs[2].wait()
    ordered.reset()
    ordered(None, 3)
    assert started == [0, 1, 2, 3]  # the next backward's first bucket does not wait for the last one's


def test_quantisers_are_priced_as_they_are_sent() -> None:
    # the runners send one int8 per element (quantizers.py), so signSGD, EF-signSGD and TernGrad are priced at
    # 8 bits per element: 1,000 elements of fp32 -> 1,000 B of signs, + 4 B of scale per tensor for TernGrad and
    # EF-signSGD; packed, the compressors' own formats are 125 B (signs), 129 B and 254 B (2 bits + scale)
    from runners.training.pricing import schedule_call

    for name, sent, packed in (("signsgd", 1000.0, 125.0), ("ef_signsgd", 1004.0, 129.0), ("terngrad", 1004.0, 254.0)):
        spec = schedule_call(name, {})[1]
        assert spec == f"{name}:8"
        entry, bits = cm.parse_compressor(spec)
        assert entry.wire_bytes(1000, bits) == sent and cm.compressor(name).wire_bytes(1000) == packed
    assert schedule_call("qsgd", {})[1] == "qsgd:8"  # QSGD's default 8 bits are the int8 levels it sends
    from runners.constants.options import parse_compressor_list

    # the width on the wire does not change what the compressor computes: constants keep the plain name
    assert parse_compressor_list("signsgd:8,ef_signsgd,terngrad:8,qsgd:4") == ["signsgd", "ef_signsgd", "terngrad",
                                                                               "qsgd:4"]
    with pytest.raises(CommscopeError, match=r"bits in \[1, 32\]"):
        cm.parse_compressor("signsgd:0")
    with pytest.raises(CommscopeError, match=r"bits in \[2, 32\]"):
        cm.parse_compressor("terngrad:1")
