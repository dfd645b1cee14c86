"""Time to accuracy: iterations a convergence bound needs to reach eps, times seconds per iteration.

For every training algorithm (:mod:`convergence.algorithms`) ``seconds = T(eps) x t_iter`` where
``T(eps)`` is the smallest T at which the algorithm's bound is <= eps (:meth:`Bound.iterations_to`,
with the constants the algorithm fixes at each worker count p and the problem's L, sigma, Delta,
zeta) and ``t_iter`` the cost model's time of one of those iterations in each environment
(:meth:`Algorithm.iteration_time`, one vectorized :func:`costmodels.sweep` over all environments and
worker counts). Where a bound never reaches eps, the time is inf. A bound that needs each worker to
average K mini-batches per iteration (``Bound.batch``: signSGD's K = T) is priced at that batch: the
profile's iteration plus K - 1 forward and backward passes (gradient accumulation before the exchange),
which ``TimeToAccuracy.batches`` and the algorithm's note report.

Bounds are worst-case upper bounds with the constants derived here: the comparison says which
algorithm's *guarantee* is met first, not which run converges first in practice. Only bounds of one
metric are compared (the average squared gradient norm by default); others (signSGD's l1 metric,
the strongly convex distance) are reported but never win against them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.environment_array import EnvironmentArray
from costmodels.errors import CommscopeError

from .algorithms import DEFAULT_MEASURE, Algorithm, available, parse_algorithm
from .tta_inputs import (
    UNIT,
    Measured,
    _environments,
    _eps,
    _positive,
    _profile,
    _ranks,
    compressor_override,
    measured,
    priced_schedule,
)

DEFAULT_CONSTANTS: dict[str, float] = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "zeta": 0.0}
"""Problem constants used unless given: L-smooth, unit gradient noise, unit initial gap, i.i.d. data."""

FIXED_BY_ALGORITHM = {
    "n": "n = p (the workers)",
    "tau": "tau = p - 1 for async_sgd",
    "H": "H is local_sgd's parameter: ask for 'local_sgd:16'",
    "s": "s is ssp's parameter: ask for 'ssp:2'",
    "gap": "gap follows from the topology and p: ask for 'dpsgd:torus'",
    "delta": "delta follows from the compressor: ask for 'topk:0.001'",
    "omega": "omega follows from the compressor: ask for 'qsgd:4'",
}


# ------------------------------------------------------------------------------------- inputs
def _selection(algorithms: Any) -> list[tuple[Algorithm, Any]]:
    if algorithms is None:
        return [parse_algorithm(name) for name in available()]
    if isinstance(algorithms, str):
        algorithms = [x for x in algorithms.split(",") if x.strip()]
    if isinstance(algorithms, Algorithm):
        algorithms = [algorithms]
    picked = [parse_algorithm(x) for x in algorithms]
    if not picked:
        raise CommscopeError(f"give at least one algorithm; available: {', '.join(available())}")
    labels = [a.label(v) for a, v in picked]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise CommscopeError(f"algorithm {twice[0]} is listed twice")
    for a, _ in picked:
        a.get_bound()  # an algorithm whose bound is not registered (yet) fails here, naming it
    return picked


def _problem_constants(picked: list[tuple[Algorithm, Any]], constants: Mapping[str, Any],
                       base: Mapping[str, float] = DEFAULT_CONSTANTS) -> dict[str, float]:
    takes = {x.name for a, _ in picked for x in a.get_bound().assumptions}
    for k in constants:
        if k in FIXED_BY_ALGORITHM:
            raise CommscopeError(f"{k} is set by each algorithm, not given: {FIXED_BY_ALGORITHM[k]}")
    allowed = sorted((takes | set(DEFAULT_CONSTANTS)) - set(FIXED_BY_ALGORITHM))
    unknown = sorted(set(constants) - set(allowed))
    if unknown:
        raise CommscopeError(f"unknown constant {unknown[0]!r}; the chosen bounds take {', '.join(allowed)}")
    out = {**DEFAULT_CONSTANTS, **base}
    for k, v in constants.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
            raise CommscopeError(f"constant {k} must be a finite number, got {v!r}")
        out[k] = float(v)
    return out


# ------------------------------------------------------------------------------------- ranking
def _rank(seconds: np.ndarray, comparable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Winner index (-1 where nothing reaches eps) and margin runner-up / winner along axis 0 (over the
    comparable algorithms; times equal to 1e-9 count as a tie, won by the one listed first)."""
    t = np.where(comparable.reshape((-1,) + (1,) * (seconds.ndim - 1)), seconds, np.inf)
    first = t.min(axis=0)
    best = np.argmax(t <= first * (1 + 1e-9), axis=0)  # ties within rounding go to the first listed
    if len(t) > 1:
        second = np.partition(t, 1, axis=0)[1]
    else:
        second = np.full(first.shape, np.inf)
    reached = np.isfinite(first)
    with np.errstate(invalid="ignore", divide="ignore"):
        margin = np.where(reached, second / np.where(reached, first, 1.0), np.nan)
    return np.where(reached, best, -1), margin


