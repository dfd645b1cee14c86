"""The profiler's entry points: :func:`profile_model` and :func:`resolve_device`.

    prof = profile_model("resnet_small", batch_size=32, device="cpu", threads=1)
    prof.save("resnet_small.json"); cm.simulate(cm.load_profile("resnet_small.json"), env, 4, "wfbp")

What a layer is: one trainable parameter tensor (one gradient tensor on the wire), listed in forward
execution order (the order in which the modules holding them first run), as in the shipped profiles.
A tensor shared by several modules (a tied LM head) appears once, where it is first used.

On a CPU, compute measured alone differs from compute beside other ranks sharing the cores:
``threads`` sets ``torch.set_num_threads`` for the measurement and is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costmodels.errors import CommscopeError
from costmodels.profiles import ModelProfile
from runners._extras import require

from .hooks import _measure
from .target import _resolve


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CommscopeError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def resolve_device(device: Any) -> Any:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a torch.device, or a one-line error saying why not."""
    torch = require("torch", "the layer-wise profiler")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise CommscopeError(f"device must be cpu, cuda or cuda:N, got {device!r}") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise CommscopeError(f"device must be cpu, cuda or cuda:N, got {device!r}")
    if not torch.cuda.is_available():
        why = "this torch has no CUDA support" if torch.version.cuda is None else "no CUDA device is visible"
        raise CommscopeError(f"device {device!r}: CUDA is not available ({why}; torch {torch.__version__})")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= torch.cuda.device_count():
        raise CommscopeError(f"device {device!r}: there are only {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def profile_model(model: Any, batch_size: int, device: str = "cpu", warmup: int = 3, iterations: int = 20, *,
                  threads: int | None = None, inputs: Any = None, loss_fn: Callable[[Any, Any], Any] | None = None,
                  name: str | None = None, seed: int | None = 0, correct_overhead: bool = True,
                  **model_options: Any) -> ModelProfile:
    """Measure a model's per-tensor forward and backward times (see :mod:`runners.training.profiler`).

    ``model`` is a zoo name (``runners.training.zoo``; ``model_options`` go to its builder and example
    batch, ``seed`` fixes its initial weights) or an ``nn.Module`` with ``inputs=(inputs, targets)``
    and ``loss_fn``. Returns a ``ModelProfile`` with origin ``"measured"``.
    """
    torch = require("torch", "the layer-wise profiler")
    batch_size = _count("batch size", batch_size, 1)
    warmup = _count("warmup", warmup, 0)
    iterations = _count("iterations", iterations, 1)
    if threads is not None:
        threads = _count("threads", threads, 1)
    dev = resolve_device(device)
    target = _resolve(model, batch_size, inputs, loss_fn, name, seed, model_options)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _measure(torch, target, batch_size, dev, warmup, iterations, correct_overhead)
    finally:
        torch.set_num_threads(before)
