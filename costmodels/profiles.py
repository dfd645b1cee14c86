"""Model profiles: per-layer forward time, backward time and gradient bytes, in execution order.

A :class:`ModelProfile` is what the iteration schedules consume (WFBP, tensor fusion, MG-WFBP,
DeAR, ...). A layer here is one parameter tensor (or a module), listed in forward order; backward
produces gradients in the reverse order. Profiles are measured by the layer-wise profiler
(``commscope profile``) or estimated from per-layer FLOPs and a stated device throughput; the
``origin`` field says which. Shipped reference profiles live in ``costmodels/data/profiles``.

The optimizer step (issue 16) is optional: each layer's ``optimizer_s`` (the time to update its
parameters), or a profile total distributed over the layers by their parameters
(:meth:`ModelProfile.with_optimizer`, or ``"optimizer_s"`` at the top of the JSON); 0 when absent, so
profiles written before it load unchanged. The schedules place it where each technique runs it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from ._io import atomic_write_text, read_json
from .errors import CommscopeError, UnknownNameError

SCHEMA = "commscope.model_profile/1"
ORIGINS = ("measured", "estimated")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _nonneg(where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommscopeError(f"{where}: {name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise CommscopeError(f"{where}: {name} must be finite and >= 0, got {value!r}")
    return v


@dataclass(frozen=True)
class Layer:
    """One parameter tensor (or module) of a model.

    Attributes:
        name: e.g. ``"layer1.0.conv1.weight"``.
        params: number of parameters.
        grad_bytes: bytes of its gradient on the wire before compression.
        forward_s, backward_s: compute time attributed to it in one iteration (seconds).
        shape: the tensor's shape when known (its product is ``params``); compressors that
            factorise a gradient as a matrix (PowerSGD) use it.
        optimizer_s: time of the optimizer step on its parameters (seconds, default 0).
    """

    name: str
    params: int
    grad_bytes: float
    forward_s: float
    backward_s: float
    shape: tuple[int, ...] | None = None
    optimizer_s: float = 0.0

    def __post_init__(self) -> None:
        where = f"layer {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise CommscopeError(f"a layer needs a non-empty name, got {self.name!r}")
        if isinstance(self.params, bool) or not isinstance(self.params, int) or self.params < 0:
            raise CommscopeError(f"{where}: params must be an integer >= 0, got {self.params!r}")
        for f in ("grad_bytes", "forward_s", "backward_s", "optimizer_s"):
            object.__setattr__(self, f, _nonneg(where, f, getattr(self, f)))
        if self.shape is not None:
            dims = self.shape
            if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence) or not all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
                raise CommscopeError(f"{where}: shape must be a list of positive integers, got {dims!r}")
            if math.prod(dims) != self.params:
                raise CommscopeError(f"{where}: shape {list(dims)} holds {math.prod(dims)} values, "
                                     f"but params is {self.params}")
            object.__setattr__(self, "shape", tuple(dims))


OPTIMIZER_STREAMS = {"sgd": 3, "momentum": 5, "adam": 7, "adamw": 7}
"""Bytes streamed per gradient byte by an optimizer step (derived here, fp32 state of the gradient's size):
SGD reads p and g and writes p (3); SGD with momentum also reads and writes its buffer (5); Adam(W) reads p,
g, m, v and writes p, m, v (7)."""


CODEC_FIELDS = ("encode_s", "decode_s", "ranks")
"""What ``metadata['codecs']`` holds per compressor (keyed by :func:`costmodels.compression.codec_key`): the
measured seconds to encode the whole model's gradients and to decode what ``ranks`` ranks sent (a runner's own
encoder and decoder on this device; see :meth:`costmodels.schedules.core.compress`)."""


def _check_codecs(where: str, codecs: object) -> None:
    """``metadata['codecs']``: {compressor: {encode_s, decode_s >= 0 seconds, ranks: integer >= 1}} or absent."""
    if codecs is None:
        return
    if not isinstance(codecs, Mapping):
        raise CommscopeError(f"{where}: metadata codecs must be an object (compressor: timings), got {codecs!r}")
    for spec, entry in codecs.items():
        if not isinstance(entry, Mapping) or any(k not in entry for k in CODEC_FIELDS):
            raise CommscopeError(f"{where}: metadata codecs[{spec!r}] needs {', '.join(CODEC_FIELDS)}, got {entry!r}")
        for key in ("encode_s", "decode_s"):
            v = entry[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise CommscopeError(f"{where}: metadata codecs[{spec!r}].{key} must be a finite number of seconds "
                                     f">= 0, got {v!r}")
        r = entry["ranks"]
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise CommscopeError(f"{where}: metadata codecs[{spec!r}].ranks must be an integer >= 1, got {r!r}")


def _check_buffers(where: str, buffers: object) -> None:
    """``metadata['buffers']``: {dtype name: bytes >= 0} of the module's buffers (BatchNorm's running statistics and
    counters), or absent."""
    if buffers is None:
        return
    if not isinstance(buffers, Mapping):
        raise CommscopeError(f"{where}: metadata buffers must be an object (dtype: bytes), got {buffers!r}")
    for dtype, v in buffers.items():
        if (not isinstance(dtype, str) or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or v < 0):
            raise CommscopeError(f"{where}: metadata buffers[{dtype!r}] must be a finite number of bytes >= 0, got "
                                 f"{v!r}")


@dataclass(frozen=True)
class ModelProfile:
    """Layers of a model in forward execution order, with where the numbers came from.

    Attributes:
        name: model name (``"resnet50"``).
        layers: :class:`Layer` objects in forward order.
        device: the device the timings belong to (``"NVIDIA V100-SXM2-32GB"``).
        dtype: dtype of the gradients (``"float32"``).
        batch_size: per-worker batch size of the timings.
        origin: ``"measured"`` (by the profiler) or ``"estimated"`` (from FLOPs).
        source: how the numbers were obtained (device throughput assumed, profiler overhead, ...).
        metadata: free JSON-able details (input shape, sequence length, FLOPs, ...).
    """

    name: str
    layers: tuple[Layer, ...]
    device: str
    dtype: str
    batch_size: int
    origin: str
    source: str
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = f"profile {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise CommscopeError(f"a profile needs a non-empty name, got {self.name!r}")
        layers = tuple(self.layers)
        if not layers:
            raise CommscopeError(f"{where}: needs at least one layer")
        if not all(isinstance(x, Layer) for x in layers):
            raise CommscopeError(f"{where}: layers must be Layer objects")
        names = [x.name for x in layers]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise CommscopeError(f"{where}: layer name {dup!r} appears twice")
        object.__setattr__(self, "layers", layers)
        for key in ("device", "dtype", "origin", "source"):
            if not isinstance(getattr(self, key), str):
                raise CommscopeError(f"{where}: {key} must be a string, got {getattr(self, key)!r}")
        if self.dtype not in DTYPE_BYTES:
            raise CommscopeError(f"{where}: dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise CommscopeError(f"{where}: batch_size must be a positive integer, got {self.batch_size!r}")
        if self.origin not in ORIGINS:
            raise CommscopeError(f"{where}: origin must be one of {', '.join(ORIGINS)}, got {self.origin!r}")
        if not isinstance(self.metadata, Mapping):
            raise CommscopeError(f"{where}: metadata must be an object (name: value), got {self.metadata!r}")
        object.__setattr__(self, "metadata", dict(self.metadata))
        measured = self.metadata.get("pass_s_per_byte")
        if measured is not None and (isinstance(measured, bool) or not isinstance(measured, (int, float))
                                     or not math.isfinite(measured) or measured < 0):
            raise CommscopeError(f"{where}: metadata pass_s_per_byte must be a finite number >= 0 (seconds per "
                                 f"gradient byte of one memory pass), got {measured!r}")
        _check_codecs(where, self.metadata.get("codecs"))
        _check_buffers(where, self.metadata.get("buffers"))

    # ----------------------------------------------------------------- totals
    @property
    def params(self) -> int:
        return sum(x.params for x in self.layers)

    @property
    def grad_bytes(self) -> float:
        return sum(x.grad_bytes for x in self.layers)

    @property
    def forward_s(self) -> float:
        return sum(x.forward_s for x in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(x.backward_s for x in self.layers)

    @property
    def buffer_bytes(self) -> dict[str, float]:
        """Bytes of the module's buffers by dtype (``metadata['buffers']``; empty where the profile does not say):
        what PyTorch DDP broadcasts from rank 0 before every forward (``broadcast_buffers``)."""
        return {k: float(v) for k, v in (self.metadata.get("buffers") or {}).items() if v > 0}

    @property
    def compute_s(self) -> float:
        """Forward plus backward time of one iteration on one worker."""
        return self.forward_s + self.backward_s

    @property
    def optimizer_s(self) -> float:
        """Time of the whole optimizer step on one worker (0 when the profile does not say)."""
        return sum(x.optimizer_s for x in self.layers)

    @property
    def pass_s_per_byte(self) -> float:
        """Seconds per gradient byte of one memory pass (every byte read and written once: a copy, or a scaling
        in place), the work of the gradient copies and the averaging the techniques run around their messages.

        Measured where ``metadata['pass_s_per_byte']`` gives it. Otherwise derived here from the optimizer
        step U, which streams the gradient bytes S times (:data:`OPTIMIZER_STREAMS`: plain SGD, p -= lr g,
        reads p and g and writes p, S = 3) where a pass streams them twice: both memory-bound, a pass takes
        2 U / (S x gradient bytes) per byte. ``metadata['optimizer']`` names the step (default ``sgd``).
        0 where the profile has no optimizer step or no gradient bytes.
        """
        measured = self.metadata.get("pass_s_per_byte")
        if measured is not None:  # checked when the profile was made
            return float(measured)
        streams = OPTIMIZER_STREAMS.get(str(self.metadata.get("optimizer", "sgd")).lower(), OPTIMIZER_STREAMS["sgd"])
        return 2.0 * self.optimizer_s / (streams * self.grad_bytes) if self.grad_bytes > 0 else 0.0

    def __len__(self) -> int:
        return len(self.layers)

    def column(self, attribute: str) -> list[float]:
        """One attribute of every layer, in forward order."""
        return [getattr(x, attribute) for x in self.layers]

    # ------------------------------------------------------------- transforms
    def rescaled(self, total_iteration_time: float) -> ModelProfile:
        """Same model on another device: every forward and backward time scaled by one factor so
        that forward + backward equals ``total_iteration_time``; per-layer proportions are kept."""
        t = _nonneg(f"profile {self.name!r}", "total_iteration_time", total_iteration_time)
        if t <= 0:
            raise CommscopeError(f"total_iteration_time must be > 0, got {total_iteration_time!r}")
        if self.compute_s <= 0:
            raise CommscopeError(f"profile {self.name!r} has no compute time to rescale")
        k = t / self.compute_s
        layers = tuple(replace(x, forward_s=x.forward_s * k, backward_s=x.backward_s * k) for x in self.layers)
        meta = {**self.metadata, "rescaled_from_compute_s": self.compute_s}
        return replace(self, layers=layers, source=f"{self.source}; rescaled by {k:.6g} to {t:.6g} s",
                       metadata=meta)

    def with_optimizer(self, total_s: float) -> ModelProfile:
        """The same profile with an optimizer step of ``total_s`` seconds, distributed over the layers in
        proportion to their parameters (evenly when no layer has any)."""
        t = _nonneg(f"profile {self.name!r}", "optimizer_s", total_s)
        weights = [float(x.params) for x in self.layers] if self.params else [1.0] * len(self)
        total = sum(weights)
        return replace(self, layers=tuple(replace(x, optimizer_s=t * w / total) for x, w in zip(self.layers, weights,
                                                                                               strict=True)))

    # ------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        step = any(x.optimizer_s for x in self.layers)  # the column only when there is an optimizer step
        return {
            "schema": SCHEMA, "name": self.name, "device": self.device, "dtype": self.dtype,
            "batch_size": self.batch_size, "origin": self.origin, "source": self.source,
            "metadata": dict(self.metadata),
            "columns": ["name", "params", "grad_bytes", "forward_s", "backward_s", "shape"] + ["optimizer_s"] * step,
            "layers": [[x.name, x.params, x.grad_bytes, x.forward_s, x.backward_s,
                        None if x.shape is None else list(x.shape)] + [x.optimizer_s] * step for x in self.layers],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelProfile:
        if not isinstance(data, Mapping):
            raise CommscopeError(f"a model profile must be a JSON object, got {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise CommscopeError(f"unsupported model profile schema {data.get('schema')!r}; expected {SCHEMA!r}")
        required = ("name", "device", "dtype", "batch_size", "origin", "source", "columns", "layers")
        missing = [k for k in required if k not in data]
        if missing:
            raise CommscopeError(f"model profile is missing field(s): {', '.join(missing)}")
        columns, rows = data["columns"], data["layers"]
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise CommscopeError(f"model profile columns must be a list of column names, got {columns!r}")
        if not isinstance(rows, list):
            raise CommscopeError(f"model profile layers must be a list of rows, one per layer, got {rows!r}")
        need = ["name", "params", "grad_bytes", "forward_s", "backward_s"]
        if sorted(set(columns) - {"shape", "optimizer_s"}) != sorted(need) or len(set(columns)) != len(columns):
            raise CommscopeError(f"model profile columns must be {need} and optionally 'shape' and 'optimizer_s', "
                                 f"got {columns}")
        if "optimizer_s" in columns and "optimizer_s" in data:
            raise CommscopeError("give the optimizer step per layer (column 'optimizer_s') or as a profile total "
                                 "('optimizer_s' field), not both")
        layers = []
        for i, row in enumerate(rows):
            if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != len(columns):
                raise CommscopeError(f"layer {i}: expected a list of {len(columns)} values, got {row!r}")
            layers.append(Layer(**dict(zip(columns, row, strict=True))))
        prof = cls(name=data["name"], layers=tuple(layers), device=data["device"], dtype=data["dtype"],
                   batch_size=data["batch_size"], origin=data["origin"], source=data["source"],
                   metadata=data.get("metadata", {}))
        return prof.with_optimizer(data["optimizer_s"]) if "optimizer_s" in data else prof

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write JSON atomically (temporary file + rename): a failure leaves any old file intact."""
        return atomic_write_text(path, json.dumps(self.to_dict(), allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelProfile:
        data = read_json(path, "model profile")
        try:
            return cls.from_dict(data)
        except CommscopeError as exc:
            raise CommscopeError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------- shipped profiles
_PACKAGE_DATA = "costmodels.data.profiles"


def _shipped_files() -> dict[str, Any]:
    return {p.name[: -len(".json")]: p for p in resources.files(_PACKAGE_DATA).iterdir()
            if p.name.endswith(".json")}


def profiles() -> list[str]:
    """Names of the shipped reference profiles."""
    return sorted(_shipped_files())


@cache
def _load_shipped(name: str) -> ModelProfile:
    return ModelProfile.from_dict(json.loads(_shipped_files()[name].read_text(encoding="utf-8")))


def profile(name: str) -> ModelProfile:
    """A shipped reference profile by name (``cm.profiles()`` lists them)."""
    files = _shipped_files()
    key = name.lower() if isinstance(name, str) else name
    if key not in files:
        raise UnknownNameError("model profile", name, files)
    return _load_shipped(key)


def load_profile(path: str | os.PathLike[str]) -> ModelProfile:
    """A model profile from a JSON file (as written by ``ModelProfile.save`` or the profiler)."""
    return ModelProfile.load(path)

