"""Predicted time to accuracy of each algorithm relative to SGD, from its convergence bound with the constants
measured on the same task (``commscope constants``) and its seconds per step.

    predicted ratio = (T_a(eps) x t_a) / (T_sgd(eps) x t_sgd)

``T_a(eps)`` is the smallest T at which algorithm a's registered bound (``convergence.algorithms``: the bound of
the algorithm of that name) is <= eps (:meth:`convergence.Bound.iterations_to`), with the problem constants L,
sigma, Delta, zeta measured on the task (:func:`convergence.measured_constants.constants_from_records`), n = p,
H of local SGD, the spectral gap of D-PSGD's topology at p (:func:`convergence.spectral_gap`) and each
compressor's delta or omega *measured* on the task's gradients (the same bound with the compressor's worst case
beside it). ``t_a`` is a step's seconds: (1) measured, the median over seeds of the run's wall clock per step in
this same run (so the prediction tests the bound's count of steps, not the cost model), and (2) where the run
swept and fitted its link and profiled the model, the cost models' iteration time
(:func:`runners.training.pricing.predict`).

Bounds measure the average squared gradient norm, not a loss or an accuracy, so eps is anchored once, on SGD:
eps = B_sgd(T*), SGD's bound after the median number of steps SGD took to the target (T*). Only SGD's measurement
enters the predictions, and only through that one number; every other algorithm's prediction is then the number
of steps its bound needs to guarantee what SGD's guarantees at T*. Bounds are worst-case: their absolute times
are not compared, only ratios to SGD and the order.

A row says why it has no prediction where the bound does not describe the run: signSGD's bound measures the l1
norm with a mini-batch growing as T and identical workers (the run keeps its batch and shards the data); an
algorithm without a registered bound; a constant its bound needs that was not measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from costmodels.errors import CommscopeError

REFERENCE_MEASURE = "avg_grad_sq"


def problem_constants(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """L, sigma, Delta, zeta (the means over checkpoints, sigma at the measured batch), the compressors' measured
    delta / omega with their worst cases, and the record's notes on L (e.g. negative curvature)."""
    from convergence.measured_constants import compressor_constants_from_records, constants_from_records

    rec = next(r for r in records if r.get("kind") == "constants")
    return {"problem": constants_from_records(records), "compressors": compressor_constants_from_records(records),
            "L_note": rec["result"]["L"].get("note", ""), "L_used": rec["result"]["L"].get("used", ""),
            "record": rec}


def _fixed(algorithm: str, options: Mapping[str, Any], p: int, compressor: Mapping[str, Any] | None,
           worst: bool) -> dict[str, float]:
    """The constants an algorithm fixes: n = p, H, the topology's gap, the compressor's delta or omega."""
    from convergence import spectral_gap

    out: dict[str, float] = {"n": float(p)}
    if "H" in options:
        out["H"] = float(options["H"])
    if "topology" in options:
        out["gap"] = float(spectral_gap(str(options["topology"]), p))
    if compressor is not None:
        which = compressor["constant"]
        out[which] = float(compressor["worst_case"] if worst else compressor[which])
    return out


def _given(bound: Any, problem: Mapping[str, float], fixed: Mapping[str, float]) -> dict[str, float]:
    names = [x.name for x in bound.assumptions]
    given = {k: v for k, v in {**problem, **fixed}.items() if k in names}
    missing = [k for k in names if k not in given and k not in bound.defaults]
    if missing:
        raise CommscopeError(f"its bound {bound.name} needs {', '.join(missing)}, which this run does not measure")
    return given


def _bound(name: str | None) -> Any:
    from convergence.algorithms import algorithm

    if name is None:
        raise CommscopeError("no convergence bound describes it")
    return algorithm(name).get_bound()


def anchor(sgd_steps: float, problem: Mapping[str, float], p: int) -> float:
    """eps = B_sgd(T*): SGD's bound after its measured median steps to the target (module docstring)."""
    bound = _bound("sgd")
    return float(bound.value(float(sgd_steps), **_given(bound, problem, {"n": float(p)})))


