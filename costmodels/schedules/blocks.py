"""Building blocks the schedule families share.

The compute stream's events, DDP's bucket sizes and greedy grouping of messages, the bounded
grouping of DeAR and DeepSpeed, tensors cut into partitions, messages sent in order on one link (as
events, and as the vectorized :func:`serial_ends`), a bucket's chain of messages, option
validation, and the (reduce-scatter, allgather) pair of a decoupled allreduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._inputs import as_rank
from ..collectives.token_bucket import full_bucket
from ..environment import Environment
from ..errors import CommscopeError
from ..messages import WIRE, Comm
from ..profiles import ModelProfile
from ..timeline import Event, Timeline
from ..units import parse_size
from .core import IterationResult

DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 1 * 2**20
DDP_BROADCAST_BUCKET_BYTES = 250 * 2**20  # DistributedDataParallel.broadcast_bucket_size


def serial_ends(ready: np.ndarray, dt: np.ndarray, link_free: Any = 0.0) -> np.ndarray:
    """End times of messages sent in order on one link: ``e_j = max(e_{j-1}, ready_j) + dt_j``.

    Unrolled, ``e_j = S_j + max(e_{-1}, max_{k <= j}(ready_k - S_{k-1}))`` with ``S`` the running
    sum of ``dt``: a cumulative sum and a cumulative max along the last axis replace the loop, so
    all configurations (leading axes) advance together.
    """
    s = np.cumsum(dt, axis=-1)
    slack = np.maximum.accumulate(ready - (s - dt), axis=-1)
    return s + np.maximum(np.asarray(link_free)[..., None] if np.ndim(link_free) else link_free, slack)


def _compute_events(prof: ModelProfile, t0: float = 0.0) -> tuple[list[Event], np.ndarray]:
    """Forward then backward on the compute stream; returns events and each layer's gradient-ready time."""
    events, t = [], t0
    for layer in prof.layers:
        events.append(Event("compute", "forward", layer.name, t, t + layer.forward_s))
        t += layer.forward_s
    ready = np.empty(len(prof))
    for i in range(len(prof) - 1, -1, -1):
        layer = prof.layers[i]
        events.append(Event("compute", "backward", layer.name, t, t + layer.backward_s))
        t += layer.backward_s
        ready[i] = t
    return events, ready


def greedy_buckets(sizes_in_order: np.ndarray, cap: float, first_cap: float | None = None) -> list[list[int]]:
    """Group consecutive items so that each group reaches ``cap`` bytes (the last may be smaller).

    PyTorch DDP's rule (``_compute_bucket_assignment_by_size``): add tensors in gradient-ready
    order and close the bucket once its size reaches the limit; the first bucket uses
    ``first_cap`` (DDP: 1 MiB). Indices refer to positions in ``sizes_in_order``.
    """
    groups, cur, total = [], [], 0.0
    limit = cap if first_cap is None else first_cap
    for i, s in enumerate(sizes_in_order):
        cur.append(i)
        total += float(s)
        if total >= limit:
            groups.append(cur)
            cur, total, limit = [], 0.0, cap
    if cur:
        groups.append(cur)
    return groups


def bounded_buckets(sizes_in_order: np.ndarray, cap: float, strict: bool) -> list[list[int]]:
    """Group consecutive items while the group's total stays below ``cap`` (``strict``) or within it.

    An item joins the current group when the group is still empty of bytes or when the total with it
    is < cap (DeAR, ``dopt_rsag.py``: ``tot_size == 0 or tot_size + mod_size < threshold``) or <= cap
    (DeepSpeed ZeRO-1/2, ``reduce_independent_p_g_buckets_and_remove_grads``: a bucket is reduced before
    a gradient that would take it over ``reduce_bucket_size``); otherwise it starts the next group.
    """
    groups: list[list[int]] = []
    cur: list[int] = []
    total = 0.0
    for i, s in enumerate(sizes_in_order):
        s = float(s)
        if total == 0 or (total + s < cap if strict else total + s <= cap):
            cur.append(i)
            total += s
        else:
            groups.append(cur)
            cur, total = [i], s
    if cur:
        groups.append(cur)
    return groups


def partitions(nbytes: np.ndarray, part: float) -> tuple[np.ndarray, np.ndarray]:
    """Each tensor cut into partitions of ``part`` bytes (the last one smaller; an empty tensor is one
    empty partition), in order: (tensor of each partition, its bytes)."""
    counts = np.maximum(1, np.ceil(nbytes / part).astype(int))
    layer_of = np.repeat(np.arange(len(nbytes)), counts)
    chunk = np.arange(len(layer_of)) - np.repeat(np.cumsum(counts) - counts, counts)
    return layer_of, np.minimum(part, nbytes[layer_of] - chunk * part)


