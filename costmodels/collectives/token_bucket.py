"""A collective over a link shaped by a token bucket (Linux ``tc tbf``): latency hidden by the bucket.

Derived here. A link shaped by a token bucket of ``B`` bytes at rate ``1/beta`` earns tokens at the rate
while it is idle, up to ``B``, and lets a message through at the host's speed as far as its tokens go; the
rest leaves at the rate. A flat algorithm of ``S`` steps (``S = dT/d alpha``) that puts ``W`` bytes on
its critical path's wire (``W = dT/d beta``) sends ``m = W / S`` bytes per step and, between its sends,
leaves the link idle for the step's other time, ``idle = (T - beta W) / S`` (its latency alpha and its
reduction). With the steps back to back, the bucket holds ``c = min(B, idle / beta)`` tokens when a send
starts (it emptied during the previous send if that was longer than its tokens, then refilled during
``idle``), so a step takes::

    idle + beta * max(0, m - min(B, idle / beta))  =  idle + m beta - min(idle, m beta, B beta)

and the collective::

    T_tb = T - S * min(idle, m beta, B beta)

For ``B = 0`` (a NIC; no bucket) this is ``T``. While the bucket refills within ``idle``
(``idle <= B beta``) a step takes ``max(idle, m beta)`` rather than their sum: a send shorter than the idle
time costs nothing beyond it (``T_tb = S idle``), and a longer one hides the latency (``T_tb = beta W``).

Against the emulated links of the shipped validation run (``runners/reference/validation``: ``tbf`` buckets of
4 ms of the rate) this explains why 64 KiB-1 MiB collectives ran up to 2x faster than alpha + n beta, and a
fit under it finds beta within 1-3% of the wire's framing-corrected cost per byte where the plain alpha-beta
fit finds 0.8 of it (faster than the wire). The model is homogeneous of degree one in (alpha, beta, gamma),
like every model here.

Only flat algorithms on the shaped (inter-node, or only) link get the term; the intra-node link (loopback
in the emulator) has no bucket, and hierarchical algorithms and lower bounds are left as they are.

Bytes that wait behind another rank's message (``serial``, s: a collective's ``serial`` expression, e.g. gloo's
allgather at p = 2, whose early rank waits for its peer's half-block before its receive notice arrives) are
not steps of the algorithm: that message leaves its sender's idle link on a full bucket, so up to ``B`` of
it pass at the host's speed and the wait is ``beta max(0, s - B)``. The rest of the time gets the term above::

    T_tb = tb(T - beta s; S, W - s) + beta max(0, s - B)

(derived here), which is ``T`` without a bucket.

**A message that finds the bucket full** (:data:`FULL_BUCKET`, derived here). The steps above start on ``c``
tokens, what one step's idle time earns: right for messages sent back to back, as a sweep times them. A
message sent after the link sat idle (the first of an iteration, after compute) or after a message whose steps
never emptied the bucket (``m <= c``: latency-bound) starts on ``B``. The surplus ``E = B - c`` pays for each
step's shortfall ``d = max(0, m - c)`` until it is spent, so the message takes
``beta * min(E, S d)`` less (the serial bytes already leave on a full bucket). Emulated 2 x 2 ranks behind
1 Gbit/s (B = 4 ms of the rate): a 1 MiB all-reduce took 13.1-13.6 ms back to back and 9.8-11.4 ms after
the small messages of a transformer's gradients; this prices them 13.5 and 10.3 ms.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np

FULL_BUCKET: contextvars.ContextVar[bool] = contextvars.ContextVar("commscope_full_bucket", default=False)


@contextlib.contextmanager
def full_bucket() -> Iterator[None]:
    """Within it, every shaped price is that of a message that finds the bucket full (module doc)."""
    token = FULL_BUCKET.set(True)
    try:
        yield
    finally:
        FULL_BUCKET.reset(token)


def _terms(time: Any, steps: Any, wire_bytes: Any, beta: Any, burst_bytes: Any
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """T, S, W, B as arrays, and each step's idle time and bytes (module doc)."""
    t, s, w, b = (np.asarray(x, dtype=np.float64) for x in (time, steps, wire_bytes, burst_bytes))
    with np.errstate(divide="ignore", invalid="ignore"):
        return t, s, w, b, (t - beta * w) / s, w / s


