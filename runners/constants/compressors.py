"""Each compressor applied to real gradients, tensor by tensor as the training techniques apply it, and its
measured constant beside the worst case of its definition (:mod:`costmodels.compression`).

``C`` is the trainers' own code: top-k's and DGC's ``select`` and random-k's ``shared_indices``
(:mod:`runners.training.compressed.error_feedback`), the QSGD and TernGrad quantisers and EF-signSGD's
scaled sign (:mod:`runners.training.compressed.encoders`), casts as PyTorch's fp16/bf16 compress hooks cast,
and PowerSGD's step as ``powerSGD_hook`` takes it on one rank (a random Gaussian Q, orthogonalised;
P = M Q, orthogonalised; Q = M^T P; M ~ P Q^T; tensors the hook leaves uncompressed pass as they are).

* Biased compressors (used with error feedback): contraction ``delta = 1 - E||C(g) - g||^2 / ||g||^2``
  (Stich et al. 2018, Def. 2.1; costmodels' ``delta``), the expectation over the compressor's randomness.
* Unbiased ones: variance ``omega = E||C(g) - g||^2 / ||g||^2`` (Alistarh et al. 2017; equal to
  ``E||C(g)||^2 / ||g||^2 - 1`` for E C(g) = g, and never negative when estimated this way).
* random-k is recorded both ways: the runner sends C(g) unscaled with error feedback (delta; worst case
  and expectation k/d), and ``(d/k) C(g)`` is the unbiased rand-k (omega = d/k - 1 exactly, in expectation).
* signSGD (majority vote) has neither: its bound takes L1 and sigma1 (see the sigma1 record).

For every gradient, ``ratio`` is E||C(g) - g||^2 / ||g||^2 per tensor, and overall (errors and norms
summed over the tensors: the model-level constant); randomised compressors average ``draws`` draws.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from costmodels.compression import compressor, compressors, parse_compressor, powersgd_split
from costmodels.errors import CommscopeError

RANDOMISED = ("randomk", "dgc", "qsgd", "terngrad", "powersgd")
NO_CONSTANT = "signSGD's bound (convergence.bounds_sign) takes L1 and sigma1, not delta or omega: see sigma1"


def constant_of(name: str) -> str | None:
    """Which constant a compressor's bound takes: "delta" (biased), "omega" (unbiased) or None."""
    entry = compressor(name)
    if entry.delta(1000, entry.resolve(None)) is not None:
        return "delta"
    if entry.omega(1000, entry.resolve(None)) is not None:
        return "omega"
    return None


def _orthogonalise(m: Any) -> Any:
    import torch

    return torch.linalg.qr(m).Q


def compress(name: str, value: float | None, g: Any, shape: tuple[int, ...], gen: Any) -> Any:
    """C(g) for one tensor's flat float32 gradient ``g`` (see the module docstring for whose code)."""
    import torch

    from runners.training.compressed import DGC, RandomK, TopK, decode, qsgd_quantize, scaled_sign, terngrad_quantize

    d = g.numel()
    k = max(1, math.ceil(d * (value or 0)))
    if name in ("fp16", "bf16"):
        return g.to(torch.float16 if name == "fp16" else torch.bfloat16).to(g.dtype)
    if name in ("topk", "dgc", "randomk"):
        if name == "topk":
            idx = TopK.select(SimpleNamespace(ks=[k]), 0, g)  # type: ignore[arg-type]
        elif name == "dgc":
            idx = DGC.select(SimpleNamespace(ks=[k], density=value, rng=gen), 0, g)  # type: ignore[arg-type]
        else:
            # a random step number: RandomK seeds with (seed << 32) + step, whose low 32 bits (all that torch's
            # CPU generator keeps) are the step's
            step = int(torch.randint(0, 2**31, (1,), generator=gen))
            idx = RandomK.shared_indices(SimpleNamespace(  # type: ignore[arg-type]
                device=g.device, seed=0, iteration=step, sizes=[d], ks=[k]))[0]
        out = torch.zeros_like(g)
        out[idx] = g[idx]
        return out
    if name == "qsgd":
        return qsgd_quantize(g, int(value or 8), gen)
    if name == "terngrad":
        return terngrad_quantize(g, gen)
    if name == "ef_signsgd":
        return decode(*scaled_sign(g))
    if name == "signsgd":
        return torch.sign(g)
    if name == "powersgd":
        compressed, n, m, r = powersgd_split(d, value, shape)
        if not compressed:
            return g.clone()
        mat = g.view(n, m)
        q = _orthogonalise(torch.randn(m, r, generator=gen, dtype=g.dtype))
        p = _orthogonalise(mat @ q)
        return (p @ (mat.t() @ p).t()).reshape(-1)
    raise CommscopeError(f"no measurement for compressor {name!r}; measured: {', '.join(compressors())}")


