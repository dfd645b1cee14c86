"""Compression by PyTorch DDP communication hooks: ``fp16`` and ``powersgd``.

They are PyTorch DDP with PyTorch's own communication hooks (``default_hooks.fp16_compress_hook``;
``powerSGD_hook.PowerSGDState`` + ``powerSGD_hook``), registered on the DDP model as PyTorch documents:
the gradient communication runs inside ``backward`` (bucketed, overlapped), so those steps report it
there and ``compression`` / ``exposed_comm`` stay 0.

On gloo, PowerSGD's bucket chains run one after another (:class:`BucketsInOrder`): the hook issues a
bucket's P and Q all-reduces from the callbacks of its earlier ones, which gloo runs on its worker threads,
while DDP issues the next bucket's first all-reduce from backward. The two raced, in a different order on
each rank, and gloo matched different collectives: "Received data size doesn't match expected size" (7168
vs 1024 B), gpt_wide on two emulated 200 Mbit/s ranks at iteration 8-12 (commscope validate --suite full).
DDP calls the hook in bucket order on every rank (its reducer launches buckets by index), so chaining the
buckets gives every rank the same order.
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

        if isinstance(self.hook, BucketsInOrder):
            self.hook.reset()  # a new backward: its first bucket starts at once
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


class BucketsInOrder:
    """A DDP communication hook whose bucket chains run one after another, in the order DDP calls it: bucket
    k's hook starts when bucket k-1's future completes (module doc: why gloo needs it)."""

    def __init__(self, hook: Any) -> None:
        import inspect

        self.hook = hook
        self.tail: Any = None
        # DDP checks a hook's name and its signature's annotations (bucket: GradBucket, -> Future[Tensor])
        self.__name__ = self.__qualname__ = f"{getattr(hook, '__name__', 'hook')}_buckets_in_order"
        self.__signature__ = inspect.signature(hook)

    def reset(self) -> None:
        self.tail = None

    def __call__(self, state: Any, bucket: Any) -> Any:
        import torch

        previous = self.tail
        if previous is None:
            fut = self.hook(state, bucket)
        else:
            fut = torch.futures.Future()

            def start(_: Any) -> None:
                try:
                    inner = self.hook(state, bucket)
                except Exception as exc:  # the hook raised: DDP sees it on this bucket's future
                    fut.set_exception(exc)
                    return

                def done(f: Any) -> None:
                    try:
                        fut.set_result(f.value())
                    except Exception as exc:
                        fut.set_exception(exc)

                inner.add_done_callback(done)

            previous.add_done_callback(start)
        self.tail = fut
        return fut


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
        import torch.distributed as dist

        if dist.get_backend(self.group) == "gloo":
            return state, BucketsInOrder(powersgd.powerSGD_hook)
        return state, powersgd.powerSGD_hook

