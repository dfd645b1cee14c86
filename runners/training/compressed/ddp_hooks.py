"""Compression by PyTorch DDP communication hooks: ``fp16`` and ``powersgd``.

They are PyTorch DDP with PyTorch's own communication hooks (``default_hooks.fp16_compress_hook``;
``powerSGD_hook.PowerSGDState`` + ``powerSGD_hook``), registered on the DDP model as PyTorch documents:
the gradient communication runs inside ``backward`` (bucketed, overlapped), so those steps report it
there and ``compression`` / ``exposed_comm`` stay 0.
"""

from __future__ import annotations

from typing import Any

from costmodels.compression import compressor as _compressor
from costmodels.errors import CommscopeError

from ..base import LossFn, StepResult, Trainer
from .shared import _bool_option, _int_option


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
        from ..exact_common import sgd_  # imports torch

        t0 = self.clock()
        self.ddp.zero_grad(set_to_none=True)
        loss = loss_fn(self.ddp(inputs), targets)
        t1 = self.clock()
        loss.backward()  # the hook's communication runs here; DDP waits for it before backward returns
        t2 = self.clock()
        sgd_(list(self.model.parameters()), self.lr)
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