def chain_prices(comm: Comm, sizes: Any, sent: Any = None) -> np.ndarray:
    """Times of messages sent one after another on one link, ``sizes`` (..., M) in sending order.

    Over a link shaped by a token bucket, a message finds the bucket full when it is the first of the chain
    (the link sat idle through compute) or when the message before it never emptied it (it gained nothing from
    a full bucket: latency-bound); it then takes its full-bucket price (``token_bucket.full_bucket``), the
    others their back-to-back price, what the sweep measured (derived here; ``costmodels.collectives.
    token_bucket``). ``sent`` (same shape): which positions carry a message; the others are skipped (a
    message's predecessor is the last sent one). Without a bucket: ``comm(sizes)``.
    """
    t = comm(sizes)
    burst = getattr(getattr(comm, "env", None), "burst_bytes", None)
    if burst is not None and not np.any(np.asarray(burst) > 0):  # no link has a bucket: nothing to price again
        return t
    with full_bucket():
        full = comm(sizes)
    with np.errstate(invalid="ignore"):  # an infinite price (an overflowing environment) keeps it, credited nothing
        credit = np.where(np.isfinite(t) & np.isfinite(full), np.maximum(t - full, 0.0), 0.0)
    if not credit.any():
        return t
    on = np.ones(np.shape(credit), dtype=bool) if sent is None else np.broadcast_to(np.asarray(sent, bool),
                                                                                      np.shape(credit))
    at = np.arange(credit.shape[-1])
    last = np.maximum.accumulate(np.where(on, at, -1), axis=-1)  # the last sent position up to each one
    before = np.concatenate([np.full((*last.shape[:-1], 1), -1), last[..., :-1]], axis=-1)
    drained = np.take_along_axis(credit, np.maximum(before, 0), axis=-1) > 0
    return t - np.where((before < 0) | ~drained, credit, 0.0)


def buffer_broadcasts(prof: ModelProfile) -> np.ndarray:
    """Bytes of each message of PyTorch DDP's buffer broadcast, sent before every forward with
    ``broadcast_buffers=True`` (its default): ``_sync_buffers`` -> ``dist._broadcast_coalesced`` from rank 0, which
    flattens the buffers into buckets of one dtype of at most ``broadcast_bucket_size`` (250 MiB;
    ``compute_bucket_assignment_by_size`` in ``comm.cpp``) and broadcasts each, then waits. BatchNorm's running
    mean and variance (float) and its ``num_batches_tracked`` (int64) make two messages. The bytes by dtype come
    from the profile (:attr:`ModelProfile.buffer_bytes`); none: no message."""
    return np.array([n for n, _ in _buffer_messages(prof)], dtype=float)


def buffer_broadcast_labels(prof: ModelProfile) -> list[str]:
    """The timeline label of each message of :func:`buffer_broadcasts`: ``buffers (<dtype>)``."""
    return [f"buffers ({dtype})" for _, dtype in _buffer_messages(prof)]


def buffer_events(prof: ModelProfile, prices: Any) -> list[Event]:
    """The buffer broadcasts on the link's timeline, back to back from 0: ``prices`` the seconds of each message of
    :func:`buffer_broadcasts` (one configuration's)."""
    prices = np.asarray(prices, dtype=float).reshape(-1)
    ends = np.cumsum(prices)
    return [Event("comm", "broadcast", label, float(e - t), float(e), float(n)) for t, e, n, label in
            zip(prices, ends, buffer_broadcasts(prof), buffer_broadcast_labels(prof), strict=False)]


def _buffer_messages(prof: ModelProfile) -> list[tuple[float, str]]:
    cap = DDP_BROADCAST_BUCKET_BYTES
    out: list[tuple[float, str]] = []
    for dtype, nbytes in prof.buffer_bytes.items():
        full = int(np.ceil(nbytes / cap)) - 1
        out += [(float(cap), dtype)] * full + [(nbytes - full * cap, dtype)]
    return out


def broadcast_comm(p: Any, env: Any, collective: Any, comm: Any = Comm) -> Comm:
    """The broadcast DDP's buffers take: a fitted environment's algorithm for it (``collective`` as a mapping
    primitive -> algorithm), else the library's choice (an all-reduce algorithm named for the gradients says
    nothing about the broadcast). ``comm``: the class that prices it (:class:`.core.LinkComm` in the engine). The
    buffers travel as they are, whatever compressor the gradients' messages use (no :data:`WIRE`)."""
    token = WIRE.set(None)
    try:
        return comm("broadcast", p, env, collective.get("broadcast") if isinstance(collective, Mapping) else None,
                    {})
    finally:
        WIRE.reset(token)


