"""Timelines of one simulated training iteration, and their Chrome / Perfetto trace export.

A :class:`Timeline` is a list of :class:`Event` (stream, kind, label, start, end, bytes). Streams
are ``"compute"`` and ``"comm"`` (one network link per worker, as the alpha-beta model assumes).
``to_chrome_trace`` writes the Trace Event Format that chrome://tracing, Perfetto and
torch.profiler's exports use ("X" complete events, microseconds), so a predicted iteration opens
beside a measured profile.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._io import atomic_write_text

STREAMS = ("compute", "comm")


@dataclass(frozen=True)
class Event:
    """One interval on one stream: a layer's forward/backward, or a message of a collective."""

    stream: str
    kind: str
    label: str
    start: float
    end: float
    nbytes: float = 0.0

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Timeline:
    """Events of one iteration (times in seconds from the start of the iteration's forward)."""

    events: tuple[Event, ...]

    @classmethod
    def of(cls, events: Iterable[Event]) -> Timeline:
        order = {s: i for i, s in enumerate(STREAMS)}
        return cls(tuple(sorted(events, key=lambda e: (e.start, order.get(e.stream, len(order))))))

    def on(self, stream: str) -> list[Event]:
        return [e for e in self.events if e.stream == stream]

    @property
    def end(self) -> float:
        return max((e.end for e in self.events), default=0.0)

    def busy(self, stream: str) -> float:
        """Total time the stream is busy (its events never overlap)."""
        return sum(e.duration for e in self.on(stream))

    def bytes_sent(self, kind: str | None = None) -> float:
        """Bytes of all communication events (of one kind, e.g. ``"allreduce"``)."""
        return sum(e.nbytes for e in self.on("comm") if kind is None or e.kind == kind)

    def to_chrome_trace(self, *, process: str = "commscope prediction") -> dict[str, Any]:
        """Trace Event Format (JSON object form) with one thread per stream (compute, comm, and any other
        stream the events use, e.g. the parameter server's "pull")."""
        extra = sorted({e.stream for e in self.events} - set(STREAMS))
        tids = {s: i for i, s in enumerate((*STREAMS, *extra))}
        meta = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": process}}]
        meta += [{"ph": "M", "pid": 0, "tid": i, "name": "thread_name", "args": {"name": s}} for s, i in tids.items()]
        evs = [
            {"name": f"{e.kind} {e.label}", "cat": e.kind, "ph": "X", "pid": 0, "tid": tids[e.stream],
             "ts": e.start * 1e6, "dur": e.duration * 1e6, "args": {"label": e.label, "bytes": e.nbytes}}
            for e in self.events
        ]
        return {"traceEvents": meta + evs, "displayTimeUnit": "ms"}

    def save_chrome_trace(self, path: str | os.PathLike[str], **kwargs: Any) -> Path:
        return atomic_write_text(path, json.dumps(self.to_chrome_trace(**kwargs)))
