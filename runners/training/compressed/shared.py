"""What the compressed techniques share: option checks, ranks, the first rank's model, phase timers, and
:class:`_Compressed`, the base of the techniques that compress every tensor after ``backward``.

Those techniques compress every parameter tensor on its own after ``backward``, fuse the ranks' messages
into one collective of each kind per step, decode, and subtract the average: one fused message after
backward, whose cost model is the ``fusion`` schedule with a single bucket holding every tensor
(:data:`~.registration.ONE_MESSAGE`: sent when the last gradient is ready, so nothing overlaps) and the
compressor.

All ranks start from rank 0's parameters and buffers (broadcast at construction, as DDP does). Every step
reports the bytes this rank put on the wire in ``extra["sent_bytes"]``; ``state_for_check`` returns what
this rank's last message decodes to (``sent/<name>``, shaped like the parameter: ``C(p)``, ``Q(g)`` or
``sign(g)``) and the residuals (``residual/<name>``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from costmodels.errors import CommscopeError

from ..base import LossFn, StepResult, Trainer
from .encoders import decode


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