def format_duration(s: float) -> str:
    """``12.3 s``, ``45.6 min``, ``7.8 h``, ``3.1 days``, ``2.5 years``; ``never`` for inf."""
    if not np.isfinite(s):
        return "never"
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if s >= 2 * size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


@dataclass(frozen=True, eq=False)
class TimeToAccuracy:
    """Iterations, seconds per iteration and seconds to eps of each algorithm in each configuration.

    Arrays are indexed ``[algorithm, *environment, p]``; the environment axes are those of the
    EnvironmentArray given (none for a single environment). ``winner`` is the index of the fastest
    comparable algorithm (-1 where none reaches eps), ``margin`` the runner-up's time over the
    winner's (inf when no runner-up reaches eps, nan when nobody does). ``batches``: the mini-batches of the
    profile each worker computes per iteration, 1 except where a bound needs a growing batch (signSGD's
    K = T, priced as gradient accumulation: ``seconds_per_iteration`` includes the extra forward and
    backward passes); 1 where eps is never reached. ``schedules``: what prices each algorithm's iteration
    (:func:`~convergence.tta_inputs.priced_schedule`); ``constants_source``: where the constants came from.
    """

    model: str
    eps: float
    p: np.ndarray
    envs: EnvironmentArray
    single_environment: bool
    algorithms: tuple[str, ...]
    names: tuple[str, ...]
    parameters: tuple[Any, ...]
    bounds: tuple[str, ...]
    measures: tuple[str, ...]
    comparable: np.ndarray
    constants: Mapping[str, float]
    notes: tuple[str, ...]
    iterations: np.ndarray
    seconds_per_iteration: np.ndarray
    seconds: np.ndarray
    winner: np.ndarray
    margin: np.ndarray
    batches: np.ndarray
    schedules: tuple[str, ...] = ()
    constants_source: str = UNIT

    @property
    def shape(self) -> tuple[int, ...]:
        """Configurations: ``envs.shape + (len(p),)``, without the environment axes for a single one."""
        return self.seconds.shape[1:]

    def index(self, algorithm: str) -> int:
        """Position of an algorithm (its name, or its label such as ``"local_sgd (H=8)"``)."""
        for i, (label, name) in enumerate(zip(self.algorithms, self.names, strict=True)):
            if algorithm in (label, name):
                return i
        raise CommscopeError(f"no algorithm {algorithm!r} in this result; it has {', '.join(self.algorithms)}")

    def ratio_to(self, reference: str = "sgd") -> np.ndarray:
        """Each algorithm's seconds over ``reference``'s (its name or label), ``[algorithm, *configuration]``;
        nan where the reference is not in the result, never reaches eps, or bounds another metric than the
        algorithm (inf where only the reference reaches eps)."""
        try:
            i = self.index(reference)
        except CommscopeError:
            return np.full(self.seconds.shape, np.nan)
        ref, same = self.seconds[i], np.array([m == self.measures[i] for m in self.measures])
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(np.isfinite(ref) & (ref > 0), self.seconds / np.where(ref > 0, ref, 1.0), np.nan)
        return np.where(same.reshape((-1,) + (1,) * (ratio.ndim - 1)), ratio, np.nan)

    def _environment_name(self, idx: tuple[int, ...]) -> str:
        e = idx[:-1] if not self.single_environment else (0,)
        return str(self.envs.names[e])

    def _config(self, index: Any) -> tuple[int, ...]:
        if index is None:
            if int(np.prod(self.shape)) != 1:
                raise CommscopeError(f"this result has {int(np.prod(self.shape))} configurations {self.shape}; "
                                     "give the index of one")
            return (0,) * len(self.shape)
        idx = (index,) if isinstance(index, (int, np.integer)) else tuple(index)
        if len(idx) != len(self.shape) or any(not 0 <= i < n for i, n in zip(idx, self.shape, strict=True)):
            raise CommscopeError(f"index {index!r} is not a configuration of shape {self.shape}")
        return idx

    def summary(self, index: Any = None) -> str:
        """One sentence: who reaches eps first in a configuration, and by how much."""
        idx = self._config(index)
        where = f"on {self._environment_name(idx)} with {int(self.p[idx[-1]])} workers and {self.model}"
        w = int(self.winner[idx])
        if w < 0:
            return f"{where}, no algorithm's bound reaches eps = {self.eps:g}"
        t = self.seconds[(slice(None), *idx)]
        line = (f"{where}, {self.algorithms[w]} reaches eps = {self.eps:g} first ({format_duration(t[w])}: "
                f"{self.iterations[(w, *idx)]:.4g} iterations of {self.seconds_per_iteration[(w, *idx)]:.4g} s)")
        m = float(self.margin[idx])
        if not np.isfinite(m):
            if int(self.comparable.sum()) == 1:
                return line + f"; it is the only one ranked on {self.measures[w]}"
            return line + f"; no other algorithm's bound on {self.measures[w]} reaches it"
        order = [i for i in np.argsort(t, kind="stable") if self.comparable[i] and i != w]
        r = order[0]
        return line + f", {m:.3g}x faster than the runner-up {self.algorithms[r]} ({format_duration(t[r])})"

    def rows(self) -> list[dict[str, Any]]:
        """One dict per (configuration, algorithm), ready for a table (inf where eps is never reached)."""
        out, to_sgd = [], self.ratio_to("sgd")
        for idx in np.ndindex(self.shape):
            w = int(self.winner[idx])
            best = float(self.seconds[(w, *idx)]) if w >= 0 else np.nan
            for i, label in enumerate(self.algorithms):
                at = (i, *idx)
                secs = float(self.seconds[at])
                out.append({
                    "model": self.model, "environment": self._environment_name(idx), "p": int(self.p[idx[-1]]),
                    "algorithm": label, "name": self.names[i], "parameter": self.parameters[i],
                    "bound": self.bounds[i], "measure": self.measures[i], "eps": self.eps,
                    "iterations": float(self.iterations[at]), "seconds_per_iteration": float(
                        self.seconds_per_iteration[at]), "batch": float(self.batches[at]), "seconds": secs,
                    "ratio_to_best": secs / best if self.comparable[i] and best > 0 else np.nan,
                    "ratio_to_sgd": float(to_sgd[at]), "schedule": self.schedules[i] if self.schedules else "",
                    "winner": i == w, "note": self.notes[i]})
        return out


