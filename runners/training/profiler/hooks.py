"""Hook timing: clocks, the hooks that take timestamps, and the hooked and unhooked iterations measured.

Hooks take a timestamp at the start and end of every module that holds parameters directly
(forward pre and post hooks) and when each parameter's gradient has been accumulated
(``Tensor.register_post_accumulate_grad_hook``): ``time.perf_counter`` on the CPU (CPU kernels
finish before they return), CUDA events on a GPU (read after a synchronisation). The timestamps
partition the iteration, so nothing is left out (how they become per-layer times: :mod:`.build`).

Hooked and unhooked iterations alternate, after ``warmup`` of each; ``iterations`` of each are timed.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError
from costmodels.profiles import ModelProfile

from .build import _build
from .calibration import _calibrate
from .target import _call, _Target, _to


# ------------------------------------------------------------------------------------ clocks
class _CpuClock:
    """perf_counter timestamps; CPU kernels are synchronous, so a timestamp follows finished work."""

    timing = "time.perf_counter at each hook (CPU kernels are synchronous)"

    def __init__(self) -> None:
        self.mark = time.perf_counter

    def start(self) -> None:
        pass

    def seconds(self, marks: list[Any]) -> np.ndarray:
        return np.asarray(marks, dtype=float) - marks[0]


class _CudaClock:
    """CUDA events recorded on the current stream at each hook; read after synchronising the device."""

    timing = "CUDA events recorded at each hook on the current stream, read after torch.cuda.synchronize"

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device
        self.pool: list[Any] = []
        self.used = 0

    def start(self) -> None:
        self.torch.cuda.synchronize(self.device)  # nothing earlier runs into the timed iteration
        self.used = 0

    def mark(self) -> Any:
        if self.used == len(self.pool):
            self.pool.append(self.torch.cuda.Event(enable_timing=True))
        ev = self.pool[self.used]
        self.used += 1
        ev.record()
        return ev

    def seconds(self, marks: list[Any]) -> np.ndarray:
        self.torch.cuda.synchronize(self.device)
        return np.array([marks[0].elapsed_time(m) / 1e3 for m in marks])



# ------------------------------------------------------------------------------ the profiler
class _Hooks:
    """Forward pre/post hooks on modules holding parameters, gradient hooks on parameter tensors."""

    def __init__(self, modules: list[Any], params: list[Any], clock: Any) -> None:
        self.modules, self.params, self.clock = modules, params, clock
        self.fwd: list[tuple[int, bool, Any]] = []  # (module index, is_post, mark)
        self.bwd: list[tuple[int, Any]] = []  # (param index, mark)
        self.handles: list[Any] = []

    def install(self) -> None:
        fwd, bwd, mark = self.fwd, self.bwd, self.clock.mark
        for i, m in enumerate(self.modules):
            self.handles.append(m.register_forward_pre_hook(lambda *_, i=i: fwd.append((i, False, mark()))))
            self.handles.append(m.register_forward_hook(lambda *_, i=i: fwd.append((i, True, mark()))))
        for j, p in enumerate(self.params):
            self.handles.append(p.register_post_accumulate_grad_hook(lambda _, j=j: bwd.append((j, mark()))))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


def _measure(torch: Any, t: _Target, batch_size: int, dev: Any, warmup: int, iterations: int,
             correct: bool) -> ModelProfile:
    net = t.model.to(dev).train()
    x, y = _to(t.inputs, dev), _to(t.targets, dev)
    named = [(n, p) for n, p in net.named_parameters() if p.requires_grad]  # shared tensors once
    if not named:
        raise CommscopeError(f"model {t.name}: no trainable parameters to profile")
    index = {id(p): k for k, (_, p) in enumerate(named)}
    modules, direct = [], []  # modules holding trainable parameters directly, and those tensors' indices
    for _, m in net.named_modules():
        mine = [index[id(p)] for p in m.parameters(recurse=False) if id(p) in index]
        if mine:
            modules.append(m)
            direct.append(mine)
    clock = _CudaClock(torch, dev) if dev.type == "cuda" else _CpuClock()
    hooks = _Hooks(modules, [p for _, p in named], clock)

    def iteration(hooked: bool) -> tuple[list[Any], list[tuple[int, bool, Any]], list[tuple[int, Any]]]:
        net.zero_grad(set_to_none=True)
        hooks.fwd.clear()
        hooks.bwd.clear()
        if hooked:
            hooks.install()
        try:
            clock.start()
            t0 = clock.mark()
            loss = t.loss_fn(_call(net, x), y)
            t1 = clock.mark()
            loss.backward()
            t2 = clock.mark()
        finally:
            hooks.remove()
        return [t0, t1, t2], list(hooks.fwd), list(hooks.bwd)

    hooked_runs: list[Any] = []
    plain: list[np.ndarray] = []
    gc_enabled = gc.isenabled()
    gc.collect()
    gc.disable()  # no collection pauses inside timed iterations (autograd graphs are freed by reference counting)
    cuda = dev.type == "cuda"
    try:  # on a GPU, events and kernels go to dev's current stream; dropout leaves the caller's RNG alone
        with torch.cuda.device(dev) if cuda else contextlib.nullcontext(), \
                torch.random.fork_rng(devices=[dev] if cuda else []):
            for _ in range(warmup):
                iteration(True)
                iteration(False)
            for i in range(iterations):
                for h in ((True, False) if i % 2 == 0 else (False, True)):  # alternate which goes first
                    marks, fwd, bwd = iteration(h)
                    sec = clock.seconds(marks + [m for *_, m in fwd] + [m for _, m in bwd])
                    if not h:
                        plain.append(sec[:3])
                        continue
                    fwd_s, bwd_s = sec[3:3 + len(fwd)], sec[3 + len(fwd):]
                    hooked_runs.append((sec[:3], [(k, post, s) for (k, post, _), s in zip(fwd, fwd_s, strict=True)],
                                        [(j, s) for (j, _), s in zip(bwd, bwd_s, strict=True)]))
    finally:
        if gc_enabled:
            gc.enable()
    hook_costs = _calibrate(torch) if dev.type == "cpu" else None
    return _build(torch, t, batch_size, dev, named, direct, hooked_runs, plain, warmup, iterations, correct,
                  clock.timing, hook_costs)
