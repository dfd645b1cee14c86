"""Seeded, vectorized single-process simulation of n workers running each algorithm.

All replicas (independent seeds' worth of noise) and all horizons advance together in one array
of shape ``(horizons, replicas, n, d)``. Each horizon T runs with the step size its bound uses for
that T, so the simulated metric (measured as the bound's ``measure`` says) is directly comparable
with ``bound.value(T)``.

Algorithms form a registry (:data:`SIMULATIONS`) of :class:`SimulatedAlgorithm` entries: the bound
they are checked against, their parameters and defaults, how the bound's constants follow from the
problem and parameters, and one step function. See :mod:`convergence.sim_algorithms` for the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError
from costmodels.registry import Registry

from .bounds import bound
from .problems import Problem


@dataclass
class Run:
    """The state one step function advances: models ``x`` (horizons, replicas, n, d), steps ``gamma``
    (horizons, 1, 1, 1), the iteration ``t``, a random generator and per-algorithm ``state``."""

    problem: Problem
    params: dict[str, Any]
    gamma: np.ndarray
    horizons: np.ndarray
    rng: np.random.Generator
    x: np.ndarray
    t: int = 0
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulatedAlgorithm:
    """A simulated algorithm: ``step(run)`` advances ``run.x`` by one iteration; ``constants(problem,
    params)`` gives the bound's constants (the problem's own, adjusted); ``bound_for(params)`` names
    the bound whose step it runs with and which it must respect, unless ``unbounded(params)`` (no
    guarantee, e.g. a biased compressor without error feedback: it runs with the same step so that
    the two are compared fairly, and reports a NaN bound)."""

    name: str
    description: str
    step: Callable[[Run], None]
    bound_for: Callable[[Mapping[str, Any]], str]
    params: Mapping[str, Any] = field(default_factory=dict)
    constants: Callable[[Problem, Mapping[str, Any]], dict[str, float]] = lambda prob, params: {}
    check: Callable[[Problem, Mapping[str, Any]], str | None] = lambda prob, params: None
    unbounded: Callable[[Mapping[str, Any]], bool] = lambda params: False


SIMULATIONS: Registry[SimulatedAlgorithm] = Registry("simulated algorithm")


@dataclass(frozen=True)
class SimulationResult:
    """``metric[k]``: the replica mean of the bound's measure at horizon T_k (for ``l1_avg_squared``, the
    square of the replica mean); ``spread[k]`` its standard error; ``bound[k]`` the bound at T_k (NaN
    when the algorithm has none); ``step[k]`` the step used."""

    algorithm: str
    bound_name: str | None
    problem: str
    horizons: np.ndarray
    metric: np.ndarray
    spread: np.ndarray
    bound: np.ndarray
    step: np.ndarray
    constants: dict[str, float]
    params: dict[str, Any]

    @property
    def tightness(self) -> np.ndarray:
        """bound / empirical metric (>= 1 when the bound holds)."""
        return self.bound / self.metric


def bound_constants(algorithm: str, prob: Problem, params: Mapping[str, Any]) -> dict[str, float]:
    """The constants of ``algorithm``'s bound on ``prob`` (from the problem and the parameters)."""
    entry = SIMULATIONS.get(algorithm)
    c = {**prob.constants(), **entry.constants(prob, params)}
    names = {x.name for x in bound(entry.bound_for(params)).assumptions}
    return {k: v for k, v in c.items() if k in names}


def simulations() -> list[str]:
    """Names of the algorithms :func:`simulate` runs."""
    return SIMULATIONS.names()


def _metric_point(measure: str, prob: Problem, xbar: np.ndarray) -> np.ndarray:
    if measure == "l1_avg_squared":
        return np.abs(prob.full_grad(xbar)).sum(axis=-1)
    if measure == "last_dist_sq":
        if prob.x_star is None:
            raise CommscopeError(f"problem {prob.name} has no known minimiser x*, needed for a distance bound")
        return np.square(xbar - prob.x_star).sum(axis=-1)
    return np.square(prob.full_grad(xbar)).sum(axis=-1)


MAX_STEPS = 10**6
"""Longest horizon :func:`simulate` runs (one Python-level step per iteration)."""
MAX_WORK = 10**10
"""Most coordinate updates of one :func:`simulate` call (T x horizons x replicas x n x d): minutes at most."""


