"""Fitting an environment (alpha, beta, gamma; an intra-node link too) to measured collective times.

``fit(records, "allreduce", "ring_allreduce")`` finds the parameters of the algorithm's cost model
that best explain the measurements, by least squares on the *relative* error
``(predicted - measured) / measured`` (every size counts alike, from 1 KiB to 1 GiB), with every
parameter constrained to be >= 0 (``scipy.optimize.least_squares``). Every model here is homogeneous
of degree one in (alpha, beta, gamma, intra_alpha, intra_beta) (``Collective.sensitivity``), and most
are linear in them for fixed (n, p): their design matrix is exact, its bounded linear solution is the
closed form and the start; the others (pipelined trees) are refined from a few linear solves.

Identifiability is decided on the weighted, column-normalised design matrix, column by column in the
order beta, alpha, intra_beta, intra_alpha, gamma: a column whose distance to the span of those already
accepted is below 0.1 (its variance inflation factor would exceed 100) cannot be told apart from them.
In every allreduce model gamma's column is collinear with beta's (ring: gamma (p-1)/p n beside beta
2 (p-1)/p n; nearly so in the pipelined double binary tree), so allreduce records alone leave gamma
fixed at 0 with beta absorbing it; records of a primitive that reduces differently (allgather reduces
nothing, reduce_scatter half as much per byte sent) separate it.

Two levels: records with several ranks per node spanning several nodes fit the inter-node link; records
from within one node (p <= ranks per node) fit the intra-node link; without them the intra-node link
is not identifiable and is set equal to the inter-node one.

Confidence intervals (95%) come from the Jacobian at the solution: cov = s^2 (J^T J)^-1 with
s^2 = RSS / (N - k), and Student's t with N - k degrees of freedom.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.analysis import default_candidates
from costmodels.errors import CommscopeError

from . import results as rs

PARAMS = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta")
ORDER = ("beta", "alpha", "intra_beta", "intra_alpha", "gamma")  # identifiability is decided in this order
UNITS = {"alpha": "s", "beta": "s/byte", "gamma": "s/byte", "intra_alpha": "s", "intra_beta": "s/byte"}
SEPARATION_MIN = 0.1  # a column closer than this (relative) to the span of the others is not separable (VIF > 100)
MAX_COMBINATIONS = 500
DEFAULT_P1_BYTES = 64 * 1024
METHOD = ("weighted least squares on relative error (scipy.optimize.least_squares, parameters >= 0); "
          "95% CIs from s^2 (J^T J)^-1 and Student's t")


# ======================================================================================= results
@dataclass(frozen=True)
class FittedParameter:
    """One environment parameter: value, 95% CI, and whether it was fitted, fixed or not identifiable."""

    name: str
    value: float
    status: str  # "fitted" | "not identifiable" | "fixed"
    ci95: tuple[float, float] | None = None
    stderr: float | None = None
    note: str = ""

    @property
    def unit(self) -> str:
        return UNITS[self.name]

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "status": self.status,
                "ci95": None if self.ci95 is None else list(self.ci95), "stderr": self.stderr, "note": self.note}


@dataclass(frozen=True)
class Candidate:
    """One algorithm (one per primitive) fitted to the data, or why it could not be."""

    algorithm: str  # "ring_allreduce" or "ring_allreduce+ring_allgather"
    algorithms: dict[str, str]
    rms_rel_error: float | None = None
    max_rel_error: float | None = None
    aic: float | None = None
    parameters: int = 0
    skipped: str = ""
    delta_aic: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "algorithms": dict(self.algorithms), "rms_rel_error": self.rms_rel_error,
                "max_rel_error": self.max_rel_error, "aic": self.aic, "delta_aic": self.delta_aic,
                "parameters": self.parameters, "skipped": self.skipped, "note": self.note}


@dataclass
class FitResult:
    """What :func:`fit` found: the environment, its parameters with CIs, the fit quality, the residuals."""

    environment: cm.Environment
    primitives: tuple[str, ...]
    algorithms: dict[str, str]
    parameters: dict[str, FittedParameter]
    r2: float
    r2_log: float
    rms_rel_error: float
    median_rel_error: float
    max_rel_error: float
    aic: float
    condition_number: float
    residuals: list[dict[str, Any]]
    ranking: list[Candidate]
    files: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    bad: list[rs.BadLine] = field(default_factory=list)
    two_level: bool = False
    ranks_per_node: int = 1
    world_sizes: list[int] = field(default_factory=list)
    network: Any = None
    run: dict[str, Any] = field(default_factory=dict)
    min_bytes: int = 0
    verdict: str = ""

    @property
    def algorithm(self) -> str:
        return "+".join(self.algorithms[q] for q in self.primitives)

    @property
    def records(self) -> int:
        return len(self.residuals)

    def metadata(self) -> dict[str, Any]:
        """Provenance and quality of the fit, as the fitted environment carries it (JSON-able)."""
        return _jsonable({
            "fitted_by": "commscope fit", "method": METHOD, "files": self.files, "records": self.records,
            "primitives": list(self.primitives), "algorithm": self.algorithm, "algorithms": dict(self.algorithms),
            "min_bytes": self.min_bytes,
            "parameters": {k: v.to_dict() for k, v in self.parameters.items()},
            "r2": self.r2, "r2_log": self.r2_log, "rms_rel_error": self.rms_rel_error,
            "median_rel_error": self.median_rel_error, "max_rel_error": self.max_rel_error, "aic": self.aic,
            "condition_number": self.condition_number, "two_level": self.two_level,
            "ranks_per_node": self.ranks_per_node, "world_sizes": self.world_sizes, "network": self.network,
            "ranking": [c.to_dict() for c in self.ranking] if len(self.ranking) > 1 else [],
            "verdict": self.verdict, "notes": list(self.notes),
        })

    def to_dict(self) -> dict[str, Any]:
        """Everything, residual table included (for ``commscope fit --json``)."""
        return {"environment": self.environment.to_dict(), "fit": self.metadata(),
                "residuals": _jsonable(self.residuals), "bad_lines": [str(b) for b in self.bad]}

    def record(self) -> dict[str, Any]:
        """An ``environment``-kind record of the results store for this fit."""
        config = {"primitive": ",".join(self.primitives), "algorithm": self.algorithm,
                  "files": [f["path"] for f in self.files], "min_bytes": self.min_bytes}
        result = {"environment": self.environment.to_dict(), "fit": self.metadata()}
        return rs.record("environment", config, result, self.run, source="commscope fit")

    def summary(self) -> str:
        a, b = self.parameters["alpha"], self.parameters["beta"]
        return (f"{self.algorithm}: alpha = {a.value * 1e6:.4g} us, beta = {b.value * 1e9:.4g} ns/B "
                f"({1 / b.value / 1e9:.4g} GB/s); RMS relative error {self.rms_rel_error:.2%}, R^2 {self.r2:.5f}")


@dataclass(frozen=True)
class PredictionErrors:
    """Relative errors |predicted - measured| / measured of a model over records (P1 of benchmark 8c)."""

    median: float
    max: float
    rms: float
    count: int
    min_bytes: int
    algorithm: str

    def to_dict(self) -> dict[str, Any]:
        return {"median_rel_error": self.median, "max_rel_error": self.max, "rms_rel_error": self.rms,
                "count": self.count, "min_bytes": self.min_bytes, "algorithm": self.algorithm}


# ===================================================================================== helpers
def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


def _primitives(primitive: str | Sequence[str]) -> tuple[str, ...]:
    items = primitive.split(",") if isinstance(primitive, str) else list(primitive)
    prims = tuple(dict.fromkeys(x.strip() for x in items if isinstance(x, str) and x.strip()))
    if not prims:
        raise CommscopeError(f"primitive must name at least one primitive, got {primitive!r}")
    for q in prims:
        if q not in cm.PRIMITIVES:
            raise CommscopeError(f"no cost models for primitive {q!r}; modelled primitives: {', '.join(cm.PRIMITIVES)}")
    return prims


def _candidates(prims: tuple[str, ...], algorithm: str | Sequence[str] | None) -> dict[str, list[str]]:
    """Algorithms to try for each primitive: the named one, or every candidate (``auto``)."""
    if algorithm is None:
        names: list[str] = []
        for q in prims:
            names.append(f"ring_{q}" if f"ring_{q}" in cm.COLLECTIVES else "auto")
    elif isinstance(algorithm, str):
        names = [x.strip() for x in algorithm.split(",") if x.strip()]
    else:
        names = [str(x).strip() for x in algorithm if str(x).strip()]
    if not names:
        raise CommscopeError(f"algorithm must be 'auto' or algorithm name(s), got {algorithm!r}")
    allowed = ["auto"] + [a for q in prims for a in default_candidates(q)]
    out: dict[str, list[str]] = {}
    for name in names:
        if name.lower() == "auto":
            continue
        if name not in cm.COLLECTIVES:
            raise CommscopeError(f"unknown algorithm {name!r} for {', '.join(prims)}; allowed: {', '.join(allowed)}")
        c = cm.collective(name)
        if c.primitive not in prims:
            raise CommscopeError(f"{c.name} implements {c.primitive}, but the primitive(s) fitted are "
                                 f"{', '.join(prims)}; allowed: {', '.join(allowed)}")
        if c.is_lower_bound:
            raise CommscopeError(f"{c.name} is a lower bound, not an algorithm; allowed: {', '.join(allowed)}")
        if c.primitive in out:
            raise CommscopeError(f"two algorithms for {c.primitive}: {out[c.primitive][0]} and {c.name}; give one")
        out[c.primitive] = [c.name]
    for q in prims:
        if q not in out:
            out[q] = default_candidates(q)
            if not out[q]:
                raise CommscopeError(f"no algorithms registered for {q}")
    return out


def _gamma(gamma: Any) -> float | None:
    """None for 'auto' (fit when identifiable), else the fixed value."""
    if isinstance(gamma, str):
        if gamma.strip().lower() == "auto":
            return None
        try:
            gamma = float(gamma)
        except ValueError:
            raise CommscopeError(f"gamma must be 'auto' or a number of s/byte >= 0, got {gamma!r}") from None
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma < 0:
        raise CommscopeError(f"gamma must be 'auto' or a number of s/byte >= 0, got {gamma!r}")
    return float(gamma)


def _is_paths(x: Any) -> bool:
    if isinstance(x, (str, os.PathLike)):
        return True
    return isinstance(x, Sequence) and bool(x) and all(isinstance(e, (str, os.PathLike)) for e in x)


def _gather(records: Any) -> tuple[list[tuple[dict[str, Any], str | None]], list[rs.BadLine], list[str]]:
    """(record, file) pairs, bad lines, file names, from paths, a Loaded or a list of records."""
    if _is_paths(records):
        paths = [records] if isinstance(records, (str, os.PathLike)) else list(records)
        pairs: list[tuple[dict[str, Any], str | None]] = []
        bad: list[rs.BadLine] = []
        for path in paths:
            loaded = rs.load(path)
            pairs += [(r, str(path)) for r in loaded.records]
            bad += loaded.bad
        return pairs, bad, [str(x) for x in paths]
    if isinstance(records, rs.Loaded):
        return [(r, None) for r in records.records], list(records.bad), []
    if isinstance(records, Mapping) and records and all(isinstance(v, rs.Loaded) for v in records.values()):
        pairs = [(r, str(path)) for path, loaded in records.items() for r in loaded.records]
        return pairs, [b for loaded in records.values() for b in loaded.bad], [str(p) for p in records]
    if isinstance(records, Mapping) or not isinstance(records, Sequence):
        raise CommscopeError("records must be a list of result records, a results.Loaded, or results file path(s)")
    out = []
    for r in records:
        if not isinstance(r, Mapping):
            raise CommscopeError(f"records must be result records (dicts), got {type(r).__name__}")
        out.append((dict(r), None))
    return out, [], []


@dataclass
class _Data:
    prim: np.ndarray
    n: np.ndarray
    p: np.ndarray
    rpn: np.ndarray
    y: np.ndarray
    runs: list[dict[str, Any]]
    files: list[str | None]


STATISTICS = ("median", "mean")


def record_time(record: dict[str, Any], statistic: str = "median") -> float:
    """A collective record's time: its median (``time_s``), or the mean of its per-iteration ``times``.

    The mean is what a chain of many messages costs per message (sum of n draws ~ n x mean): on
    shared cores a small message's time is bimodal (0.2 ms usually, 4 ms one time in five, measured
    with 2 gloo ranks on 2 cores), so its median understates what 47 of them take back to back.
    Records without ``times`` (imported nccl-tests logs) keep ``time_s``.
    """
    if statistic not in STATISTICS:
        raise CommscopeError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    times = record["result"].get("times")
    if statistic == "mean" and isinstance(times, list) and times:
        return float(np.mean(times))
    return float(record["result"]["time_s"])


def _select(pairs: list[tuple[dict[str, Any], str | None]], prims: tuple[str, ...], min_bytes: int,
            bad: list[rs.BadLine], paths: list[str], statistic: str = "median") -> tuple[_Data, list[str]]:
    notes: list[str] = []
    where = f" in {', '.join(paths)}" if paths else ""
    coll = [(r, f) for r, f in pairs if r.get("kind") == "collective"]
    if not pairs:
        extra = f" ({len(bad)} bad line(s), first: {bad[0]})" if bad else ""
        raise CommscopeError(f"no valid records{where}{extra}")
    chosen = [(r, f) for r, f in coll if r["config"].get("op") in prims]
    if not chosen:
        found = Counter(r["config"].get("op") for r, _ in coll)
        kinds = Counter(r.get("kind") for r, _ in pairs)
        what = (", ".join(f"{op} ({k})" for op, k in sorted(found.items())) if found
                else "no collective records; kinds: " + ", ".join(f"{k} ({v})" for k, v in sorted(kinds.items())))
        raise CommscopeError(f"no {'/'.join(prims)} records{where}; found: {what}")
    ones = [x for x in chosen if int(x[0]["run"]["world_size"]) < 2]
    if ones:
        notes.append(f"skipped {len(ones)} record(s) with world size 1 (nothing crosses a link)")
    chosen = [x for x in chosen if int(x[0]["run"]["world_size"]) >= 2]
    small = [x for x in chosen if int(x[0]["config"]["bytes"]) < min_bytes]
    if small:
        notes.append(f"skipped {len(small)} record(s) below the minimum size {cm.format_size(min_bytes)}")
    chosen = [x for x in chosen if int(x[0]["config"]["bytes"]) >= min_bytes]
    if not chosen:
        raise CommscopeError(f"no {'/'.join(prims)} records{where} with world size >= 2 and at least "
                             f"{cm.format_size(min_bytes)}")
    for key, what in (("network", "emulated networks"), ("backend", "backends")):
        seen = {json.dumps(r["run"].get(key), sort_keys=True) for r, _ in chosen}
        if len(seen) > 1:
            raise CommscopeError(f"the records come from {len(seen)} different {what} ({'; '.join(sorted(seen))}); "
                                 "one environment cannot describe them: fit them separately")
    data = _Data(
        prim=np.array([r["config"]["op"] for r, _ in chosen], dtype=object),
        n=np.array([float(r["config"]["bytes"]) for r, _ in chosen]),
        p=np.array([int(r["run"]["world_size"]) for r, _ in chosen], dtype=np.int64),
        rpn=np.array([int(r["run"]["ranks_per_node"]) for r, _ in chosen], dtype=np.int64),
        y=np.array([record_time(r, statistic) for r, _ in chosen]),
        runs=[r["run"] for r, _ in chosen], files=[f for _, f in chosen])
    return data, notes


def _layout(d: _Data) -> int:
    """Ranks per node of a two-level environment (1 for one level); errors for layouts one env cannot hold."""
    multi = d.p > d.rpn
    if not multi.any():
        return 1  # one node: the only link is the one inside it
    gs = sorted(set(d.rpn[multi].tolist()))
    if len(gs) > 1:
        raise CommscopeError(f"the multi-node records have different ranks per node ({', '.join(map(str, gs))}); "
                             "one environment has one gpus_per_node: fit them separately")
    g = gs[0]
    over = (~multi) & (d.p > g)
    if over.any():
        raise CommscopeError(
            f"single-node records of {int(d.p[over][0])} ranks do not fit an environment whose nodes hold "
            f"{g} rank(s) (the multi-node records' ranks per node); fit them separately")
    return g


def _env(theta: Mapping[str, float], g: int) -> cm.Environment:
    beta = max(theta["beta"], 1e-300)
    if g > 1:
        return cm.Environment(alpha=theta["alpha"], beta=beta, gamma=theta["gamma"], intra_alpha=theta["intra_alpha"],
                              intra_beta=max(theta["intra_beta"], 1e-300), gpus_per_node=g)
    return cm.Environment(alpha=theta["alpha"], beta=beta, gamma=theta["gamma"])


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
    """d time / d parameter at every record (the exact design matrix of linear models)."""
    cols = {k: np.zeros_like(d.y) for k in PARAMS}
    for q, name in algos.items():
        m = d.prim == q
        if m.any():
            sens = cm.collective(name).sensitivity(d.n[m], d.p[m], env)
            for k, v in sens.items():
                cols[k][m] = np.broadcast_to(np.asarray(v, dtype=np.float64), (int(m.sum()),))
    return cols


def _distance(col: np.ndarray, basis: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """Relative distance of ``col`` to the span of ``basis`` (sin of the angle), and the coefficients."""
    if not basis:
        return 1.0, np.zeros(0)
    B = np.column_stack(basis)
    coef, *_ = np.linalg.lstsq(B, col, rcond=None)
    return float(np.linalg.norm(col - B @ coef) / np.linalg.norm(col)), coef


class _SkipError(CommscopeError):
    """A candidate algorithm that cannot be fitted to these records (the message says why)."""


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


def _greedy(cols: Mapping[str, np.ndarray], order: Sequence[str], w: np.ndarray, names: str, g: int,
            ) -> tuple[list[str], dict[str, str]]:
    """Accept the columns in ``order`` that stand apart from those accepted before them; say why not the others."""
    accepted: list[str] = []
    basis: list[np.ndarray] = []
    why: dict[str, str] = {}
    for k in order:
        col = cols[k] * w
        norm = float(np.linalg.norm(col))
        if norm == 0.0:
            if k == "gamma":
                why[k] = f"not in the model: {names} reduce(s) nothing in these records; fixed at 0"
            elif k.startswith("intra"):
                why[k] = f"no records from within one node (p <= {g} ranks)"
            else:
                why[k] = "no record depends on it"
            continue
        dist, _ = _distance(col / norm, basis)
        if dist >= SEPARATION_MIN:
            accepted.append(k)
            basis.append(col / norm)
            continue
        coef, *_ = np.linalg.lstsq(np.column_stack([cols[a] * w for a in accepted]), col, rcond=None)
        weight, *_ = np.linalg.lstsq(np.column_stack(basis), col / norm, rcond=None)
        used = [(a, c) for a, c, x in zip(accepted, coef, weight, strict=True) if abs(x) > 1e-6]
        others = " and ".join(a for a, _ in used) or ", ".join(accepted)
        if dist < 1e-9:
            how = (f"its column is collinear with {others}'s (distance {dist:.1e}): in {names} its coefficient is "
                   f"{' + '.join(f'{c:.3g} x {a}' + chr(39) + 's' for a, c in used)} in every record")
        else:
            how = (f"its column is nearly collinear with {others}'s (distance {dist:.3g} < {SEPARATION_MIN:g}, "
                   f"variance inflation {1 / dist**2:.0f}): these records cannot separate it")
        if k == "gamma":
            absorbed = ", ".join(f"{a} is {a} + {c:.3g} gamma" for a, c in used)
            how += (f"{', so the fitted ' + absorbed if dist < 1e-9 else ''}; records of a primitive that reduces "
                    "differently (e.g. primitive 'allreduce,allgather') separate it; fixed at 0")
        why[k] = how
    return accepted, why


def _identify(cols: dict[str, np.ndarray], d: _Data, g: int, gamma_fixed: float | None, algos: Mapping[str, str],
              ) -> tuple[list[str], dict[str, str], dict[str, str], float]:
    """Free parameters, tied ones (intra -> inter), why each left-out one is left out, and the condition number
    of the free parameters' (relative, column-normalised) design matrix."""
    w = 1.0 / d.y
    names = " + ".join(dict.fromkeys(algos.values()))
    order = [k for k in ORDER if (k != "gamma" or gamma_fixed is None) and (g > 1 or not k.startswith("intra"))]
    accepted, why = _greedy(cols, order, w, names, g)
    tied: dict[str, str] = {}
    if g > 1 and not {"intra_alpha", "intra_beta"} <= set(accepted):
        reasons = {k: why[k] for k in ("intra_beta", "intra_alpha") if k in why}
        reason = ("; ".join(f"{k}: {v}" for k, v in reasons.items()) if len(set(reasons.values())) > 1
                  else next(iter(reasons.values()), "only one of the pair is separable"))
        merged = dict(cols)
        for k in ("intra_alpha", "intra_beta"):
            tied[k] = k.removeprefix("intra_")
            merged[tied[k]] = cols[tied[k]] + cols[k]
        accepted, why = _greedy(merged, [k for k in order if not k.startswith("intra")], w, names, g)
        for k in ("intra_alpha", "intra_beta"):
            why[k] = f"not identifiable ({reason}): set equal to the inter-node link"
        cols = merged
    if gamma_fixed is not None:
        why["gamma"] = "fixed by the caller"
    for k in ("beta", "alpha"):
        if k not in accepted:
            sizes = sorted(set(d.n.tolist()))
            raise _SkipError(f"alpha and beta are not separable from these records ({k}: {why.get(k, '')}; sizes "
                        f"{', '.join(cm.format_size(s) for s in sizes[:6])}{' ...' if len(sizes) > 6 else ''}): "
                        "measure a sweep from small (latency-bound) to large (bandwidth-bound) sizes")
    basis = [cols[k] * w / np.linalg.norm(cols[k] * w) for k in accepted]
    cond = float(np.linalg.cond(np.column_stack(basis)))
    return accepted, tied, why, cond


