"""Model selection: :func:`fit` fits every candidate algorithm (one per primitive) by least squares and
ranks them by AIC; the best one's environment is the result.

``fit(records, "allreduce", "ring_allreduce")`` finds the parameters of the algorithm's cost model
that best explain the measurements (:mod:`.least_squares`); with ``"auto"`` every registered
algorithm valid for the records is tried, and those within 2 of the best AIC are named as
indistinguishable from it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.analysis import default_candidates
from costmodels.errors import CommscopeError

from .cpu import fit_cpu
from .identify import _SkipError
from .least_squares import _env, _Fit, _fit_one
from .per_primitive import per_primitive as fit_per_code_path
from .records import STATISTICS, _Data, _gather, _layout, _primitives, _select
from .result import METHOD, Candidate, FitResult, FittedParameter

MAX_COMBINATIONS = 500
GAMMA_AIC = 2.0  # gamma is kept only when it lowers the AIC by at least this much (nested models)


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


def _gamma_earns_its_place(f: _Fit, d: _Data, algos: dict[str, str], g: int, burst: float,
                           host: tuple[float, float]) -> _Fit:
    """The fit with gamma, or the nested one without it when gamma does not lower the AIC by at least
    :data:`GAMMA_AIC` (Burnham & Anderson 2002, sec. 2.6: a model within 2 of the best has substantial support,
    so the extra parameter is not warranted). A reduction cost the records cannot see (gloo's ring all-reduce
    measures twice its all-gather within 2%, where 1.5-10.9 ns/B of gamma was fitted from the noise) is otherwise
    kept and charged on every reducing message."""
    if f.params.get("gamma") is None or f.params["gamma"].status != "fitted":
        return f
    try:
        f0 = _fit_one(d, algos, g, 0.0, burst, host)
    except (_SkipError, CommscopeError):
        return f
    if f.aic <= f0.aic - GAMMA_AIC:
        return f
    note = (f"fixed at 0: fitting it ({f.params['gamma'].value:.3g} s/B) changed the AIC by "
            f"{f.aic - f0.aic:+.2f}, where it must lower it by {GAMMA_AIC:g}; these records cannot see a reduction "
            "cost")
    f0.params["gamma"] = FittedParameter("gamma", 0.0, "not identifiable", None, None, note)
    return f0


def _files(paths: list[str], used: _Data, total: Mapping[str, int]) -> list[dict[str, Any]]:
    used_count = Counter(f for f in used.files if f is not None)
    return [{"path": p, "records": used_count.get(p, 0), "records_in_file": total.get(p, 0)} for p in paths]


def _run_info(d: _Data, g: int) -> dict[str, Any]:
    run = dict(d.runs[0])
    run["world_size"] = int(d.p.max())
    run["ranks_per_node"] = int(g if g > 1 else d.rpn.max())
    run["world_sizes"] = sorted(set(d.p.tolist()))
    return run


def fit(records: Any, primitive: str | Sequence[str] = "allreduce", algorithm: str | Sequence[str] | None = None, *,
        min_bytes: int | str = 0, gamma: Any = "auto", name: str | None = None, statistic: str = "median",
        burst: float | None = None, per_primitive: bool = True, host: Any = None) -> FitResult:
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
        statistic: the time of a record fitted: ``"median"`` (``time_s``), ``"mean"`` of its
            per-iteration times, or ``"chain"`` (each rank's calls summed, the slowest rank's: ``time_chain_s``,
            the mean where a record lacks it; see :func:`record_time`).
        burst: the token bucket of the link in bytes (:mod:`costmodels.collectives.token_bucket`); None: the
            records' network spec says (an emulated link's ``tc tbf``; 0 for a NIC).
        per_primitive: fit each code path (primitives priced by one formula) on its own and keep the others as
            ``primitive_factors`` of the all-reduce's link where the AIC says so (:mod:`.per_primitive`).
        host: (host_copy, host_fault) in s/byte, the library's host buffer costs measured on the ranks' host
            (:mod:`runners.measure.host_buffers`); given, not fitted; None: 0 (no host buffer priced).
    """
    host = host_costs(host)
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
    elif statistic == "chain":
        notes.append("fitted to each record's chain time (each rank's calls summed, the slowest rank's: the cost of "
                     "messages back to back)")
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
    nets = [r.get("network") for r in d.runs]
    network = nets[0] if nets else None
    burst = link_burst(network) if burst is None else float(burst)
    if any(host):
        notes.append(f"the library's host buffers are priced as measured on the host (host_copy {host[0]:.3g} s/B, "
                     f"host_fault {host[1]:.3g} s/B; costmodels.collectives.host_buffers), not fitted")
    if burst:
        notes.append(f"the link's token bucket ({burst:,.0f} B, tc tbf) is part of the model: latency hidden behind "
                     "back-to-back sends (costmodels.collectives.token_bucket)")
    fits: list[_Fit] = []
    ranking: list[Candidate] = []
    errors: list[str] = []
    for combo in combos:
        algos = dict(zip(present, combo, strict=True))
        label = "+".join(combo)
        try:
            f = _fit_one(d, algos, g, gamma_fixed, burst, host)
            if gamma_fixed is None:
                f = _gamma_earns_its_place(f, d, algos, g, burst, host)
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
        min_bytes=min_b, verdict=verdict, cpu=fit_cpu(d, best.algos, best.theta, g))
    env = _env(best.theta, g, burst, host)
    description = (f"{res.algorithm} fitted to {res.records} {'/'.join(present)} record(s) of {stems} "
                   f"(p = {', '.join(map(str, res.world_sizes))}): RMS relative error {res.rms_rel_error:.2%}, "
                   f"max {res.max_rel_error:.2%}, R^2 {r2:.5f}")
    source = "commscope fit of " + (", ".join(paths) if paths else "records") + f": {METHOD}"
    # the library that made the measurements chooses the algorithms when the environment prices a schedule
    # (gloo: one algorithm per primitive); other backends keep the ideal library and the fitted algorithms
    library = "gloo" if {r.get("backend") for r in d.runs} == {"gloo"} else "ideal"
    implausible = faster_than_the_wire(env.beta, network)
    if implausible:
        res.notes.append(implausible)
    res.environment = env.with_(name=name or f"fitted:{stems}", description=description, source=source,
                                metadata=res.metadata(), library=library)
    if per_primitive and len(present) > 1:
        def refit(prims: list[str], algos: str) -> FitResult:  # gamma is the device's: every path keeps the joint's
            return fit(records, prims, algos, min_bytes=min_b, gamma=res.environment.gamma, name=name,
                       statistic=statistic, burst=burst, per_primitive=False, host=host)
        res = fit_per_code_path(res, records, refit, statistic)
    return res


