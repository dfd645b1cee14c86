"""A ``ModelProfile`` from a Kineto trace: the layers :mod:`.trace_steps` finds, with the median of each time
over the trace's training steps, and gradient bytes from the accumulated gradients' shapes and dtypes.

A layer is a module (``nn.Module: Linear_0`` calls, named by the chain of enclosing modules without the prefix
all layers share, e.g. ``Sequential_0.Linear_1``), a ``record_function`` scope, or a top-level op
(``aten::linear#1``), as :mod:`.trace_steps` says. Its ``params`` are the elements of its gradients, ``shape``
the gradient's shape where it has one tensor. The optimizer step (the median ``Optimizer.step#`` time) is spread
over the layers by parameters (``ModelProfile.with_optimizer``). ``batch_size`` is the leading dimension of the
first layer's first input unless given.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from costmodels.profiles import DTYPE_BYTES, OPTIMIZER_STREAMS, Layer, ModelProfile

from .common import FormatError
from .trace_steps import UNATTRIBUTED, Analysis, Key


def unit_names(keys: list[Key]) -> dict[Key, str]:
    """Layer names: each key's elements joined by '.', without the leading elements all keys share."""
    real = [k for k in keys if k != UNATTRIBUTED]
    cut = 0
    if len(real) == 1:
        cut = len(real[0]) - 1
    elif real:
        while all(len(k) > cut + 1 for k in real) and len({k[cut] for k in real}) == 1:
            cut += 1
    names = {k: ".".join(k[cut:]) for k in real}
    if UNATTRIBUTED in keys:
        names[UNATTRIBUTED] = UNATTRIBUTED[0]
    return names


def phases(analysis: Analysis) -> dict[str, float]:
    """Median forward, backward, optimizer and iteration seconds over the steps."""
    steps = analysis.steps
    return {"forward_s": statistics.median(sum(s.forward_s) for s in steps),
            "backward_s": statistics.median(sum(s.backward_s) for s in steps),
            "optimizer_s": statistics.median(s.optimizer_s for s in steps),
            "iteration_s": statistics.median(s.iteration_s for s in steps)}


def optimizer_of(trace: Any) -> dict[str, str]:
    """``{"optimizer": name}`` from the trace's ``Optimizer.step#<Class>.step`` scope where the class is one whose
    memory streams are known (:data:`costmodels.profiles.OPTIMIZER_STREAMS`: the profile's memory-pass cost is
    derived from its step), else nothing."""
    for e in trace.events:
        if e.name.startswith("Optimizer.step#"):
            kind = e.name[len("Optimizer.step#"):].split(".")[0].lower()
            return {"optimizer": kind} if kind in OPTIMIZER_STREAMS else {}
    return {}


def build(analysis: Analysis, name: str | None = None, batch_size: int | None = None) -> ModelProfile:
    """The profile of the trace's model (one worker's compute, as the schedules take it)."""
    trace, steps = analysis.trace, analysis.steps
    order: list[Key] = []
    for s in steps:
        order += [k for k in s.units if k not in order]
    names = unit_names(order)
    layers, dtype_bytes = [], Counter()
    for key in order:
        present = [(s, s.units.index(key)) for s in steps if key in s.units]
        grads = present[0][0].grads[key]
        shapes = [g.shape for g in grads]
        params = sum(math.prod(sh) for sh in shapes)
        for g in grads:
            dtype_bytes[g.dtype] += g.nbytes
        layers.append(Layer(name=names[key], params=params, grad_bytes=float(sum(g.nbytes for g in grads)),
                            forward_s=statistics.median(s.forward_s[i] for s, i in present),
                            backward_s=statistics.median(s.backward_s[i] for s, i in present),
                            shape=shapes[0] if len(shapes) == 1 and params > 0 else None))
    dtype = dtype_bytes.most_common(1)[0][0]
    if dtype not in DTYPE_BYTES:
        raise FormatError(f"{trace.path}: gradients are {dtype}; a profile takes {', '.join(DTYPE_BYTES)}")
    where = phases(analysis)
    timing = ("device time: kernels, copies and memsets (NCCL kernels excepted) launched in each layer's window"
              if analysis.on_device else "host time: each layer's window on the training thread")
    batch = batch_size or analysis.batch_size or 1
    stem = Path(trace.path).name.split(".")[0] or "trace"
    meta: dict[str, Any] = {
        "imported_from": trace.path, "format": "kineto", "steps": [s.label for s in steps],
        "skipped_steps": analysis.skipped, "timing": timing, "layers_are": steps[0].unit_kind,
        "phases": where, "host": trace.host, "distributed": trace.distributed or None,
        **optimizer_of(trace),
        "batch_size_from": ("given" if batch_size else "leading dimension of the first layer's first input"
                            if analysis.batch_size else "unknown (1 assumed; give --batch-size)"),
        "unlaunched_device_events": analysis.unlaunched_device_events,
    }
    device = trace.device_names[0] if analysis.on_device and trace.device_names else (
        "GPU" if analysis.on_device else f"CPU ({trace.host})")
    source = (f"IMPORTED from the PyTorch profiler trace {trace.path} (Kineto Chrome trace): per "
              f"{steps[0].unit_kind.rstrip('s')}, medians of {len(steps)} step(s); {timing}; parameter-free "
              "forward ops count towards the next layer, backward per layer from when its gradients were "
              "accumulated (runners/imports/trace_steps.py)")
    prof = ModelProfile(name=name or stem, layers=tuple(layers), device=device, dtype=dtype, batch_size=batch,
                        origin="measured", source=source, metadata=meta)
    return prof.with_optimizer(where["optimizer_s"]) if where["optimizer_s"] > 0 else prof
