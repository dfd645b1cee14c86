"""Building the profile: per-layer forward and backward times from the hooks' timestamps, and the
:class:`~costmodels.profiles.ModelProfile` with its metadata and source.

* forward: a module's time is from the previous module's end to its own end, so parameter-free
  operations (activations, pooling, attention softmax, residual adds) count towards the next
  module that holds parameters, and the loss towards the last one. The time goes to the module's
  first parameter tensor (its weight); its other tensors (bias) get 0, as in the shipped profiles.
  A module whose tensors all belong to an earlier module (a tied LM head) gives its time to the
  layer before it.
* backward: the schedules assume layer l's gradient is ready once layers l, l+1, ... have run
  their backward. With r_l the measured time from the start of backward until l's gradient is
  accumulated, R_l = max(r_l, r_{l+1}, ...) (R_0 = the whole backward) and backward_s_l =
  R_l - R_{l+1}; the sum over layers is the measured backward time.

Each per-layer time is the median over the hooked iterations. The profiler's overhead and its
correction: :mod:`.calibration`.
"""

from __future__ import annotations

import platform
import time
from collections import Counter
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError
from costmodels.profiles import DTYPE_BYTES, Layer, ModelProfile
from runners.results import cpu_name

from .calibration import _calls_per_position, describe_overhead
from .target import _Target, module_buffers


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    return v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v)


def _layer_order(named: list[tuple[str, Any]], direct: list[list[int]], first_fwd: list[tuple[int, bool, float]],
                 ) -> tuple[list[int], dict[int, int], list[int]]:
    """Tensors in forward order (by the first end of the module holding them), each module's layer
    position (where its forward time goes), and the tensors of modules that were never called."""
    order: list[int] = []
    owner: dict[int, int] = {}
    seen: set[int] = set()
    for i, post, _ in first_fwd:
        if not post or i in owner:
            continue
        new = [k for k in direct[i] if k not in seen]
        owner[i] = len(order) if new else max(len(order) - 1, 0)
        order += new
        seen.update(new)
    unused = [k for k in range(len(named)) if k not in seen]
    return order + unused, owner, unused


def _forward_split(run_fwd: list[tuple[int, bool, float]], owner: dict[int, int], n: int, t_forward: float,
                   ) -> tuple[np.ndarray, float, int]:
    """Forward seconds per layer position, the time inside hooked modules, and the number of hook calls."""
    out = np.zeros(n)
    prev, last, depth, entered, inside = 0.0, 0, 0, 0.0, 0.0
    for i, post, s in run_fwd:
        if not post:
            if depth == 0:
                entered = s
            depth += 1
            continue
        depth = max(depth - 1, 0)
        if depth == 0:
            inside += s - entered
        last = owner.get(i, last)
        out[last] += s - prev
        prev = s
    out[last] += max(t_forward - prev, 0.0)  # the loss and whatever follows the last module
    return out, inside, len(run_fwd)


def _backward_split(run_bwd: list[tuple[int, float]], position: dict[int, int], n: int, t_forward: float,
                    t_backward: float) -> tuple[np.ndarray, np.ndarray]:
    """Backward seconds per layer position (monotone envelope of gradient-ready times) and which fired."""
    ready = np.zeros(n)
    fired = np.zeros(n, dtype=bool)
    for j, s in run_bwd:
        pos = position[j]
        ready[pos] = max(ready[pos], s - t_forward)
        fired[pos] = True
    env = np.maximum.accumulate(ready[::-1])[::-1]  # R_l = max over l, l+1, ...
    env[0] = max(env[0], t_backward)
    return env - np.append(env[1:], 0.0), fired