def iterations(name: str | None, options: Mapping[str, Any], p: int, eps: float, problem: Mapping[str, float],
               compressor: Mapping[str, Any] | None, worst: bool = False) -> float:
    """T(eps) of one algorithm's bound (inf where it never gets there); raises CommscopeError saying why the bound
    does not apply to the run."""
    bound = _bound(name)
    if bound.measure != REFERENCE_MEASURE:
        raise CommscopeError(f"its bound ({bound.name}) bounds {bound.metric}, not the average squared gradient "
                             "norm of the others" + (": " + NOT_APPLICABLE[bound.name] if bound.name in NOT_APPLICABLE
                                                     else ""))
    needs = {x.name for x in bound.assumptions} & {"delta", "omega"}
    if needs and compressor is None:
        raise CommscopeError(f"its compressor's {'/'.join(sorted(needs))} was not measured")
    return float(bound.iterations_to(eps, **_given(bound, problem, _fixed(name or "", options, p, compressor,
                                                                          worst))))


NOT_APPLICABLE = {
    "signsgd": "the bound takes a per-worker batch growing as T (K = T) and every worker sampling the same "
               "objective (zeta = 0), while the run keeps its batch and shards the data (zeta > 0): it does not "
               "describe this run"}


def predict(algorithms: Sequence[tuple[str, str, Mapping[str, Any], str | None]], p: int, constants: Mapping[str, Any],
            compressor_of: Mapping[str, str], sgd_steps: float | None, seconds_measured: Mapping[str, float | None],
            seconds_model: Mapping[str, float | None] | None = None) -> dict[str, Any]:
    """Per algorithm label: its bound's iterations to eps (measured and worst-case delta / omega), and its predicted
    ratio to SGD with measured and with cost-model seconds per step; ``eps`` and notes for the whole run.
    ``algorithms``: (label, technique, options, bound algorithm) as in the suite; ``compressor_of``: label ->
    compressor label of the constants record; ``sgd_steps``: SGD's measured median steps to the target (None:
    censored, then nothing is predicted)."""
    problem = constants["problem"]
    out: dict[str, Any] = {"eps": None, "sgd_steps": sgd_steps, "rows": {}, "notes": []}
    if sgd_steps is None:
        out["notes"].append("SGD did not reach the target in more than half its seeds: no eps to anchor the bounds")
        return out
    eps = anchor(sgd_steps, problem, p)
    out["eps"] = eps
    sgd: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    for label, _technique, options, name in algorithms:
        comp = constants["compressors"].get(compressor_of.get(label, ""))
        row: dict[str, Any] = {"bound": name, "applies": True, "note": ""}
        try:
            row["iterations"] = iterations(name, options, p, eps, problem, comp)
            row["iterations_worst_case"] = iterations(name, options, p, eps, problem, comp, worst=True)
            row["iterations_eps_x10"] = iterations(name, options, p, 10 * eps, problem, comp)
            row["iterations_eps_div10"] = iterations(name, options, p, eps / 10, problem, comp)
        except CommscopeError as exc:
            row.update(applies=False, note=str(exc))
        if not row["applies"] or not math.isfinite(row["iterations"]):
            if row["applies"]:
                row["note"] = f"its bound never reaches eps = {eps:.3g} (T > 1e18)"
            rows[label] = row
            continue
        if label == "sgd":
            sgd = {k: row[k] for k in ("iterations", "iterations_worst_case", "iterations_eps_x10",
                                       "iterations_eps_div10")}
        rows[label] = row
    for label, row in rows.items():
        if not row["applies"] or not sgd or "iterations" not in row or not math.isfinite(row["iterations"]):
            continue
        row["iterations_ratio"] = row["iterations"] / sgd["iterations"]
        row["iterations_ratio_worst_case"] = row["iterations_worst_case"] / sgd["iterations_worst_case"]
        row["iterations_ratio_eps_x10"] = row["iterations_eps_x10"] / sgd["iterations_eps_x10"]
        row["iterations_ratio_eps_div10"] = row["iterations_eps_div10"] / sgd["iterations_eps_div10"]
        for suffix, seconds in (("", seconds_measured), ("_cost_model", seconds_model or {})):
            t, t0 = seconds.get(label), seconds.get("sgd")
            if t and t0:
                row["seconds_per_step" + suffix] = t
                row["predicted_ratio" + suffix] = row["iterations_ratio"] * t / t0
                if not suffix:
                    row["predicted_ratio_worst_case"] = row["iterations_ratio_worst_case"] * t / t0
    out["rows"] = rows
    if constants.get("L_note"):
        out["notes"].append(f"L: {constants['L_note']} (the nonconvex bounds need only |curvature| <= L, so they "
                            "still apply)")
    return out
