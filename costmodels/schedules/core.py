"""The schedule framework: what a schedule is, what it returns, its registry, and :func:`simulate`.

Each :class:`Schedule` simulates one iteration of data-parallel training on p workers from a
:class:`~costmodels.profiles.ModelProfile` and an :class:`~costmodels.environment.Environment`, and returns an
:class:`IterationResult` with the iteration time and a :class:`~costmodels.timeline.Timeline`. Messages are priced
by a registered collective algorithm (``collective=None``: what the environment's library runs at every message
size), so every schedule runs over all-reduce or parameter-server architectures alike.

Model (common to all schedules): one compute stream and one communication link per worker; the link carries one
message at a time (the alpha-beta model); layer l's gradient is ready when its backward finishes; backward runs from
the last layer to the first.

The schedules register here from their family modules (``sequential``, ``overlap``, ``sharded``), imported by the
package.

Interference (``kappa_c``, ``kappa_m``, ``compute_loss_step``), host overhead (``host_overhead``) and the optimizer
step (``ModelProfile.optimizer_s``), issue 16: where an environment has any of them, or the profile an optimizer step,
:func:`simulate` and ``sweep`` run the schedule's entry in :data:`TERMS` (``terms``, ``terms_overlap``: the schedule as
a task graph on the piecewise-rate engine of ``engine``) instead of its recurrences, which stay exactly as they are
where all of them are 0. The closed-form bounds gain U (the optimizer time the schedule runs on a worker), O (the sum
of its host overheads), L (the compute its messages can take) and the interference factors
(:func:`interference_excess`, derived there). The host overhead o is part of every price an environment fitted to
blocking calls gives, so a message holds the link for its price less o (:class:`LinkComm`, derived there) while its
issuing thread pays o.
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

from .._inputs import as_rank
from ..environment import Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError
from ..messages import WIRE, Comm, Wire
from ..profiles import DTYPE_BYTES, ModelProfile
from ..registry import Registry
from ..timeline import Event, Timeline
from .contended import compute_loss, contended_floor
from .engine import PHI

# symbols of the closed forms
F, B, C = sp.symbols("F B C", nonnegative=True)  # forward, backward, sum of communication times
U, O, L = sp.symbols("U O L", nonnegative=True)  # optimizer step on a worker, sums of host overheads and losses
kappa_c, kappa_m = sp.symbols("kappa_c kappa_m", nonnegative=True)  # interference factors


def interference_excess(compute: sp.Expr, comm: sp.Expr) -> sp.Expr:
    """The most that interference can add to a serial sum ``compute + comm`` of work (derived here).

    With every wait of a schedule on a task that runs or will run, some task runs at every instant, so
    the iteration lasts at most the time with only compute, only communication, both, and only host
    overhead. Over the time tau with both, compute does tau / (1 + kappa_c) of its work and communication
    tau / (1 + kappa_m) of its work (at least: two directions of a link may run at once), so
    tau <= min(compute (1 + kappa_c), comm (1 + kappa_m)) and the total is at most
    compute + comm + O + tau (1 - 1/(1 + kappa_c) - 1/(1 + kappa_m)): overlap saves time where the
    bracket is negative (no interference: -1), costs at most this where it is positive.

    With messages that take compute (L, the sum of their losses, :mod:`.engine`), compute does (tau - Phi) /
    (1 + kappa_c) over tau, Phi <= L, and a message is slowed past 1 + kappa_m only while compute gives up PHI,
    for at most L / PHI: tau <= min(compute (1 + kappa_c) + L, comm (1 + kappa_m) + L / PHI), and the total
    gains L / (1 + kappa_c) + L / (PHI (1 + kappa_m)). A contended floor is in neither bound.
    """
    bracket, phi = sp.Max(0, kappa_c / (1 + kappa_c) - 1 / (1 + kappa_m)), sp.nsimplify(PHI)
    return (bracket * sp.Min(compute * (1 + kappa_c) + L, comm * (1 + kappa_m) + L / phi)
            + L / (1 + kappa_c) + L / (phi * (1 + kappa_m)))


NO_OVERLAP = F + B + U + C + O + interference_excess(F + B + U, C)


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

    ``no_overlap`` and ``perfect_overlap`` are sympy expressions in F (forward), B (backward), C (sum
    of the schedule's communication times at full rate), U (the optimizer step it runs on a worker),
    O (the sum of its host overheads), L (the compute its messages can take) and the interference factors
    ``kappa_c``, ``kappa_m``: every simulated iteration without a contended floor lies between them (:meth:`bounds`).
    """

    name: str
    description: str
    source: str
    primitive: str
    options: Mapping[str, Any]
    run: Callable[..., IterationResult]
    no_overlap: sp.Expr = NO_OVERLAP
    perfect_overlap: sp.Expr = F + U + sp.Max(B, C)
    vectorized: Callable[..., np.ndarray] | None = None
    """``vectorized(batch, collective, **options)``: iteration times of many configurations at once."""
    placement: str = ""
    """Where the technique pays the host overhead o and the optimizer step, and the source (issue 16)."""

    def bounds(self, values: Mapping[Any, float]) -> tuple[float, float]:
        """(perfect_overlap, no_overlap) at ``values`` (symbols or their names; U, O, L and kappas default to 0)."""
        given = {(sp.Symbol(k, nonnegative=True) if isinstance(k, str) else k): v for k, v in values.items()}
        at = {U: 0.0, O: 0.0, L: 0.0, kappa_c: 0.0, kappa_m: 0.0, **given}
        return float(self.perfect_overlap.subs(at)), float(self.no_overlap.subs(at))


