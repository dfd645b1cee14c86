"""The schedule framework: what a schedule is, what it returns, its registry, and :func:`simulate`.

Each :class:`Schedule` simulates one iteration of data-parallel training on p workers from a
:class:`~costmodels.profiles.ModelProfile` and an :class:`~costmodels.environment.Environment`,
and returns an :class:`IterationResult` with the iteration time and a
:class:`~costmodels.timeline.Timeline`. Messages are priced by a registered collective algorithm
(``collective=None`` picks the cheapest of the needed primitive at every message size), so every
schedule runs over all-reduce or parameter-server architectures alike.

Model (common to all schedules): one compute stream and one communication link per worker; the
link carries one message at a time (the alpha-beta model); layer l's gradient is ready when its
backward finishes; backward runs from the last layer to the first.

The schedules themselves register here from their family modules (``sequential``, ``overlap``,
``sharded``), which the package imports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import sympy as sp

from ..environment import Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError
from ..messages import WIRE, Comm, Wire
from ..profiles import DTYPE_BYTES, ModelProfile
from ..registry import Registry
from ..timeline import Timeline

# symbols of the closed forms
F, B, C = sp.symbols("F B C", nonnegative=True)  # forward, backward, sum of communication times


@dataclass(frozen=True)
class IterationResult:
    """One simulated iteration: its time, the timeline, and derived rates.

    ``iteration_time`` is the steady-state time per iteration (for schedules that overlap
    communication with the next forward, the period between consecutive iterations).
    """

    schedule: str
    p: int
    iteration_time: float
    compute_time: float
    batch_size: int
    timeline: Timeline
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Samples per second over all p workers."""
        return self.p * self.batch_size / self.iteration_time

    @property
    def speedup(self) -> float:
        """Throughput relative to one worker computing alone (no communication)."""
        return self.p * self.compute_time / self.iteration_time

    @property
    def scaling_efficiency(self) -> float:
        """Speedup / p: 1 when communication is completely hidden."""
        return self.compute_time / self.iteration_time

    @property
    def exposed_communication(self) -> float:
        return self.iteration_time - self.compute_time


@dataclass(frozen=True)
class Schedule:
    """A registered schedule: name, what it does, its source, options and closed-form bounds.

    ``no_overlap`` and ``perfect_overlap`` are sympy expressions in F (forward), B (backward) and
    C (sum of the schedule's communication times): every simulated iteration lies between them.
    """

    name: str
    description: str
    source: str
    primitive: str
    options: Mapping[str, Any]
    run: Callable[..., IterationResult]
    no_overlap: sp.Expr = F + B + C
    perfect_overlap: sp.Expr = F + sp.Max(B, C)
    vectorized: Callable[..., np.ndarray] | None = None
    """``vectorized(batch, collective, **options)``: iteration times of many configurations at once."""


@dataclass(frozen=True, eq=False)
class Configurations:
    """C configurations (p_c, environment_c) of one profile, simulated together by a schedule's kernel.

    ``p`` is an int array and ``env`` an :class:`EnvironmentArray`, both of shape ``(C, 1)``, so
    that message prices broadcast to ``(C, messages)``.
    """

    prof: ModelProfile
    p: np.ndarray
    env: EnvironmentArray

    def comm(self, primitive: str, algorithm: str | None, params: Mapping[str, Any]) -> Comm:
        return Comm(primitive, self.p, self.env, algorithm, params)

    @cached_property
    def nbytes(self) -> np.ndarray:
        return np.array(self.prof.column("grad_bytes"))

    @cached_property
    def ready(self) -> np.ndarray:
        """Each layer's gradient-ready time (forward, then backward from the last layer), shape (M,)."""
        bwd = np.array(self.prof.column("backward_s"))
        return sum(self.prof.column("forward_s")) + np.cumsum(bwd[::-1])[::-1]


SCHEDULES: Registry[Schedule] = Registry("schedule")


def schedules() -> list[str]:
    """Names of the registered schedules."""
    return SCHEDULES.names()


def schedule(name: str) -> Schedule:
    return SCHEDULES.get(name)


COMPRESSIBLE = ("bsp", "wfbp", "fusion", "mgwfbp", "bytescheduler", "local_sgd")


