"""Compressed data-parallel training: one registered technique per compressor of :mod:`costmodels.compression`.

``fp16`` and ``powersgd`` are PyTorch DDP with PyTorch's own communication hooks
(``default_hooks.fp16_compress_hook``; ``powerSGD_hook.PowerSGDState`` + ``powerSGD_hook``), registered on
the DDP model as PyTorch documents: the gradient communication runs inside ``backward`` (bucketed,
overlapped), so those steps report it there and ``compression`` / ``exposed_comm`` stay 0.

The others compress every parameter tensor on its own after ``backward``, fuse the ranks' messages into
one collective of each kind per step, decode, and subtract the average: one fused message after backward,
whose cost model is the ``fusion`` schedule with a single bucket holding every tensor (:data:`ONE_MESSAGE`:
sent when the last gradient is ready, so nothing overlaps) and the compressor:

* ``topk``, ``randomk``, ``dgc``, ``ef_signsgd`` keep **error feedback on the step**, as
  :mod:`convergence.sim_algorithms` does: each rank keeps a residual ``e_j`` per tensor, forms
  ``p_j = e_j + lr * g_j``, sends ``C(p_j)``, keeps ``e_j <- p_j - C(p_j)``, and every rank subtracts the
  average over ranks of ``C(p_j)`` from the parameters. Over k steps, on every rank,
  ``sum_t C(p_t) + e_k = lr * sum_t g_t``. ``topk`` and ``dgc`` all-gather the values and their indices
  into the flattened model (int32, int64 beyond 2^31 elements); ``dgc`` (Lin et al. 2018) takes the
  threshold from a random 1% sample of the magnitudes (at least 100 values; all of a tensor that small),
  sends every value at or above it, at most k = ceil(density * d) (an exact top-k among the chosen when
  more pass), and sends the variable sizes first (messages padded to the largest); momentum correction,
  clipping and warm-up of the paper are not part of it. ``randomk`` draws the same k coordinates per tensor
  on every rank (seed ``seed`` and the step number) and all-reduces their values. ``ef_signsgd`` sends
  ``(||p_j||_1 / d_j) sign(p_j)`` (Karimireddy et al. 2019) as int8 signs and one float32 scale per tensor.
* ``qsgd`` (Alistarh et al. 2017) and ``terngrad`` (Wen et al. 2017) are unbiased and need no residual:
  they quantise the gradient itself (s = 2^(bits-1) - 1 levels of the tensor's l2 norm; or ternary times
  its max-abs) by stochastic rounding with a per-rank generator, all-gather one float32 scale per tensor and
  the signed levels (int8, int32 above 8 bits as gloo has no int16), and step ``lr`` times the average.
  The wire carries a byte per level, not the bits the cost model counts.
* ``signsgd`` (Bernstein et al. 2019) all-gathers int8 signs (a byte each) and steps ``lr`` times the
  majority vote ``sign(sum_r sign(g_r))`` (0 where the vote ties or every gradient is 0).

All ranks start from rank 0's parameters and buffers (broadcast at construction, as DDP does). Every step
reports the bytes this rank put on the wire in ``extra["sent_bytes"]``; ``state_for_check`` returns what
this rank's last message decodes to (``sent/<name>``, shaped like the parameter: ``C(p)``, ``Q(g)`` or
``sign(g)``) and the residuals (``residual/<name>``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from costmodels.compression import compressor as _compressor
from costmodels.errors import CommscopeError

from .base import TECHNIQUES, LossFn, StepResult, Technique, Trainer

DGC_SAMPLE_FRACTION = 0.01
DGC_MIN_SAMPLE = 100


# ---------------------------------------------------------------------------------------------- quantisers
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


# -------------------------------------------------------------------------------------------- helpers
def _int_option(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise CommscopeError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _bool_option(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise CommscopeError(f"{name} must be True or False, got {value!r}")
    return value


def _global_rank(group: Any, rank: int) -> int:
    import torch.distributed as dist

    return rank if group is None else dist.get_global_rank(group, rank)


def broadcast_from_first(model: Any, group: Any) -> None:
    """Give every rank the group's first rank's parameters and buffers (as DDP does at construction)."""
    import torch
    import torch.distributed as dist

    src = _global_rank(group, 0)
    with torch.no_grad():
        for t in itertools.chain(model.parameters(), model.buffers()):
            dist.broadcast(t.data, src=src, group=group)


class _Phases:
    """Seconds spent in the compression and communication phases of one step."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.seconds = {"compression": 0.0, "exposed_comm": 0.0}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = self.trainer.clock()
        try:
            yield
        finally:
            self.seconds[phase] += self.trainer.clock() - t0


