"""Machinery shared by the exact techniques (:mod:`.exact`): the timed step, gradient-ready hooks, flat buckets.

Every exact trainer runs plain SGD (no momentum, no weight decay) on the gradient averaged over the
ranks, so that after k steps the parameters equal single-process SGD on the concatenated batch up to
float32 rounding. A parameter with no gradient in a step (unused in the forward) is left unchanged,
as ``torch.optim.SGD`` leaves it; frozen parameters (``requires_grad=False``) take no part at all.
The set of unused parameters must be the same on every rank (as with DDP), since it decides which
messages are sent.

The timed step (:meth:`ExactTrainer.step`) has six phases; subclasses fill in the ones they need:

1. forward (forward pre-hooks may first wait for the previous step's communication and apply its
   update: that waiting is reported as ``exposed_comm`` and that update as ``update``);
2. ``_before_backward``: finish whatever the previous step left pending (same accounting);
3. backward (communication launched from gradient hooks overlaps it);
4. ``_after_backward``: wait for communication: ``exposed_comm``;
5. ``_update``: the SGD update: ``update``;
6. ``_after_update``: communication after the update (e.g. ZeRO's all-gather): ``exposed_comm``.

Clocks are read after ``sync()`` (a CUDA synchronisation on GPUs). Time spent inside hooks is read
with ``time.perf_counter`` alone, since synchronising there would remove the overlap being measured:
on a GPU it is the host's waiting, and device-side waits show up in the phase around them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from costmodels.errors import CommscopeError
from costmodels.units import parse_size

from .base import LossFn, StepResult, Trainer


def size_option(name: str, value: Any) -> int:
    """A positive number of bytes, given as a number or a size string (``"4MiB"``)."""
    try:
        v = parse_size(value) if isinstance(value, str) else value
    except (ValueError, CommscopeError):
        v = None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
        raise CommscopeError(f"{name} must be a positive number of bytes (or a size like '4MiB'), got {value!r}")
    return int(v)


def trainable(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters that receive gradients, in registration order (shared ones once)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def sgd_(params: Sequence[torch.Tensor], lr: float) -> None:
    """Plain SGD on parameters whose ``.grad`` already holds the averaged gradient."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)


class ReadyHooks:
    """Calls ``launch(b)`` once every parameter of bucket ``b`` has its gradient accumulated in this backward.

    Registered with ``register_post_accumulate_grad_hook``: the hook runs after autograd has summed
    all contributions into ``p.grad``. The order in which buckets are launched is the autograd
    execution order, the same on every rank for the same graph, so collectives launched from here
    match across ranks. ``flush()`` (after backward) launches the buckets left incomplete by
    parameters that got no gradient, in bucket order.
    """

    def __init__(self, buckets: Sequence[Sequence[torch.nn.Parameter]], launch: Callable[[int], None]) -> None:
        self.buckets = [list(b) for b in buckets]
        self._launch = launch
        self._bucket_of = {id(p): b for b, ps in enumerate(self.buckets) for p in ps}
        self._handles = [p.register_post_accumulate_grad_hook(self._hook) for ps in self.buckets for p in ps]
        self.reset()

    def reset(self) -> None:
        self._left = [len(ps) for ps in self.buckets]
        self.launched = [False] * len(self.buckets)
        self.order: list[int] = []  # buckets in launch order

    def _hook(self, p: torch.Tensor) -> None:
        b = self._bucket_of[id(p)]
        self._left[b] -= 1
        if self._left[b] == 0 and not self.launched[b]:
            self._fire(b)

    def _fire(self, b: int) -> None:
        self.launched[b] = True
        self.order.append(b)
        self._launch(b)

    def flush(self) -> None:
        for b in range(len(self.buckets)):
            if not self.launched[b]:
                self._fire(b)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