@dataclass(frozen=True, eq=False)
class Compressed:
    """A profile as a compressor sees it, and what pricing its messages needs.

    ``profile``: wire bytes per layer, encode time added after each layer's backward (encoding runs
    on the compute stream and delays the gradient's readiness). ``dense_bytes``: each layer's
    uncompressed gradient bytes, by which DDP buckets before its comm hook compresses a bucket.
    ``parts``: (layers, K) wire bytes by message of a bucket (K = 1; PowerSGD's uncompressed, P, Q),
    which the fusion schedule (DDP) sends as K messages per bucket; the other schedules send a
    group's parts as one message. Decoding is charged on the link with each message
    (``Wire.decode_per_byte``) at the model's average rate: a message of w bytes from each of f
    workers (f = p for an allgather, 1 for an allreduce) costs ``f w per_received + w fixed``, the
    totals of :meth:`Compressor.decode_time` over the layers at f = 1 and 0 per wire byte (decode is
    affine in f), so per received byte ``per_received + fixed / f``.
    """

    profile: ModelProfile
    primitive: str
    dense_bytes: np.ndarray
    parts: np.ndarray
    per_received: float
    fixed: float

    def wire(self, p: Any) -> Wire:
        """How messages travel on p workers (an int, or a (C, 1) array of them in a sweep)."""
        fan_in = p if self.primitive == "allgather" else 1
        return Wire(self.primitive, self.per_received + self.fixed / np.maximum(fan_in, 1))


COMPRESSED: ContextVar[Compressed | None] = ContextVar("commscope_compressed", default=None)


def compress(profile: ModelProfile, spec: str) -> Compressed:
    """Each layer compressed on its own with the profile's dtype (see :class:`Compressed`)."""
    from ..compression import parse_compressor

    if not isinstance(profile, ModelProfile):
        raise CommscopeError(f"profile must be a costmodels.ModelProfile, got {type(profile).__name__}")
    entry, q = parse_compressor(spec)
    layers, parts, decode1, decode0 = [], [], 0.0, 0.0
    for x in profile.layers:
        elements = max(1, round(x.grad_bytes / DTYPE_BYTES[profile.dtype]))
        args = (elements, q, x.shape, profile.dtype)  # PowerSGD factorises (shape[0], prod(shape[1:]))
        sent = entry.messages(*args) if x.grad_bytes > 0 else (0.0,) * len(entry.messages(1, q, None))
        if x.grad_bytes > 0:
            decode1 += entry.decode_time(*args, fan_in=1)
            decode0 += entry.decode_time(*args, fan_in=0)
        parts.append(sent)
        e = entry.encode_time(*args) if x.grad_bytes > 0 else 0.0
        layers.append(replace(x, grad_bytes=float(sum(sent)), backward_s=x.backward_s + e))
    meta = {**profile.metadata, "compressor": spec, "uncompressed_grad_bytes": profile.grad_bytes}
    out = replace(profile, layers=tuple(layers), source=f"{profile.source}; compressed with {spec}", metadata=meta)
    wire = out.grad_bytes
    return Compressed(out, entry.primitive, np.array(profile.column("grad_bytes")), np.array(parts, dtype=float),
                      (decode1 - decode0) / wire if wire else 0.0, decode0 / wire if wire else 0.0)


def compressed_profile(profile: ModelProfile, spec: str, p: Any = 1) -> tuple[ModelProfile, Wire]:
    """The profile as a compressor sees it (:func:`compress`) and how its messages travel on p workers."""
    c = compress(profile, spec)
    return c.profile, c.wire(p)


@contextmanager
def compressing(c: Compressed, p: Any) -> Iterator[None]:
    """Run schedules with ``c``'s messages on p workers (:data:`WIRE` and :data:`COMPRESSED` set)."""
    tokens = WIRE.set(c.wire(p)), COMPRESSED.set(c)
    try:
        yield
    finally:
        WIRE.reset(tokens[0])
        COMPRESSED.reset(tokens[1])


def simulate(profile: ModelProfile, env: Environment, p: int, schedule: str = "wfbp",
             collective: str | None = None, compressor: str | None = None, **options: Any) -> IterationResult:
    """Simulate one iteration of ``schedule`` (see :func:`schedules`) on p workers.

    ``collective`` names the algorithm that carries the messages (e.g. ``"ring_allreduce"`` or
    ``"parameter_server"``); ``None`` picks the cheapest for each message size. ``compressor``
    (e.g. ``"topk:0.01"``, ``"fp16"``; see ``costmodels.compression``) compresses every gradient
    first: messages then carry its wire bytes over the primitive it needs (allgather for sparse and
    quantised formats, so the volume grows with p). Options are the schedule's (``bucket_bytes``
    for fusion, ``H`` for local_sgd, ``k`` servers, ...).
    """
    entry = SCHEDULES.get(schedule)
    p = int(p) if isinstance(p, np.integer) else p
    if compressor is None:
        return entry.run(profile, env, p, collective, **options)
    if entry.name not in COMPRESSIBLE:
        raise CommscopeError(f"compression runs on top of the schedules {', '.join(COMPRESSIBLE)}; "
                             f"{entry.name} communicates shards, got compressor {compressor!r}")
    c = compress(profile, compressor)
    with compressing(c, p):
        r = entry.run(c.profile, env, p, collective, **options)
    return IterationResult(r.schedule, r.p, r.iteration_time, profile.compute_s, r.batch_size, r.timeline,
                           {**r.details, "compressor": compressor, "wire_bytes": c.profile.grad_bytes,
                            "primitive": c.primitive})
