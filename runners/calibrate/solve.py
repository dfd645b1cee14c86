"""The fit of an environment's iteration terms to measured iterations, and the leave-one-technique-out check.

With the network terms (alpha, beta, gamma) fixed by the sweep, the iteration terms ``kappa_c`` (compute
slowed while a collective is in flight), ``kappa_m`` (communication slowed while compute runs) and
``host_overhead`` (LogP's o, seconds per message on the issuing thread) are found by least squares on the
relative error of every cell, ``r_i = predicted_i(theta) / measured_i - 1``, each term >= 0
(``scipy.optimize.least_squares``; the predictions are ``costmodels.sweep`` of each cell's schedule over the
base point and a forward step in every term at once: the Jacobian by forward differences). The overhead is
bounded above by the cheapest lone message the sweep prices at the cells' p (every message the sweep timed paid
o inside it); a term held at that bound is reported. The residuals are not convex in the terms, so the fit starts
from the given point, from the default one and (the contended step, a floor that holds only above the messages'
own step times and masks kappa_m where it holds) from the default one without a floor, and keeps the best. Terms that no
cell is sensitive to (kappa_c and kappa_m when no technique overlaps) are reported as not identifiable and
kept at 0; two terms whose estimates are correlated beyond 0.99 (kappa_c against kappa_m when every
overlapping cell is communication-bound: a ridge of equally good fits), or whose interval is wider than ten
times their value, are reported as not separable; the interval alone cannot say so when the data fit exactly.

Confidence intervals (95%): cov = s^2 (J^T J)^-1 with s^2 = RSS / (N - k) and Student's t with N - k
degrees of freedom, as for the sweep fit (:mod:`runners.measure.fit.least_squares`).

Leave-one-technique-out: for each technique, the terms are fitted on the cells of the other techniques
and that technique's cells are predicted; its error there is what a person who never measured it would see.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .cells import OVERLAPPING, Cell, gather_cells, scale_latency, sweep_environment
from .result import CalibrationResult, LeftOut, TermFit

TERMS = ("kappa_c", "kappa_m", "host_overhead", "contended_step", "compute_loss_step")  # what can be calibrated
# what is calibrated unless asked otherwise: the contended step is measured (bench_overlap_diagnostics) but, fitted
# as a fourth term on the shipped runs, it did not make the techniques left out any better (README, Validation)
FITTED = ("kappa_c", "kappa_m", "host_overhead")
# scale of each term in the solver's variables (O(1) steps): kappas as they are, the overhead and the step in ms
SCALE = {"kappa_c": 1.0, "kappa_m": 1.0, "host_overhead": 1e-3, "contended_step": 1e-3, "compute_loss_step": 1e-3}
START = {"kappa_c": 0.05, "kappa_m": 0.05, "host_overhead": 1e-4, "contended_step": 1e-3, "compute_loss_step": 5e-4}
STEP = 1e-4  # forward-difference step in the solver's units (kappa 1e-4, overhead 0.1 us)
IDENTIFIABLE = 1e-6  # a term whose Jacobian column has a smaller norm (relative error per unit) is not seen
RIDGE = 0.99  # |correlation| of two estimates above which only a combination of them is measured
AT_BOUND = 5e-3  # a term within this fraction of its physical upper bound is reported as held there
RANK_RTOL = 1e-9  # singular values of the Jacobian below this share of the largest: terms not separable


def predict_grid(cells: Sequence[Cell], envs: Sequence[cm.Environment]) -> np.ndarray:
    """Predicted seconds per iteration of every cell (columns) in every environment (rows), one vectorized sweep
    per distinct (technique, options, model, p); NaN where a cell cannot be predicted."""
    from runners.training.pricing import predict_many

    out = np.full((len(envs), len(cells)), math.nan)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(cells):
        key = (c.technique, json.dumps(dict(c.options), sort_keys=True, default=str), c.model, c.p, id(c.profile),
               c.latency_scale)
        groups.setdefault(key, []).append(i)
    for idx in groups.values():
        c = cells[idx[0]]
        mine = envs if c.latency_scale == 1.0 else [scale_latency(e, c.latency_scale) for e in envs]
        try:
            col = predict_many(c.technique, c.options, c.profile, mine, c.p)
        except CommscopeError:
            continue
        out[:, idx] = col[:, None]
    return out


def predict_cells(cells: Sequence[Cell], env: cm.Environment) -> np.ndarray:
    """Predicted seconds per iteration of every cell in ``env`` (NaN where a cell cannot be predicted)."""
    return predict_grid(cells, [env])[0]


def with_terms(env: cm.Environment, values: Mapping[str, float]) -> cm.Environment:
    """``env`` with its iteration terms replaced."""
    return replace(env, **{k: float(v) for k, v in values.items()})


def _fit(cells: Sequence[Cell], env: cm.Environment, terms: Sequence[str], start: Mapping[str, float] | None = None
         ) -> tuple[dict[str, TermFit], np.ndarray, list[str], np.ndarray | None]:
    """Least squares of ``terms`` over ``cells`` (others kept as in ``env``) from ``start`` (default ``START``):
    the fits, the relative errors, the fitted terms' names and their covariance (in the terms' own units; None
    where the fit gives no interval)."""
    from scipy import optimize, stats

    measured = np.array([c.measured_s for c in cells])
    ps = sorted({c.p for c in cells})

    def envs_at(x: np.ndarray, names: Sequence[str], step: float = 0.0) -> list[cm.Environment]:
        base = {k: max(v, 0.0) * SCALE[k] for k, v in zip(names, x, strict=True)}
        out = [with_terms(env, base)]
        if step:
            for k in names:
                out.append(with_terms(env, {**base, k: base[k] + step * SCALE[k]}))
        return out

    def residual(x: np.ndarray, names: Sequence[str]) -> np.ndarray:
        r = predict_grid(cells, envs_at(x, names))[0] / measured - 1.0
        return np.where(np.isfinite(r), r, 0.0)

    def jacobian(x: np.ndarray, names: Sequence[str]) -> np.ndarray:  # forward differences, one sweep per cell
        grid = predict_grid(cells, envs_at(x, names, STEP)) / measured
        grid = np.where(np.isfinite(grid), grid, 0.0)
        return ((grid[1:] - grid[0]) / STEP).T

    def solve(x: np.ndarray) -> tuple[Any, list[str], dict[str, TermFit]]:
        """From ``x``: least squares, then again without the terms nothing is sensitive to."""
        names, blind_fits, sol = list(terms), {}, None
        upper = np.array([_upper(env, k, ps) / SCALE[k] for k in names])
        x = np.minimum(x, upper * (1 - 1e-9))
        for _ in range(len(TERMS) + 1):
            if not names:
                break
            sol = optimize.least_squares(residual, x, jac=jacobian, args=(names,), bounds=(0.0, upper), x_scale=1.0,
                                         ftol=1e-6, xtol=1e-4, max_nfev=40)
            norms = np.linalg.norm(sol.jac, axis=0)
            blind = [k for k, n in zip(names, norms, strict=True) if n < IDENTIFIABLE]
            if not blind:
                break
            for k in blind:
                blind_fits[k] = TermFit(k, 0.0, "not identifiable", note="no measured cell is sensitive to it "
                                        "near the fit; kept at 0")
            keep = [i for i, k in enumerate(names) if k not in blind]
            names, x, upper = [names[i] for i in keep], sol.x[keep], upper[keep]
        return sol, names, blind_fits

    # the residuals are not convex in the terms (a kappa_c ridge against kappa_m and o): solve from the given start
    # and from the default one, and keep the better fit
    starts = [{**START, **(start or {})}] + ([dict(START)] if start else [])
    if "contended_step" in terms:  # a floor masks kappa_m wherever it holds: also try without it
        starts.append({**START, "contended_step": 0.0})
    best: tuple[float, Any, list[str], dict[str, TermFit]] | None = None
    for s0 in starts:
        x0 = np.array([max(s0.get(k, START[k]), STEP * SCALE[k]) / SCALE[k] for k in terms])
        sol, names, blind_fits = solve(x0)
        cost = float(sol.cost) if sol is not None and names else math.inf
        if best is None or cost < best[0]:
            best = (cost, sol, names, blind_fits)
    assert best is not None
    _, sol, free, fits = best
    values = {k: float(v) * SCALE[k] for k, v in zip(free, sol.x if sol is not None and free else [], strict=False)}
    rel = residual(np.array([values[k] / SCALE[k] for k in free]), free) if free else residual(np.array([]), [])
    cov = None
    if free and sol is not None:
        n, k = len(cells), len(free)
        dof = n - k
        jac = sol.jac / np.array([SCALE[t] for t in free])  # d r / d term, in the term's own unit
        rss = float(np.sum(rel**2))
        cov = corr = None
        # terms not separable: a rank-deficient Jacobian in the solver's units (where the terms' scales are
        # comparable), judged with a relative tolerance, so that float noise in the inputs (1e-13) does not turn a
        # ridge into a huge but finite covariance
        sv = np.linalg.svd(np.asarray(sol.jac, dtype=float), compute_uv=False) if dof > 0 else np.array([])
        separable = bool(sv.size == k and np.all(np.isfinite(sv)) and sv.min() > RANK_RTOL * sv.max())
        if dof > 0 and separable:
            try:
                unscaled = np.linalg.inv(jac.T @ jac)
                cov = rss / dof * unscaled
                d = np.sqrt(np.abs(np.diag(unscaled)))
                corr = unscaled / np.outer(d, d)  # the estimates' correlation: a ridge shows whatever the noise
            except (np.linalg.LinAlgError, FloatingPointError):
                cov = corr = None
        tq = float(stats.t.ppf(0.975, dof)) if dof > 0 else math.nan
        for i, t in enumerate(free):
            if cov is None or not math.isfinite(cov[i, i]) or cov[i, i] < 0:
                why = "as many terms as cells: no interval" if dof <= 0 else "terms not separable: no interval"
                fits[t] = TermFit(t, values[t], "fitted", note=why)
                continue
            se = math.sqrt(cov[i, i])
            note = ""
            partner = max((j for j in range(len(free)) if j != i), key=lambda j: abs(corr[i, j]), default=None) \
                if corr is not None else None
            if partner is not None and abs(corr[i, partner]) > RIDGE:
                note = (f"not separable from {free[partner]} on these cells (estimates correlated "
                        f"{corr[i, partner]:+.3f}): only a combination of the two is measured; measure more "
                        "techniques or regimes")
            elif tq * se > max(10.0 * values[t], 10.0 * SCALE[t]):
                note = "not separable from the other terms on these cells: measure more techniques or regimes"
            fits[t] = TermFit(t, values[t], "fitted", ci95=(max(values[t] - tq * se, 0.0), values[t] + tq * se),
                              stderr=se, note=note)
        for t in free:  # a term held at its physical bound: the data asked for more than the bound allows
            limit = _upper(env, t, ps)
            if math.isfinite(limit) and values[t] >= limit * (1 - AT_BOUND):
                at = (f"at its physical bound ({limit * 1e6:.4g} us, the cheapest lone message the sweep prices, "
                      "which pays o inside it): the cells ask for more, so another term is missing")
                fits[t] = replace(fits[t], note="; ".join(n for n in (fits[t].note, at) if n))
    return {t: fits[t] for t in terms if t in fits}, rel, free, cov


SWEPT = ("allreduce", "allgather", "reduce_scatter")  # the primitives a sweep times and the techniques send


def _upper(env: cm.Environment, term: str, ps: Sequence[int] = ()) -> float:
    """The largest physical value of a term: the host overhead o is paid inside every lone message the sweep timed,
    so it cannot exceed the cheapest of them, the price of an empty message of each primitive at each of the
    cells' p (``ring_allreduce``: 2 (p - 1) alpha; ``ring_allgather``: (p - 1) alpha; a two-level environment's
    hierarchical prices hold its intra-node alpha); below it every message keeps a link time >= 0
    (``costmodels.schedules.core.LinkComm``). Without the cells' p: alpha, or the intra-node alpha, the price of
    one hop."""
    if term != "host_overhead":
        return math.inf
    if ps:
        from costmodels.messages import Comm

        algorithms = env.metadata.get("algorithms") if isinstance(env.metadata.get("algorithms"), dict) else None
        prices = [float(np.asarray(Comm(prim, int(p), env, algorithms)(0.0)).reshape(-1)[0])
                  for prim in SWEPT for p in sorted(set(ps)) if int(p) > 1]
        prices = [x for x in prices if math.isfinite(x) and x > 0]
        if prices:
            return min(prices)
    alphas = [a for a in (env.alpha, env.intra_alpha if env.two_level else None) if a is not None and a > 0]
    return min(alphas) if alphas else math.inf


def _require_mix(cells: Sequence[Cell], what: str) -> None:
    techs = {c.technique for c in cells}
    if len(techs) < 2 or not any(c.overlaps for c in cells) or all(c.overlaps for c in cells):
        raise CommscopeError(
            f"{what} needs measured iterations of at least two techniques, one that overlaps communication with "
            f"computation ({', '.join(sorted(OVERLAPPING))}) and one that does not (e.g. bsp); got "
            f"{', '.join(sorted(techs)) or 'none'}")


def fit_terms(cells: Sequence[Cell], env: cm.Environment, terms: Sequence[str] = FITTED,
              start: Mapping[str, float] | None = None) -> dict[str, TermFit]:
    """The iteration ``terms`` fitted to ``cells`` on top of ``env``'s network terms (see the module docstring),
    starting from ``start`` when given."""
    return _fit(cells, env, terms, start)[0]


def leave_one_technique_out(cells: Sequence[Cell], env: cm.Environment, terms: Sequence[str] = FITTED,
                            start: Mapping[str, float] | None = None) -> list[LeftOut]:
    """For each technique: the terms fitted on the other techniques' cells (from ``start``: the fit on every cell
    makes a close start), and its own cells predicted with them."""
    out = []
    for tech in sorted({c.technique for c in cells}):
        rest = [c for c in cells if c.technique != tech]
        mine = [c for c in cells if c.technique == tech]
        note = ""
        if len({c.technique for c in rest}) < 2 or not any(c.overlaps for c in rest) or all(c.overlaps for c in rest):
            note = "the other techniques do not include both an overlapping and a non-overlapping one"
        sub, _, free, cov = _fit(rest, env, terms, start)
        values = {t: f.value for t, f in sub.items()}
        pred = predict_cells(mine, with_terms(env, values))
        out.append(LeftOut(tech, values, [(c, float(p)) for c, p in zip(mine, pred, strict=True)], note,
                           tuple(prediction_stderr(mine, env, values, free, cov, pred))))
    return out


def prediction_stderr(cells: Sequence[Cell], env: cm.Environment, values: Mapping[str, float], free: Sequence[str],
                      cov: np.ndarray | None, pred: np.ndarray) -> list[float]:
    """Standard error of each cell's prediction from the fitted terms' covariance, by the delta method:
    var(T) = g^T cov g with g = dT/dtheta at the fit (forward differences, one step ``STEP`` per term in the
    solver's units). A cell of a technique left out can depend on a combination of the terms that the other
    techniques do not measure (a ridge): its standard error then exceeds its error, which says the prediction is
    not determined by those techniques. NaN where the fit gives no covariance (as many terms as cells, terms
    not separable)."""
    if cov is None or not free or not np.all(np.isfinite(cov)):
        return [math.nan] * len(cells)
    steps = np.array([STEP * SCALE[t] for t in free])
    stepped = predict_grid(cells, [with_terms(env, {**values, t: values[t] + h}) for t, h in zip(free, steps,
                                                                                                  strict=True)])
    g = (stepped - np.asarray(pred)[None, :]) / steps[:, None]  # (terms, cells)
    var = np.einsum("ic,ij,jc->c", g, cov, g)
    return [math.sqrt(v) if math.isfinite(v) and v >= 0 else math.nan for v in var]


def calibrate(paths: Sequence[str | Path], *, environment: cm.Environment | None = None,
              profile: cm.ModelProfile | None = None, terms: Sequence[str] = FITTED, name: str | None = None,
              leave_one_out: bool = True, host: Any = None) -> CalibrationResult:
    """Calibrate an environment on measured records: alpha, beta, gamma from the sweeps (or ``environment``),
    then ``terms`` from the iterations, with 95% CIs and the leave-one-technique-out errors; ``host``: the
    library's host buffer costs given to the sweep's fit (:func:`runners.measure.fit.fit`)."""
    from runners import results

    bad_terms = [t for t in terms if t not in TERMS]
    if bad_terms or not terms:
        raise CommscopeError(f"unknown term(s) {', '.join(map(repr, bad_terms)) or '(none)'}; allowed: "
                             f"{', '.join(TERMS)}")
    files = [str(p) for p in paths]
    loaded = results.load(files)
    cells = gather_cells(loaded.records, profile)
    _require_mix(cells, "calibration")
    sweep = None
    if environment is None:
        sweep = sweep_environment(files, loaded.records, name=name, host=host)
        base = sweep.environment
    else:
        base = environment
    base = with_terms(base, {t: 0.0 for t in TERMS})
    sweep_only = predict_cells(cells, base)
    fits = fit_terms(cells, base, terms)
    env = with_terms(base, {t: f.value for t, f in fits.items()})
    start = {t: f.value for t, f in fits.items()}
    left_out = leave_one_technique_out(cells, base, terms, start) if leave_one_out else []
    return CalibrationResult(environment=env, sweep=sweep, cells=cells, terms=fits,
                             predicted_s=predict_cells(cells, env),
                             sweep_only_s=sweep_only, left_out=left_out, files=files, bad=[str(b) for b in loaded.bad])


def describe(values: Mapping[str, float]) -> str:
    """Terms as people read them: kappas as they are, the overhead in microseconds."""
    parts = []
    for t in TERMS:
        if t in values:
            v = values[t]
            parts.append(f"{t} {v * 1e6:.4g} us" if t == "host_overhead" else
                         f"{t} {v * 1e3:.4g} ms" if t in ("contended_step", "compute_loss_step") else f"{t} {v:.4g}")
    return ", ".join(parts)