class FlatBucket:
    """Several parameters seen as one flat vector (their order here), padded to a multiple of ``world_size``.

    Rank r owns the r-th of the ``world_size`` equal shards of the padded vector; ``pieces`` are the
    (parameter, start, stop, offset in the shard) slices that fall into this rank's shard, so that
    the owned part of the parameters is updated in place without materialising the flat vector.

    The flat vectors a step sends and receives are allocated once per bucket and reused
    (:meth:`buffer`), as DDP's reducer keeps its bucket buffers and DeepSpeed ZeRO its flat groups.
    On a GPU, PyTorch's caching allocator makes a fresh tensor per step free; on a CPU it is a
    fresh ``malloc``, and glibc returns such blocks to the kernel, so every step would fault their
    pages in again. Measured on 4 ranks sharing 2 cores at 2.5 Gbit/s (gpt_wide, one 23 MB bucket,
    median over ranks of 20 steps, the two ways interleaved twice in one job): ZeRO 403 and 406 ms
    per iteration with fresh buffers, 404 and 371 ms with these; DeAR 426 and 423 ms, 399 and 382 ms.
    That cost belongs to the CPU allocator, not to the technique.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], world_size: int, rank: int) -> None:
        if len({(p.dtype, p.device) for p in params}) > 1:
            raise CommscopeError("a flat bucket needs parameters of one dtype on one device; got "
                                 f"{sorted({f'{p.dtype} on {p.device}' for p in params})}")
        for p in params:
            if not p.is_contiguous():
                raise CommscopeError("flat buckets need contiguous parameters (got a non-contiguous one, e.g. "
                                     "channels_last); convert the model with .contiguous() first")
        self.params = list(params)
        self.sizes = [p.numel() for p in self.params]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.numel = sum(self.sizes)
        self.shard = -(-self.numel // world_size)  # ceil
        self.padded = self.shard * world_size
        self.nbytes = self.numel * self.params[0].element_size()
        lo, hi = rank * self.shard, (rank + 1) * self.shard
        self.pieces = []
        for p, off, n in zip(self.params, self.offsets, self.sizes, strict=True):
            a, b = max(lo, off), min(hi, off + n)
            if a < b:
                self.pieces.append((p, a - off, b - off, a - lo))
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, numel: int) -> torch.Tensor:
        """This bucket's persistent buffer ``name`` of ``numel`` elements (zeros when first made; then as
        last written). A caller reuses it only once the collective that last used it has completed."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() != numel:
            p0 = self.params[0]
            buf = self._buffers[name] = torch.zeros(numel, dtype=p0.dtype, device=p0.device)
        return buf

    def flat_grads(self) -> torch.Tensor:
        """The gradients as one padded vector (zeros for parameters without a gradient), in the
        bucket's persistent ``grads`` buffer (the padding stays zero: nothing writes it)."""
        flat = self.buffer("grads", self.padded)
        for p, off, n in zip(self.params, self.offsets, self.sizes, strict=True):
            if p.grad is not None:
                flat[off:off + n].copy_(p.grad.reshape(-1))
            else:
                flat[off:off + n].zero_()
        return flat

    def write_grads(self, flat: torch.Tensor) -> None:
        """Set each ``p.grad`` to its slice of ``flat`` (a view, no copy)."""
        for p, off, n in zip(self.params, self.offsets, self.sizes, strict=True):
            p.grad = flat[off:off + n].view_as(p)

    def update_own(self, grad_shard: torch.Tensor, lr: float) -> None:
        """SGD on the owned slices of the parameters with this rank's shard of the averaged gradient."""
        with torch.no_grad():
            for p, a, b, o in self.pieces:
                p.view(-1)[a:b].add_(grad_shard[o:o + b - a], alpha=-lr)

    def own_shard(self) -> torch.Tensor:
        """This rank's shard of the parameters, in the persistent ``own`` buffer (padding stays zero)."""
        out = self.buffer("own", self.shard)
        with torch.no_grad():
            for p, a, b, o in self.pieces:
                out[o:o + b - a].copy_(p.view(-1)[a:b])
        return out

    def write_params(self, flat: torch.Tensor) -> None:
        """Copy a full (gathered) flat vector into the parameters."""
        with torch.no_grad():
            for p, off, n in zip(self.params, self.offsets, self.sizes, strict=True):
                p.copy_(flat[off:off + n].view_as(p))