def _build(torch: Any, t: _Target, batch_size: int, dev: Any, named: list[tuple[str, Any]], direct: list[list[int]],
           hooked_runs: list[Any], plain: list[np.ndarray], warmup: int, iterations: int, correct: bool,
           timing: str, hook_costs: tuple[float, float] | None) -> ModelProfile:
    order, owner, unused = _layer_order(named, direct, hooked_runs[0][1])
    n = len(order)
    position = {k: pos for pos, k in enumerate(order)}
    fwd_rows, bwd_rows, inside_rows, calls, grads = [], [], [], [], []
    fired_any = np.zeros(n, dtype=bool)
    for ends, run_fwd, run_bwd in hooked_runs:
        f, inside, c = _forward_split(run_fwd, owner, n, ends[1])
        b, fired = _backward_split(run_bwd, position, n, ends[1], ends[2] - ends[1])
        fwd_rows.append(f)
        bwd_rows.append(b)
        inside_rows.append(inside / ends[1] if ends[1] > 0 else 0.0)
        calls.append(c)
        grads.append(len(run_bwd))
        fired_any |= fired
    raw_fwd, raw_bwd = np.median(fwd_rows, axis=0), np.median(bwd_rows, axis=0)
    ends, plain_ends = np.array([e for e, *_ in hooked_runs]), np.array(plain)
    hooked_f, hooked_t = float(np.median(ends[:, 1])), float(np.median(ends[:, 2]))
    hooked_b = float(np.median(ends[:, 2] - ends[:, 1]))
    plain_f, plain_t = float(np.median(plain_ends[:, 1])), float(np.median(plain_ends[:, 2]))
    plain_b = float(np.median(plain_ends[:, 2] - plain_ends[:, 1]))
    if hook_costs is None:  # CUDA: what the hooks cost shows on the device timeline only when the host lags
        per_fwd_hook = max(hooked_f - plain_f, 0.0) / max(float(np.median(calls)), 1.0)
        per_bwd_hook = max(hooked_b - plain_b, 0.0) / max(float(np.median(grads)), 1.0)
    else:  # CPU: the hooks run on the timed thread; their cost is calibrated apart from the model's noise
        per_fwd_hook, per_bwd_hook = hook_costs
    fwd, bwd = raw_fwd, raw_bwd
    if correct:
        fwd = np.maximum(raw_fwd - per_fwd_hook * _calls_per_position(hooked_runs[0][1], owner, n), 0.0)
        bwd = np.maximum(raw_bwd - per_bwd_hook * fired_any, 0.0)
    layer_sum = float(raw_fwd.sum() + raw_bwd.sum())

    dtypes = Counter()
    layers = []
    for pos, k in enumerate(order):
        pname, p = named[k]
        dname = str(p.dtype).removeprefix("torch.")
        dtypes[dname] += p.numel()
        layers.append(Layer(pname, int(p.numel()), float(p.numel() * p.element_size()), float(fwd[pos]),
                            float(bwd[pos]), tuple(int(d) for d in p.shape)))
    dtype = dtypes.most_common(1)[0][0]
    if dtype not in DTYPE_BYTES:
        raise CommscopeError(f"model {t.name}: parameters are {dtype}; profiles hold {', '.join(DTYPE_BYTES)}")
    threads = torch.get_num_threads()
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name(dev)
    else:
        device_name = f"{cpu_name()} (CPU, {threads} thread{'s' if threads != 1 else ''})"
    overhead = {
        # what the brief of the profiler promises: the sum of per-layer medians against an unhooked iteration
        "layer_sum_s": layer_sum, "unhooked_iteration_s": plain_t, "overhead_s": layer_sum - plain_t,
        "overhead_fraction": (layer_sum - plain_t) / plain_t if plain_t > 0 else None,
        # like for like: median hooked iteration against median unhooked iteration (the hooks' own cost)
        "hooked_iteration_s": hooked_t, "hook_cost_s": hooked_t - plain_t,
        "hooked_forward_s": hooked_f, "hooked_backward_s": hooked_b,
        "unhooked_forward_s": plain_f, "unhooked_backward_s": plain_b,
        "layer_forward_sum_s": float(raw_fwd.sum()), "layer_backward_sum_s": float(raw_bwd.sum()),
        "per_forward_hook_s": per_fwd_hook, "per_backward_hook_s": per_bwd_hook,
        "per_hook_cost_from": ("calibrated: hooked vs plain calls of a tiny module and tiny gradients, min of 5"
                               if hook_costs is not None else "hooked minus unhooked median forward and backward, "
                               "per hook call"),
        "corrected": bool(correct), "reported_sum_s": float(fwd.sum() + bwd.sum()),
        "reported_vs_unhooked": float(fwd.sum() + bwd.sum()) / plain_t - 1 if plain_t > 0 else None,
    }
    spread = {"hooked_iteration_p10_s": float(np.percentile(ends[:, 2], 10)),
              "hooked_iteration_p90_s": float(np.percentile(ends[:, 2], 90)),
              "unhooked_iteration_p10_s": float(np.percentile(plain_ends[:, 2], 10)),
              "unhooked_iteration_p90_s": float(np.percentile(plain_ends[:, 2], 90))}
    x = t.inputs
    meta: dict[str, Any] = {
        "profiler": "runners.training.profiler", "batch_size": batch_size, "device": str(dev),
        "device_name": device_name,
        "threads": threads, "interop_threads": torch.get_num_interop_threads(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(), "host": platform.node(),
        "warmup": warmup, "iterations": iterations, "timing": timing,
        "options": {k: _jsonable(v) for k, v in t.options.items()},
        "input_shape": list(x.shape) if hasattr(x, "shape") else None,
        "overhead": overhead, "spread": spread,
        "forward_inside_modules_fraction": float(np.median(inside_rows)),
        "modules_with_parameters": len(direct),
        # tensors of modules that were never called (listed last, no forward time) and tensors without a gradient
        "not_called_in_forward": [named[k][0] for k in unused],
        "no_gradient": [named[k][0] for pos, k in enumerate(order) if not fired_any[pos]],
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "buffers": module_buffers(t.model),
    }
    if dev.type == "cpu":
        meta["note"] = (f"measured alone with {threads} thread(s); ranks sharing this host's cores compute "
                        "more slowly than this")
    source = (
        f"MEASURED by the layer-wise profiler (runners.training.profiler, torch {torch.__version__}) on {device_name}, "
        f"batch {batch_size}: {timing}; per parameter tensor, medians of {iterations} iterations after {warmup} "
        f"warm-up; parameter-free operations count towards the next module with parameters; backward per "
        f"tensor from gradient-accumulated times. {describe_overhead(overhead, iterations)}"
    )
    return ModelProfile(name=t.name, layers=tuple(layers), device=device_name, dtype=dtype, batch_size=batch_size,
                        origin="measured", source=source, metadata=meta)
