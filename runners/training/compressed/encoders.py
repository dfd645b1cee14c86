"""The compressors' encoders: QSGD and TernGrad stochastic quantisation, EF-signSGD's scaled sign, and decoding.

Each works on vectors (the last axis) and returns ``(scale, codes)``: a float scale per vector and integer
codes; :func:`decode` gives the dense tensor such a message stands for.
"""

from __future__ import annotations

from typing import Any


def qsgd_encode(v: Any, bits: int, generator: Any = None) -> tuple[Any, Any]:
    """QSGD's stochastic rounding of each vector (last axis) to s = 2^(bits-1) - 1 levels of its l2 norm.

    Returns ``(scale, levels)``: ``scale = ||v|| / s`` (shape ``v.shape[:-1] + (1,)``) and the signed integer
    levels ``l`` in [-s, s] (int8 up to 8 bits, else int32) with ``|l_i| = floor(r_i) + Bernoulli(r_i -
    floor(r_i))``, ``r_i = s |v_i| / ||v||``; ``scale * l`` is unbiased for ``v`` with variance at most
    ``min(d/s^2, sqrt(d)/s) ||v||^2`` (Alistarh et al., NeurIPS 2017, Lemma 3.1).
    """
    import torch

    s = 2 ** (int(bits) - 1) - 1
    norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    r = v.abs() / safe * s
    low = r.floor()
    up = torch.rand(r.shape, generator=generator, device=v.device, dtype=r.dtype) < (r - low)
    levels = (low + up).clamp_(max=s) * torch.sign(v)
    return norm / s, levels.to(torch.int8 if bits <= 8 else torch.int32)


def terngrad_encode(v: Any, generator: Any = None) -> tuple[Any, Any]:
    """TernGrad's stochastic ternarisation of each vector (last axis): ``(scale, codes)`` with
    ``scale = max_i |v_i|`` and int8 codes ``sign(v_i) * Bernoulli(|v_i| / scale)``; ``scale * codes`` is
    unbiased for ``v`` with variance ``scale ||v||_1 - ||v||^2 <= (sqrt(d) - 1) ||v||^2`` (Wen et al. 2017)."""
    import torch

    scale = v.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    keep = torch.rand(v.shape, generator=generator, device=v.device, dtype=v.dtype) < v.abs() / safe
    return scale, (torch.sign(v) * keep).to(torch.int8)


def decode(scale: Any, codes: Any) -> Any:
    """``scale * codes`` in the scale's dtype: the dense tensor a (scale, codes) message stands for."""
    return scale * codes.to(scale.dtype)


def qsgd_quantize(v: Any, bits: int, generator: Any = None) -> Any:
    """The dequantised QSGD estimate of ``v`` (see :func:`qsgd_encode`)."""
    return decode(*qsgd_encode(v, bits, generator))


def terngrad_quantize(v: Any, generator: Any = None) -> Any:
    """The dequantised TernGrad estimate of ``v`` (see :func:`terngrad_encode`)."""
    return decode(*terngrad_encode(v, generator))


def scaled_sign(v: Any) -> tuple[Any, Any]:
    """``(||v||_1 / d, sign(v))`` of each vector (last axis), the signs as int8 (EF-signSGD's compressor)."""
    import torch

    return v.abs().mean(dim=-1, keepdim=True), torch.sign(v).to(torch.int8)