def _evaluate(prof: cm.ModelProfile, envs: EnvironmentArray, single: bool, p: Any, eps: Any, algorithms: Any,
              constants: Mapping[str, Any], records: Any = None) -> TimeToAccuracy:
    e = _eps(eps)
    ranks = _ranks(p)
    picked = _selection(algorithms)
    m: Measured | None = None if records is None else measured(records, prof)
    problem = _problem_constants(picked, constants, m.problem if m else DEFAULT_CONSTANTS)
    measures = tuple(a.get_bound().measure for a, _ in picked)
    reference = DEFAULT_MEASURE if DEFAULT_MEASURE in measures else measures[0]
    env_shape = () if single else envs.shape
    shape = (*env_shape, len(ranks))
    iters, per_it, batches, notes = [], [], [], []
    for a, v in picked:
        b = a.get_bound()
        names = {x.name for x in b.assumptions}
        given = {k: x for k, x in problem.items() if k in names}
        fixed = {k: x for k, x in a.bound_constants(ranks, prof, v).items() if k in names}
        override, compressed = compressor_override(a, v, names, fixed, m, prof.name)
        given.update({**fixed, **override})
        it = np.broadcast_to(np.asarray(b.iterations_to(e, **given), dtype=np.float64), (len(ranks),))
        reached = np.isfinite(it)
        batch = np.where(reached, b.batch_size(np.where(reached, it, 1.0), **given), 1.0)
        # a bound that needs a per-worker batch of K mini-batches: K - 1 more forward and backward passes
        # accumulated before the iteration's communication (the profile prices one)
        t = a.iteration_time(prof, envs, ranks, v).reshape(shape) + (batch - 1) * prof.compute_s
        iters.append(np.broadcast_to(it, shape))
        per_it.append(t)
        batches.append(np.broadcast_to(batch, shape))
        ignored = sorted(k for k in constants if k in DEFAULT_CONSTANTS and k not in names)
        note = [] if b.measure == reference else [f"bound measures {b.measure}, not {reference}: not ranked"]
        if b.batch != 1:
            note.append(f"priced at the per-worker batch its bound needs ({b.batch} mini-batches of "
                        f"{prof.batch_size} per iteration, accumulated before each exchange), not the profile's")
        if ignored:
            note.append(f"its bound does not take {', '.join(ignored)}")
        if compressed:
            note.append(compressed)
        notes.append("; ".join(note))
    iterations = np.stack(iters)
    seconds_per_iteration = np.stack(per_it)
    with np.errstate(invalid="ignore"):
        seconds = iterations * seconds_per_iteration
    comparable = np.array([m == reference for m in measures])
    winner, margin = _rank(seconds, comparable)
    return TimeToAccuracy(prof.name, e, ranks, envs, single, tuple(a.label(v) for a, v in picked),
                          tuple(a.name for a, _ in picked), tuple(v for _, v in picked),
                          tuple(a.bound for a, _ in picked), measures, comparable, problem, tuple(notes), iterations,
                          seconds_per_iteration, seconds, winner, margin, np.stack(batches),
                          tuple(priced_schedule(a, v) for a, v in picked), m.source if m else UNIT)


