"""Latency probes in ``commscope validate``: the cost of a small message measured again beside each technique's run.

Why (measured, ``bench/bench_overlap_diagnostics.py --only bsp``, ``bench/results/bench_overlap_bsp_2500mbit.json``,
4 gloo ranks sharing 2 cores at 2.5 Gbit/s): resnet_small's 47 gradients all-reduced one by one right after a real
backward took 1.00-1.06 of the same 47 with no compute before and of 47 back-to-back 1 KB all-reduces taken
beside them, while the three launches' medians moved from 237 to 279 ms. A small message costs what a probe
taken at the same time says, and that drifts: in the shipped run ``validation-run3`` the sweep priced a small
all-reduce at 5.4 ms where bsp's 47 per-tensor messages took 4.2 ms each minutes later. So the run probes the
latency, as it probes the compute (:func:`runners.validate.rank._probe`), once after the sweep and once before every
technique's run, and keeps every probe as a ``collective`` record in ``latency_probes.jsonl`` beside the run's
records (not in them: no fit reads a probe as a sweep point). Asked to (``compare(probes=...)``,
``tools/repredict_validation.py DIR --probes``), a technique's predictions take the latency its probes measured
(:func:`latency_scale`); by default they keep the sweep's fit (README, Validation: alone it made the overlapping
techniques' error larger).

A probe: one barrier, then ``calls`` back-to-back all-reduces of ``nbytes`` (float32), the slowest rank's
elapsed time divided by ``calls``, the protocol of the sweep's own calls (``runners/measure/sweep/timing.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError

PROBE_CALLS = 40
PROBE_BYTES = 1024
FILE = "latency_probes.jsonl"


def probes_path(records: str | Path) -> Path:
    """Where a run whose records are ``records`` keeps its latency probes."""
    return Path(records).with_name(FILE)


def latency_probe(ctx: Any, calls: int = PROBE_CALLS, nbytes: int = PROBE_BYTES) -> float:
    """Seconds per back-to-back all-reduce of ``nbytes`` after one barrier, the slowest rank's (every rank)."""
    torch, dist = ctx.torch, ctx.dist
    buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=ctx.device)
    dist.all_reduce(buf)  # the first call of a size sets up its buffers: not timed
    dist.barrier()
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(buf)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    per_call = torch.tensor([(time.perf_counter() - t0) / calls], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(per_call, op=dist.ReduceOp.MAX)
    return float(per_call.item())


def probe_record(ctx: Any, seconds: float, when: Mapping[str, Any], calls: int = PROBE_CALLS,
                 nbytes: int = PROBE_BYTES) -> dict[str, Any]:
    """A ``collective`` record of one probe; ``when`` says where in the run it was taken (``{"after": "sweep"}``,
    or the technique, its options, model and repetition it came before)."""
    from costmodels import busbw_factor
    from runners import results

    config = {"op": "allreduce", "bytes": int(nbytes), "count": max(1, nbytes // 4), "dtype": "float32",
              "warmup": 1, "iterations": int(calls), "timing": "back_to_back", "probe": dict(when)}
    result = {"time_s": seconds, "algbw_GBps": nbytes / seconds / 1e9,
              "busbw_GBps": nbytes / seconds * float(busbw_factor("allreduce", ctx.world)) / 1e9, "wrong": 0}
    return results.record("collective", config, result, ctx.run_info(), "commscope validate (latency probe)")


def probe_and_keep(ctx: Any, records: str | Path, when: Mapping[str, Any]) -> float:
    """Probe on every rank; rank 0 appends the record to the run's probes file. Returns the probe."""
    from runners import results

    seconds = latency_probe(ctx)
    if ctx.rank == 0:
        results.append(probes_path(records), [probe_record(ctx, seconds, when)])
    return seconds


def probe_times(probes: Sequence[Mapping[str, Any]], technique: str, options: Mapping[str, Any], model: str
                ) -> list[tuple[int, float]]:
    """(bytes, seconds per call) of the probes taken before a technique's runs. Options match as the iteration
    records keep them (the technique's defaults filled in, MG-WFBP's profile and environment paths left out)."""
    import json

    def key(opts: Mapping[str, Any]) -> str:
        from runners.training import technique as get_technique

        try:
            defaults = dict(get_technique(str(technique)).options)
        except CommscopeError:
            defaults = {}
        merged = {k: v for k, v in {**defaults, **dict(opts)}.items() if k not in ("profile", "env")}
        return json.dumps(merged, sort_keys=True, default=str)

    want = key(options)
    return [(int(p["config"]["bytes"]), float(p["result"]["time_s"])) for p in probes
            if p["config"]["probe"].get("technique") == technique and p["config"]["probe"].get("model") == model
            and key(p["config"]["probe"].get("options", {})) == want]


def latency_scale(env: Any, p: int, probes: Sequence[Mapping[str, Any]], technique: str, options: Mapping[str, Any],
                  model: str) -> float | None:
    """The factor on ``env``'s latencies (``alpha``, ``intra_alpha``) that makes its library price the probe
    message at what the probes before the technique's runs measured (their median)::

        s = (t_probe - T(n; alpha = 0)) / (T(n) - T(n; alpha = 0))

    exact, as the price is affine in the latencies (derived here). None without probes, or where the price has no
    latency to scale or the factor would not be positive."""
    import dataclasses
    import math
    import statistics

    import costmodels as cm

    mine = probe_times(probes, technique, options, model)
    if not mine:
        return None
    n = float(statistics.median(b for b, _ in mine))
    measured = statistics.median(t for _, t in mine)
    zero = dataclasses.replace(env, alpha=0.0, intra_alpha=None if env.intra_alpha is None else 0.0)
    price, base = (float(cm.choose("allreduce", n, p, e).time) for e in (env, zero))
    if not price > base:
        return None
    s = (measured - base) / (price - base)
    return s if math.isfinite(s) and s > 0 else None
