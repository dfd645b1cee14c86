"""The training-technique registry: one entry per technique, named like the schedules and compressors.

A technique turns a model, a process group and an SGD learning rate into a :class:`Trainer` whose
``step(inputs, targets, loss_fn)`` runs one data-parallel iteration: forward, backward, the
technique's communication (and compression), and the parameter update. Every rank calls ``step``
with its own shard of the global batch (equal shard sizes); ``loss_fn`` returns the mean loss over
the shard, so averaging gradients over ranks gives the gradient of the mean loss over the
concatenated batch. Exact techniques must then match single-process SGD on that concatenated batch
(tested to float32 tolerance); compressed, local and gossip techniques implement their algorithm as
its paper states it, with its parameters in ``options``.

``StepResult`` reports the loss and a breakdown of the step's wall time (seconds): ``forward``,
``backward`` (including communication overlapped with it), ``exposed_comm`` (communication the
step waited for after backward), ``compression`` (encode/decode) and ``update``; ``total`` is
measured around the whole step after a device synchronisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from costmodels.errors import CommscopeError
from costmodels.registry import Registry

LossFn = Callable[[Any, Any], Any]  # (outputs, targets) -> scalar tensor (mean over the local shard)


@dataclass
class StepResult:
    loss: float
    total: float
    forward: float = 0.0
    backward: float = 0.0
    exposed_comm: float = 0.0
    compression: float = 0.0
    update: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class Trainer:
    """Base class: holds the model, group and learning rate; subclasses implement :meth:`step`.

    ``sync()`` waits for the device (CUDA) so that timers see finished work; on CPUs it is free.
    """

    def __init__(self, model: Any, lr: float, group: Any = None, **options: Any) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise CommscopeError("a Trainer needs torch.distributed to be initialised (run under torchrun)")
        if not lr > 0:
            raise CommscopeError(f"lr must be > 0, got {lr!r}")
        self.model = model
        self.lr = float(lr)
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.options = options
        self.device = next(model.parameters()).device

    def sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def clock(self) -> float:
        self.sync()
        return time.perf_counter()

    def step(self, inputs: Any, targets: Any, loss_fn: LossFn) -> StepResult:
        raise NotImplementedError

    def state_for_check(self) -> dict[str, Any]:
        """Tensors a test may inspect besides the parameters (e.g. error-feedback residuals)."""
        return {}


@dataclass(frozen=True)
class Technique:
    """A registered training technique.

    ``exact``: equals single-process SGD on the concatenated batch; ``schedule`` / ``compressor`` /
    ``bound``: the names of its cost model, compressor and convergence bound (None where it has none);
    ``schedule_options``: options of that schedule that describe how the technique sends (e.g. one
    bucket for a technique that fuses everything into one message);
    ``options``: its parameters with defaults; ``factory(model, lr, group, **options)`` builds the
    :class:`Trainer`; ``backends``: the torch.distributed backends it runs on; ``replicas_differ``: the ranks'
    models differ between synchronisations, so its convergence is measured on their average (what its bound
    describes); ``returns_in_flight``: its step returns while messages still travel (the next step awaits them),
    so the ranks' step boundaries drift apart (:func:`runners.training.pricing.measured_time`).
    """

    name: str
    description: str
    factory: Callable[..., Trainer]
    exact: bool
    schedule: str | None = None
    compressor: str | None = None
    bound: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    schedule_options: Mapping[str, Any] = field(default_factory=dict)
    backends: tuple[str, ...] = ("gloo", "nccl")
    replicas_differ: bool = False  # the ranks' models differ between synchronisations (local SGD, D-PSGD)
    returns_in_flight: bool = False  # the step returns before its messages complete (ByteScheduler, DeAR)

    def build(self, model: Any, lr: float, group: Any = None, **options: Any) -> Trainer:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise CommscopeError(f"technique {self.name} takes {', '.join(self.options) or 'no options'}, "
                                 f"got {', '.join(unknown)}")
        return self.factory(model, lr, group, **{**self.options, **options})


TECHNIQUES: Registry[Technique] = Registry("training technique")


def techniques() -> list[str]:
    return TECHNIQUES.names()


def technique(name: str) -> Technique:
    return TECHNIQUES.get(name)
