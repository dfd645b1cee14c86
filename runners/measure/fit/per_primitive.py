"""Each code path of a sweep fitted on its own: the link as each primitive's code sees it.

A library runs each primitive through its own code. gloo's all-gather (``allgather.cc``) waits on each step's pair
of buffers and copies every block into place; its ring all-reduce (``allreduce.cc``) streams segments two at a time;
its reduce-scatter is that all-reduce (``allreduce_reduce_scatter``). One alpha and one beta for all of them is a
compromise none of them runs at: over the 36 four-rank environments of the shipped and kept validation runs, the
all-gather fitted alone took 1.08-1.36 times the all-reduce's alpha (beta 1.01-1.20 times; kept by the AIC in 31),
and the shared alpha priced every small all-reduce above what the sweep measured (e.g. 7.22 ms against 4.8-7.2 ms
from 64 B to 256 KiB at 1 Gbit/s, validation-run4), while per-tensor BSP and WFBP, which send only all-reduces,
paid for it.

:func:`per_primitive` groups the fitted primitives by their cost formula (one formula, one code path: gloo's
reduce-scatter joins its all-reduce), fits each group with the same fitter, and keeps the group holding the
all-reduce as the environment's ``alpha`` and ``beta``; every other group becomes ``primitive_factors`` (its alpha
and beta over those). ``gamma`` is the device's reduction cost, not a path's: every path is fitted with the shared
fit's (fitted where the primitives together separate it, else 0). The per-path model is kept only where the Akaike
information criterion of all records under it, counting every parameter each path fitted, is at least
:data:`FACTORS_AIC` below the shared link's (Burnham & Anderson 2002, sec. 2.6, as gamma is kept), else the shared
fit stands, with the reason in its notes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .identify import _SkipError
from .least_squares import _predict, weights
from .records import _gather, _select
from .result import FitResult

FACTORS_AIC = 2.0  # per-path factors are kept when they lower the AIC by at least this much (nested models)


def code_paths(algorithms: Mapping[str, str]) -> list[list[str]]:
    """The primitives grouped by the cost formula of their algorithm (same formula: same code path), in order."""
    groups: list[tuple[Any, list[str]]] = []
    for q, name in algorithms.items():
        expr = cm.collective(name).expr
        for e, qs in groups:
            if e == expr:
                qs.append(q)
                break
        else:
            groups.append((expr, [q]))
    return [qs for _, qs in groups]


def _aic(d: Any, res: FitResult, env: cm.Environment, k: int) -> tuple[float, np.ndarray]:
    """AIC of ``env`` over the records ``d`` (the weights of the least squares), and its predictions."""
    pred = _predict(d, res.algorithms, env)
    rss = float(np.sum(((pred - d.y) * weights(d)) ** 2))
    return len(d.y) * math.log(max(rss, 1e-300) / len(d.y)) + 2 * k, pred


def per_primitive(joint: FitResult, records: Any, refit: Callable[[list[str], str], FitResult],
                  statistic: str = "median") -> FitResult:
    """``joint`` (one link for every primitive) with each code path fitted on its own where the records show it.

    ``refit(primitives, algorithm)`` fits the group's records alone (the same method as ``joint``). Returns
    ``joint`` itself (a note added) when there is one code path, a group cannot be fitted alone, an alpha is 0,
    or the factors do not lower the AIC by :data:`FACTORS_AIC`.
    """
    groups = code_paths({q: joint.algorithms[q] for q in joint.primitives})
    if len(groups) < 2:
        return joint
    primary = next((g for g in groups if "allreduce" in g), max(groups, key=len))
    fits: dict[tuple[str, ...], FitResult] = {}
    for g in groups:
        try:
            fits[tuple(g)] = refit(g, ",".join(joint.algorithms[q] for q in g))
        except (CommscopeError, _SkipError) as exc:
            joint.notes.append(f"one link for every primitive: {'/'.join(g)} alone could not be fitted ({exc})")
            return joint
    base = fits[tuple(primary)].environment
    others = [(g, fits[tuple(g)].environment) for g in groups if g != primary]
    if base.alpha <= 0 or any(e.alpha <= 0 for _, e in others):
        joint.notes.append("one link for every primitive: an alpha fitted at 0 leaves no factor to express")
        return joint
    factors = {q: {"alpha": e.alpha / base.alpha, "beta": e.beta / base.beta} for g, e in others for q in g}
    env = base.with_(primitive_factors=factors)
    pairs, _bad, paths = _gather(records)
    d, _ = _select(pairs, joint.primitives, joint.min_bytes, [], paths, statistic)
    def fitted(res: FitResult) -> int:
        return sum(1 for p in res.parameters.values() if p.status == "fitted")

    gamma = joint.parameters.get("gamma")  # the device's, held by every path: counted once
    aic_joint, _ = _aic(d, joint, joint.environment, fitted(joint))
    aic_sep, pred = _aic(d, joint, env, sum(fitted(f) for f in fits.values())
                         + int(gamma is not None and gamma.status == "fitted"))
    said = env.factors_text()
    if aic_sep > aic_joint - FACTORS_AIC:
        joint.notes.append(f"one link for every primitive: fitting each code path alone ({said}) changed the AIC by "
                           f"{aic_sep - aic_joint:+.2f}, where it must lower it by {FACTORS_AIC:g}")
        return joint
    return _combined(joint, fits[tuple(primary)], env, d, pred, others, aic_sep, aic_joint)


def _combined(joint: FitResult, primary: FitResult, env: cm.Environment, d: Any, pred: np.ndarray,
              others: Sequence[tuple[list[str], cm.Environment]], aic: float, aic_joint: float) -> FitResult:
    """The per-path result: ``primary``'s parameters, every record's residual under ``env``."""
    rel = pred / d.y - 1.0
    residuals = [{"primitive": str(q), "algorithm": joint.algorithms[str(q)], "bytes": int(n_), "p": int(p_),
                  "ranks_per_node": int(r_), "measured_s": float(m_), "predicted_s": float(t_), "rel_error": float(e_)}
                 for q, n_, p_, r_, m_, t_, e_ in zip(d.prim, d.n, d.p, d.rpn, d.y, pred, rel, strict=True)]
    paths = [{"primitives": list(g), "alpha_factor": e.alpha / env.alpha, "beta_factor": e.beta / env.beta,
              "alpha_s": e.alpha, "beta_s_per_byte": e.beta} for g, e in others]
    note = (f"each code path fitted on its own ({'/'.join(primary.primitives)} sets alpha and beta; "
            f"{env.factors_text()}): AIC {aic:.1f} against {aic_joint:.1f} with one link for every primitive")
    params = {**primary.parameters, "gamma": joint.parameters["gamma"]} if "gamma" in joint.parameters else \
        dict(primary.parameters)
    out = replace(joint, parameters=params, residuals=residuals,
                  rms_rel_error=float(np.sqrt(np.mean(rel**2))), median_rel_error=float(np.median(np.abs(rel))),
                  max_rel_error=float(np.max(np.abs(rel))), aic=aic, notes=[*joint.notes, note], cpu=primary.cpu,
                  code_paths=paths)
    meta = out.metadata()
    meta["method"] = f"{joint.environment.metadata.get('method', meta['method'])}; {note}"
    description = (f"{out.algorithm} fitted per code path to {out.records} record(s): RMS relative error "
                   f"{out.rms_rel_error:.2%}, max {out.max_rel_error:.2%}; {env.factors_text()}")
    out.environment = env.with_(name=joint.environment.name, description=description,
                                source=joint.environment.source, metadata=meta, library=joint.environment.library)
    return out
