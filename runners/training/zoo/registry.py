"""The zoo's registry: :class:`ModelEntry`, the ``MODELS`` registry and the conversion of model options.

Every :class:`ModelEntry` has a ``name``, a ``description``, ``builder(**options) -> nn.Module``,
``example_batch(batch_size, generator=None, **options) -> (inputs, targets)`` (random but
reproducible: a fixed seed unless a generator is given) and ``loss_fn(outputs, targets)`` (mean
over the batch). ``options`` lists what a builder takes, with defaults; values given as text
(``"256,128"``, from the command line) are converted to the default's type.

The models themselves register in :mod:`.networks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from costmodels.errors import CommscopeError
from costmodels.registry import Registry
from runners._extras import require

torch = require("torch", "the model zoo")
F = torch.nn.functional

SEED = 0  # seed of example batches when no generator is given
Batch = tuple[Any, Any]


# ------------------------------------------------------------------------------------ options
def _ints(value: Any, name: str) -> tuple[int, ...]:
    if isinstance(value, str):
        parts = [x for x in value.replace("x", ",").split(",") if x.strip()]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = [value]
    out = []
    for x in parts:
        try:
            v = int(str(x).strip()) if not isinstance(x, bool) else None
        except ValueError:
            v = None
        if v is None or v < 1:
            raise CommscopeError(f"option {name} must be positive integers such as 256,128; got {value!r}")
        out.append(v)
    if not out:
        raise CommscopeError(f"option {name} needs at least one integer, got {value!r}")
    return tuple(out)


def _coerce(name: str, default: Any, value: Any) -> Any:
    if isinstance(default, tuple):
        return _ints(value, name)
    if isinstance(default, bool):
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
            return value.lower() in ("1", "true", "yes")
        if isinstance(value, bool):
            return value
        raise CommscopeError(f"option {name} must be true or false, got {value!r}")
    if isinstance(default, int):
        v = _ints(value, name)
        if len(v) != 1:
            raise CommscopeError(f"option {name} must be one positive integer, got {value!r}")
        return v[0]
    if isinstance(default, float):
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = math.nan
        if not math.isfinite(v) or v < 0:
            raise CommscopeError(f"option {name} must be a number >= 0, got {value!r}")
        return v
    return value


# ------------------------------------------------------------------------------------ entries
@dataclass(frozen=True)
class ModelEntry:
    """One model of the zoo (see the module docstring)."""

    name: str
    description: str
    build: Callable[..., Any]  # (**options) -> nn.Module
    batch: Callable[[int, Any, dict[str, Any]], Batch]  # (batch_size, generator, options) -> (inputs, targets)
    loss: Callable[[Any, Any], Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    requires: tuple[str, ...] = ()  # packages beyond torch
    dataset: str | None = None  # the generated data set it pairs with

    def available(self) -> bool:
        import importlib.util

        try:
            return all(importlib.util.find_spec(p) is not None for p in self.requires)
        except (ImportError, ValueError):
            return False

    def options(self, **given: Any) -> dict[str, Any]:
        """The defaults updated with ``given`` (converted to the defaults' types)."""
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise CommscopeError(f"model {self.name} has no option {', '.join(unknown)}; its options: "
                                 f"{', '.join(f'{k}={_text(v)}' for k, v in self.defaults.items()) or 'none'}")
        return {k: _coerce(k, d, given[k]) if k in given else d for k, d in self.defaults.items()}

    def builder(self, seed: int | None = None, **options: Any) -> Any:
        """A new model (train mode, CPU). With ``seed``, its initial weights depend on nothing else."""
        opts = self.options(**options)
        if seed is None:
            return self.build(**opts)
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(int(seed))
            return self.build(**opts)

    def example_batch(self, batch_size: int, generator: Any = None, **options: Any) -> Batch:
        """Synthetic ``(inputs, targets)`` on the CPU; the same for the same generator state (default: seed 0)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise CommscopeError(f"batch size must be a positive integer, got {batch_size!r}")
        gen = generator if generator is not None else torch.Generator().manual_seed(SEED)
        return self.batch(batch_size, gen, self.options(**options))

    def loss_fn(self, outputs: Any, targets: Any) -> Any:
        return self.loss(outputs, targets)


def _text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, tuple) else str(v)


MODELS: Registry[ModelEntry] = Registry("model")


def model(name: str) -> ModelEntry:
    """A model of the zoo by name (case-insensitive)."""
    return MODELS.get(name)


def models(available_only: bool = False) -> list[str]:
    """Names of the zoo's models (``available_only``: those whose packages are importable)."""
    return MODELS.names((lambda e: e.available()) if available_only else None)


def _logits(outputs: Any) -> Any:
    return outputs.logits if hasattr(outputs, "logits") else outputs  # transformers return ModelOutput


def classification_loss(outputs: Any, targets: Any) -> Any:
    """Mean cross-entropy; sequence outputs (B, T, V) are flattened against targets (B, T)."""
    logits = _logits(outputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