# -------------------------------------------------------------------------------------- manual trainers
class _Compressed(Trainer):
    """Forward, backward, then :meth:`exchange` the flattened gradients for the flattened updates to subtract."""

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        import torch

        super().__init__(model, lr, group, **options)
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.named:
            raise CommscopeError("the model has no trainable parameters")
        dtypes = {p.dtype for _, p in self.named}
        if len(dtypes) > 1 or not next(iter(dtypes)).is_floating_point:
            raise CommscopeError(f"compressed techniques need one floating dtype for all parameters, got {dtypes}")
        self.dtype = next(iter(dtypes))
        self.sizes = [p.numel() for _, p in self.named]
        self.offsets = [0, *itertools.accumulate(self.sizes)][:-1]
        self.total = sum(self.sizes)
        self.index_dtype = torch.int32 if self.total < 2**31 else torch.int64
        self.iteration = 0
        self.sent_bytes = 0
        self.sent = [torch.zeros(d, dtype=self.dtype, device=self.device) for d in self.sizes]
        broadcast_from_first(model, group)

    # communication, counted in sent_bytes
    def all_gather(self, tensor: Any) -> list[Any]:
        import torch
        import torch.distributed as dist

        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor, group=self.group)
        self.sent_bytes += tensor.numel() * tensor.element_size()
        return out

    def all_reduce(self, tensor: Any) -> Any:
        import torch.distributed as dist

        dist.all_reduce(tensor, group=self.group)
        self.sent_bytes += tensor.numel() * tensor.element_size()
        return tensor

    def sizes_tensor(self) -> Any:
        import torch

        return torch.tensor(self.sizes, device=self.device)

    def decode_dense(self, scales: list[Any], codes: list[Any]) -> Any:
        """Sum over ranks of ``scale_j * codes`` (one scale per tensor), flattened."""
        import torch

        sizes = self.sizes_tensor()
        out = torch.zeros(self.total, dtype=self.dtype, device=self.device)
        for s, c in zip(scales, codes, strict=True):
            out += decode(torch.repeat_interleave(s, sizes), c)
        return out

    def exchange(self, grads: list[Any], phases: _Phases) -> list[Any]:
        raise NotImplementedError

    def step(self, inputs: Any, targets: Any, loss_fn: LossFn) -> StepResult:
        import torch

        t0 = self.clock()
        for _, p in self.named:
            p.grad = None
        loss = loss_fn(self.model(inputs), targets)
        t1 = self.clock()
        loss.backward()
        t2 = self.clock()
        grads = [torch.zeros(p.numel(), dtype=self.dtype, device=self.device) if p.grad is None
                 else p.grad.detach().reshape(-1) for _, p in self.named]
        phases = _Phases(self)
        self.sent_bytes = 0
        updates = self.exchange(grads, phases)
        t3 = self.clock()
        with torch.no_grad():
            for (_, p), u in zip(self.named, updates, strict=True):
                p.sub_(u.view_as(p))
        t4 = self.clock()
        self.iteration += 1
        return StepResult(loss=float(loss.detach()), total=t4 - t0, forward=t1 - t0, backward=t2 - t1,
                          exposed_comm=phases.seconds["exposed_comm"], compression=phases.seconds["compression"],
                          update=t4 - t3, extra={"sent_bytes": float(self.sent_bytes)})

    def state_for_check(self) -> dict[str, Any]:
        return {f"sent/{n}": s.view_as(p) for (n, p), s in zip(self.named, self.sent, strict=True)}

    def generator(self, seed: int) -> Any:
        import torch

        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        return g


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
        g.manual_seed((self.seed << 32) + self.iteration)
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