def token_bucket_time(time: Any, steps: Any, wire_bytes: Any, beta: Any, burst_bytes: Any,
                      serial_bytes: Any = 0.0) -> np.ndarray:
    """``T - S min(idle, m beta, B beta)`` (module doc): ``time`` T of the unshaped model, ``steps`` S =
    dT/d alpha, ``wire_bytes`` W = dT/d beta, ``beta`` of the shaped link and its bucket ``burst_bytes`` B
    (0 where unshaped); ``serial_bytes`` s (part of T and W) wait behind another rank's message and cost
    ``beta max(0, s - B)``; all broadcast."""
    sb = np.asarray(serial_bytes, dtype=np.float64)
    t, s, _, b, idle, per_step = _terms(np.asarray(time) - beta * sb, steps, np.asarray(wire_bytes) - sb, beta,
                                        burst_bytes)
    hidden = np.minimum(np.minimum(idle, per_step * beta), b * beta)
    if FULL_BUCKET.get():  # the surplus B - c over the steps' shortfalls m - c (module doc)
        with np.errstate(invalid="ignore", divide="ignore"):
            tokens = np.minimum(b, idle / beta)
        credit = beta * np.minimum(b - tokens, s * np.maximum(per_step - tokens, 0.0))
        hidden = hidden + np.where(s > 0, np.nan_to_num(np.maximum(credit, 0.0)) / np.where(s > 0, s, 1.0), 0.0)
    return np.where(s > 0, t - s * np.maximum(hidden, 0.0), t) + beta * np.maximum(sb - b, 0.0)


def token_bucket_gradient(time: Any, steps: Any, wire_bytes: Any, beta: Any, burst_bytes: Any,
                          d_time: Any, is_beta: bool, serial_bytes: Any = 0.0) -> np.ndarray:
    """d T_tb / d x from d T / d x (``d_time``) for one parameter x (``is_beta``: x is the shaped link's beta):
    minus S times the derivative of whichever of idle, m beta and B beta is the smallest (module doc), plus
    ``max(0, s - B)`` for beta."""
    sb = np.asarray(serial_bytes, dtype=np.float64)
    time, wire_bytes = np.asarray(time) - beta * sb, np.asarray(wire_bytes) - sb
    serial_part = np.maximum(sb - np.asarray(burst_bytes, dtype=np.float64), 0.0) if is_beta else 0.0
    d_time = np.asarray(d_time, dtype=np.float64) - (sb if is_beta else 0.0)
    return _base_gradient(time, steps, wire_bytes, beta, burst_bytes, d_time, is_beta) + serial_part


def _base_gradient(time: Any, steps: Any, wire_bytes: Any, beta: Any, burst_bytes: Any, d_time: Any,
                   is_beta: bool) -> np.ndarray:
    _, s, w, b, idle, per_step = _terms(time, steps, wire_bytes, beta, burst_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        d_idle = (np.asarray(d_time, dtype=np.float64) - (w if is_beta else 0.0)) / s
    wire, bucket = per_step * beta, b * beta
    d_wire = per_step if is_beta else np.zeros_like(per_step)
    d_bucket = b if is_beta else np.zeros_like(b)
    d_hidden = np.where((idle <= wire) & (idle <= bucket), d_idle, np.where(wire <= bucket, d_wire, d_bucket))
    d_hidden = np.where(np.minimum(np.minimum(idle, wire), bucket) > 0, d_hidden, 0.0)
    return np.where(s > 0, d_time - s * d_hidden, d_time)