def host_costs(value: Any) -> tuple[float, float]:
    """(host_copy, host_fault) in s/byte from None (both 0), a pair, or a mapping with those keys."""
    if value is None:
        return (0.0, 0.0)
    if isinstance(value, Mapping):
        value = (value.get("host_copy", 0.0), value.get("host_fault", 0.0))
    try:
        pair = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        pair = ()
    if len(pair) != 2 or not all(math.isfinite(v) and v >= 0 for v in pair):
        raise CommscopeError(f"host buffers must be (host_copy, host_fault), each a finite number of s/byte >= 0, "
                             f"got {value!r}")
    return (pair[0], pair[1])


def link_burst(network: Any) -> float:
    """Bytes of the token bucket that shapes an emulated link (``qdisc.tbf.burst_bytes`` of the records' network
    spec), 0 for a link without one (a NIC, or records without a network spec)."""
    burst = ((network.get("qdisc") or {}).get("tbf") or {}).get("burst_bytes") if isinstance(network, Mapping) else None
    return float(burst) if isinstance(burst, (int, float)) and not isinstance(burst, bool) and burst > 0 else 0.0


WIRE_TOLERANCE = 0.97  # a fitted beta below 97% of the wire's cost per byte is physically implausible


def faster_than_the_wire(beta: float, network: Any) -> str | None:
    """A warning when a fitted beta is faster than the emulated link's wire (``expected_beta_s_per_byte`` of the
    records' network spec, framing included), else None. A token bucket lets bursts pass at the host's speed, so
    sizes that fit in it pull a least-squares beta below the wire; back-to-back messages then run at the wire."""
    wire = network.get("expected_beta_s_per_byte") if isinstance(network, Mapping) else None
    if not isinstance(wire, (int, float)) or wire <= 0 or beta >= WIRE_TOLERANCE * wire:
        return None
    burst = ((network.get("qdisc") or {}).get("tbf") or {}).get("burst_bytes")
    why = f" (a token bucket of {burst:,} bytes lets bursts through at the host's speed)" if burst else ""
    return (f"implausible: beta {beta * 1e9:.4g} ns/B is {wire / beta:.2f}x faster than the emulated link's wire "
            f"({wire * 1e9:.4g} ns/B at {network.get('rate', '?')}){why}; messages sent back to back will take "
            f"longer than this environment predicts")
