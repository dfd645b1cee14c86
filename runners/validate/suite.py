"""What a validation runs: the suites (model, techniques, sweep and profile sizes, iterations) and the JSON plan
one environment's torchrun job follows (:mod:`runners.validate.rank`), with the command that starts that job."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from runners.calibrate.cells import SWEEP_ALGORITHM, SWEEP_STATISTIC

LATENCY_BYTES = 64 * 1024  # sweep sizes below this are latency-bound: the fit takes alpha from them
# sweep sizes below this get Suite.latency_iters iterations: on shared cores a message's time up to 1 MiB scatters
# 2-5x between iterations (p10 to p90 at 2.5 Gbit/s on 4 ranks over 2 cores), and with 10 iterations the mean's
# standard error (up to 20%) exceeded every miss of the sweep fit (bench/bench_library_fit.py)
MANY_ITERATIONS_BELOW = 4 * 1024 * 1024


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
    latency_iters: int = 100  # timed iterations of sizes below MANY_ITERATIONS_BELOW: bimodal on shared cores
    profile_iters: tuple[int, int] = (3, 10)
    extra_models: tuple[tuple[str, int], ...] = ()  # more (model, batch size) workloads after the first
    repeats: int = 1  # times each technique is trained, in rotated order (the spread over repetitions)

    @property
    def workloads(self) -> tuple[tuple[str, int], ...]:
        """Every (model, batch size) the suite trains, the first one first."""
        return ((self.model, self.batch_size), *self.extra_models)


EXACT = ("bsp", "wfbp", "fusion", "mgwfbp", "bytescheduler", "dear", "zero", "fsdp")
# bsp sends all gradients as one message after backward (flatten): the iteration's communication share is then
# that of its bytes and one latency, which is what places a (link, model) cell in its regime. bsp per tensor
# (blocking all-reduces after backward, nothing overlapped) pays the host overhead o once per tensor with no
# interference: it is what tells o apart from kappa_m when calibrating (with wfbp alone they trade off)
QUICK_TECHNIQUES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("bsp", {"flatten": True}), ("bsp", {}), ("wfbp", {}), ("fusion", {}), ("mgwfbp", {}), ("bytescheduler", {}),
    ("dear", {}), ("zero", {}), ("local_sgd", {}))
FULL_EXTRA: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("fsdp", {}), ("fp16", {}), ("powersgd", {}), ("topk", {}), ("randomk", {}), ("dgc", {}), ("qsgd", {}),
    ("terngrad", {}), ("signsgd", {}), ("ef_signsgd", {}), ("dpsgd", {}))
# the workloads: a CNN whose 0.7 MB of gradients leave it compute-bound on a fast link, and a transformer whose
# 23 MB embedding and LM head make it communication-bound on a slow one (regimes: runners.validate.report)
WORKLOADS = (("resnet_small", 32), ("gpt_wide", 8))
SUITES: dict[str, Suite] = {
    # the sweep reaches 16 MiB: gpt_wide's buckets (25 MiB) and flattened gradients (23 MB) are priced within a
    # factor 1.5 of its largest size, not extrapolated from 4 MiB
    "quick": Suite("quick", WORKLOADS[0][0], WORKLOADS[0][1], QUICK_TECHNIQUES, iterations=12, warmup=2,
                   sweep_sizes=("4", "16MiB", 4.0), extra_models=WORKLOADS[1:], repeats=2),
    "full": Suite("full", WORKLOADS[0][0], WORKLOADS[0][1], QUICK_TECHNIQUES + FULL_EXTRA, iterations=24, warmup=4,
                  sweep_sizes=("4", "16MiB", 4.0), sweep_iters=(3, 15), profile_iters=(5, 30),
                  extra_models=WORKLOADS[1:], repeats=3),
}


class ValidationError(CommscopeError):
    """A validation that cannot start or did not complete (the message says which run)."""


def env_label(rate: str | None, ranks_per_node: int | None = None, ranks: int | None = None) -> str:
    """An environment's name in the tables and its directory: the link rate, or "host"; a two-level cluster adds its
    nodes x ranks per node (``1gbit-2x2``)."""
    if rate is None:
        return "host"
    if ranks_per_node and ranks and ranks_per_node > 1:
        return f"{rate}-{ranks // ranks_per_node}x{ranks_per_node}"
    return rate


def profile_file(envdir: Path, index: int, model: str) -> Path:
    """Where a workload's measured profile goes: ``profile.json`` for the first, ``profile-<model>.json`` after."""
    return envdir / ("profile.json" if index == 0 else f"profile-{re.sub(r'[^A-Za-z0-9_.-]', '_', model)}.json")


