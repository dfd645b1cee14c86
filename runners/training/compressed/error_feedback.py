"""Error-feedback sparsifiers and EF-signSGD: ``topk``, ``randomk``, ``dgc``, ``ef_signsgd``.

They keep **error feedback on the step**, as :mod:`convergence.sim_algorithms` does: each rank keeps a
residual ``e_j`` per tensor, forms ``p_j = e_j + lr * g_j``, sends ``C(p_j)``, keeps ``e_j <- p_j - C(p_j)``,
and every rank subtracts the average over ranks of ``C(p_j)`` from the parameters. Over k steps, on every
rank, ``sum_t C(p_t) + e_k = lr * sum_t g_t``. ``topk`` and ``dgc`` all-gather the values and their indices
into the flattened model (int32, int64 beyond 2^31 elements); ``dgc`` (Lin et al. 2018) takes the
threshold from a random 1% sample of the magnitudes (at least 100 values; all of a tensor that small),
sends every value at or above it, at most k = ceil(density * d) (an exact top-k among the chosen when
more pass), and sends the variable sizes first (messages padded to the largest); momentum correction,
clipping and warm-up of the paper are not part of it. ``randomk`` draws the same k coordinates per tensor
on every rank (seed ``seed`` and the step number) and all-reduces their values. ``ef_signsgd`` sends
``(||p_j||_1 / d_j) sign(p_j)`` (Karimireddy et al. 2019) as int8 signs and one float32 scale per tensor.
"""

from __future__ import annotations

import math
from typing import Any

from costmodels.compression import compressor as _compressor

from .encoders import decode, scaled_sign
from .shared import _Compressed, _int_option, _Phases

DGC_SAMPLE_FRACTION = 0.01
DGC_MIN_SAMPLE = 100


class _ErrorFeedback(_Compressed):
    """p = e + lr g per tensor; send C(p); e <- p - C(p); subtract the average of the ranks' C(p)."""

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        import torch

        super().__init__(model, lr, group, **options)
        self.residuals = [torch.zeros(d, dtype=self.dtype, device=self.device) for d in self.sizes]

    def encode(self, ps: list[Any]) -> tuple[Any, list[Any]]:
        """(the message, what this rank's message decodes to per tensor)."""
        raise NotImplementedError

    def communicate(self, message: Any) -> Any:
        raise NotImplementedError

    def decode_mean(self, received: Any) -> Any:
        """The average over ranks of the decoded messages, flattened."""
        raise NotImplementedError

    def exchange(self, grads: list[Any], phases: _Phases) -> list[Any]:
        with phases("compression"):
            ps = [e + self.lr * g for e, g in zip(self.residuals, grads, strict=True)]
            message, self.sent = self.encode(ps)
            self.residuals = [p - s for p, s in zip(ps, self.sent, strict=True)]
        with phases("exposed_comm"):
            received = self.communicate(message)
        with phases("compression"):
            return list(self.decode_mean(received).split(self.sizes))

    def state_for_check(self) -> dict[str, Any]:
        return {**super().state_for_check(),
                **{f"residual/{n}": e.view_as(p) for (n, p), e in zip(self.named, self.residuals, strict=True)}}


class _Sparse(_ErrorFeedback):
    """Values and their indices into the flattened model, all-gathered; ``select`` picks each tensor's indices."""

    compressor_name = ""
    variable_size = False

    def __init__(self, model: Any, lr: float, group: Any = None, *, density: float, seed: int) -> None:
        self.density = _compressor(self.compressor_name).resolve(density)
        self.seed = _int_option("seed", seed, 0)
        super().__init__(model, lr, group, density=density, seed=seed)
        self.ks = [max(1, math.ceil(d * self.density)) for d in self.sizes]
        self.rng = self.generator(self.seed * 65537 + self.rank)

    def select(self, j: int, p: Any) -> Any:
        raise NotImplementedError

    def encode(self, ps: list[Any]) -> tuple[Any, list[Any]]:
        import torch

        values, indices, sent = [], [], []
        for j, p in enumerate(ps):
            idx = self.select(j, p)
            s = torch.zeros_like(p)
            s[idx] = p[idx]
            sent.append(s)
            values.append(p[idx])
            indices.append((idx + self.offsets[j]).to(self.index_dtype))
        return (torch.cat(values), torch.cat(indices)), sent

    def communicate(self, message: Any) -> Any:
        import torch

        values, indices = message
        if not self.variable_size:
            return self.all_gather(values), self.all_gather(indices)
        counts = [int(c) for c in self.all_gather(torch.tensor([values.numel()], dtype=torch.int64,
                                                                  device=self.device))]
        pad = max(counts) - values.numel()
        if pad:
            values = torch.cat([values, values.new_zeros(pad)])
            indices = torch.cat([indices, indices.new_zeros(pad)])
        vals, idxs = self.all_gather(values), self.all_gather(indices)
        return [v[:c] for v, c in zip(vals, counts, strict=True)], [i[:c] for i, c in zip(idxs, counts, strict=True)]

    def decode_mean(self, received: Any) -> Any:
        import torch

        values, indices = received
        out = torch.zeros(self.total, dtype=self.dtype, device=self.device)
        out.index_add_(0, torch.cat(indices).long(), torch.cat(values))
        return out.div_(self.world_size)