def measure(label: str, grads: list[Any], tensors: list[tuple[str, int, tuple[int, ...]]], draws: int, gen: Any
            ) -> dict[str, Any]:
    """Ratios E||C(g) - g||^2 / ||g||^2 of one compressor (``"topk:0.01"``) on each flat gradient in ``grads``:
    ``overall`` (one per gradient) and ``tensors`` (per tensor, one per gradient; None where g_j = 0); for
    random-k also ``scaled_*`` of the unbiased (d/k) C(g)."""
    entry, value = parse_compressor(label)
    if constant_of(entry.name) is None:
        return {}
    n_draws = draws if entry.name in RANDOMISED else 1
    out: dict[str, Any] = {"overall": [], "tensors": [[] for _ in tensors]}
    scaled = entry.name == "randomk"
    if scaled:
        out.update(scaled_overall=[], scaled_tensors=[[] for _ in tensors])
    for g in grads:
        g32 = g.float()  # what the trainers compress
        start, err_sum, scaled_sum, norm_sum = 0, 0.0, 0.0, 0.0
        for j, (_, d, shape) in enumerate(tensors):
            gj = g32[start:start + d]
            start += d
            norm = float(gj.square().sum())
            err = scaled_err = 0.0
            for _ in range(n_draws):
                c = compress(entry.name, value, gj, shape, gen)
                err += float((c - gj).square_().sum()) / n_draws
                if scaled:
                    factor = d / max(1, math.ceil(d * (value or 0)))
                    scaled_err += float((c * factor - gj).square_().sum()) / n_draws
            err_sum, scaled_sum, norm_sum = err_sum + err, scaled_sum + scaled_err, norm_sum + norm
            out["tensors"][j].append(err / norm if norm > 0 else None)
            if scaled:
                out["scaled_tensors"][j].append(scaled_err / norm if norm > 0 else None)
        out["overall"].append(err_sum / norm_sum if norm_sum > 0 else None)
        if scaled:
            out["scaled_overall"].append(scaled_sum / norm_sum if norm_sum > 0 else None)
    return out


def worst_case(label: str, tensors: list[tuple[str, int, tuple[int, ...]]]) -> dict[str, Any]:
    """The costmodels constant of a compressor (its definition's worst case, :meth:`Compressor.model_constants`):
    ``overall`` for the model (min delta / max omega over tensors) and per tensor."""
    entry, value = parse_compressor(label)
    which = constant_of(entry.name)
    if which is None:
        return {}

    def of(ts: list[tuple[int, tuple[int, ...]]]) -> float | None:
        v = entry.model_constants(ts, value)[which]
        return None if v is None else float(v)

    out: dict[str, Any] = {"overall": of([(d, s) for _, d, s in tensors]),
                           "tensors": [of([(d, s)]) for _, d, s in tensors]}
    if entry.name == "randomk":
        ks = [max(1, math.ceil(d * (value or 0))) for _, d, _ in tensors]
        out["scaled_tensors"] = [d / k - 1 for (_, d, _), k in zip(tensors, ks, strict=True)]
        out["scaled_overall"] = max(out["scaled_tensors"])
    return out
