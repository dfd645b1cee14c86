"""Reading a PyTorch profiler (Kineto) trace: its complete events, their nesting, kernels and their launches.

**Why not HolisticTraceAnalysis.** HTA (``pip install HolisticTraceAnalysis``, 0.5.0) requires jupyterlab,
pytest, networkx, pydot, plotly and pandas at run time, and reads traces into pandas frames per rank directory
for GPU analyses; commscope needs a few fields of one trace, so it parses the documented format itself, with
``json`` only.

**The format** (the Trace Event Format that ``torch.profiler``'s ``export_chrome_trace`` writes; Kineto's
``ChromeTraceLogger``, and traces torch 2.13 writes here): a JSON object whose ``traceEvents`` list holds
complete events ``{"ph": "X", "cat", "name", "pid", "tid", "ts", "dur", "args"}`` with ``ts`` and ``dur`` in
microseconds; top-level keys beside it include ``distributedInfo`` (``backend``, ``rank``, ``world_size``,
``pg_config``), ``deviceProperties`` (one object per GPU with its ``name``) and ``host_name``. Categories:

- host side: ``cpu_op`` (ATen ops; ``args``: ``External id``, ``Sequence number`` on ops that autograd records,
  ``Fwd thread id``, and with ``record_shapes`` ``Input Dims`` / ``Input type``), ``user_annotation``
  (``record_function`` scopes: ``ProfilerStep#N``, ``Optimizer.step#SGD.step``, ``DistributedDataParallel.forward``,
  ``gloo:all_reduce``), ``python_function`` (with ``with_stack``: ``nn.Module: Linear_0`` for each module call),
  ``cuda_runtime`` / ``cuda_driver`` (``cudaLaunchKernel`` with ``args.correlation``);
- device side: ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (``args``: ``correlation``, ``stream``, ``device``; NCCL
  kernels also carry ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
  ``Process Group Name`` / ``Description``, as the ``record_param_comms`` host op does);
- flows: ``ac2g`` (launch to kernel, ``id`` = correlation) and ``fwdbwd``; the correlation in ``args`` is used
  here instead.

Events of one thread nest (a scope contains the ops it runs); :class:`Trace` computes each event's parent by one
sweep per thread. A ``.json.gz`` trace (as ``export_chrome_trace("x.json.gz")`` writes it) is read too.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .common import FormatError, load_json

EPS_US = 1e-3  # Kineto writes ts and dur with nanosecond digits; nesting is checked to within this
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
MODULE_PREFIX = "nn.Module: "
EVALUATE = "autograd::engine::evaluate_function: "
ACCUMULATE = "torch::autograd::AccumulateGrad"
STEP_PREFIX = "ProfilerStep#"


class Ev:
    """One complete event: name, category, pid, tid, start and duration (us), args; ``parent`` after nesting."""

    __slots__ = ("args", "cat", "dur", "index", "name", "parent", "pid", "tid", "ts")

    def __init__(self, raw: dict[str, Any], index: int) -> None:
        self.name: str = raw["name"]
        self.cat: str = str(raw.get("cat", "")).lower()
        self.pid: Hashable = _key(raw.get("pid"))
        self.tid: Hashable = _key(raw.get("tid"))
        self.ts: float = float(raw["ts"])
        self.dur: float = float(raw["dur"])
        args = raw.get("args")
        self.args: dict[str, Any] = args if isinstance(args, dict) else {}
        self.index = index
        self.parent: Ev | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def thread(self) -> tuple[Hashable, Hashable]:
        return (self.pid, self.tid)

    def contains(self, other: Ev | float) -> bool:
        """Whether ``other`` (an event, or a time in us) lies within this event."""
        if isinstance(other, Ev):
            return self.ts - EPS_US <= other.ts and other.end <= self.end + EPS_US
        return self.ts - EPS_US <= other <= self.end + EPS_US

    def ancestors(self) -> Iterator[Ev]:
        e = self.parent
        while e is not None:
            yield e
            e = e.parent

    def __repr__(self) -> str:
        return f"Ev({self.cat}:{self.name!r} ts={self.ts} dur={self.dur})"


def _key(value: Any) -> Hashable:
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else repr(value)


def _usable(raw: Any) -> bool:
    if not isinstance(raw, dict) or raw.get("ph") != "X" or not isinstance(raw.get("name"), str):
        return False
    ts, dur = raw.get("ts"), raw.get("dur")
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ts, dur))
    return ok and dur >= 0 and abs(ts) < 1e300 and dur < 1e300


@dataclass
class Trace:
    """A loaded trace: its complete events (host and device), nesting, and the top-level metadata."""

    path: str
    meta: dict[str, Any]
    raw_events: list[Any]
    events: list[Ev]
    by_thread: dict[tuple[Hashable, Hashable], list[Ev]] = field(default_factory=dict)
    launches: dict[Any, Ev] = field(default_factory=dict)

    @property
    def device_work(self) -> list[Ev]:
        return [e for e in self.events if e.cat in DEVICE_CATS]

    @property
    def on_device(self) -> bool:
        """Whether the trace has device (GPU) activity: kernels, copies or memsets."""
        return any(e.cat in DEVICE_CATS for e in self.events)

    @property
    def distributed(self) -> dict[str, Any]:
        info = self.meta.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def device_names(self) -> list[str]:
        props = self.meta.get("deviceProperties")
        names = [str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")] if isinstance(
            props, list) else []
        return names

    @property
    def host(self) -> str:
        return str(self.meta.get("host_name") or "unknown")

    def launch_of(self, ev: Ev) -> Ev | None:
        """The host event (``cudaLaunchKernel`` and the like) that launched a device event, by ``correlation``."""
        corr = ev.args.get("correlation")
        return self.launches.get(corr) if corr is not None else None

    def thread_events(self, thread: tuple[Hashable, Hashable]) -> list[Ev]:
        return self.by_thread.get(thread, [])


def _nest(events: list[Ev]) -> None:
    """Set each event's parent: the innermost earlier event of the same thread that contains it."""
    stack: list[Ev] = []
    for e in events:
        while stack and not stack[-1].contains(e):
            stack.pop()
        e.parent = stack[-1] if stack else None
        stack.append(e)


