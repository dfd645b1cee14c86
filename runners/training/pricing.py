"""A training technique priced by the cost models: which schedule, compressor and options stand for it, its
predicted seconds per iteration in one or many environments, and the measured time of an iteration record to
compare with.

Shared by validation (:mod:`runners.validate`) and calibration (:mod:`runners.calibrate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError

#: Techniques whose iterations come in periods (local SGD averages every H steps): their measured time is the
#: wall-clock mean over whole periods, which is what their schedule predicts.
PERIODIC = {"local_sgd": "H"}

#: Techniques that run plainly for their first iterations (PowerSGD all-reduces uncompressed before
#: start_powerSGD_iter): the option naming how many. What their schedule predicts is the iteration after.
STARTS_AFTER = {"powersgd": "start_powerSGD_iter"}


def steady_warmup(technique: str, options: Mapping[str, Any], warmup: int) -> int:
    """At least ``warmup`` untimed iterations, and enough that the timed ones run as the technique's cost model
    prices it (:data:`STARTS_AFTER`)."""
    from runners.training import technique as get_technique

    key = STARTS_AFTER.get(technique)
    if key is None:
        return warmup
    return max(warmup, int({**get_technique(technique).options, **options}[key]))


def _collective_for(env_meta: Mapping[str, Any]) -> dict[str, str] | None:
    """The fitted algorithm of each primitive (``commscope fit``'s metadata), or None (the cheapest)."""
    algos = env_meta.get("algorithms")
    return dict(algos) if isinstance(algos, Mapping) and algos else None


def schedule_call(technique: str, options: Mapping[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """The schedule, compressor and schedule options that price ``technique`` with ``options``.

    Technique options map to schedule options (fusion's ``bucket_cap_mb``, dear's ``buffer_bytes``, zero's
    buckets, fsdp's ``unit_bytes``, local_sgd's ``H``, bsp's ``flatten``).
    """
    from runners.training import technique as get_technique

    tech = get_technique(technique)
    if tech.schedule is None:
        raise CommscopeError(f"technique {tech.name} has no schedule to predict it with")
    opts = {**tech.options, **options}
    sched: dict[str, Any] = dict(tech.schedule_options)
    if tech.schedule == "fusion" and "bucket_cap_mb" in opts:
        # the runner hands bucket_cap_mb to DDP, and an explicit bucket_cap_mb caps the first bucket too (torch
        # 2.13 torch/nn/parallel/distributed.py, _BucketCapacityConfig.create: the 1 MiB first bucket only when
        # bucket_cap_mb is left at None); tests/test_training_exact.py checks the buckets DDP builds
        sched["bucket_bytes"] = sched["first_bucket_bytes"] = float(opts["bucket_cap_mb"]) * 2**20
    if tech.schedule == "fusion" and "broadcast_buffers" in opts:  # DDP's buffers broadcast before each forward
        sched["broadcast_buffers"] = opts["broadcast_buffers"]
    elif tech.schedule == "dear" and "buffer_bytes" in opts:
        sched["buffer_bytes"] = opts["buffer_bytes"]
    elif tech.schedule == "zero":
        sched.update({k: opts[k] for k in ("bucket_bytes", "allgather_bucket_bytes") if k in opts})
    elif tech.schedule == "fsdp" and "unit_bytes" in opts:  # the runner wraps units by size
        sched["unit_bytes"] = opts["unit_bytes"]
    elif tech.schedule == "local_sgd":
        sched["H"] = int(opts["H"])
    elif tech.schedule == "bsp" and opts.get("flatten"):  # one message of every gradient after backward
        sched["flatten"] = True
    elif tech.schedule == "dpsgd" and "topology" in opts:
        sched["topology"] = opts["topology"]
    compressor = None
    if tech.compressor is not None:
        compressor = tech.compressor
        if "density" in opts:
            compressor = f"{compressor}:{opts['density']}"
        elif "rank" in opts:
            compressor = f"{compressor}:{opts['rank']}"
        elif "bits" in opts:
            compressor = f"{compressor}:{opts['bits']}"
    return tech.schedule, compressor, sched


def predict(technique: str, options: Mapping[str, Any], profile: Any, env: Any, p: int) -> tuple[float, str]:
    """Predicted seconds per iteration of ``technique`` with ``options`` and how it was priced.

    The technique's registered schedule and compressor (``runners.training``, :func:`schedule_call`) are
    simulated with ``costmodels.simulate`` on the measured ``profile`` and fitted ``env``; every message goes
    over the algorithm fitted for its primitive (e.g. gloo's reduce-scatter, which is an allreduce).
    """
    import costmodels as cm

    schedule, compressor, sched = schedule_call(technique, options)
    collective = _collective_for(env.metadata)
    try:
        r = cm.simulate(profile, env, p, schedule, collective, compressor, **sched)
        over = "+".join(sorted(set(collective.values()))) if collective else "the cheapest algorithm"
        how = f"{schedule}" + (f" + {compressor}" if compressor else "") + f" over {over}"
    except CommscopeError:
        r = cm.simulate(profile, env, p, schedule, None, compressor, **sched)
        how = f"{schedule}" + (f" + {compressor}" if compressor else "") + " over the cheapest"
    return float(r.iteration_time), how


def predict_many(technique: str, options: Mapping[str, Any], profile: Any, envs: Sequence[Any], p: int
                 ) -> np.ndarray:
    """:func:`predict` in every environment of ``envs`` at once (``costmodels.sweep``; they share the fitted
    algorithms of ``envs[0]``), as an array of seconds per iteration."""
    import costmodels as cm

    schedule, compressor, sched = schedule_call(technique, options)
    collective = _collective_for(envs[0].metadata)
    try:
        r = cm.sweep(profile, list(envs), [p], schedule, collective, compressor, **sched)
        return np.asarray(r.iteration_time, dtype=float).reshape(len(envs))
    except CommscopeError:
        return np.array([predict(technique, options, profile, e, p)[0] for e in envs])


def measured_time(record: Mapping[str, Any]) -> float:
    """The measured seconds per iteration of an iteration record: the period a schedule predicts.

    - A periodic technique (local SGD): the wall-clock mean over whole periods (``mean_time_s``; see
      :mod:`runners.validate`), since the median iteration is one without communication.
    - Otherwise the median over iterations of the mean over ranks of each rank's step (``time_rank_mean_s``).
    - Records made before that was recorded: ``time_s``, the median of each iteration's maximum over ranks, which
      exceeds the period when the ranks' step boundaries drift (:mod:`runners.training.runner.loop`). A step that
      ends at a completed collective re-synchronises them; one that returns with messages in flight
      (``Technique.returns_in_flight``) does not, and takes the wall-clock mean ``mean_time_s`` instead. Over the
      4-rank validation runs shipped and kept (108 iteration records per technique), time_s / mean_time_s has a
      median of 1.135 for ByteScheduler and 1.005-1.018 for the other techniques, where the mean, unlike the
      median, also counts a disturbed iteration (+10% on bsp in the shipped run's disturbed 200 Mbit/s network).
    """
    from runners.training import TECHNIQUES

    cfg, res = record["config"], record["result"]
    name = str(cfg["algorithm"])
    if name in PERIODIC and "mean_time_s" in res:
        return float(res["mean_time_s"])
    if res.get("time_rank_mean_s") is not None:
        return float(res["time_rank_mean_s"])
    if name in TECHNIQUES and TECHNIQUES.get(name).returns_in_flight and res.get("mean_time_s") is not None:
        return float(res["mean_time_s"])
    return float(res["time_s"])