class ExactTrainer(Trainer):
    """Base of the exact trainers: the timed six-phase step, hook bookkeeping, ``finish`` and ``close``.

    ``equivalents`` names, for each collective a technique needs, what carries it on this backend
    (the native call, or a documented equivalent where the backend lacks it).
    """

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        super().__init__(model, lr, group, **options)
        self.equivalents: dict[str, str] = {}
        self.named = trainable(model)
        self.params = [p for _, p in self.named]
        self._handles: list[Any] = []
        self._waited = 0.0  # host time spent in hooks waiting for communication
        self._updated = 0.0  # host time spent in hooks applying updates
        self.steps = 0

    # --------------------------------------------------------------------------- phases
    def _zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _forward(self, inputs: Any) -> Any:
        return self.model(inputs)

    def _before_backward(self) -> None:
        pass

    def _after_backward(self) -> None:
        pass

    def _update(self) -> None:
        sgd_(self.params, self.lr)

    def _after_update(self) -> None:
        pass

    def _extra(self) -> dict[str, float]:
        return {}

    def step(self, inputs: Any, targets: Any, loss_fn: LossFn) -> StepResult:
        self._waited = self._updated = 0.0
        t0 = self.clock()
        self._zero_grad()
        loss = loss_fn(self._forward(inputs), targets)
        t1 = self.clock()
        w_fwd, u_fwd = self._waited, self._updated
        self._before_backward()
        loss.backward()
        t2 = self.clock()
        w_bwd, u_bwd = self._waited - w_fwd, self._updated - u_fwd
        self._after_backward()
        t3 = self.clock()
        self._update()
        t4 = self.clock()
        self._after_update()
        t5 = self.clock()
        self.steps += 1
        return StepResult(
            loss=float(loss.detach()), total=t5 - t0,
            forward=(t1 - t0) - w_fwd - u_fwd, backward=(t2 - t1) - w_bwd - u_bwd,
            exposed_comm=(t3 - t2) + (t5 - t4) + w_fwd + w_bwd, update=(t4 - t3) + u_fwd + u_bwd,
            extra=self._extra(),
        )

    # -------------------------------------------------------------------------- helpers
    def _hook_time(self, wait: Callable[[], None], apply: Callable[[], None]) -> None:
        """Run ``wait`` then ``apply`` from a hook, charging their host time to exposed comm and update."""
        t0 = time.perf_counter()
        wait()
        t1 = time.perf_counter()
        apply()
        t2 = time.perf_counter()
        self._waited += t1 - t0
        self._updated += t2 - t1

    def _pre_hooks(self, groups_of: Callable[[torch.nn.Parameter], Sequence[int]],
                   ensure: Callable[[Sequence[int]], None]) -> None:
        """A forward pre-hook on every module that directly holds trainable parameters: before the module
        runs, ``ensure(units)`` makes the units (buckets or parameters) its parameters belong to current."""
        mine = {id(p) for p in self.params}
        for module in self.model.modules():
            units = sorted({u for p in module.parameters(recurse=False) if id(p) in mine for u in groups_of(p)})
            if units:
                self._handles.append(module.register_forward_pre_hook(lambda _m, _a, units=units: ensure(units)))

    def finish(self) -> None:
        """Complete communication left pending by the last step, so that the parameters are current."""

    def close(self) -> None:
        """``finish()``, then remove the trainer's hooks (and stop its threads)."""
        self.finish()
        for h in self._handles:
            h.remove()
        self._handles = []

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """Every parameter of the model as a full tensor on the CPU (after ``finish()``), by name."""
        self.finish()
        return {n: p.detach().cpu().clone() for n, p in self.model.named_parameters()}