def from_data(data: Any, path: str) -> Trace:
    """A :class:`Trace` from parsed JSON (``path`` names it in messages)."""
    if isinstance(data, dict):
        raw = data.get("traceEvents")
        if not isinstance(raw, list):
            raise FormatError(f"{path}: not a Chrome trace: no 'traceEvents' list (torch.profiler's "
                              "export_chrome_trace writes one)")
        meta = {k: v for k, v in data.items() if k != "traceEvents"}
    elif isinstance(data, list):  # the Trace Event Format's array form
        raw, meta = data, {}
    else:
        raise FormatError(f"{path}: not a Chrome trace: expected a JSON object with 'traceEvents', got "
                          f"{type(data).__name__}")
    events = [Ev(r, i) for i, r in enumerate(raw) if _usable(r)]
    if not events:
        raise FormatError(f"{path}: no complete ('ph': 'X') events with a name, ts and dur: nothing to import")
    trace = Trace(path=path, meta=meta, raw_events=raw, events=events)
    threads: dict[tuple[Hashable, Hashable], list[Ev]] = defaultdict(list)
    for e in events:
        if e.cat not in DEVICE_CATS:
            threads[e.thread].append(e)
        if e.cat in RUNTIME_CATS and e.args.get("correlation") is not None:
            trace.launches[e.args["correlation"]] = e
    for evs in threads.values():
        evs.sort(key=lambda e: (e.ts, -e.dur, e.index))
        _nest(evs)
    trace.by_thread = dict(threads)
    return trace


def load(path: str | os.PathLike[str]) -> Trace:
    """Read a Kineto / Chrome trace file (``.json`` or ``.json.gz``); bad input raises one-line errors."""
    return from_data(load_json(path, "trace"), str(path))


def main_thread(trace: Trace) -> tuple[Hashable, Hashable]:
    """The thread that runs the training loop: the one with ``ProfilerStep#`` scopes, else the one with the most
    module calls, else the one with the most ops that autograd recorded (``Sequence number``)."""
    for test in (lambda e: e.name.startswith(STEP_PREFIX),
                 lambda e: e.cat == "python_function" and e.name.startswith(MODULE_PREFIX),
                 lambda e: e.cat == "cpu_op" and "Sequence number" in e.args and not e.name.startswith(EVALUATE)):
        counts = Counter(e.thread for e in trace.events if e.cat not in DEVICE_CATS and test(e))
        if counts:
            return counts.most_common(1)[0][0]
    raise FormatError(f"{trace.path}: no training loop found: no ProfilerStep# scopes, no module calls and no ops "
                      "recorded by autograd (record a training step with torch.profiler)")
