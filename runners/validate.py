"""``commscope validate``: measure, fit, profile, train every technique, predict it, compare.

    commscope validate --suite quick --ranks 4 --out DIR [--emulate 100mbit,1gbit,2500mbit]

For each environment (the host as it is, or an emulated cluster of ``--ranks`` nodes with one rank
each behind a link of the given rate), one torchrun job (:mod:`runners.validate_rank`) sweeps the
collectives, fits the environment, profiles the model on all ranks at once and trains each
technique of the suite. Then every technique's iteration time is predicted with ``costmodels``
from *that* fitted environment and *that* measured profile, and compared with the measurement.

DIR receives, per environment, ``<env>/records.jsonl`` (sweep, environment, profile and iteration
records), ``<env>/environment.json``, ``<env>/profile.json``, ``<env>/plan.json`` and
``<env>/log.txt``; and for the whole run ``validation.jsonl`` (one "validation" record per
technique and environment), ``validation.csv`` and ``validation.md`` (technique, environment, p,
predicted, measured, error; then the median and max error). Nothing in DIR is overwritten: a
DIR that already holds a validation is refused.

What "measured" is: the median over timed iterations of the iteration time (max over ranks) for
techniques that communicate every iteration; for ``local_sgd`` (communicates every H-th) the
wall-clock time of the timed loop over whole periods divided by the iterations, which is what its
schedule predicts (amortised time per iteration).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costmodels.errors import CommscopeError
from runners import results

PERIODIC = {"local_sgd": "H"}
LATENCY_BYTES = 64 * 1024  # sweep sizes below this are latency-bound: Suite.latency_iters iterations each


@dataclass(frozen=True)
class Suite:
    """What one validation suite runs on every environment."""

    name: str
    model: str
    batch_size: int
    techniques: tuple[tuple[str, Mapping[str, Any]], ...]
    iterations: int
    warmup: int
    sweep_ops: tuple[str, ...] = ("allreduce", "allgather", "reduce_scatter")
    sweep_sizes: tuple[str, str, float] = ("4", "4MiB", 4.0)
    sweep_iters: tuple[int, int] = (2, 10)  # warm-up, timed
    latency_iters: int = 100  # timed iterations of sizes below LATENCY_BYTES: their latency is bimodal on shared cores
    profile_iters: tuple[int, int] = (3, 10)
    model_options: Mapping[str, Any] = field(default_factory=dict)


EXACT = ("bsp", "wfbp", "fusion", "mgwfbp", "bytescheduler", "dear", "zero", "fsdp")
SUITES: dict[str, Suite] = {
    "quick": Suite("quick", "resnet_small", 32,
                   tuple((t, {}) for t in ("bsp", "wfbp", "fusion", "mgwfbp", "bytescheduler", "dear", "zero",
                                           "local_sgd")), iterations=16, warmup=3),
    "full": Suite("full", "resnet_small", 32,
                  tuple((t, {}) for t in (*EXACT, "fp16", "powersgd", "topk", "randomk", "qsgd", "local_sgd")),
                  iterations=32, warmup=5, sweep_iters=(3, 15), profile_iters=(5, 30)),
}


class ValidationError(CommscopeError):
    """A validation that cannot start or did not complete (the message says which run)."""


# ------------------------------------------------------------------------------------ prediction
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
    zero's buckets, local_sgd's ``H``).
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
    """The measured seconds per iteration of an iteration record (see the module docstring)."""
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


# ------------------------------------------------------------------------------------------ tables
def table_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        c, s = r["config"], r["result"]
        rows.append({"technique": c["technique"], "environment": c["environment"], "p": c["world_size"],
                     "model": c["model"], "predicted_ms": s.get("predicted_s", math.nan) * 1e3,
                     "measured_ms": s["measured_s"] * 1e3, "error": s.get("error", math.nan)})
    return rows


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median and max |error| overall and per environment (NaN errors left out and counted)."""
    def stats(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        e = np.array([abs(r["error"]) for r in rs if math.isfinite(r["error"])])
        return {"n": int(e.size), "median_abs_error": float(np.median(e)) if e.size else math.nan,
                "max_abs_error": float(e.max()) if e.size else math.nan,
                "unpredicted": sum(1 for r in rs if not math.isfinite(r["error"]))}

    envs = sorted({r["environment"] for r in rows}, key=lambda x: [r["environment"] for r in rows].index(x))
    return {"all": stats(rows), **{env: stats([r for r in rows if r["environment"] == env]) for env in envs}}


def markdown(rows: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> str:
    lines = ["# commscope validate: predicted vs measured iteration time", "", f"Command: `{command}`", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", "| technique | environment | p | model | predicted (ms) | measured (ms) | error |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['error']:+.1%}" if math.isfinite(r["error"]) else "n/a"
        lines.append(f"| {r['technique']} | {r['environment']} | {r['p']} | {r['model']} | {r['predicted_ms']:.2f} | "
                     f"{r['measured_ms']:.2f} | {err} |")
    lines += ["", "| environment | techniques | median abs. error | max abs. error |", "|---|---|---|---|"]
    for env, s in summary(rows).items():
        lines.append(f"| {env} | {s['n']} | {s['median_abs_error']:.1%} | {s['max_abs_error']:.1%} |")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, records: Sequence[Mapping[str, Any]], command: str, notes: Sequence[str] = ()) -> None:
    rows = table_rows(records)
    with open(out / "validation.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["technique"])
        w.writeheader()
        w.writerows(rows)
    (out / "validation.md").write_text(markdown(rows, command, notes))


# --------------------------------------------------------------------------------------- running
def env_label(rate: str | None) -> str:
    return "host" if rate is None else rate


def make_plan(suite: Suite, envdir: Path, ranks: int, ranks_per_node: int, threads: int, timeout: float,
              seed: int = 0, backend: str = "auto") -> dict[str, Any]:
    """The JSON plan one environment's torchrun job follows (paths inside ``envdir``)."""
    envdir = envdir.resolve()
    techniques = []
    for name, options in suite.techniques:
        opts = dict(options)
        if name == "mgwfbp":  # buckets from the merge rule on this run's profile and fitted environment
            opts.update(profile=str(envdir / "profile.json"), env=str(envdir / "environment.json"))
        techniques.append([name, opts])
    return {"suite": suite.name, "model": suite.model, "model_options": dict(suite.model_options),
            "batch_size": suite.batch_size, "threads": threads, "seed": seed, "lr": 0.05, "timeout": timeout,
            "sweep": {"ops": list(suite.sweep_ops), "min_size": suite.sweep_sizes[0],
                      "max_size": suite.sweep_sizes[1], "factor": suite.sweep_sizes[2],
                      "warmup": suite.sweep_iters[0], "iters": suite.sweep_iters[1],
                      "latency_iters": suite.latency_iters, "latency_bytes": LATENCY_BYTES},
            "profile": {"warmup": suite.profile_iters[0], "iterations": suite.profile_iters[1]},
            "techniques": techniques, "iterations": suite.iterations, "warmup": suite.warmup,
            "records": str(envdir / "records.jsonl"), "environment": str(envdir / "environment.json"),
            "environment_name": f"fitted:{envdir.name}",
            "profile_path": str(envdir / "profile.json"),
            # reduce_scatter is left to auto: gloo's is an allreduce of the whole buffer
            "fit_algorithm": "ring_allreduce,ring_allgather",
            # iterations send many messages back to back: their cost is the mean message time, not the median
            "fit_statistic": "mean",
            # alpha from the latency-bound sizes, beta from the bandwidth-bound ones: a shaped link's token
            # bucket makes the sizes between them faster than any one alpha-beta line
            "fit_method": "two_regimes",
            "ranks": ranks, "ranks_per_node": ranks_per_node, "backend": backend}


def job_command(plan_path: Path, rate: str | None, ranks: int, ranks_per_node: int) -> list[str]:
    node = [sys.executable, "-m", "runners.validate_rank", "--node", str(plan_path)]
    if rate is None:
        return node
    return [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(ranks // ranks_per_node),
            "--ranks-per-node", str(ranks_per_node), "--rate", rate, "--", *node]


_STAGE = re.compile(r"@@ stage (\d+)/(\d+): (.*)")
_FAILED = re.compile(r"@@ failed (\S+): (.*)")


def run_job(cmd: Sequence[str], log: Path, on_stage: Callable[[int, int, str], None], threads: int
            ) -> tuple[int, list[str], list[str]]:
    """Run one environment's job, its output into ``log``; returns (exit code, failed techniques, its
    ``commscope: error:`` lines, or its last lines where it printed none)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    failed: list[str] = []
    tail: list[str] = []
    errors: list[str] = []
    with open(log, "w") as fh, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                                 env=env, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            tail = [*tail, line.rstrip()][-15:]
            if "commscope: error:" in line:
                errors.append(line.strip())
            m = _STAGE.search(line)
            if m:
                on_stage(int(m.group(1)), int(m.group(2)), m.group(3))
            f = _FAILED.search(line)
            if f:
                failed.append(f"{f.group(1)} ({f.group(2)})")
        code = proc.wait()
    return code, failed, errors or tail


def validate(suite: str | Suite, ranks: int, out: str | os.PathLike[str], emulate: Sequence[str] = (),
             threads: int = 1, timeout: float = 300.0, ranks_per_node: int | None = None,
             command: str = "", progress: Any = None, backend: str = "auto"
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the suite on every environment; returns (validation records, failures). See the module docstring."""
    import costmodels as cm
    from runners.emulate import parse_rate

    if isinstance(suite, Suite):
        s = suite
    elif suite in SUITES:
        s = SUITES[suite]
    else:
        raise ValidationError(f"unknown suite {suite!r}; choose one of: {', '.join(SUITES)}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ValidationError(f"--ranks must be an integer >= 2, got {ranks!r}")
    rates: list[str | None] = [None]
    if emulate:
        rates = []
        for r in emulate:
            parse_rate(r)  # a bad rate fails before anything runs
            rates.append(r)
        rpn = ranks_per_node or 1
        if ranks % rpn:
            raise ValidationError(f"--ranks {ranks} is not a multiple of --ranks-per-node {rpn}")
    else:
        rpn = ranks
    from runners.bench import BACKENDS

    if backend not in BACKENDS:
        raise ValidationError(f"unknown --backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    outdir = Path(out)
    if (outdir / "validation.jsonl").exists():
        raise ValidationError(f"{outdir} already holds a validation (validation.jsonl); choose another --out")
    outdir.mkdir(parents=True, exist_ok=True)
    all_records: list[dict[str, Any]] = []
    failures: list[str] = []
    notes = [f"suite {s.name}: model {s.model}, batch {s.batch_size} per rank, {ranks} ranks "
             f"({rpn} per node), {threads} thread(s) per rank, {s.iterations} timed iterations after {s.warmup}",
             "compute: profiled inside the distributed run, on all ranks at once with the same threads per rank "
             "(each rank's per-layer medians scaled to its unhooked forward and backward, then the mean over ranks)",
             "environment: fitted to the mean per-iteration times of this run's own sweep of "
             + ", ".join(s.sweep_ops) + " in two regimes (Hockney): alpha from the sizes below 64 KiB, beta and "
             "gamma from those from 256 KiB"]
    for rate in rates:
        label = env_label(rate)
        envdir = outdir / re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        if envdir.exists() and any(envdir.iterdir()):
            raise ValidationError(f"{envdir} is not empty; choose another --out")
        envdir.mkdir(parents=True, exist_ok=True)
        plan = make_plan(s, envdir, ranks, rpn, threads, timeout, backend=backend)
        plan_path = envdir / "plan.json"
        plan_path.write_text(json.dumps(plan, indent=2))
        cmd = job_command(plan_path, rate, ranks, rpn)
        task = progress.add_task(label, total=3 + len(s.techniques)) if progress is not None else None

        def on_stage(k: int, n: int, what: str, task: Any = task) -> None:
            if progress is not None:
                progress.update(task, completed=k - 1, description=f"{label}: {what}")

        code, failed, tail = run_job(cmd, envdir / "log.txt", on_stage, threads)
        if progress is not None:
            progress.update(task, completed=3 + len(s.techniques), description=f"{label}: done")
        for f in failed:
            failures.append(f"{label}: {f}")
        if code and not failed:
            failures.append(f"{label}: the job exited with code {code} ({envdir / 'log.txt'} has its output):\n  "
                            + "\n  ".join(tail[-6:]))
        if not (envdir / "environment.json").exists() or not (envdir / "profile.json").exists():
            continue
        env = cm.Environment.load(envdir / "environment.json")
        prof = cm.load_profile(envdir / "profile.json")
        loaded = results.load(envdir / "records.jsonl")
        recs = compare(loaded.records, prof, env, label)
        if recs:
            results.append(outdir / "validation.jsonl", recs)
        all_records += recs
    write_tables(outdir, all_records, command, notes)
    return all_records, failures