def chained_prices(comm: Comm, sizes: np.ndarray) -> np.ndarray:
    """Time of each group's K messages sent back to back: ``sizes`` (groups, K) -> (configurations, groups).

    K = 1: one message per group, always sent (an empty group still pays a message), priced as a chain
    (:func:`chain_prices`). K > 1 (PowerSGD's uncompressed, P and Q all-reduces of a bucket): the empty ones are
    skipped, unless all are empty; each at its back-to-back price.
    """
    sizes = np.asarray(sizes, dtype=float).reshape(len(sizes), -1)
    if sizes.shape[1] == 1:
        return chain_prices(comm, sizes[None, :, 0])
    empty = ~(sizes > 0).any(axis=1)
    sent = (sizes > 0) | (empty[:, None] & (np.arange(sizes.shape[1]) == 0))
    return sum(np.where(sent[:, k], comm(sizes[None, :, k]), 0.0) for k in range(sizes.shape[1]))


def _send_in_order(groups: list[list[int]], ready: np.ndarray, nbytes: np.ndarray, comm: Comm, kind: str,
                   names: list[str], link_free: float = 0.0, times: np.ndarray | None = None
                   ) -> tuple[list[Event], float]:
    """Messages sent in the given order, each when all its layers are ready and the link is free
    (``times``: each message's duration, when it is not ``comm`` of its bytes)."""
    sizes = np.array([nbytes[g].sum() for g in groups])
    if times is None:
        times = chain_prices(comm, sizes) if len(groups) else np.array([])
    events, t = [], link_free
    for g, size, dt in zip(groups, sizes, times, strict=True):
        start = max(t, float(ready[g].max()))
        label = names[g[0]] if len(g) == 1 else f"{names[g[-1]]}..{names[g[0]]} ({len(g)})"
        events.append(Event("comm", kind, label, start, start + float(dt), float(size)))
        t = start + float(dt)
    return events, t


def _result(name: str, p: int, prof: ModelProfile, events: list[Event], **details: Any) -> IterationResult:
    tl = Timeline.of(events)
    return IterationResult(name, p, max(tl.end, prof.compute_s), prof.compute_s, prof.batch_size, tl, details)


def _validated(prof: ModelProfile, env: Environment, p: int) -> tuple[np.ndarray, list[str]]:
    if not isinstance(prof, ModelProfile):
        raise CommscopeError(f"profile must be a costmodels.ModelProfile, got {type(prof).__name__}")
    if not isinstance(env, Environment):
        raise CommscopeError(f"env must be a costmodels.Environment, got {type(env).__name__}")
    as_rank(p)
    return np.array(prof.column("grad_bytes")), [x.name for x in prof.layers]


def _bytes_option(name: str, value: Any) -> float:
    v = parse_size(value) if isinstance(value, str) else value
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        raise CommscopeError(f"{name} must be a positive number of bytes (or a size like '25MiB'), got {value!r}")
    return float(v)


# ------------------------------------------------------------ decoupled allreduce (DeAR, ZeRO, FSDP)
DECOUPLED = {
    "ring_allreduce": ("ring_reduce_scatter", "ring_allgather"),
    "gloo_ring_allreduce": ("allreduce_reduce_scatter", "gloo_ring_allgather"),  # gloo's own halves
    "rabenseifner_allreduce": ("recursive_halving_reduce_scatter", "recursive_doubling_allgather"),
}


def decoupled(collective: Any, who: str = "dear") -> tuple[str | None, str | None]:
    """(reduce-scatter, allgather) algorithms for a schedule that decouples the allreduce.

    ``collective``: None (the cheapest of each), an allreduce algorithm of :data:`DECOUPLED` (its
    two halves), or a mapping primitive -> algorithm such as a fitted environment's
    ``metadata["algorithms"]`` (a primitive it lacks gets the cheapest).
    """
    if collective is None:
        return None, None
    if isinstance(collective, Mapping):
        return collective.get("reduce_scatter"), collective.get("allgather")
    if collective not in DECOUPLED:
        what = ("dear decouples an allreduce into reduce-scatter + allgather; it knows how to for" if who == "dear"
                else "sharded schedules use reduce-scatter and allgather; give one of")
        raise CommscopeError(f"{what} {', '.join(DECOUPLED)} (or a mapping primitive -> algorithm, or None for "
                             f"the cheapest of each), got {collective!r}")
    return DECOUPLED[collective]


def negotiation_time(p: Any, env: Any, partitions_count: int, negotiation: Any) -> Any:
    """Seconds the scheduler waits before each batch: with ``negotiation``, rank 0's broadcast of the batch (a
    mask of one byte per partition) at the library's choice of broadcast (the runner's rule,
    ``runners/training/exact_bytescheduler.py``; Horovod's coordinator likewise negotiates every cycle), else 0."""
    if not isinstance(negotiation, (bool, np.bool_)):
        raise CommscopeError(f"negotiation must be True or False, got {negotiation!r}")
    if np.ndim(p):  # configurations, (C, 1)
        if not negotiation:
            return np.zeros(np.shape(p))
        return np.where(np.asarray(p) > 1, Comm("broadcast", p, env, None, {})(np.array([[float(partitions_count)]])),
                        0.0)
    if not negotiation or p <= 1:
        return 0.0
    return float(np.asarray(Comm("broadcast", p, env, None, {})(float(partitions_count))).reshape(-1)[0])