def time_to_accuracy(model: str | cm.ModelProfile, env: Any, p: Any, eps: float, algorithms: Any = None,
                     constants: Any = None, **given: float) -> TimeToAccuracy:
    """Seconds until each algorithm's convergence bound reaches ``eps``, and which gets there first.

    ``model``: a shipped profile name (``cm.profiles()``), a profile JSON file or a ModelProfile.
    ``env``: a preset name, an environment JSON file, an Environment, a list of them or an
    EnvironmentArray. ``p``: workers, an int or an array. ``algorithms``: names or ``name:value``
    specs (``["sgd", "local_sgd:16", "topk:0.001", "dpsgd:torus"]`` or one comma-separated string);
    None = every algorithm whose bound is registered and measures the average squared gradient norm
    (signSGD's l1 bound and the strongly convex ones only when asked for).
    ``given`` (keywords): problem constants of the bounds, by default ``L = sigma = Delta = 1``, ``zeta = 0``
    (others such as ``mu`` as the chosen bounds need); n, tau, H, s, gap, delta and omega are set by
    the algorithms. ``constants``: results-store record dicts of kind "constants" (``commscope constants``;
    ``runners.results.load(path).records``): L, sigma (at the profile's per-worker batch), Delta and zeta
    measured on real training, and each compressor's measured delta / omega in place of its worst case where
    the records have it at the algorithm's setting (:mod:`convergence.tta_inputs`); keywords override them.

    >>> r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "local_sgd"])
    >>> r.algorithms, r.seconds.shape
    (('sgd', 'local_sgd (H=8)'), (2, 1))
    """
    envs, single = _environments(env)
    return _evaluate(_profile(model), envs, single, p, eps, algorithms, given, constants)


