"""Hockney's two-regime fit: alpha from the latency-bound sizes, beta and gamma from the bandwidth-bound ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .cpu import fit_cpu, theta_of
from .least_squares import _predict
from .per_primitive import per_primitive as fit_per_code_path
from .records import _gather, _primitives, _select
from .result import METHOD, FitResult
from .selection import fit, link_burst

LATENCY_BELOW = 64 * 1024  # sizes below: latency-bound (alpha)
BANDWIDTH_FROM = 256 * 1024  # sizes from: bandwidth-bound (beta, gamma)


def fit_two_regimes(records: Any, primitive: str | Sequence[str] = "allreduce",
                    algorithm: str | Sequence[str] | None = None, *, latency_below: int | str = LATENCY_BELOW,
                    bandwidth_from: int | str = BANDWIDTH_FROM, statistic: str = "median",
                    name: str | None = None, per_primitive: bool = True, gamma: Any = "auto", host: Any = None
                    ) -> FitResult:
    """Hockney's two-regime fit: alpha from the latency-bound sizes, beta and gamma from the bandwidth-bound ones.

    One least-squares fit over every size assumes the link is alpha-beta at every size. A shaped link
    is not: a token bucket (tc tbf) lets a message smaller than its burst leave at the line rate, so the
    sizes in between pull beta below the sustained rate (fitted 66 ns/B against the 83.6 ns/B of 100
    Mbit/s with framing, on the shipped reference run). Here alpha is fitted (gamma fixed at 0) to the
    records below ``latency_below``, and beta (and gamma where identifiable) to those from
    ``bandwidth_from``, with that alpha kept from the first fit: Hockney's classic procedure (R. W.
    Hockney, "The communication challenge for MPP", Parallel Computing 20(3), 1994: latency from
    short messages, asymptotic bandwidth from long ones). The result's residuals and errors are those
    of the combined environment over all records of the primitives. Records of a link whose token bucket is
    known (an emulated link's network spec) get one fit over every size instead: the model then includes the
    bucket (:mod:`costmodels.collectives.token_bucket`), which explains both regimes. ``per_primitive``: each code
    path fitted on its own, as :func:`.selection.fit` does (:mod:`.per_primitive`); ``gamma`` and ``host``: as there.
    """
    lo_b, hi_b = cm.parse_size(latency_below), cm.parse_size(bandwidth_from)
    if not 0 < lo_b <= hi_b:
        raise CommscopeError(f"latency_below ({lo_b} B) must be > 0 and at most bandwidth_from ({hi_b} B)")
    pairs, _bad, _paths = _gather(records)
    prims = _primitives(primitive)
    coll = [r for r, _ in pairs if r.get("kind") == "collective" and r["config"].get("op") in prims]
    burst = link_burst(coll[0]["run"].get("network")) if coll else 0.0
    if burst:  # the bucket is in the model, which then explains both regimes at once: one fit over every size
        res = fit(records, prims, algorithm, statistic=statistic, name=name, per_primitive=per_primitive,
                  gamma=gamma, host=host)
        res.notes.append(f"one fit over every size, not two regimes: the link's token bucket ({burst:,.0f} B) that "
                         "made the sizes in between faster than alpha-beta is part of the model")
        return res
    small = [r for r in coll if int(r["config"]["bytes"]) < lo_b]
    if not small:
        raise CommscopeError(f"no {'/'.join(prims)} records below {cm.format_size(lo_b)} to fit the latency to")
    # latency-bound sizes: what beta does there is noise (and under a token bucket nothing), so no bucket here
    lat = fit(small, prims, algorithm, gamma=0.0, statistic=statistic, name=name, burst=0.0, host=host)
    bw = fit(records, prims, algorithm, min_bytes=hi_b, statistic=statistic, name=name, gamma=gamma,
             per_primitive=False, host=host)
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
                    world_sizes=bw.world_sizes, network=bw.network, run=bw.run, min_bytes=0, verdict=note,
                    cpu=fit_cpu(d, bw.algorithms, theta_of(env), bw.ranks_per_node))
    meta = out.metadata()
    meta["method"] = f"{METHOD}; {note}"
    out.environment = env.with_(metadata=meta, description=f"{bw.algorithm} fitted in two regimes: {note}")
    if per_primitive and len(out.primitives) > 1:
        def refit(group: list[str], algos: str) -> FitResult:
            return fit_two_regimes(records, group, algos, latency_below=lo_b, bandwidth_from=hi_b, statistic=statistic,
                                   name=name, per_primitive=False, gamma=out.environment.gamma, host=host)
        out = fit_per_code_path(out, records, refit, statistic)
    return out
