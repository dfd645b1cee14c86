"""The training steps of a Kineto trace: phases, the layers that own gradients, and each layer's time.

Per step (a ``ProfilerStep#N`` scope on the training thread; without them, the trace cut after each
``Optimizer.step#`` scope, or the whole trace):

- **backward** runs from the first to the last top-level ``autograd::engine::evaluate_function: X`` event (on
  any thread of the training process: on GPUs autograd runs on a device thread); **forward** from the first
  module call, ``*.forward`` scope or autograd-recorded op of the step to the start of backward (so the loss
  counts to forward, as in ``commscope profile``); the **optimizer step** is the ``Optimizer.step#...`` scope.
- **units** (the layers of the profile): each forward op that autograd records carries a ``Sequence number``;
  a backward function's ``evaluate_function`` event carries the number of the forward op that created it
  (PyTorch profiler docs, "sequence number"). Ops that create no node show the number the next node will get,
  so the creator is the last forward op that shows it. A gradient is the ``torch::autograd::AccumulateGrad``
  event after a backward function (its ``Input Dims`` and ``Input type``, with ``record_shapes``, give its
  shape and dtype), so it belongs to that function's forward op, and the op to its unit: the innermost module
  call enclosing it (``nn.Module: ...`` events, which ``with_stack=True`` writes), else the innermost
  ``record_function`` scope that does not enclose the whole forward (torch's ``*.forward`` wrapper scopes
  excepted), else the top-level op itself (``aten::linear#0``). Units with gradients are the layers, in the
  order their forward first ran.
- **windows**, as ``commscope profile`` splits time (runners/training/profiler/build.py): forward ops without
  parameters count towards the next layer (a layer's forward window ends where its unit's forward ends; the
  last one runs to the start of backward, loss included); layer l's backward window ends when the last of
  layers l, l+1, ... has accumulated its gradients (gradients are ready in reverse order), layer 0's at the
  end of backward.
- **times**: on the host (a CPU trace), each window's length; with device activity (a GPU trace), the
  durations of the kernels, copies and memsets (NCCL kernels excepted) whose launch (``cudaLaunchKernel``,
  matched by ``correlation``) falls in the window. The optimizer step likewise.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field

from .common import FormatError, dtype_of
from .kineto import ACCUMULATE, DEVICE_CATS, EVALUATE, MODULE_PREFIX, STEP_PREFIX, Ev, Trace, main_thread

UNATTRIBUTED = ("(unattributed)",)
Key = tuple[str, ...]


def is_comm_kernel(e: Ev) -> bool:
    """Whether a device event is a collective's kernel (NCCL / RCCL names, or Kineto's collective args)."""
    return e.name.lower().startswith(("nccl", "rccl")) or "Collective name" in e.args


@dataclass
class Grad:
    """One accumulated gradient: its layer, shape, dtype name, bytes and when accumulation ended (us)."""

    unit: Key
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    done: float


@dataclass
class Step:
    """One training step: its window, phases (us), layers in forward order with their windows and times (s)."""

    label: str
    start: float
    end: float
    fwd_start: float
    bwd_start: float
    bwd_end: float
    optimizer: tuple[float, float] | None
    units: list[Key]
    grads: dict[Key, list[Grad]]
    forward_windows: list[tuple[float, float]]
    backward_windows: list[tuple[float, float]]
    forward_s: list[float] = field(default_factory=list)
    backward_s: list[float] = field(default_factory=list)
    optimizer_s: float = 0.0
    iteration_s: float = 0.0
    first_op: Ev | None = None  # the first op of the first layer: its input's leading dimension is the batch
    unit_kind: str = ""


@dataclass
class Analysis:
    """The steps of a trace, the steps skipped (and why), the training thread and how time was measured."""

    trace: Trace
    steps: list[Step]
    skipped: list[str]
    thread: tuple[Hashable, Hashable]
    on_device: bool
    batch_size: int | None = None
    unlaunched_device_events: int = 0


def _top_level(evals: list[Ev]) -> list[Ev]:
    return [e for e in evals if not any(a.name.startswith(EVALUATE) for a in e.ancestors())]


class _Units:
    """The unit (layer key) and forward interval of each forward op of one step."""

    def __init__(self, main_events: list[Ev], lo: float, hi: float, fwd_ops: list[Ev]) -> None:
        region = [e for e in main_events if lo <= e.ts < hi]
        self.modules = [e for e in region if e.cat == "python_function" and e.name.startswith(MODULE_PREFIX)]
        self.intervals: dict[Key, list[float]] = {}
        self._key: dict[int, Key] = {}  # event index -> unit key, for module calls, scopes and top-level ops
        self._cache: dict[int, Key] = {}
        if self.modules:
            for m in self.modules:  # a module's key is its chain of enclosing modules; calls of one key share it
                chain = [m] + [a for a in m.ancestors() if a.name.startswith(MODULE_PREFIX)]
                self._key[m.index] = self._add(tuple(c.name[len(MODULE_PREFIX):] for c in reversed(chain)), m)
        else:
            first = min((e.ts for e in fwd_ops), default=hi)
            last = max((e.end for e in fwd_ops), default=lo)
            for e in region:
                if e.cat == "user_annotation" and not e.name.startswith((STEP_PREFIX, "Optimizer.")) and not (
                        e.name.endswith(".forward") or (e.ts <= first + 1e-3 and e.end >= last - 1e-3)):
                    # torch's wrapper scopes (DistributedDataParallel.forward) and scopes around the whole forward
                    # are no units
                    self._key[e.index] = self._add((e.name,), e)
        self.kind = "module calls" if self.modules else "record_function scopes" if self._key else "top-level ops"
        seen: dict[str, int] = defaultdict(int)
        self._top: dict[int, Key] = {}
        for e in region:
            if e.cat == "cpu_op" and not any(a.cat == "cpu_op" for a in e.ancestors()):
                self._top[e.index] = (f"{e.name}#{seen[e.name]}",)
                seen[e.name] += 1

    def _add(self, key: Key, e: Ev) -> Key:
        span = self.intervals.setdefault(key, [e.ts, e.end])
        span[0], span[1] = min(span[0], e.ts), max(span[1], e.end)
        return key

    def of(self, op: Ev) -> Key:
        """The innermost module call (or scope) enclosing ``op``, else its top-level op."""
        if op.index not in self._cache:
            chain = [op, *op.ancestors()]
            inner = next((a for a in chain if a.index in self._key), None)
            if inner is not None:
                self._cache[op.index] = self._key[inner.index]
            else:
                top = next((a for a in reversed(chain) if a.index in self._top), None)
                self._cache[op.index] = UNATTRIBUTED if top is None else self._add(self._top[top.index], top)
        return self._cache[op.index]


def _grad(e: Ev, thread_events: list[Ev], pos: int, unit: Key, where: str) -> Grad:
    child = None
    for j in range(pos + 1, len(thread_events)):
        if thread_events[j].ts > e.end:
            break
        if thread_events[j].name == ACCUMULATE:
            child = thread_events[j]
            break
    dims = child.args.get("Input Dims") if child is not None else None
    types = child.args.get("Input type") if child is not None else None
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types):
        raise FormatError(f"{where}: gradients have no shapes (AccumulateGrad without 'Input Dims'); record the "
                          "trace with torch.profiler(record_shapes=True)")
    shape = tuple(int(d) for d in dims[0])
    dt = dtype_of(str(types[0]))
    if dt is None:
        raise FormatError(f"{where}: gradient of unknown element type {types[0]!r}")
    return Grad(unit, shape, dt[0], math.prod(shape) * dt[1], e.end)


def _windows(step_units: list[Key], units: _Units, grads: dict[Key, list[Grad]], fwd_start: float,
             bwd_start: float, bwd_end: float) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    fwd, prev = [], fwd_start
    for i, key in enumerate(step_units):
        end = bwd_start if i == len(step_units) - 1 else units.intervals.get(key, [prev, prev])[1]
        end = min(max(end, prev), bwd_start)
        fwd.append((prev, end))
        prev = end
    ready = [max(g.done for g in grads[k]) for k in step_units]
    bwd: list[tuple[float, float]] = [(0.0, 0.0)] * len(step_units)
    hi_next = bwd_start
    for i in range(len(step_units) - 1, -1, -1):
        hi = max(ready[i], hi_next)
        if i == 0:
            hi = max(hi, bwd_end)
        bwd[i] = (hi_next, hi)
        hi_next = hi
    return fwd, bwd


def _step(trace: Trace, main: tuple[Hashable, Hashable], label: str, s0: float, s1: float, real: bool,
          skipped: list[str]) -> Step | None:
    pid = main[0]
    where = f"{trace.path}: step {label}"
    evals: list[Ev] = []
    for thread, evs in trace.by_thread.items():
        if thread[0] == pid:
            evals += _top_level([e for e in evs if e.name.startswith(EVALUATE) and s0 <= e.ts < s1])
    if not evals:
        skipped.append(f"step {label}: no backward pass (autograd::engine::evaluate_function events)")
        return None
    bwd_start, bwd_end = min(e.ts for e in evals), max(e.end for e in evals)
    main_events = trace.thread_events(main)
    fwd_ops = [e for e in main_events if e.cat == "cpu_op" and "Sequence number" in e.args and s0 <= e.ts < bwd_start
               and not e.name.startswith(EVALUATE)]
    if not fwd_ops:
        skipped.append(f"step {label}: no forward ops recorded by autograd before backward")
        return None
    seq: dict[object, Ev] = {}
    for e in sorted(fwd_ops, key=lambda x: x.ts):  # ops show the next number until one creates a node with it:
        seq[e.args["Sequence number"]] = e  # the creator is the last op that shows it
    units = _Units(main_events, s0, bwd_start, fwd_ops)
    grads: dict[Key, list[Grad]] = defaultdict(list)
    for thread in sorted({e.thread for e in evals}, key=str):
        evs = trace.thread_events(thread)
        pos = {e.index: i for i, e in enumerate(evs)}
        last: Key | None = None
        for e in sorted((x for x in evals if x.thread == thread), key=lambda x: x.ts):
            if e.name.endswith("AccumulateGrad"):
                g = _grad(e, evs, pos[e.index], last or UNATTRIBUTED, where)
                grads[g.unit].append(g)
            elif "Sequence number" in e.args:
                op = seq.get(e.args["Sequence number"])
                last = units.of(op) if op is not None else None
    if not grads:
        skipped.append(f"step {label}: no gradients accumulated (torch::autograd::AccumulateGrad)")
        return None
    order = sorted(grads, key=lambda k: (k == UNATTRIBUTED, units.intervals.get(k, [math.inf])[0]))
    wrappers = [e for e in main_events if e.cat == "user_annotation" and e.name.endswith(".forward")]
    starts = [e.ts for e in (*units.modules, *fwd_ops, *wrappers) if s0 <= e.ts < bwd_start]
    fwd_start = min(starts)
    fwd_w, bwd_w = _windows(order, units, grads, fwd_start, bwd_start, bwd_end)
    opt = next(((e.ts, e.end) for e in main_events if e.name.startswith("Optimizer.step#") and s0 <= e.ts < s1), None)
    step = Step(label, s0, s1, fwd_start, bwd_start, bwd_end, opt, order, dict(grads), fwd_w, bwd_w)
    step.unit_kind = units.kind
    step.first_op = next((e for e in fwd_ops if units.of(e) == order[0]), None)
    step.iteration_s = ((s1 - s0) if real else (max(bwd_end, opt[1] if opt else 0.0) - fwd_start)) / 1e6
    return step


def _device_times(analysis: Analysis) -> None:
    """Device mode: sum the non-collective device work launched in each window."""
    pid = analysis.thread[0]
    work: list[tuple[float, float]] = []
    for e in analysis.trace.events:
        if e.cat in DEVICE_CATS and not is_comm_kernel(e):
            launch = analysis.trace.launch_of(e)
            if launch is None or launch.pid != pid:
                analysis.unlaunched_device_events += 1
                continue
            work.append((launch.ts, e.dur))
    work.sort()
    times = [t for t, _ in work]
    prefix = [0.0]
    for _, d in work:
        prefix.append(prefix[-1] + d)

    def busy(lo: float, hi: float, closed_lo: bool = False) -> float:
        i = bisect.bisect_left(times, lo) if closed_lo else bisect.bisect_right(times, lo)
        j = bisect.bisect_right(times, hi)
        return (prefix[j] - prefix[i]) / 1e6 if j > i else 0.0

    for s in analysis.steps:
        s.forward_s = [busy(lo, hi, closed_lo=(i == 0)) for i, (lo, hi) in enumerate(s.forward_windows)]
        s.backward_s = [busy(lo, hi, closed_lo=(i == len(s.backward_windows) - 1))
                        for i, (lo, hi) in enumerate(s.backward_windows)]
        s.optimizer_s = busy(*s.optimizer, closed_lo=True) if s.optimizer else 0.0


def analyse(trace: Trace) -> Analysis:
    """The training steps of ``trace`` with each layer's forward and backward time."""
    main = main_thread(trace)
    main_events = trace.thread_events(main)
    marks = [e for e in main_events if e.name.startswith(STEP_PREFIX)]
    skipped: list[str] = []
    steps: list[Step] = []
    if marks:
        windows = [(e.name[len(STEP_PREFIX):], e.ts, e.end, True) for e in marks]
    else:  # no schedule: one step per optimizer step (cut after each), or the whole trace
        host = [e for e in trace.events if e.pid == main[0] and e.cat not in DEVICE_CATS]
        lo, hi = min(e.ts for e in host), max(e.end for e in host) + 1e-3
        cuts = sorted(e.end + 1e-3 for e in main_events if e.name.startswith("Optimizer.step#"))
        if any(e.name.startswith(EVALUATE) and e.ts > cuts[-1] for e in host) if cuts else True:
            cuts.append(hi)  # a last step after the last optimizer step (or no optimizer step at all)
        bounds = [lo, *cuts]
        windows = [(f"#{i + 1}" if len(cuts) > 1 else "(whole trace)", a, b, False)
                   for i, (a, b) in enumerate(itertools.pairwise(bounds))]
    for label, s0, s1, real in windows:
        step = _step(trace, main, label, s0, s1, real, skipped)
        if step is not None:
            steps.append(step)
    if not steps:
        why = "; ".join(skipped[:3])
        raise FormatError(f"{trace.path}: no training step with a forward and backward pass ({why})")
    analysis = Analysis(trace, steps, skipped, main, trace.on_device and any(
        e.cat in DEVICE_CATS and not is_comm_kernel(e) for e in trace.events))
    if analysis.on_device:
        _device_times(analysis)
    else:
        for s in steps:
            s.forward_s = [(hi - lo) / 1e6 for lo, hi in s.forward_windows]
            s.backward_s = [(hi - lo) / 1e6 for lo, hi in s.backward_windows]
            s.optimizer_s = (s.optimizer[1] - s.optimizer[0]) / 1e6 if s.optimizer else 0.0
    first = steps[0].first_op
    dims = first.args.get("Input Dims") if first is not None else None
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and isinstance(dims[0][0], int):
        analysis.batch_size = int(dims[0][0]) if dims[0][0] > 0 else None
    return analysis
