"""Unbiased quantisers and majority-vote signs: ``qsgd``, ``terngrad``, ``signsgd``.

* ``qsgd`` (Alistarh et al. 2017) and ``terngrad`` (Wen et al. 2017) are unbiased and need no residual:
  they quantise the gradient itself (s = 2^(bits-1) - 1 levels of the tensor's l2 norm; or ternary times
  its max-abs) by stochastic rounding with a per-rank generator, all-gather one float32 scale per tensor and
  the signed levels (int8, int32 above 8 bits as gloo has no int16), and step ``lr`` times the average.
  The wire carries a byte per level, not the bits the codes need; TernGrad is priced as sent
  (``terngrad:8``, :mod:`.registration`), QSGD at its default 8 bits is.
* ``signsgd`` (Bernstein et al. 2019) all-gathers int8 signs (a byte each; priced as sent, ``signsgd:8``) and
  steps ``lr`` times the majority vote ``sign(sum_r sign(g_r))`` (0 where the vote ties or every gradient is 0).
"""

from __future__ import annotations

from typing import Any

from costmodels.compression import compressor as _compressor

from .encoders import decode, qsgd_encode, terngrad_encode
from .shared import _Compressed, _int_option, _Phases


class _Unbiased(_Compressed):
    """Quantise each gradient tensor (unbiased), all-gather (scales, codes), step lr times the average."""

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        self.seed = _int_option("seed", options.get("seed"), 0)
        super().__init__(model, lr, group, **options)
        self.rng = self.generator(self.seed * 65537 + self.rank)

    def quantise(self, g: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def exchange(self, grads: list[Any], phases: _Phases) -> list[Any]:
        import torch

        with phases("compression"):
            parts = [self.quantise(g) for g in grads]
            self.sent = [decode(s, c) for s, c in parts]
            scales, codes = torch.cat([s for s, _ in parts]), torch.cat([c for _, c in parts])
        with phases("exposed_comm"):
            all_scales, all_codes = self.all_gather(scales), self.all_gather(codes)
        with phases("compression"):
            return list(self.decode_dense(all_scales, all_codes).mul_(self.lr / self.world_size).split(self.sizes))


class QSGD(_Unbiased):
    def __init__(self, model: Any, lr: float, group: Any = None, *, bits: int, seed: int) -> None:
        self.bits = int(_compressor("qsgd").resolve(bits))  # type: ignore[arg-type]
        super().__init__(model, lr, group, bits=bits, seed=seed)

    def quantise(self, g: Any) -> tuple[Any, Any]:
        return qsgd_encode(g, self.bits, self.rng)


class TernGrad(_Unbiased):
    def __init__(self, model: Any, lr: float, group: Any = None, *, seed: int) -> None:
        super().__init__(model, lr, group, seed=seed)

    def quantise(self, g: Any) -> tuple[Any, Any]:
        return terngrad_encode(g, self.rng)


class SignSGD(_Compressed):
    """Majority vote: int8 signs all-gathered, update ``lr * sign(sum_r sign(g_r))``."""

    def exchange(self, grads: list[Any], phases: _Phases) -> list[Any]:
        import torch

        with phases("compression"):
            codes = torch.cat([torch.sign(g).to(torch.int8) for g in grads])
            self.sent = [c.to(self.dtype) for c in codes.split(self.sizes)]
        with phases("exposed_comm"):
            gathered = self.all_gather(codes)
        with phases("compression"):
            self.vote = torch.sign(torch.stack(gathered).to(torch.int32).sum(dim=0)).to(self.dtype)
            return list((self.lr * self.vote).split(self.sizes))

    def state_for_check(self) -> dict[str, Any]:
        vote = getattr(self, "vote", None)
        out = super().state_for_check()
        if vote is not None:
            votes = vote.split(self.sizes)
            out.update({f"vote/{n}": v.view_as(p) for (n, p), v in zip(self.named, votes, strict=True)})
        return out

