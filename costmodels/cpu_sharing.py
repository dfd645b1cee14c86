"""Interference of ranks that share a host's CPU cores with their own communication (CPU ranks under gloo).

Derived here. On CPU ranks the network stack (TCP send and receive copies, softirq) and the collective library's
own per-byte work (gloo's reduction and buffers: the fitted gamma) run on the cores that also compute. With the
links busy at their rate, R = 1 / beta payload bytes per second per rank, the communication of ``ranks`` ranks
keeps::

    L = ranks x R x (c + gamma / 2)    cores busy

where c is the host's CPU seconds per byte sent and received once (one send plus one receive; measured by
:mod:`runners.measure.emulate.cpu_cost`), each rank sends and receives R bytes per second in a ring, and reduces
half of what it receives (the reduce-scatter half of a ring all-reduce: (p - 1)/p n reduced bytes over
2 (p - 1)/p n beta seconds).

The scheduler shares the host's C cores fairly among runnable threads. While ranks compute (``compute_threads``
each) and communicate (``comm_threads`` each), communication gets at most its fair share
C_f = C x comm / (comm + compute) of the cores, and compute what communication leaves. So, with
l = min(L, C_f) the cores communication takes while both run:

* compute runs C / (C - l) times slower while a collective is in flight: **kappa_c = l / (C - l)**;
* communication runs min(L, C) / l times slower than alone (alone it takes min(L, C); the fitted beta already
  holds that limit): **kappa_m = min(L, C) / l - 1**.

**The compute a message's latency steps take (derived here).** Each latency step of a message also costs each rank
CPU time of its own, whatever its bytes: a send and a receive, their system calls and wake-ups (s_step CPU seconds,
fitted on the sweep's per-call CPU times, :mod:`runners.measure.fit.cpu`). All ``ranks`` ranks run the step at once,
taking ranks x s_step core-seconds from the C cores that compute, where each rank's compute had C / ranks cores:
each rank's compute loses

    compute_loss_step = s_step x ranks / C

seconds per step of a message that runs beside it (:mod:`costmodels.schedules.engine` spends it). On the shipped
validation run (2 cores, 4 ranks; s_step 0.28 ms at 2.5 Gbit/s) that is 0.56 ms a step, 3.4 ms for a 6-step
all-reduce, where MG-WFBP's iterations measured 3.6-4.4 ms more per message than prediction (a) priced.

Compute is assumed to keep every core busy (ranks x compute threads >= C, as the validation's 4 ranks on 2
cores do); on a host with idle cores the terms are upper bounds. On the shipped validation run (2 cores, 4
ranks, c about 0.65 ns/B measured on the same host) this gives kappa_c = 0.03, 0.55 and 1.0 at 200 Mbit/s,
1 Gbit/s (2 nodes x 2 ranks) and 2.5 Gbit/s, and kappa_m = 0, 0 and 0.67, where calibration on the measured
iterations found 0.12-0.26, 0.8-1.65 and 0.77-3.1 (kappa_c) and 0-0.25, 0-0.52 and 0.05-1.26 (kappa_m): the
order and the size of the effect come from the host alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import CommscopeError


@dataclass(frozen=True)
class SharedHost:
    """A host whose cores run ranks and their communication: ``cores``, ``ranks`` on it, threads per rank that
    compute and that communicate, ``cpu_s_per_byte`` (c: CPU seconds per byte sent and received once), with
    where c comes from, and ``cpu_s_per_step`` (s_step: CPU seconds per latency step of a message, 0: unknown)."""

    cores: float
    ranks: int
    cpu_s_per_byte: float
    compute_threads: int = 1
    comm_threads: int = 1
    source: str = ""
    cpu_s_per_step: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cores", "cpu_s_per_byte", "cpu_s_per_step"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (
                    name == "cores" and v == 0):
                allowed = "> 0" if name == "cores" else ">= 0"
                raise CommscopeError(f"{name} must be a finite number {allowed}, got {v!r}")
        for name in ("ranks", "compute_threads", "comm_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CommscopeError(f"{name} must be a positive integer, got {v!r}")


def communication_cores(env: Any, host: SharedHost) -> float:
    """L = ranks x (1 / beta) x (c + gamma / 2): cores the ranks' communication keeps busy at the link's rate."""
    return host.ranks * (host.cpu_s_per_byte + env.gamma / 2.0) / env.beta


def cpu_sharing_terms(env: Any, host: SharedHost) -> dict[str, float]:
    """``{kappa_c, kappa_m, compute_loss_step}`` of ranks sharing ``host``'s cores with their communication (module
    docstring), and ``load_cores`` (L) and ``fair_cores`` (C_f) behind them."""
    load = communication_cores(env, host)
    cores = float(host.cores)
    fair = cores * host.comm_threads / (host.comm_threads + host.compute_threads)
    taken = min(load, fair)
    kappa_c = taken / (cores - taken) if taken > 0 else 0.0
    kappa_m = min(load, cores) / taken - 1.0 if taken > 0 else 0.0
    return {"kappa_c": kappa_c, "kappa_m": max(kappa_m, 0.0), "load_cores": load, "fair_cores": fair,
            "compute_loss_step": host.cpu_s_per_step * host.ranks / cores}
