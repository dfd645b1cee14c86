"""The least-squares core: one algorithm per primitive fitted to the records, with 95% confidence intervals.

The parameters of the algorithms' cost models that best explain the measurements are found by least
squares on the *relative* error ``(predicted - measured) / measured`` (every size counts alike, from
1 KiB to 1 GiB), each divided by how precisely its record measured it (:func:`weights`), with every
parameter constrained to be >= 0 (``scipy.optimize.least_squares``). Every
model here is homogeneous of degree one in (alpha, beta, gamma, intra_alpha, intra_beta)
(``Collective.sensitivity``), and most are linear in them for fixed (n, p): their design matrix is
exact, its bounded linear solution is the closed form and the start; the others (pipelined trees) are
refined from a few linear solves.

Confidence intervals (95%) come from the Jacobian at the solution: cov = s^2 (J^T J)^-1 with
s^2 = RSS / (N - k), and Student's t with N - k degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .identify import _identify, _SkipError
from .records import _Data
from .result import PARAMS, FittedParameter

HOST = ("host_copy", "host_fault")
"""The library's host buffer costs: given (measured by :mod:`runners.measure.host_buffers`), never fitted."""
NO_HOST = (0.0, 0.0)


def _env(theta: Mapping[str, float], g: int, burst: float = 0.0, host: tuple[float, float] = NO_HOST
         ) -> cm.Environment:
    beta = max(theta["beta"], 1e-300)
    fixed = {"burst_bytes": burst, **dict(zip(HOST, host, strict=True))}
    if g > 1:
        return cm.Environment(alpha=theta["alpha"], beta=beta, gamma=theta["gamma"], intra_alpha=theta["intra_alpha"],
                              intra_beta=max(theta["intra_beta"], 1e-300), gpus_per_node=g, **fixed)
    return cm.Environment(alpha=theta["alpha"], beta=beta, gamma=theta["gamma"], **fixed)


MODEL_FLOOR = 0.01
"""Relative error below which no measurement is trusted to pin the model (derived here: the emulator verifies its
achieved rate to about 1% of the configured one, ``rate_check``, and a published figure is quoted to 2-3 digits)."""


def weights(d: _Data) -> np.ndarray:
    """Each record's weight in the least squares: w = (1 / y) tau / sqrt(tau^2 + se^2), tau = :data:`MODEL_FLOOR`.

    Derived here: the residual (predicted - y) / y of a record is the model's error plus the measurement's, whose
    standard deviation is the record's relative standard error se (:func:`.records.record_se`); weighted least
    squares divides each by sqrt(tau^2 + se^2). Records with se << tau (every size of a steady link) weigh as
    the plain relative error did, and records without per-iteration times (imports) exactly so. A record whose
    times scatter weighs less: gloo's all-gather at p = 2 is bimodal (16 MiB: 351 ms or 523 ms per call, the
    mean of 15 calls uncertain by 4.6%) and pulled beta 8% below the wire while the all-reduce and
    reduce-scatter sweeps of the same link sat at it within 1% (bench/results/validation_2ranks_full).
    """
    return (1.0 / d.y) * MODEL_FLOOR / np.sqrt(MODEL_FLOOR**2 + d.se**2)


def _linear(c: cm.Collective) -> bool:
    """True when the model is linear in the environment parameters (for fixed n, p)."""
    from costmodels import symbols as s

    syms = {s.alpha, s.beta, s.gamma, s.alpha_intra, s.beta_intra}
    return all(not (c.expr.diff(x).free_symbols & syms) for x in syms)


def _predict(d: _Data, algos: Mapping[str, str], env: cm.Environment) -> np.ndarray:
    out = np.empty_like(d.y)
    for q, name in algos.items():
        m = d.prim == q
        if m.any():
            out[m] = np.asarray(cm.collective(name).time(d.n[m], d.p[m], env, out_of_domain="nan"), dtype=np.float64)
    return out


def _design(d: _Data, algos: Mapping[str, str], env: cm.Environment) -> dict[str, np.ndarray]:
    """d time / d parameter at every record (the exact design matrix of linear models; the host buffers' columns
    too, whose given values are an offset)."""
    cols = {k: np.zeros_like(d.y) for k in (*PARAMS, *HOST)}
    for q, name in algos.items():
        m = d.prim == q
        if m.any():
            sens = cm.collective(name).sensitivity(d.n[m], d.p[m], env)
            for k, v in sens.items():
                cols[k][m] = np.broadcast_to(np.asarray(v, dtype=np.float64), (int(m.sum()),))
    return cols


@dataclass
class _Fit:
    algos: dict[str, str]
    theta: dict[str, float]
    params: dict[str, FittedParameter]
    pred: np.ndarray
    rel: np.ndarray
    aic: float
    k: int
    cond: float