@dataclass(frozen=True, eq=False)
class WinnerMap:
    """Time to eps of each algorithm over bandwidth x latency x p: ``time[algorithm, bw, lat, p]``.

    ``winner[bw, lat, p]`` indexes ``algorithms`` (-1 where no bound reaches eps); ``margin`` is the
    runner-up's time over the winner's. ``result`` holds the same numbers as a
    :class:`TimeToAccuracy` over the environment grid, whose axes are (latency, bandwidth).
    """

    model: str
    eps: float
    bandwidths: np.ndarray
    latencies: np.ndarray
    p: np.ndarray
    algorithms: tuple[str, ...]
    time: np.ndarray
    iterations: np.ndarray
    seconds_per_iteration: np.ndarray
    winner: np.ndarray
    margin: np.ndarray
    result: TimeToAccuracy

    def winner_names(self) -> np.ndarray:
        """The winner's label at every point (``"-"`` where no bound reaches eps)."""
        labels = np.array([*self.algorithms, "-"], dtype=object)
        return labels[self.winner]

    def environment(self, bw: int, lat: int) -> cm.Environment:
        """The environment at bandwidth index ``bw`` and latency index ``lat``."""
        return self.result.envs[lat, bw]

    def counts(self) -> dict[str, int]:
        """How many points each algorithm wins (and ``"-"``: none reaches eps)."""
        names, n = np.unique(self.winner_names(), return_counts=True)
        return {str(k): int(v) for k, v in zip(names, n, strict=True)}


def winner_map(model: str | cm.ModelProfile, base_env: str | cm.Environment, bandwidths: Sequence[float] | np.ndarray,
               latencies: Sequence[float] | np.ndarray, p: Any, eps: float, algorithms: Any = None,
               constants: Any = None, **given: float) -> WinnerMap:
    """:func:`time_to_accuracy` over a bandwidth x latency grid around ``base_env`` and every p.

    ``bandwidths`` (bytes/s) and ``latencies`` (s) replace the base environment's inter-node beta = 1 /
    bandwidth and alpha (:meth:`EnvironmentArray.grid`); each algorithm is priced by one vectorized
    sweep over all of them and all p, and each bound's iterations once per p. ``constants`` and ``given`` as in
    :func:`time_to_accuracy`.
    """
    base = cm.environment(base_env) if isinstance(base_env, str) else base_env
    if not isinstance(base, cm.Environment):
        raise CommscopeError(f"base_env must be a preset name or a costmodels.Environment, got {base_env!r}")
    bw = _positive("bandwidths", bandwidths, "bytes/s", allow_zero=False)
    lat = _positive("latencies", latencies, "s", allow_zero=True)
    grid = EnvironmentArray.grid(base, alpha=lat, beta=1.0 / bw)  # (latency, bandwidth)
    r = _evaluate(_profile(model), grid, False, p, eps, algorithms, given, constants)

    def swap(a: np.ndarray, lead: int) -> np.ndarray:
        return np.swapaxes(a, lead, lead + 1)

    return WinnerMap(r.model, r.eps, bw, lat, r.p, r.algorithms, swap(r.seconds, 1), swap(r.iterations, 1),
                     swap(r.seconds_per_iteration, 1), swap(r.winner, 0), swap(r.margin, 0), r)
