"""Prediction beside measurement: each trained technique priced with ``costmodels.simulate`` on the run's own
fitted environment and measured profile, and the "validation" records that put the two side by side."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError
from runners import results
from runners.training.pricing import measured_time, predict


def _key(rec: Mapping[str, Any]) -> tuple[str, str, str, int]:
    cfg = rec["config"]
    opts = {k: v for k, v in cfg.get("options", {}).items() if k not in ("profile", "env")}
    return cfg["algorithm"], json.dumps(opts, sort_keys=True), str(cfg["model"]), int(cfg["world_size"])


def comm_shares(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per model: the measured share of communication in the bsp iteration (medians; the median over
    repetitions), the regime a cell lives in.

    The bsp that sends every gradient as one message after backward (``flatten``) when the run has it, else
    any bsp. Its communication is the *critical path's*: ``exposed_comm_min_s``, the exposed communication of
    the rank that arrived last (the minimum over ranks), where the record has it; the maximum over ranks
    (``exposed_comm_s``) also counts the waiting of ranks that computed faster, which on cores shared by
    several ranks is most of it. Records without the minimum fall back to the maximum.
    """
    bsp = [r for r in records if r.get("kind") == "iteration" and r["config"]["algorithm"] == "bsp"]
    flat = [r for r in bsp if (r["config"].get("options") or {}).get("flatten")]
    by: dict[str, list[float]] = {}
    for rec in flat or bsp:
        r = rec["result"]
        comm = r.get("exposed_comm_min_s", r.get("exposed_comm_s"))
        if comm is not None and r.get("time_s"):
            by.setdefault(str(rec["config"]["model"]), []).append(float(comm) / float(r["time_s"]))
    return {m: float(np.median(v)) for m, v in by.items()}


def shipped_defaults(env: Any, host: Any = None) -> Any:
    """``env`` with the interference and overhead terms that commscope ships for its kind of system (the
    library's defaults, :func:`costmodels.default_terms`; CPU ranks on a ``host`` whose cores run their
    communication too: derived from its CPU cost per byte, :mod:`costmodels.cpu_sharing`): prediction (c), what a
    user gets without calibrating."""
    import dataclasses

    import costmodels as cm

    return dataclasses.replace(env, **cm.default_terms(env, host))


def _counted(rs: Sequence[Mapping[str, Any]], tech: str, env: Any, p: int) -> dict[str, Any]:
    """The runner's counters per step (mean over the repetitions that kept them: ``counters`` of the iteration
    records), the training thread's page faults per step (``minor_faults_per_step``) and, for ByteScheduler,
    what the model prices one batch's negotiation at (``negotiation_priced_s``: rank 0's broadcast of the batch
    mask, :func:`costmodels.schedules.blocks.negotiation_time`), to set beside the measured seconds per batch."""
    out: dict[str, Any] = {}
    faults = [float(r["result"]["minor_faults_per_step"]) for r in rs
              if isinstance(r["result"].get("minor_faults_per_step"), (int, float))]
    if faults:  # the training thread's page faults per step (runners/torchrun/allocator.py), mean over repetitions
        out["minor_faults_per_step"] = float(np.mean(faults))
    kept = [r["result"]["counters"] for r in rs if isinstance(r["result"].get("counters"), Mapping)]
    if not kept:
        return out
    keys = sorted(set.intersection(*(set(c) for c in kept)))
    out["counters"] = {k: float(np.mean([float(c[k]) for c in kept])) for k in keys}
    if tech == "bytescheduler" and "partitions" in out["counters"]:
        from costmodels.schedules.blocks import negotiation_time

        out["negotiation_priced_s"] = negotiation_time(p, env, int(out["counters"]["partitions"]), True)
    return out


