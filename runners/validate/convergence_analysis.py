"""A finished convergence validation, analysed: measured time and steps to the target per algorithm (over seeds),
the measured constants, the predicted ratio to SGD, rankings, Kendall's tau and the goals of issue 17.

:func:`analyse` needs only the records and the suite the run wrote (``suite.json``), so a shipped run is analysed
again from its files (``bench/bench_convergence.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import convergence_measure as cm_
from .convergence_predict import predict, problem_constants
from .convergence_suite import NOT_RUN

TAU_GOAL, RATIO_FACTOR, MIN_RANKED = 0.6, 2.0, 8


def suite_dict(suite: Any, compressors: Mapping[str, str]) -> dict[str, Any]:
    """What :func:`analyse` needs of a suite, as JSON (``suite.json``)."""
    return {"name": suite.name, "model": suite.model, "dataset": suite.dataset, "batch_size": suite.batch_size,
            "lr": suite.lr, "steps": suite.steps, "eval_every": suite.eval_every,
            "target": {"loss": suite.target_loss, "accuracy": suite.target_accuracy},
            "algorithms": [{"label": label, "technique": tech, "options": dict(opts), "bound": bound,
                            "lr": suite.lr_of(label), "compressor": compressors.get(label)}
                           for label, tech, opts, bound in suite.algorithms]}


def _cost_model_seconds(envdir: Path, algos: Sequence[Mapping[str, Any]], p: int) -> dict[str, float | None]:
    """Seconds per step priced by the cost models on the run's fitted link and measured profile (if it has them)."""
    env_path, prof_path = envdir / "environment.json", envdir / "profile.json"
    if not (env_path.exists() and prof_path.exists()):
        return {}
    import costmodels as cm
    from runners.training.pricing import predict as price

    env, prof = cm.Environment.load(env_path), cm.load_profile(prof_path)
    out: dict[str, float | None] = {}
    for a in algos:
        try:
            out[a["label"]] = price(a["technique"], a["options"], prof, env, p)[0]
        except cm.CommscopeError:
            out[a["label"]] = None
    return out


def analyse(records: Sequence[Mapping[str, Any]], suite: Mapping[str, Any], p: int, envdir: Path | None = None
            ) -> dict[str, Any]:
    """The analysis of one environment's records (see the module docstring); ``envdir`` holds the fitted
    environment and profile for the cost-model prices, if the run made them."""
    algos = suite["algorithms"]
    target = cm_.Target(float(suite["target"]["loss"]), float(suite["target"]["accuracy"]))
    curves = cm_.curves(records, {a["technique"]: a["label"] for a in algos})
    runs = {a["label"]: [cm_.reach(pts, target) for (label, _), pts in sorted(curves.items()) if label == a["label"]]
            for a in algos}
    measured = {label: {"time": cm_.over_seeds(r, "both", "time_s"), "steps": cm_.over_seeds(r, "both", "step"),
                        "time_loss": cm_.over_seeds(r, "loss", "time_s"),
                        "time_accuracy": cm_.over_seeds(r, "accuracy", "time_s"),
                        "seconds_per_step": cm_.seconds_per_step(r), "runs": r} if r else None
                for label, r in runs.items()}
    notes: list[str] = []
    constants = None
    try:
        constants = problem_constants(records)
    except StopIteration:
        notes.append("no constants record: nothing is predicted")
    sgd = measured.get("sgd")
    sgd_steps = sgd["steps"]["median"] if sgd else None
    pred: dict[str, Any] = {"eps": None, "rows": {}, "notes": []}
    if constants is not None:
        pred = predict([(a["label"], a["technique"], a["options"], a["bound"]) for a in algos], p, constants,
                       {a["label"]: a["compressor"] for a in algos if a.get("compressor")}, sgd_steps,
                       {k: (m["seconds_per_step"] if m else None) for k, m in measured.items()},
                       _cost_model_seconds(envdir, algos, p) if envdir is not None else {})
        notes += pred["notes"]
    sgd_time = sgd["time"]["median"] if sgd else None
    rows = []
    for a in algos:
        label, m = a["label"], measured.get(a["label"])
        pr = pred["rows"].get(label, {"applies": constants is not None, "note": ""})
        comp = (constants or {}).get("compressors", {}).get(a.get("compressor") or "")
        row: dict[str, Any] = {"label": label, "technique": a["technique"], "options": a["options"], "lr": a["lr"],
                               "bound": a["bound"], "compressor": a.get("compressor"),
                               "constant": comp["constant"] if comp else None,
                               "measured_constant": comp[comp["constant"]] if comp else None,
                               "worst_case_constant": comp["worst_case"] if comp else None}
        if a.get("compressor") and comp is None and constants is not None:
            row["constant_note"] = "no delta or omega (signSGD's bound takes sigma1)" if label == "signsgd" else \
                "not measured"
        if m is None:
            row.update(seeds=0, reached=0, note="not trained (failed)")
            rows.append(row)
            continue
        t, s = m["time"], m["steps"]
        row.update(seeds=t["n"], reached=t["reached"], time_median_s=t["median"], time_min_s=t["min"],
                   time_max_s=t["max"], time_spread=t["spread"], time_at_least_s=t["at_least"],
                   time_values_s=t["values"],
                   steps_median=s["median"], steps_min=s["min"], steps_max=s["max"], steps_values=s["values"],
                   time_to_loss_median_s=m["time_loss"]["median"],
                   time_to_accuracy_median_s=m["time_accuracy"]["median"],
                   seconds_per_step=m["seconds_per_step"],
                   final_accuracy=[r["final_accuracy"] for r in m["runs"]],
                   measured_ratio=cm_.ratio(t["median"], sgd_time),
                   measured_ratio_at_least=cm_.ratio(t["at_least"], sgd_time))
        row["applies"] = bool(pr.get("applies"))
        row["note"] = pr.get("note", "")
        row["diverged"] = sum(1 for r in m["runs"] if r.get("diverged"))  # censored at the step they diverged
        if row["diverged"]:
            row["note"] = "; ".join(n for n in (row["note"], f"{row['diverged']} of {t['n']} seed(s) diverged "
                                                "(censored)") if n)
        for k in ("iterations", "iterations_worst_case", "iterations_ratio", "iterations_ratio_worst_case",
                  "iterations_ratio_eps_x10", "iterations_ratio_eps_div10", "predicted_ratio",
                  "predicted_ratio_worst_case", "predicted_ratio_cost_model", "seconds_per_step_cost_model"):
            if k in pr:
                row[k] = pr[k]
        for suffix in ("", "_cost_model", "_worst_case"):
            got = row.get("predicted_ratio" + suffix)
            if row["measured_ratio"] is not None:
                row["within_2x" + suffix] = cm_.within(got, row["measured_ratio"], RATIO_FACTOR)
            elif got is not None and row["measured_ratio_at_least"] is not None:  # censored: a lower bound
                row["within_2x" + suffix] = got >= row["measured_ratio_at_least"] / RATIO_FACTOR
        rows.append(row)
    return _rankings(rows, suite, p, constants, pred, notes)