class TopK(_Sparse):
    compressor_name = "topk"

    def select(self, j: int, p: Any) -> Any:
        import torch

        k = self.ks[j]
        if k >= p.numel():
            return torch.arange(p.numel(), device=p.device)
        return p.abs().topk(k, sorted=False).indices


class DGC(_Sparse):
    compressor_name = "dgc"
    variable_size = True

    def select(self, j: int, p: Any) -> Any:
        import torch

        d, k = p.numel(), self.ks[j]
        if k >= d:
            return torch.arange(d, device=p.device)
        mag = p.abs()
        m = max(math.ceil(d * DGC_SAMPLE_FRACTION), DGC_MIN_SAMPLE)
        sample = mag if m >= d else mag[torch.randint(d, (m,), generator=self.rng, device=p.device)]
        threshold = sample.topk(max(1, math.ceil(sample.numel() * self.density))).values[-1]
        chosen = (mag >= threshold).nonzero().squeeze(1)
        if chosen.numel() > k:
            chosen = chosen[mag[chosen].topk(k, sorted=False).indices]
        return chosen


class RandomK(_ErrorFeedback):
    """The same k coordinates per tensor on every rank (seeded by ``seed`` and the step): one all-reduce."""

    def __init__(self, model: Any, lr: float, group: Any = None, *, density: float, seed: int) -> None:
        self.density = _compressor("randomk").resolve(density)
        self.seed = _int_option("seed", seed, 0)
        super().__init__(model, lr, group, density=density, seed=seed)
        self.ks = [max(1, math.ceil(d * self.density)) for d in self.sizes]
        self.shared: Any = None

    def shared_indices(self) -> list[Any]:
        import torch

        g = torch.Generator(device=self.device)
        # torch's CPU generator keeps the low 32 bits of a seed ((seed << 32) + step lost the seed): mix both there
        g.manual_seed((self.seed * 2654435761 + self.iteration) % 2**32)
        return [torch.randperm(d, generator=g, device=self.device)[:k]
                for d, k in zip(self.sizes, self.ks, strict=True)]

    def encode(self, ps: list[Any]) -> tuple[Any, list[Any]]:
        import torch

        self.shared = self.shared_indices()
        sent = []
        for p, idx in zip(ps, self.shared, strict=True):
            s = torch.zeros_like(p)
            s[idx] = p[idx]
            sent.append(s)
        return torch.cat([p[idx] for p, idx in zip(ps, self.shared, strict=True)]), sent

    def communicate(self, message: Any) -> Any:
        return self.all_reduce(message)

    def decode_mean(self, received: Any) -> Any:
        import torch

        out = torch.zeros(self.total, dtype=self.dtype, device=self.device)
        idx = torch.cat([i + o for i, o in zip(self.shared, self.offsets, strict=True)])
        out[idx] = received / self.world_size
        return out


class EFSignSGD(_ErrorFeedback):
    """``(||p||_1 / d) sign(p)`` per tensor with error feedback: int8 signs and float32 scales all-gathered."""

    def encode(self, ps: list[Any]) -> tuple[Any, list[Any]]:
        import torch

        parts = [scaled_sign(p) for p in ps]
        sent = [decode(s, c) for s, c in parts]
        return (torch.cat([s for s, _ in parts]), torch.cat([c for _, c in parts])), sent

    def communicate(self, message: Any) -> Any:
        scales, codes = message
        return self.all_gather(scales), self.all_gather(codes)

    def decode_mean(self, received: Any) -> Any:
        return self.decode_dense(*received).div_(self.world_size)