def compare(records: Sequence[Mapping[str, Any]], profiles: Any, env: Any, environment: str,
            host: Any = None, calibrate: bool = True, terms: Sequence[str] | None = None,
            probes: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Validation records: one per measured cell (technique, options, model, p; repetitions together), with three
    predictions beside the measurement:

    (a) ``predicted_s``: the run's sweep-fitted environment alone (interference and overhead at 0);
    (b) ``predicted_calibrated_s``: calibrated leave-one-technique-out (:mod:`runners.calibrate`) on this
        environment's other techniques;
    (c) ``predicted_defaults_s``: the sweep-fitted environment with the shipped default terms (derived from the
        ``host`` its CPU ranks share, :class:`costmodels.cpu_sharing.SharedHost`, where given).

    ``profiles`` is one profile for every model, or a mapping from model name to profile; ``calibrate=False``
    leaves (b) out (the slow part: a least-squares fit per technique left out); ``terms``: the terms (b) fits
    (default ``runners.calibrate.FITTED``). ``probes``: the run's latency probes (:mod:`.latency`); where a cell
    has them, all three predictions take the environment's latencies scaled to what its probes measured
    (``latency_scale`` in the record).
    """
    from runners.calibrate import Cell, fit_terms, leave_one_technique_out
    from runners.calibrate.cells import scale_latency
    from runners.calibrate.solve import FITTED, TERMS, with_terms
    from runners.training.profiler.target import with_model_buffers

    from .attribution import attribute, contributions
    from .latency import latency_scale

    its = [r for r in records if r.get("kind") == "iteration"]
    groups: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    for rec in its:
        groups.setdefault(_key(rec), []).append(rec)

    def profile_of(model: str) -> Any:  # with the model's buffers, DDP broadcasts them (older profiles lack them)
        prof = profiles.get(model) if isinstance(profiles, Mapping) else profiles
        return None if prof is None else with_model_buffers(prof, model)

    base = with_terms(env, {t: 0.0 for t in TERMS})
    scales = {k: (latency_scale(base, k[3], probes, k[0], json.loads(k[1]), k[2]) if probes else None) or 1.0
              for k in groups}
    cells = [Cell(r["config"]["algorithm"], json.loads(k[1]), k[2], int(r["config"]["batch_size"]), k[3],
                  measured_time(r), r["result"].get("time_p10_s"), r["result"].get("time_p90_s"), profile_of(k[2]),
                  str(r["id"]), scales[k]) for k, rs in groups.items() for r in rs if profile_of(k[2]) is not None]
    loto: dict[str, Mapping[str, float]] = {}
    stderr: dict[tuple[str, str, str, int], float] = {}  # (b)'s standard error per cell, from the terms' covariance
    techs = {c.technique for c in cells}
    if calibrate and len(techs) >= 2 and any(c.overlaps for c in cells) and not all(c.overlaps for c in cells):
        try:
            fitted = tuple(terms) if terms is not None else FITTED
            start = {t: f.value for t, f in fit_terms(cells, base, fitted).items()}
            left_out = leave_one_technique_out(cells, base, fitted, start=start)
            loto = {lo.technique: lo.terms for lo in left_out}
            stderr = {(c.technique, json.dumps(dict(c.options), sort_keys=True), c.model, c.p): se
                      for lo in left_out for (c, _), se in zip(lo.predictions, lo.stderr_s, strict=False)}
        except CommscopeError:
            loto = {}
    defaults = shipped_defaults(base, host)
    shares = comm_shares(its)
    out = []
    for (tech, opts_json, model, p), rs in groups.items():
        opts = json.loads(opts_json)
        scale = scales[(tech, opts_json, model, p)]
        times = [measured_time(r) for r in rs]
        measured = float(np.median(times))
        prof = profile_of(model)
        first = rs[0]
        result: dict[str, Any] = {
            "measured_s": measured, "measured_repeats_s": times,
            "measured_p10_s": first["result"].get("time_p10_s"), "measured_p90_s": first["result"].get("time_p90_s"),
            # the measurement's own noise: half the range over repetitions, or of the timed iterations of one run
            "spread": (0.5 * (max(times) - min(times)) / measured) if len(times) > 1 else (
                0.5 * (first["result"]["time_p90_s"] - first["result"]["time_p10_s"]) / measured
                if first["result"].get("time_p90_s") is not None and first["result"].get("time_p10_s") is not None
                else None),
            "comm_share_bsp": shares.get(model),
            "breakdown_s": {k: first["result"].get(f"{k}_s") for k in
                            ("forward", "backward", "exposed_comm", "compression", "update")}}
        if prof is None:
            result["how"] = f"not predicted: no profile of model {model!r}"
        else:
            for key, e in (("", base), ("_defaults", defaults),
                           ("_calibrated", with_terms(base, loto[tech]) if tech in loto else None)):
                if e is None:
                    continue
                try:
                    pred, how = predict(tech, opts, prof, scale_latency(e, scale), p)
                except CommscopeError as exc:
                    result.setdefault("how", f"not predicted: {exc}")
                    continue
                result[f"predicted{key}_s"] = pred
                result[f"error{key}"] = pred / measured - 1.0
                result.setdefault("how", how)
            if tech in loto:
                result["calibrated_terms"] = dict(loto[tech])
                se = stderr.get((tech, json.dumps(opts, sort_keys=True), model, p))
                if se is not None and math.isfinite(se) and "predicted_calibrated_s" in result:
                    result["predicted_calibrated_stderr_s"] = se
            result["default_terms"] = {k: getattr(defaults, k) for k in ("kappa_c", "kappa_m", "host_overhead",
                                                                         "contended_step", "compute_loss_step")}
            if scale != 1.0:
                result["latency_scale"] = scale
            result.update(_counted(rs, tech, base, p))
            if "predicted_s" in result:  # which term accounts for the error of the best prediction available
                e = scale_latency(with_terms(base, loto[tech]) if tech in loto else base, scale)
                contrib = contributions(tech, opts, prof, e, p)
                result["attribution"] = {**attribute(measured, contrib), "contributions_s": contrib,
                                         "prediction": "calibrated" if tech in loto else "sweep"}
        config = {"technique": tech, "options": opts, "environment": environment, "model": model,
                  "batch_size": first["config"]["batch_size"], "world_size": p,
                  "iteration_record": first["id"], "iteration_records": [r["id"] for r in rs],
                  "repeats": len(rs), "environment_name": env.name}
        out.append(results.record("validation", config, result, first["run"], "commscope validate"))
    return out