class LinkComm(Comm):
    """A message's time on the link once issued: the library's price t(n) less the host overhead o.

    **Derivation (derived here).** An environment's alpha, beta and gamma are fitted to sweeps of blocking
    calls timed back to back, so each measured call, t(n), already holds the o its thread spent issuing it
    and waking when it completed: t(n) = o + l(n), with l(n) the time the message holds the link. A schedule
    charges o on the issuing thread (a HOST task) and l(n) = max(t(n) - o, 0) on the link, so a chain of
    blocking messages costs sum(o + l) = sum t, what the sweep measured, whatever o is; o changes a prediction
    only where the thread's o overlaps other work (issues during backward, a queue of async messages), which
    is what ``commscope calibrate`` fits it to. Pricing both t(n) and o counted o twice: every blocking
    message of BSP paid it again. ``commscope calibrate`` bounds o by the cheapest lone message the sweep prices, so
    l(n) >= 0 there.
    """

    def __init__(self, primitive: str, p: Any, env: Environment | EnvironmentArray, algorithm: Any,
                 params: Mapping[str, Any] | None, overhead: np.ndarray) -> None:
        super().__init__(primitive, p, env, algorithm, params)
        self.overhead = overhead if np.any(overhead) else None

    def __call__(self, sizes: Any) -> np.ndarray:
        t = super().__call__(sizes)
        return t if self.overhead is None else np.maximum(t - self.overhead, 0.0)


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
        """The messages' time on the link (:class:`LinkComm`): the library's price less the host overhead o."""
        return LinkComm(primitive, self.p, self.env, algorithm, params, overhead=self.overhead)

    def contended_floor(self, comm: Comm, sizes: Any) -> Any:
        """The least time beside compute of each message ``comm`` prices, (C, m) (:mod:`.contended`)."""
        return contended_floor(comm, self.p, self.env, sizes)

    def compute_loss(self, comm: Comm, sizes: Any) -> Any:
        """The compute each message ``comm`` prices takes from beside it, (C, m) (:mod:`.contended`)."""
        return compute_loss(comm, self.p, self.env, sizes)

    @cached_property
    def nbytes(self) -> np.ndarray:
        return np.array(self.prof.column("grad_bytes"))

    @cached_property
    def overhead(self) -> np.ndarray:
        """Host overhead o of one message, (C, 1): 0 where p = 1 (nothing is sent)."""
        return np.where(self.p > 1, self.env.host_overhead, 0.0)

    @cached_property
    def pass_time(self) -> np.ndarray:
        """Seconds per byte of one memory pass over gradient bytes (:attr:`ModelProfile.pass_s_per_byte`), (C, 1):
        0 where p = 1 (nothing is sent, so nothing is flattened or averaged)."""
        return np.where(self.p > 1, self.prof.pass_s_per_byte, 0.0)

    @cached_property
    def ready(self) -> np.ndarray:
        """Each layer's gradient-ready time (forward, then backward from the last layer), shape (M,)."""
        bwd = np.array(self.prof.column("backward_s"))
        return sum(self.prof.column("forward_s")) + np.cumsum(bwd[::-1])[::-1]


SCHEDULES: Registry[Schedule] = Registry("schedule")


@dataclass(frozen=True, eq=False)
class TermsRun:
    """A schedule run with interference, host overhead and the optimizer step (an entry of :data:`TERMS`).

    ``time``: iteration time of each configuration, (C,); ``events``: the timeline of the one
    configuration when asked to record; ``details``: what the schedule reports, plus ``communication_s``
    (C of its bounds at full rate), ``host_overhead_s`` (O) and ``optimizer_s`` (U), per configuration.
    """

    time: np.ndarray
    events: list[Event] | None
    details: Mapping[str, Any]


TERMS: dict[str, Callable[..., TermsRun]] = {}
"""Schedule name -> ``run(cfg, collective, record, **options)``, registered by ``terms`` and ``terms_overlap``."""


def profile_has_terms(profile: ModelProfile) -> bool:
    """True where the profile alone needs :data:`TERMS`: an optimizer step, or memory passes over the gradients
    (a measured ``pass_s_per_byte`` counts even without a step)."""
    return profile.optimizer_s > 0 or profile.pass_s_per_byte > 0


def has_terms(profile: ModelProfile, env: Environment) -> bool:
    """True where :data:`TERMS` must run: interference or host overhead on, or the profile's own terms."""
    return env.has_terms or profile_has_terms(profile)


