"""Prediction beside measurement: each trained technique priced with ``costmodels.simulate`` on the run's own
fitted environment and measured profile, and the "validation" records that put the two side by side."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from costmodels.errors import CommscopeError
from runners import results

from .suite import PERIODIC


def _collective_for(env_meta: Mapping[str, Any]) -> dict[str, str] | None:
    """The fitted algorithm of each primitive (``commscope fit``'s metadata), or None (the cheapest)."""
    algos = env_meta.get("algorithms")
    return dict(algos) if isinstance(algos, Mapping) and algos else None


def predict(technique: str, options: Mapping[str, Any], profile: Any, env: Any, p: int) -> tuple[float, str]:
    """Predicted seconds per iteration of ``technique`` with ``options`` and how it was priced.

    The technique's registered schedule and compressor (``runners.training``) are simulated with
    ``costmodels.simulate`` on the measured ``profile`` and fitted ``env``; every message goes over
    the algorithm fitted for its primitive (e.g. gloo's reduce-scatter, which is an allreduce).
    Technique options map to schedule options (fusion's ``bucket_cap_mb``, dear's ``buffer_bytes``,
    zero's buckets, fsdp's ``unit_bytes``, local_sgd's ``H``).
    """
    import costmodels as cm
    from runners.training import technique as get_technique

    tech = get_technique(technique)
    if tech.schedule is None:
        raise CommscopeError(f"technique {tech.name} has no schedule to predict it with")
    opts = {**tech.options, **options}
    sched: dict[str, Any] = dict(tech.schedule_options)
    if tech.schedule == "fusion" and "bucket_cap_mb" in opts:
        sched["bucket_bytes"] = float(opts["bucket_cap_mb"]) * 2**20
    elif tech.schedule == "dear" and "buffer_bytes" in opts:
        sched["buffer_bytes"] = opts["buffer_bytes"]
    elif tech.schedule == "zero":
        sched.update({k: opts[k] for k in ("bucket_bytes", "allgather_bucket_bytes") if k in opts})
    elif tech.schedule == "fsdp" and "unit_bytes" in opts:  # the runner wraps units by size
        sched["unit_bytes"] = opts["unit_bytes"]
    elif tech.schedule == "local_sgd":
        sched["H"] = int(opts["H"])
    compressor = None
    if tech.compressor is not None:
        compressor = tech.compressor
        if "density" in opts:
            compressor = f"{compressor}:{opts['density']}"
        elif "rank" in opts:
            compressor = f"{compressor}:{opts['rank']}"
        elif "bits" in opts:
            compressor = f"{compressor}:{opts['bits']}"
    collective = _collective_for(env.metadata)
    try:
        r = cm.simulate(profile, env, p, tech.schedule, collective, compressor, **sched)
        over = "+".join(sorted(set(collective.values()))) if collective else "the cheapest algorithm"
        how = f"{tech.schedule}" + (f" + {compressor}" if compressor else "") + f" over {over}"
    except CommscopeError:
        r = cm.simulate(profile, env, p, tech.schedule, None, compressor, **sched)
        how = f"{tech.schedule}" + (f" + {compressor}" if compressor else "") + " over the cheapest"
    return float(r.iteration_time), how


def measured_time(record: Mapping[str, Any]) -> float:
    """The measured seconds per iteration of an iteration record: the median iteration (max over ranks), or for a
    periodic technique (local SGD) the wall-clock mean over whole periods (see :mod:`runners.validate`)."""
    cfg, res = record["config"], record["result"]
    if cfg["algorithm"] in PERIODIC and "mean_time_s" in res:
        return float(res["mean_time_s"])
    return float(res["time_s"])


def compare(records: Sequence[Mapping[str, Any]], profile: Any, env: Any, environment: str) -> list[dict[str, Any]]:
    """Validation records: one per iteration record, with the prediction beside the measurement."""
    out = []
    for rec in records:
        if rec.get("kind") != "iteration":
            continue
        cfg = rec["config"]
        p = int(cfg["world_size"])
        measured = measured_time(rec)
        try:
            pred, how = predict(cfg["algorithm"], cfg.get("options", {}), profile, env, p)
        except CommscopeError as exc:
            pred, how = math.nan, f"not predicted: {exc}"
        err = pred / measured - 1.0 if math.isfinite(pred) else math.nan
        opts = {k: v for k, v in cfg.get("options", {}).items() if k not in ("profile", "env")}
        config = {"technique": cfg["algorithm"], "options": opts, "environment": environment,
                  "model": cfg["model"], "batch_size": cfg["batch_size"], "world_size": p,
                  "iteration_record": rec["id"], "environment_name": env.name}
        result = {"measured_s": measured, "measured_p10_s": rec["result"].get("time_p10_s"),
                  "measured_p90_s": rec["result"].get("time_p90_s"), "how": how,
                  "breakdown_s": {k: rec["result"].get(f"{k}_s") for k in
                                  ("forward", "backward", "exposed_comm", "compression", "update")}}
        if math.isfinite(pred):
            result.update(predicted_s=pred, error=err)
        out.append(results.record("validation", config, result, rec["run"], "commscope validate"))
    return out
