"""A measured trace beside the predicted timeline of a schedule: one Perfetto-loadable file and a per-phase table.

**Measured** phases, each the median over the trace's training steps (:mod:`.trace_steps`): forward, backward
and the optimizer step as the profile counts them (host windows on a CPU trace, device work on a GPU trace);
**exposed communication**, the time a collective runs (NCCL kernels on the device, gloo ops on the host:
:mod:`.trace_comms`, assigned to the step that launched them) while no compute does (device work other than
collectives, or the forward, backward and optimizer windows on the host); the **iteration**, the
``ProfilerStep#`` span (or forward start to the end of the optimizer step); and **other**, what is left
(zero_grad, data loading, launch gaps), which no schedule models.

**Predicted** phases come from ``costmodels.simulate`` of the schedule on the profile (by default the one imported
from the same trace): the forward, backward and optimizer events of its timeline, its exposed communication
(iteration minus compute) and its iteration time. The error is (predicted - measured) / measured.

The merged file is the trace as it was (every event, ``process_name`` prefixed with "measured: ") plus the
predicted timeline (``Timeline.to_chrome_trace``) as a process of its own, its iteration starting where the
first analysed step's forward starts (Trace Event Format; Perfetto and chrome://tracing load it).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import costmodels as cm

from .common import write_beside
from .kineto import DEVICE_CATS
from .trace_comms import Call
from .trace_steps import Analysis, Step, is_comm_kernel

PHASES = ("forward", "backward", "optimizer", "communication (exposed)", "iteration")


@dataclass(frozen=True)
class Row:
    """One phase: measured and predicted seconds, and the relative error (None where either is missing or 0)."""

    phase: str
    measured_s: float | None
    predicted_s: float | None

    @property
    def error(self) -> float | None:
        if self.measured_s is None or self.predicted_s is None or self.measured_s <= 0:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass
class Comparison:
    """The per-phase rows, the prediction, and the merged Chrome trace."""

    rows: list[Row]
    result: Any
    merged: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.result.schedule, "p": self.result.p,
                "phases": [{"phase": r.phase, "measured_s": r.measured_s, "predicted_s": r.predicted_s,
                            "error": r.error} for r in self.rows]}


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        elif hi > lo:
            out.append((lo, hi))
    return out


def exposed(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Length of the union of ``comm`` intervals outside the union of ``compute`` intervals (same unit)."""
    busy = _union(compute)
    total = 0.0
    for lo, hi in _union(comm):
        total += hi - lo
        for a, b in busy:
            total -= max(0.0, min(hi, b) - max(lo, a))
    return total


def _compute_spans(analysis: Analysis, step: Step) -> list[tuple[float, float]]:
    if not analysis.on_device:
        spans = [(step.fwd_start, step.bwd_end)]
        return spans + ([step.optimizer] if step.optimizer else [])
    out = []
    for e in analysis.trace.events:
        if e.cat in DEVICE_CATS and not is_comm_kernel(e):
            launch = analysis.trace.launch_of(e)
            if launch is not None and step.start <= launch.ts < step.end:
                out.append((e.ts, e.end))
    return out


def measured(analysis: Analysis, calls: list[Call]) -> dict[str, float]:
    """Median seconds per phase over the steps (keys: the :data:`PHASES` and ``other``)."""
    per_step = []
    for s in analysis.steps:
        comm = [(c.start, c.end) for c in calls if s.start <= c.launched < s.end]
        v = {"forward": sum(s.forward_s), "backward": sum(s.backward_s), "optimizer": s.optimizer_s,
             "communication (exposed)": exposed(comm, _compute_spans(analysis, s)) / 1e6,
             "iteration": s.iteration_s}
        v["other"] = v["iteration"] - sum(v[k] for k in PHASES[:-1])
        per_step.append(v)
    return {k: statistics.median(v[k] for v in per_step) for k in (*PHASES, "other")}


def predicted(result: Any) -> dict[str, float]:
    """Seconds per phase of a simulated iteration (``costmodels.IterationResult``)."""
    def kind(k: str) -> float:
        return sum(e.duration for e in result.timeline.on("compute") if e.kind == k)

    return {"forward": kind("forward"), "backward": kind("backward"), "optimizer": kind("optimizer"),
            "communication (exposed)": result.exposed_communication, "iteration": result.iteration_time}


def _merge(analysis: Analysis, result: Any, label: str) -> dict[str, Any]:
    trace = analysis.trace
    events = copy.deepcopy(trace.raw_events)
    named: set[Hashable] = set()
    meta = [e for e in events if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict)]
    labels = {repr(e.get("pid")): e["args"].get("labels") for e in meta if e.get("name") == "process_labels"}
    for e in meta:
        if e.get("name") == "process_name":
            kind = labels.get(repr(e.get("pid")))
            e["args"]["name"] = f"measured: {e['args'].get('name', e.get('pid'))}" + (f" ({kind})" if kind else "")
            named.add(repr(e.get("pid")))
    pids = {repr(e.pid): e.pid for e in trace.events}
    events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"measured: pid {pid}"}}
               for key, pid in pids.items() if key not in named]
    numeric = [p for p in pids.values() if isinstance(p, int)]
    pred_pid = max(numeric, default=0) + 1
    offset = analysis.steps[0].fwd_start
    for e in result.timeline.to_chrome_trace(process=label)["traceEvents"]:
        e["pid"] = pred_pid
        if e.get("ph") == "X":
            e["ts"] = e["ts"] + offset
        events.append(e)
    events.append({"ph": "M", "name": "process_sort_index", "pid": pred_pid, "tid": 0,
                   "args": {"sort_index": -1}})
    merged = {k: v for k, v in trace.meta.items() if k != "traceEvents"}
    merged.update(traceEvents=events, displayTimeUnit="ms")
    return merged


def compare(analysis: Analysis, calls: list[Call], profile: cm.ModelProfile, env: cm.Environment, p: int,
            schedule: str, collective: str | None = None, options: Mapping[str, Any] | None = None) -> Comparison:
    """The trace's measured phases beside ``schedule``'s prediction on ``profile``, ``env`` and ``p`` workers."""
    result = cm.simulate(profile, env, p, schedule, collective=collective, **dict(options or {}))
    meas, pred = measured(analysis, calls), predicted(result)
    rows = [Row(k, meas[k], pred[k]) for k in PHASES] + [Row("other (not modelled)", meas["other"], None)]
    label = f"commscope prediction: {schedule} p={p} on {env.name} ({profile.name})"
    comparison = Comparison(rows, result, _merge(analysis, result, label))
    comparison.merged["commscopeComparison"] = comparison.to_dict()
    return comparison


def save(comparison: Comparison, path: str | os.PathLike[str]) -> Path:
    """Write the merged trace atomically (a failure leaves any old file intact)."""
    return write_beside(path, json.dumps(comparison.merged, allow_nan=False))