def _simulate_terms(entry: Schedule, prof: ModelProfile, env: Environment, p: int, collective: str | None,
                    options: Mapping[str, Any]) -> IterationResult:
    if entry.name not in TERMS:
        raise CommscopeError(f"the {entry.name} schedule has no model of interference, host overhead or the "
                             "optimizer step; set kappa_c, kappa_m, host_overhead and optimizer_s to 0")
    if not isinstance(env, Environment):
        raise CommscopeError(f"env must be a costmodels.Environment, got {type(env).__name__}")
    p = as_rank(p)
    cfg = Configurations(prof, np.array([[p]]), EnvironmentArray.of([env]).reshape(1, 1))
    out = TERMS[entry.name](cfg, collective, True, **options)
    details = {k: (v[0].item() if isinstance(v, np.ndarray) and v.shape == (1,) else v) for k, v in out.details.items()}
    return IterationResult(entry.name, int(p), float(out.time[0]), prof.compute_s + prof.optimizer_s,
                           prof.batch_size, Timeline.of(out.events or []),
                           {**details, "kappa_c": env.kappa_c, "kappa_m": env.kappa_m,
                            "host_overhead": env.host_overhead})


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
    """Each layer compressed on its own with the profile's dtype (see :class:`Compressed`).

    Encode and decode are priced by :meth:`Compressor.encode_time` / :meth:`Compressor.decode_time` (memory
    passes on a reference device), unless the profile measured this compressor's codec on its own device
    (``metadata['codecs'][codec_key(spec)]``: a runner's encoder and decoder on the model's gradients,
    ``runners.training.profiler.codecs``). Then the modelled times keep their shape and take the measured totals
    (derived here): each layer's encode e_l becomes e_l E / sum(e) (by gradient bytes where the model has
    no encode), and decode(f) = D0 + f (D1 - D0) is scaled by D / decode(f_m), f_m the messages the
    measurement decoded (its ranks for an all-gather, 1 for an all-reduce): a memory-pass model on a CPU
    whose encoders are compute-bound (random numbers, top-k selection, index scatter) is off by two orders
    of magnitude, and the measurement is what the rank really spends.
    """
    from ..compression import codec_key, parse_compressor, scaled_to_measured

    if not isinstance(profile, ModelProfile):
        raise CommscopeError(f"profile must be a costmodels.ModelProfile, got {type(profile).__name__}")
    entry, q = parse_compressor(spec)
    parts, encode, decode1, decode0 = [], [], 0.0, 0.0
    for x in profile.layers:
        elements = max(1, round(x.grad_bytes / DTYPE_BYTES[profile.dtype]))
        args = (elements, q, x.shape, profile.dtype)  # PowerSGD factorises (shape[0], prod(shape[1:]))
        sent = entry.messages(*args) if x.grad_bytes > 0 else (0.0,) * len(entry.messages(1, q, None))
        if x.grad_bytes > 0:
            decode1 += entry.decode_time(*args, fan_in=1)
            decode0 += entry.decode_time(*args, fan_in=0)
        parts.append(sent)
        encode.append(entry.encode_time(*args) if x.grad_bytes > 0 else 0.0)
    meta = {**profile.metadata, "compressor": spec, "uncompressed_grad_bytes": profile.grad_bytes}
    measured = (profile.metadata.get("codecs") or {}).get(codec_key(spec))
    if measured is not None:
        encode, decode1, decode0 = scaled_to_measured(np.array(encode), np.array(profile.column("grad_bytes")),
                                                      decode1, decode0, measured, entry.primitive)
        meta["codec"] = (f"measured: encode {measured['encode_s'] * 1e3:.3g} ms, decode "
                         f"{measured['decode_s'] * 1e3:.3g} ms on {measured['ranks']} rank(s)")
    layers = [replace(x, grad_bytes=float(sum(sent)), backward_s=x.backward_s + float(e))
              for x, sent, e in zip(profile.layers, parts, encode, strict=True)]
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
    p = as_rank(p)  # an integer in [1, MAX_RANKS], whatever its type
    if compressor is None:
        if isinstance(profile, ModelProfile) and isinstance(env, Environment) and has_terms(profile, env):
            return _simulate_terms(entry, profile, env, p, collective, options)
        return entry.run(profile, env, p, collective, **options)
    if entry.name not in COMPRESSIBLE:
        raise CommscopeError(f"compression runs on top of the schedules {', '.join(COMPRESSIBLE)}; "
                             f"{entry.name} communicates shards, got compressor {compressor!r}")
    c = compress(profile, compressor)
    with compressing(c, p):
        if isinstance(env, Environment) and has_terms(c.profile, env):
            r = _simulate_terms(entry, c.profile, env, p, collective, options)
        else:
            r = entry.run(c.profile, env, p, collective, **options)
    compute = profile.compute_s + profile.optimizer_s
    return IterationResult(r.schedule, r.p, r.iteration_time, compute, r.batch_size, r.timeline,
                           {**r.details, "compressor": compressor, "wire_bytes": c.profile.grad_bytes,
                            "primitive": c.primitive,
                            "codec": c.profile.metadata.get("codec", "modelled: memory passes on the reference "
                                                                     "device (costmodels.compression)")})