def _rankings(rows: list[dict[str, Any]], suite: Mapping[str, Any], p: int, constants: Any, pred: Mapping[str, Any],
              notes: list[str]) -> dict[str, Any]:
    measured = {r["label"]: r.get("time_median_s") for r in rows if r.get("seeds")}
    m_rank = cm_.ranking(measured)
    out: dict[str, Any] = {"suite": dict(suite), "ranks": p, "eps": pred.get("eps"), "rows": rows,
                           "not_run": dict(NOT_RUN), "notes": notes}
    for suffix in ("", "_cost_model", "_worst_case"):
        predicted = {r["label"]: r["predicted_ratio" + suffix] for r in rows
                     if r.get("predicted_ratio" + suffix) is not None}
        p_rank = cm_.ranking(predicted)
        for r in rows:
            if r["label"] in p_rank:
                r["predicted_rank" + suffix] = p_rank[r["label"]]
        out["kendall" + suffix] = cm_.kendall_tau(predicted, {k: v for k, v in measured.items() if k in predicted})
        out["kendall_reached" + suffix] = cm_.kendall_tau(
            predicted, {k: v for k, v in measured.items() if k in predicted and v is not None})
    for r in rows:
        if r["label"] in m_rank:
            r["measured_rank"] = m_rank[r["label"]]
    # the bounds alone: their steps to eps against the measured steps to the target (no seconds per step)
    steps = {r["label"]: r["iterations"] for r in rows if r.get("applies") and finite(r.get("iterations"))}
    out["kendall_steps"] = cm_.kendall_tau(steps, {r["label"]: r.get("steps_median") for r in rows
                                                   if r["label"] in steps})
    if constants is not None:
        prob = constants["problem"]
        out["constants"] = {**prob, "L_used": constants["L_used"], "L_note": constants["L_note"],
                            "record_id": constants["record"]["id"]}
    judged = {r["label"]: r["within_2x"] for r in rows if r.get("applies") and "within_2x" in r}
    applies = [r["label"] for r in rows if r.get("applies")]
    tau = out["kendall"]["tau"]
    compressors = [r for r in rows if r.get("compressor") and r["label"] != "signsgd"]
    out["goals"] = {
        "kendall_tau": tau, "algorithms_ranked": out["kendall"]["n"],
        "tau_goal_met": bool(tau is not None and tau >= TAU_GOAL and out["kendall"]["n"] >= MIN_RANKED),
        "within_2x": judged, "bound_applies": applies,
        "within_2x_goal_met": bool(applies) and len(judged) == len(applies) and all(judged.values()),
        "compressors_reported": bool(compressors) and all(r.get("measured_constant") is not None
                                                          and r.get("worst_case_constant") is not None
                                                          for r in compressors)}
    return out


def load_records(envdir: Path) -> list[dict[str, Any]]:
    """An environment's records: ``records.jsonl``, or ``records.jsonl.gz`` as the shipped run keeps them (every
    convergence record carries the run's description of the emulated network, so they compress 20-fold); each
    record is validated as :func:`runners.results.load` validates it."""
    import gzip

    from runners import results

    if (envdir / "records.jsonl").exists() or not (envdir / "records.jsonl.gz").exists():
        return results.load(envdir / "records.jsonl").records
    path = envdir / "records.jsonl.gz"
    return results.parse_lines(gzip.decompress(path.read_bytes()), str(path)).records


def load_dir(directory: Path) -> dict[str, Any]:
    """Re-analyse a finished run from its files: ``suite.json`` and the environment's records."""
    meta = json.loads((Path(directory) / "suite.json").read_text())
    envdir = Path(directory) / meta["environment"]
    return analyse(load_records(envdir), meta["suite"], int(meta["ranks"]), envdir)


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