def _fit_one(d: _Data, algos: dict[str, str], g: int, gamma_fixed: float | None) -> _Fit:
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
    linear = all(_linear(cm.collective(a)) for a in algos.values())
    # a rough start from the data: y ~ a + b n over all records (relative weights)
    w = 1.0 / d.y
    a0 = optimize.lsq_linear(np.column_stack([w, d.n * w]), np.ones_like(w), bounds=(0, np.inf)).x
    guess = {"alpha": max(a0[0] / 4, 1e-7), "beta": max(a0[1] / 2, 1e-13), "gamma": gamma_fixed or 0.0}
    guess["intra_alpha"], guess["intra_beta"] = guess["alpha"], guess["beta"]
    cols = _design(d, algos, _env(guess, g))
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
        A = np.column_stack([merged[name] * w for name in free])
        return A, 1.0 - offset * w

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
            A_i, target_i = weighted(_design(d, algos, _env(start, g)))
            if not np.all(np.isfinite(A_i)):
                break
            s_i = np.linalg.norm(A_i, axis=0)
            u = optimize.lsq_linear(A_i / s_i, target_i, bounds=(0, np.inf)).x / s_i
        scale = np.where(u > 0, 1.0 / np.maximum(u, 1e-300), scale)

        def residual(v: np.ndarray) -> np.ndarray:
            return _predict(d, algos, _env(full(v / scale), g)) * w - 1.0

        sol = optimize.least_squares(residual, u * scale, bounds=(0, np.inf), method="trf", jac="2-point",
                                     x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-12)
        theta_u = sol.x / scale
        J = sol.jac * scale
    theta = full(theta_u)
    env = _env(theta, g)
    pred = _predict(d, algos, env)
    rel = (pred - d.y) / d.y
    rss = float(np.sum(rel**2))
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


