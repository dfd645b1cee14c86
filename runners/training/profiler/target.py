"""What the profiler measures: a model, its example batch and its loss (a zoo name or an ``nn.Module``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from costmodels.errors import CommscopeError
from runners._extras import require


@dataclass
class _Target:
    name: str
    model: Any
    inputs: Any
    targets: Any
    loss_fn: Callable[[Any, Any], Any]
    options: dict[str, Any]


def _resolve(model: Any, batch_size: int, inputs: Any, loss_fn: Any, name: str | None, seed: int | None,
             options: dict[str, Any]) -> _Target:
    torch = require("torch", "the layer-wise profiler")
    if isinstance(model, str):
        from runners.training.zoo import model as zoo

        entry = zoo(model)
        opts = entry.options(**options)
        net = entry.builder(seed=seed, **opts)
        x, y = entry.example_batch(batch_size, **opts) if inputs is None else inputs
        return _Target(name or entry.name, net, x, y, loss_fn or entry.loss_fn, opts)
    if not isinstance(model, torch.nn.Module):
        raise CommscopeError(f"model must be a zoo name or a torch.nn.Module, got {type(model).__name__}")
    if options:
        raise CommscopeError(f"model options ({', '.join(options)}) apply to zoo models only, not to an nn.Module")
    if inputs is None or loss_fn is None:
        raise CommscopeError("profiling an nn.Module needs inputs=(inputs, targets) and loss_fn=(outputs, targets)")
    x, y = inputs
    return _Target(name or type(model).__name__.lower(), model, x, y, loss_fn, {})


def _to(obj: Any, device: Any) -> Any:
    if hasattr(obj, "to") and callable(obj.to):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    if isinstance(obj, Mapping):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def _call(model: Any, x: Any) -> Any:
    if isinstance(x, Mapping):
        return model(**x)
    if isinstance(x, (list, tuple)):
        return model(*x)
    return model(x)


def module_buffers(model: Any) -> dict[str, int]:
    """Bytes of a module's buffers by dtype (``float32``, ``int64``, ...): what PyTorch DDP broadcasts from rank 0
    before every forward (``broadcast_buffers``; ``costmodels.schedules.blocks.buffer_broadcasts``), e.g.
    BatchNorm's running statistics and counters. Profiles keep it as ``metadata['buffers']``."""
    out: dict[str, int] = {}
    for b in model.buffers():
        name = str(b.dtype).removeprefix("torch.")
        out[name] = out.get(name, 0) + b.numel() * b.element_size()
    return out


def with_model_buffers(prof: Any, model: str) -> Any:
    """``prof`` with the bytes of its model's buffers by dtype (metadata ``buffers``, what DDP broadcasts before
    every forward: :func:`module_buffers`) where it lacks them and ``model`` is a
    zoo model: a fact of the model's definition, which profiles made before it was recorded do not carry."""
    import dataclasses

    if "buffers" in prof.metadata:
        return prof
    buffers = zoo_buffers(model)
    return prof if buffers is None else dataclasses.replace(prof, metadata={**prof.metadata, "buffers": buffers})


@functools.lru_cache(maxsize=32)
def zoo_buffers(model: str) -> dict[str, int] | None:
    """:func:`module_buffers` of the zoo's ``model`` (built once per process), or
    None where the zoo has no such model or it needs a package that is not installed."""
    from runners.training.zoo import MODELS

    if model not in MODELS or not MODELS.get(model).available():
        return None
    return module_buffers(MODELS.get(model).builder(seed=0))
