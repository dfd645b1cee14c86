"""The ranks' CPU seconds per collective step and per byte, from the sweep's per-call CPU times.

A CPU rank's collective costs its host's cores CPU time as well as wall time: the network stack's system calls
and copies, and the library's own threads (gloo's TCP loop thread). The sweep keeps each call's CPU seconds,
the mean over ranks (``cpu_s``, :func:`runners.measure.sweep.timing.measure`). Derived here: a flat algorithm
of ``S`` steps (``S = dT/d alpha`` of its model) that moves ``W`` bytes on its critical path (``W = dT/d beta``)
costs each rank about::

    cpu = c_step S + c_byte W

CPU seconds: a per-step cost (one send and one receive, their system calls and wake-ups) and a per-byte cost
(copies, checksums). Both are fitted, >= 0, by least squares on the relative error over every record that has
``cpu_s`` (``scipy.optimize.nnls``), with the steps and bytes of the algorithms the time fit chose. A two-level
environment's intra- and inter-node steps are counted alike. On four gloo ranks behind emulated 200 Mbit/s links
a small all-reduce (6 steps) took 1.0-1.5 ms of CPU per rank for a 4 ms call: latency-bound communication kept
about 4 x 1.3 / 4 = 1.3 of the host's 2 cores busy, where a bandwidth-bound one kept 0.05.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .least_squares import _design, _env
from .records import _Data

MIN_RECORDS = 3


def theta_of(env: Any) -> dict[str, float]:
    """An environment's network parameters as the fit names them."""
    return {"alpha": float(env.alpha), "beta": float(env.beta), "gamma": float(env.gamma),
            "intra_alpha": float(env.intra_alpha or 0.0), "intra_beta": float(env.intra_beta or env.beta)}


def fit_cpu(d: _Data, algos: Mapping[str, str], theta: Mapping[str, float], g: int) -> dict[str, Any] | None:
    """``{s_per_step, s_per_byte, records, rms_rel_error, method}`` of the records' CPU seconds per call (module
    docstring), or None with fewer than :data:`MIN_RECORDS` records that carry one."""
    from scipy import optimize

    cpu = d.cpu if d.cpu is not None else np.full_like(d.y, np.nan)
    have = np.isfinite(cpu) & (cpu > 0)
    if int(have.sum()) < MIN_RECORDS:
        return None
    cols = _design(d, algos, _env(dict(theta), g))  # plain alpha-beta: every byte is handled, bucket or not
    steps = cols["alpha"] + cols["intra_alpha"]
    wire = cols["beta"] + cols["intra_beta"]
    a = np.column_stack([steps, wire])[have] / cpu[have][:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    x = optimize.nnls(a / scale, np.ones(int(have.sum())))[0] / scale
    rel = a @ x - 1.0
    return {"s_per_step": float(x[0]), "s_per_byte": float(x[1]), "records": int(have.sum()),
            "rms_rel_error": float(np.sqrt(np.mean(rel**2))),
            "method": "cpu_s = c_step * steps + c_byte * wire bytes of the fitted algorithms, non-negative least "
                      "squares on the relative error (runners.measure.fit.cpu)"}