def _files(paths: list[str], used: _Data, total: Mapping[str, int]) -> list[dict[str, Any]]:
    used_count = Counter(f for f in used.files if f is not None)
    return [{"path": p, "records": used_count.get(p, 0), "records_in_file": total.get(p, 0)} for p in paths]


def _run_info(d: _Data, g: int) -> dict[str, Any]:
    run = dict(d.runs[0])
    run["world_size"] = int(d.p.max())
    run["ranks_per_node"] = int(g if g > 1 else d.rpn.max())
    run["world_sizes"] = sorted(set(d.p.tolist()))
    return run


# ========================================================================================= fit
def fit(records: Any, primitive: str | Sequence[str] = "allreduce", algorithm: str | Sequence[str] | None = None, *,
        min_bytes: int | str = 0, gamma: Any = "auto", name: str | None = None, statistic: str = "median"
        ) -> FitResult:
    """Fit the environment of a cost model to measured collective records.

    Args:
        records: result records (dicts), a :class:`runners.results.Loaded`, results file path(s), or a
            mapping of file name to the ``Loaded`` read from it; bad lines are kept in ``FitResult.bad``.
        primitive: the primitive(s) fitted together, e.g. ``"allreduce"`` or ``"allreduce,allgather"``
            (one link: their records share alpha, beta and gamma).
        algorithm: an algorithm name per primitive (comma-separated), or ``"auto"`` to fit every
            registered algorithm valid for the records' p and rank them (AIC, RMS relative error).
            A primitive left without one is ``auto``. Default: ``ring_<primitive>`` where registered.
        min_bytes: records smaller than this are left out (bytes, or a size such as ``"64KiB"``).
        gamma: ``"auto"`` (fitted where the design separates it from beta, else fixed at 0 with the
            reason) or a fixed value in s/byte.
        name: the environment's name (default ``fitted:<file stems>``).
        statistic: the time of a record fitted: ``"median"`` (``time_s``) or ``"mean"`` of its
            per-iteration times (see :func:`record_time`).
    """
    if statistic not in STATISTICS:
        raise CommscopeError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    prims = _primitives(primitive)
    cands = _candidates(prims, algorithm)
    gamma_fixed = _gamma(gamma)
    try:
        min_b = cm.parse_size(min_bytes)
    except CommscopeError as exc:
        raise CommscopeError(f"min_bytes: {exc}") from None
    pairs, bad, paths = _gather(records)
    d, notes = _select(pairs, prims, min_b, bad, paths, statistic)
    if statistic == "mean":
        notes.append("fitted to the mean of each record's per-iteration times (the cost of messages back to back)")
    sizes = sorted(set(d.n.tolist()))
    if len(sizes) < 2:
        raise CommscopeError(f"all {len(d.y)} {'/'.join(prims)} record(s) have one size ({cm.format_size(sizes[0])}):"
                             " alpha and beta are not separable; measure at least two sizes (a sweep from a few KiB "
                             "to many MiB)")
    g = _layout(d)
    present = [q for q in prims if (d.prim == q).any()]
    missing = [q for q in prims if q not in present]
    if missing:
        notes.append(f"no records of {', '.join(missing)}")
    combos = list(itertools.product(*(cands[q] for q in present)))
    if len(combos) > MAX_COMBINATIONS:
        raise CommscopeError(f"{len(combos)} algorithm combinations to try (more than {MAX_COMBINATIONS}); name the "
                             "algorithm of some primitives")
    fits: list[_Fit] = []
    ranking: list[Candidate] = []
    errors: list[str] = []
    for combo in combos:
        algos = dict(zip(present, combo, strict=True))
        label = "+".join(combo)
        try:
            f = _fit_one(d, algos, g, gamma_fixed)
        except _SkipError as exc:
            ranking.append(Candidate(label, algos, skipped=str(exc)))
            errors.append(str(exc))
            continue
        fits.append(f)
        ranking.append(Candidate(label, algos, float(np.sqrt(np.mean(f.rel**2))), float(np.max(np.abs(f.rel))),
                                 f.aic, f.k))
    if not fits:  # every candidate was skipped: say why
        if len(combos) == 1:
            raise CommscopeError(errors[0])
        raise CommscopeError("no candidate algorithm fits these records: " + "; ".join(errors))
    best = min(fits, key=lambda f: f.aic)
    ranked = sorted((c for c in ranking if not c.skipped), key=lambda c: float(c.aic or 0.0))
    delta = [float(c.aic or 0.0) - best.aic for c in ranked]
    ranking = [Candidate(c.algorithm, c.algorithms, c.rms_rel_error, c.max_rel_error, c.aic, c.parameters, "", dl,
                         "best" if i == 0 else ("indistinguishable from the best (delta AIC < 2)" if dl < 2 else ""))
               for i, (c, dl) in enumerate(zip(ranked, delta, strict=True))] + [c for c in ranking if c.skipped]
    best_label = "+".join(best.algos[q] for q in present)
    verdict = ""
    if len(ranked) > 1:
        runner = ranked[1]
        ties = [c.algorithm for c in ranking[1:] if c.note.startswith("indistinguishable")]
        verdict = (f"{best_label} explains the data best (RMS relative error {ranked[0].rms_rel_error:.2%}; next "
                   f"{runner.algorithm} {runner.rms_rel_error:.2%}, delta AIC {ranking[1].delta_aic:.1f})")
        if ties:
            verdict += (f"; {', '.join(ties)} explain(s) it as well (delta AIC < 2): these records cannot tell them "
                        "apart")
    absolute = np.abs(best.rel)
    y, pred = d.y, best.pred
    r2 = 1.0 - float(np.sum((pred - y) ** 2) / np.sum((y - y.mean()) ** 2))
    ly = np.log(y)
    r2_log = 1.0 - float(np.sum((np.log(pred) - ly) ** 2) / np.sum((ly - ly.mean()) ** 2))
    # files, network
    total = Counter(f for _, f in pairs if f is not None)
    files = _files(paths, d, total)
    nets = [r.get("network") for r in d.runs]
    network = nets[0] if nets else None
    stems = "+".join(Path(p).stem for p in paths) if paths else "records"
    res = FitResult(
        environment=cm.Environment(alpha=1.0, beta=1.0),  # replaced below, once the metadata is known
        primitives=tuple(present), algorithms=dict(best.algos), parameters=best.params, r2=r2, r2_log=r2_log,
        rms_rel_error=float(np.sqrt(np.mean(best.rel**2))), median_rel_error=float(np.median(absolute)),
        max_rel_error=float(np.max(absolute)), aic=best.aic, condition_number=best.cond,
        residuals=[{"primitive": str(q), "algorithm": best.algos[str(q)], "bytes": int(n_), "p": int(p_),
                    "ranks_per_node": int(r_), "measured_s": float(m_), "predicted_s": float(t_),
                    "rel_error": float(e_)}
                   for q, n_, p_, r_, m_, t_, e_ in zip(d.prim, d.n, d.p, d.rpn, d.y, pred, best.rel, strict=True)],
        ranking=ranking if len(combos) > 1 else [], files=files, notes=notes, bad=bad, two_level=g > 1,
        ranks_per_node=g, world_sizes=sorted(set(d.p.tolist())), network=network, run=_run_info(d, g),
        min_bytes=min_b, verdict=verdict)
    env = _env(best.theta, g)
    description = (f"{res.algorithm} fitted to {res.records} {'/'.join(present)} record(s) of {stems} "
                   f"(p = {', '.join(map(str, res.world_sizes))}): RMS relative error {res.rms_rel_error:.2%}, "
                   f"max {res.max_rel_error:.2%}, R^2 {r2:.5f}")
    source = "commscope fit of " + (", ".join(paths) if paths else "records") + f": {METHOD}"
    res.environment = env.with_(name=name or f"fitted:{stems}", description=description, source=source,
                                metadata=res.metadata())
    return res