def make_plan(suite: Suite, envdir: Path, ranks: int, ranks_per_node: int, threads: int, timeout: float,
              seed: int = 0, backend: str = "auto", host_buffers: str | None = None) -> dict[str, Any]:
    """The JSON plan one environment's torchrun job follows (paths inside ``envdir``)."""
    envdir = envdir.resolve()
    workloads = []
    for i, (model, batch) in enumerate(suite.workloads):
        prof = profile_file(envdir, i, model)
        techniques = []
        for name, options in suite.techniques:
            opts = dict(options)
            if name == "mgwfbp":  # buckets from the merge rule on this run's profile and fitted environment
                opts.update(profile=str(prof), env=str(envdir / "environment.json"))
            techniques.append([name, opts])
        workloads.append({"model": model, "batch_size": batch, "profile_path": str(prof), "techniques": techniques})
    first = workloads[0]
    return {"suite": suite.name, "model": first["model"], "batch_size": first["batch_size"],
            "workloads": workloads, "repeats": suite.repeats,
            "threads": threads, "seed": seed, "lr": 0.05, "timeout": timeout,
            "sweep": {"ops": list(suite.sweep_ops), "min_size": suite.sweep_sizes[0],
                      "max_size": suite.sweep_sizes[1], "factor": suite.sweep_sizes[2],
                      "warmup": suite.sweep_iters[0], "iters": suite.sweep_iters[1],
                      "latency_iters": suite.latency_iters, "latency_bytes": LATENCY_BYTES,
                      "latency_iters_below": MANY_ITERATIONS_BELOW},
            "profile": {"warmup": suite.profile_iters[0], "iterations": suite.profile_iters[1]},
            "techniques": first["techniques"], "iterations": suite.iterations, "warmup": suite.warmup,
            "records": str(envdir / "records.jsonl"), "environment": str(envdir / "environment.json"),
            "environment_name": f"fitted:{envdir.name}",
            "profile_path": first["profile_path"],
            # reduce_scatter is left to auto: gloo's is an allreduce of the whole buffer
            "fit_algorithm": SWEEP_ALGORITHM,
            # iterations send many messages back to back: their cost is each rank's calls summed (the chain
            # time, runners.measure.sweep.timing), not the median nor the mean of per-iteration maxima
            "fit_statistic": SWEEP_STATISTIC,
            # alpha from the latency-bound sizes, beta from the bandwidth-bound ones: a shaped link's token
            # bucket makes the sizes between them faster than any one alpha-beta line
            "fit_method": "two_regimes",
            "ranks": ranks, "ranks_per_node": ranks_per_node, "backend": backend,
            # what gloo's own buffers cost on this host (runners.measure.host_buffers): given to the fit
            **({"host_buffers": host_buffers} if host_buffers else {})}


def job_command(plan_path: Path, rate: str | None, ranks: int, ranks_per_node: int) -> list[str]:
    """The command that runs one environment's job: the rank side on this host, or under ``commscope emulate``
    with one emulated node per ``ranks_per_node`` ranks behind links of ``rate``."""
    node = [sys.executable, "-m", "runners.validate.rank", "--node", str(plan_path)]
    if rate is None:
        return node
    return [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(ranks // ranks_per_node),
            "--ranks-per-node", str(ranks_per_node), "--rate", rate, "--", *node]