# ----------------------------------------------------------------------------------------- DDP + hooks
class _HookedDDP(Trainer):
    """PyTorch DDP with a communication hook registered on it; p <- p - lr * (the hook's averaged gradient)."""

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        from torch.nn.parallel import DistributedDataParallel

        super().__init__(model, lr, group, **options)
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=ids, process_group=group)
        self.hook_state, self.hook = self.make_hook()
        self.ddp.register_comm_hook(self.hook_state, self.hook)

    def make_hook(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def step(self, inputs: Any, targets: Any, loss_fn: LossFn) -> StepResult:
        import torch

        t0 = self.clock()
        self.ddp.zero_grad(set_to_none=True)
        loss = loss_fn(self.ddp(inputs), targets)
        t1 = self.clock()
        loss.backward()  # the hook's communication runs here; DDP waits for it before backward returns
        t2 = self.clock()
        with torch.no_grad():
            for p in self.model.parameters():
                if p.grad is not None:
                    p.sub_(p.grad, alpha=self.lr)
        t3 = self.clock()
        return StepResult(loss=float(loss.detach()), total=t3 - t0, forward=t1 - t0, backward=t2 - t1,
                          update=t3 - t2)


class FP16(_HookedDDP):
    def __init__(self, model: Any, lr: float, group: Any = None) -> None:
        super().__init__(model, lr, group)

    def make_hook(self) -> tuple[Any, Any]:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        return self.group, default_hooks.fp16_compress_hook  # state: the process group (None: the default one)


class PowerSGD(_HookedDDP):
    def __init__(self, model: Any, lr: float, group: Any = None, *, rank: int, start_powerSGD_iter: int,
                 use_error_feedback: bool, warm_start: bool) -> None:
        self.rank_r = int(_compressor("powersgd").resolve(rank))  # type: ignore[arg-type]
        self.start_iter = _int_option("start_powerSGD_iter", start_powerSGD_iter, 1)
        self.use_error_feedback = _bool_option("use_error_feedback", use_error_feedback)
        self.warm_start = _bool_option("warm_start", warm_start)
        if (self.use_error_feedback or self.warm_start) and self.start_iter < 2:
            raise CommscopeError("start_powerSGD_iter must be >= 2 with use_error_feedback or warm_start "
                                 f"(PowerSGD starts after DDP's first two iterations), got {start_powerSGD_iter}")
        super().__init__(model, lr, group, rank=rank, start_powerSGD_iter=start_powerSGD_iter,
                         use_error_feedback=use_error_feedback, warm_start=warm_start)

    def make_hook(self) -> tuple[Any, Any]:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        state = powersgd.PowerSGDState(process_group=self.group, matrix_approximation_rank=self.rank_r,
                                       start_powerSGD_iter=self.start_iter,
                                       use_error_feedback=self.use_error_feedback, warm_start=self.warm_start)
        return state, powersgd.powerSGD_hook


# ------------------------------------------------------------------------------------------- registry
ONE_MESSAGE = {"bucket_bytes": 2**60, "first_bucket_bytes": 2**60}  # fusion options: every tensor in one bucket
_FUSED: dict = {"schedule": "fusion", "schedule_options": ONE_MESSAGE}

for _t in (
    Technique("fp16", "PyTorch DDP with fp16_compress_hook: gradients cast to fp16 / p and all-reduced in buckets",
              FP16, exact=False, schedule="fusion", compressor="fp16"),
    Technique("powersgd", "PyTorch DDP with powerSGD_hook (PowerSGDState: rank, start_powerSGD_iter, "
              "use_error_feedback, warm_start); plain all-reduce before start_powerSGD_iter", PowerSGD, exact=False,
              schedule="fusion", compressor="powersgd", bound="powersgd",
              options={"rank": 4, "start_powerSGD_iter": 10, "use_error_feedback": True, "warm_start": True}),
    Technique("topk", "Top-k per tensor with error feedback on lr * g; values + indices all-gathered", TopK,
              exact=False, compressor="topk", bound="topk", options={"density": 0.01, "seed": 0}, **_FUSED),
    Technique("randomk", "Random-k per tensor (indices shared by seed and step) with error feedback on lr * g; "
              "values all-reduced", RandomK, exact=False, compressor="randomk", bound="randomk",
              options={"density": 0.01, "seed": 0}, **_FUSED),
    Technique("dgc", "DGC: threshold from a 1% sample, at most k values + indices per tensor, error feedback on "
              "lr * g; variable sizes all-gathered", DGC, exact=False, compressor="dgc",
              options={"density": 0.001, "seed": 0}, **_FUSED),
    Technique("qsgd", "QSGD: unbiased stochastic rounding to 2^(bits-1) - 1 levels of each tensor's norm; "
              "norms + levels all-gathered", QSGD, exact=False, compressor="qsgd", bound="qsgd",
              options={"bits": 8, "seed": 0}, **_FUSED),
    Technique("terngrad", "TernGrad: unbiased stochastic ternary times each tensor's max-abs; scales + int8 codes "
              "all-gathered", TernGrad, exact=False, compressor="terngrad", options={"seed": 0}, **_FUSED),
    Technique("signsgd", "signSGD with majority vote: int8 signs all-gathered, step lr * sign(sum of signs)",
              SignSGD, exact=False, compressor="signsgd", bound="signsgd", **_FUSED),
    Technique("ef_signsgd", "EF-signSGD: (||p||_1/d) sign(p) per tensor with error feedback on lr * g; scales + "
              "int8 signs all-gathered", EFSignSGD, exact=False, compressor="ef_signsgd", bound="ef_signsgd",
              **_FUSED),
):
    TECHNIQUES.register(_t)