def _horizons(T: Any) -> np.ndarray:
    """``T`` as a 1-d int64 array of horizons in [1, :data:`MAX_STEPS`] (integral floats accepted)."""
    text = f"T must be one or more integers between 1 and {MAX_STEPS:,}, got {T!r}"
    if isinstance(T, (str, bytes, bool)):
        raise CommscopeError(text)
    try:
        arr = np.atleast_1d(np.asarray(T))
    except (TypeError, ValueError):
        raise CommscopeError(text) from None
    if arr.ndim != 1 or not arr.size or arr.dtype.kind not in "iuf":
        raise CommscopeError(text)
    values = arr.astype(np.float64)
    if not np.isfinite(values).all() or (values != np.floor(values)).any() or values.min() < 1:
        raise CommscopeError(text)
    if values.max() > MAX_STEPS:
        raise CommscopeError(f"T must be at most {MAX_STEPS:,} steps (one step of every worker at a time), got "
                             f"{int(values.max()):,}; simulate shorter horizons")
    return values.astype(np.int64)


def simulate(algorithm: str, problem: Problem, T: int | Sequence[int] = 1000, *, replicas: int = 32,
             seed: int = 0, n: int | None = None, **params: Any) -> SimulationResult:
    """Run ``algorithm`` on ``problem`` for each horizon in ``T`` with its bound's step size."""
    entry = SIMULATIONS.get(algorithm)
    if n is not None and n != problem.n:
        raise CommscopeError(f"the problem has n = {problem.n} workers, got n = {n!r}")
    unknown = sorted(set(params) - set(entry.params))
    if unknown:
        raise CommscopeError(f"{algorithm} takes {', '.join(entry.params) or 'no parameters'}, "
                             f"got {', '.join(unknown)}")
    params = {**entry.params, **params}
    horizons = _horizons(T)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise CommscopeError(f"replicas must be a positive integer, got {replicas!r}")
    work = int(horizons.max()) * len(horizons) * replicas * problem.n * problem.d
    if work > MAX_WORK:
        raise CommscopeError(f"this simulation would update {work:.3g} coordinates (T = {int(horizons.max()):,} "
                             f"steps x {len(horizons)} horizon(s) x {replicas} replicas x {problem.n} workers x "
                             f"{problem.d} dimensions), more than {MAX_WORK:.0e}; use a smaller T, fewer replicas or "
                             "horizons")
    problem_text = entry.check(problem, params)
    if problem_text:
        raise CommscopeError(f"{algorithm}: {problem_text}")
    b = bound(entry.bound_for(params))
    bound_name = None if entry.unbounded(params) else b.name
    consts = bound_constants(algorithm, problem, params)
    steps = np.asarray(b.step_size(horizons.astype(float), **consts), dtype=float)
    k, r, nw, d = len(horizons), replicas, problem.n, problem.d
    run = Run(problem, params, steps[:, None, None, None], horizons, np.random.default_rng(seed),
              np.broadcast_to(problem.x0, (k, r, nw, d)).copy())
    measure = b.measure
    total = np.zeros((k, r))
    last = np.zeros((k, r))
    for t in range(int(horizons.max()) + 1):
        xbar = run.x.mean(axis=2)
        if measure == "last_dist_sq":
            last = np.where((t == horizons)[:, None], _metric_point(measure, problem, xbar), last)
        elif t < horizons.max():
            total += np.where((t < horizons)[:, None], _metric_point(measure, problem, xbar), 0.0)
        if t == horizons.max():
            break
        run.t = t
        entry.step(run)
    per_replica = last if measure == "last_dist_sq" else total / horizons[:, None]
    mean = per_replica.mean(axis=1)
    err = per_replica.std(axis=1, ddof=1) / np.sqrt(r) if r > 1 else np.zeros(k)
    if measure == "l1_avg_squared":
        mean, err = mean**2, 2 * mean * err
    value = np.asarray(b.value(horizons.astype(float), **consts), dtype=float) if bound_name else np.full(k, np.nan)
    return SimulationResult(algorithm, bound_name, problem.name, horizons, mean, err, value, steps, consts, params)