# ============================================================================ prediction error
def prediction_errors(env: cm.Environment | str, records: Any, primitive: str | Sequence[str] | None = None,
                      algorithm: str | Sequence[str] | None = None, min_bytes: int | str = DEFAULT_P1_BYTES,
                      ) -> PredictionErrors:
    """Median, max and RMS of |predicted - measured| / measured over the records of at least ``min_bytes``.

    ``primitive`` and ``algorithm`` default to those a fitted environment's metadata names (else
    allreduce and its ring). Benchmark 8c's P1: median and max for n >= 64 KiB (goal: median <= 3%).
    """
    environment = cm.environment(env) if isinstance(env, str) else env
    if not isinstance(environment, cm.Environment):
        raise CommscopeError(f"env must be an Environment, a preset name or a JSON file, got {type(env).__name__}")
    meta = environment.metadata or {}
    if primitive is None:
        primitive = meta.get("primitives") or "allreduce"
    prims = _primitives(primitive)
    if algorithm is None and isinstance(meta.get("algorithms"), Mapping):
        algorithm = [v for q, v in meta["algorithms"].items() if q in prims] or None
    cands = _candidates(prims, algorithm)
    auto = [q for q, v in cands.items() if len(v) != 1]
    if auto:
        raise CommscopeError(f"name the algorithm of {', '.join(auto)} (auto has no single prediction)")
    algos = {q: v[0] for q, v in cands.items()}
    try:
        min_b = cm.parse_size(min_bytes)
    except CommscopeError as exc:
        raise CommscopeError(f"min_bytes: {exc}") from None
    pairs, bad, paths = _gather(records)
    d, _ = _select(pairs, prims, min_b, bad, paths)
    pred = np.empty_like(d.y)
    for q, name in algos.items():
        m = d.prim == q
        if m.any():
            pred[m] = np.asarray(cm.collective(name).time(d.n[m], d.p[m], environment), dtype=np.float64)
    rel = np.abs(pred - d.y) / d.y
    label = "+".join(algos[q] for q in prims)
    return PredictionErrors(float(np.median(rel)), float(np.max(rel)), float(np.sqrt(np.mean(rel**2))), len(rel), min_b,
                            label)


