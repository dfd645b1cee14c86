"""What the profiler's hooks cost, and how it is reported and taken off.

The profiler's overhead is the sum of the per-layer medians minus the median unhooked iteration
(forward + loss + backward), stored in the profile's metadata and source. With ``correct_overhead``
(default) the hooks' cost is subtracted per hook call, equally (forward and backward separately; no
time below 0), so reported times are of an unhooked iteration. On a CPU that cost per call is
calibrated on a tiny module (:func:`_calibrate`); on a GPU it is the hooked minus the unhooked median.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np


def _calibrate(torch: Any, calls: int = 200, repeats: int = 5) -> tuple[float, float]:
    """Seconds one forward hook call and one gradient hook add on this host's CPU, from a tiny module
    called with and without the profiler's kind of hooks (minimum of ``repeats``: the least disturbed)."""
    lin = torch.nn.Linear(2, 2)
    x = torch.randn(1, 2)
    params = [torch.nn.Parameter(torch.ones(1)) for _ in range(calls)]
    sink: list[Any] = []
    mark = time.perf_counter

    def forward(hooked: bool) -> float:
        handles = [lin.register_forward_pre_hook(lambda *_: sink.append((0, False, mark()))),
                   lin.register_forward_hook(lambda *_: sink.append((0, True, mark())))] if hooked else []
        with torch.no_grad():
            t0 = mark()
            for _ in range(calls):
                lin(x)
            t = mark() - t0
        for h in handles:
            h.remove()
        return t

    def backward(hooked: bool) -> float:
        handles = [p.register_post_accumulate_grad_hook(lambda _, j=j: sink.append((j, mark())))
                   for j, p in enumerate(params)] if hooked else []
        for p in params:
            p.grad = None
        loss = torch.stack(params).sum()
        t0 = mark()
        loss.backward()
        t = mark() - t0
        for h in handles:
            h.remove()
        return t

    fwd = min(forward(True) for _ in range(repeats)) - min(forward(False) for _ in range(repeats))
    bwd = min(backward(True) for _ in range(repeats)) - min(backward(False) for _ in range(repeats))
    return max(fwd, 0.0) / (2 * calls), max(bwd, 0.0) / calls


def describe_overhead(o: Mapping[str, Any], iterations: int | None = None) -> str:
    """One line about the profiler's overhead, from a profile's ``metadata["overhead"]``."""
    frac = o.get("overhead_fraction")
    share = "n/a" if frac is None else f"{frac:+.1%}"
    of = f" (median of {iterations})" if iterations else ""
    text = (f"Profiler overhead: per-layer medians sum to {o['layer_sum_s'] * 1e3:.3f} ms vs "
            f"{o['unhooked_iteration_s'] * 1e3:.3f} ms for an unhooked iteration{of}: {share}; hooked iteration "
            f"{o['hooked_iteration_s'] * 1e3:.3f} ms (hooks cost {o['hook_cost_s'] * 1e3:+.3f} ms)")
    if o.get("corrected"):
        rest = o.get("reported_vs_unhooked")
        return (text + f"; reported times have {o['per_forward_hook_s'] * 1e6:.2f} us per forward hook call and "
                f"{o['per_backward_hook_s'] * 1e6:.2f} us per gradient hook subtracted: they sum to "
                f"{o['reported_sum_s'] * 1e3:.3f} ms ({'n/a' if rest is None else f'{rest:+.1%}'} vs unhooked).")
    return text + "; reported times are the raw per-layer medians."


def _calls_per_position(run_fwd: list[tuple[int, bool, float]], owner: dict[int, int], n: int) -> np.ndarray:
    """Hook calls (pre and post) whose cost lands in each layer position's forward time."""
    out = np.zeros(n)
    last = 0
    pending = 0
    for i, post, _ in run_fwd:
        pending += 1
        if post:
            last = owner.get(i, last)
            out[last] += pending
            pending = 0
    out[last] += pending
    return out