def _fit_one(d: _Data, algos: dict[str, str], g: int, gamma_fixed: float | None, burst: float = 0.0,
             host: tuple[float, float] = NO_HOST) -> _Fit:
    """One combination of algorithms fitted; ``burst``: the token bucket of the records' shaped link, bytes
    (:mod:`costmodels.collectives.token_bucket`; the model is then piecewise linear, fitted by Gauss-Newton);
    ``host``: the library's host buffer costs (host_copy, host_fault), given."""
    from scipy import optimize, special

    for q, name in algos.items():
        c = cm.collective(name)
        m = d.prim == q
        if not m.any():
            continue
        if c.topology == "hierarchical" and g == 1:
            raise _SkipError(f"{name} needs a two-level environment (records of several nodes with several ranks "
                        "each); on one level it is the ring")
        probe = _env(dict.fromkeys(PARAMS, 1e-6), g)
        t = np.asarray(c.time(d.n[m], d.p[m], probe, out_of_domain="nan"), dtype=np.float64)
        if np.isnan(t).any():
            bad = sorted(set(d.p[m][np.isnan(t)].tolist()))
            where = c.domain.describe() if c.topology != "hierarchical" else f"p a multiple of {g} (or at most {g})"
            raise _SkipError(f"{name} is defined for {where}; the records have p = {', '.join(map(str, bad))}")
    linear = burst == 0 and all(_linear(cm.collective(a)) for a in algos.values())
    # a rough start from the data: y ~ a + b n over all records (relative weights)
    w = weights(d)
    a0 = optimize.lsq_linear(np.column_stack([w, d.n * w]), d.y * w, bounds=(0, np.inf)).x
    guess = {"alpha": max(a0[0] / 4, 1e-7), "beta": max(a0[1] / 2, 1e-13), "gamma": gamma_fixed or 0.0}
    guess["intra_alpha"], guess["intra_beta"] = guess["alpha"], guess["beta"]
    cols = _design(d, algos, _env(guess, g, burst, host))
    free, tied, why, cond = _identify(cols, d, g, gamma_fixed, algos)
    fixed = {k: 0.0 for k in PARAMS if k not in free and k not in tied}
    if gamma_fixed is not None:
        fixed["gamma"] = gamma_fixed
    k = len(free)
    N = len(d.y)
    if N <= k:
        raise CommscopeError(f"{N} record(s) are too few to fit {k} parameters ({', '.join(free)}); need at least "
                             f"{k + 1}")

    def full(u: np.ndarray) -> dict[str, float]:
        th = dict(fixed)
        th.update({name: float(v) for name, v in zip(free, u, strict=True)})
        for a, b in tied.items():
            th[a] = th[b]
        return th

    def weighted(cols_: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Design of the free parameters (tied columns folded in) and the target, both relative."""
        merged = {name: cols_[name].copy() for name in PARAMS}
        for a, b in tied.items():
            merged[b] = merged[b] + merged[a]
        offset = sum((merged[name] * v for name, v in fixed.items()), np.zeros_like(d.y))
        offset = offset + sum(cols_[name] * v for name, v in zip(HOST, host, strict=True))  # given, not fitted
        A = np.column_stack([merged[name] * w for name in free])
        return A, (d.y - offset) * w

    A, target = weighted(cols)
    scale = np.linalg.norm(A, axis=0)
    u = optimize.lsq_linear(A / scale, target, bounds=(0, np.inf)).x / scale
    if linear:
        sol = optimize.least_squares(lambda v: (A / scale) @ v - target, u * scale, jac=lambda v: A / scale,
                                     bounds=(0, np.inf), method="trf", x_scale=1.0)
        theta_u = sol.x / scale
        J = A
    else:
        for _ in range(4):  # Gauss-Newton steps of a homogeneous model: T(theta) = J(theta) theta
            start = full(u)
            if start["beta"] <= 0:
                break
            A_i, target_i = weighted(_design(d, algos, _env(start, g, burst, host)))
            if not np.all(np.isfinite(A_i)):
                break
            s_i = np.linalg.norm(A_i, axis=0)
            u = optimize.lsq_linear(A_i / s_i, target_i, bounds=(0, np.inf)).x / s_i
        scale = np.where(u > 0, 1.0 / np.maximum(u, 1e-300), scale)

        def residual(v: np.ndarray) -> np.ndarray:
            return (_predict(d, algos, _env(full(v / scale), g, burst, host)) - d.y) * w

        sol = optimize.least_squares(residual, u * scale, bounds=(0, np.inf), method="trf", jac="2-point",
                                     x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-12)
        theta_u = sol.x / scale
        J = sol.jac * scale
    theta = full(theta_u)
    env = _env(theta, g, burst, host)
    pred = _predict(d, algos, env)
    rel = (pred - d.y) / d.y
    rss = float(np.sum(((pred - d.y) * w) ** 2))  # weighted: what the fit minimised
    dof = N - k
    s2 = rss / dof
    JtJ = J.T @ J
    try:
        cov = s2 * np.linalg.inv(JtJ)
    except np.linalg.LinAlgError:
        cov = s2 * np.linalg.pinv(JtJ)
    tq = float(special.stdtrit(dof, 0.975))  # Student's t quantile
    params: dict[str, FittedParameter] = {}
    for i, name in enumerate(free):
        se = float(math.sqrt(max(cov[i, i], 0.0)))
        v = theta[name]
        note = "at its bound 0" if v == 0.0 else ""
        params[name] = FittedParameter(name, v, "fitted", (max(v - tq * se, 0.0), v + tq * se), se, note)
    for name in PARAMS:
        if name in params or (g == 1 and name.startswith("intra")):
            continue
        status = "fixed" if name == "gamma" and gamma_fixed is not None else "not identifiable"
        params[name] = FittedParameter(name, theta[name], status, None, None, why.get(name, ""))
    aic = N * math.log(max(rss, 1e-300) / N) + 2 * k
    return _Fit(dict(algos), theta, params, pred, rel, aic, k, cond)