__all__ = ["Candidate", "FitResult", "FittedParameter", "PredictionErrors", "fit", "prediction_errors"]


LATENCY_BELOW = 64 * 1024  # sizes below: latency-bound (alpha)
BANDWIDTH_FROM = 256 * 1024  # sizes from: bandwidth-bound (beta, gamma)


def fit_two_regimes(records: Any, primitive: str | Sequence[str] = "allreduce",
                    algorithm: str | Sequence[str] | None = None, *, latency_below: int | str = LATENCY_BELOW,
                    bandwidth_from: int | str = BANDWIDTH_FROM, statistic: str = "median",
                    name: str | None = None) -> FitResult:
    """Hockney's two-regime fit: alpha from the latency-bound sizes, beta and gamma from the bandwidth-bound ones.

    One least-squares fit over every size assumes the link is alpha-beta at every size. A shaped link
    is not: a token bucket (tc tbf) lets a message smaller than its burst leave at the line rate, so the
    sizes in between pull beta below the sustained rate (fitted 66 ns/B against the 83.6 ns/B of 100
    Mbit/s with framing, on the shipped reference run). Here alpha is fitted (gamma fixed at 0) to the
    records below ``latency_below``, and beta (and gamma where identifiable) to those from
    ``bandwidth_from``, with that alpha kept from the first fit: Hockney's classic procedure (R. W.
    Hockney, "The communication challenge for MPP", Parallel Computing 20(3), 1994: latency from
    short messages, asymptotic bandwidth from long ones). The result's residuals and errors are those
    of the combined environment over all records of the primitives.
    """
    lo_b, hi_b = cm.parse_size(latency_below), cm.parse_size(bandwidth_from)
    if not 0 < lo_b <= hi_b:
        raise CommscopeError(f"latency_below ({lo_b} B) must be > 0 and at most bandwidth_from ({hi_b} B)")
    pairs, _bad, _paths = _gather(records)
    prims = _primitives(primitive)
    coll = [r for r, _ in pairs if r.get("kind") == "collective" and r["config"].get("op") in prims]
    small = [r for r in coll if int(r["config"]["bytes"]) < lo_b]
    if not small:
        raise CommscopeError(f"no {'/'.join(prims)} records below {cm.format_size(lo_b)} to fit the latency to")
    lat = fit(small, prims, algorithm, gamma=0.0, statistic=statistic, name=name)
    bw = fit(records, prims, algorithm, min_bytes=hi_b, statistic=statistic, name=name)
    env = bw.environment.with_(alpha=lat.environment.alpha)
    d, _ = _select([(r, None) for r in coll], prims, 0, [], [], statistic)
    rel = _predict(d, bw.algorithms, env) / d.y - 1.0
    residuals = [{"primitive": str(q), "p": int(p_), "bytes": int(n), "records": 1, "measured_s": float(y),
                  "predicted_s": float(y * (1 + e)), "rel_error": float(e)}
                 for q, p_, n, y, e in zip(d.prim, d.p, d.n, d.y, rel, strict=True)]
    params = {**bw.parameters, "alpha": lat.parameters["alpha"]}
    note = (f"two regimes (Hockney): alpha from {len(small)} record(s) below {cm.format_size(lo_b)} "
            f"(RMS {lat.rms_rel_error:.1%} there), beta and gamma from {bw.records} record(s) from "
            f"{cm.format_size(hi_b)} (RMS {bw.rms_rel_error:.1%} there)")
    abs_rel = np.abs(rel)
    out = FitResult(environment=env, primitives=bw.primitives, algorithms=bw.algorithms, parameters=params,
                    r2=bw.r2, r2_log=bw.r2_log, rms_rel_error=float(np.sqrt(np.mean(rel**2))),
                    median_rel_error=float(np.median(abs_rel)), max_rel_error=float(abs_rel.max()), aic=bw.aic,
                    condition_number=bw.condition_number, residuals=residuals, ranking=[], files=bw.files,
                    notes=[*bw.notes, note], bad=bw.bad, two_level=bw.two_level, ranks_per_node=bw.ranks_per_node,
                    world_sizes=bw.world_sizes, network=bw.network, run=bw.run, min_bytes=0, verdict=note)
    meta = out.metadata()
    meta["method"] = f"{METHOD}; {note}"
    out.environment = env.with_(metadata=meta, description=f"{bw.algorithm} fitted in two regimes: {note}")
    return out
