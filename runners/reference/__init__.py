"""Reference measurements shipped with commscope, so the app shows predicted vs measured with no run first.

``validation/`` holds one run of the quick validation suite on a 2-core CPU machine, 4 gloo ranks, two
workloads (resnet_small, a CNN with 0.7 MB of gradients, and gpt_wide, a transformer with a 23 MB embedding
and head), every technique twice in rotated order, made by :data:`COMMAND` (into a scratch directory, then
moved here): each rank behind its own emulated link (one network namespace per rank, tc tbf) at 200 Mbit/s
and 2.5 Gbit/s, and a two-level cluster of 2 nodes x 2 ranks (loopback inside a node, 1 Gbit/s between).
Per environment it keeps the sweep, fitted environment, each model's profile and the iteration records, the
plan and the log; at the top, the validation records (three predictions per cell) and the CSV / markdown, and
``host_network_cpu.json``: the host's CPU seconds per byte at each link rate, which prediction (c) uses for ranks
sharing cores with their communication (measured on the same host after the run, 2026-11-24, with other work
running: its load averages are in the file; ``tools/repredict_validation.py`` predicted the run again with it).

``validation-rerun/`` and ``validation-run3/`` are two more runs of the same command (2026-11-27, hosts of
the same kind with nothing else running; the profile measures the averaging pass; the third was fitted at run
time as today's ``fit`` does, gamma only where it lowers the AIC by 2), kept beside the first as independent
checks: a model change is judged on every run (``bench/bench_validation.py`` reports each), so that what helps
one run by fitting its noise shows up on the others. ``validation-run4/`` (2026-11-28, a quiet host) is the first
made after the exact runners stopped allocating their flat buffers afresh every step (DeAR, ZeRO, MG-WFBP, bsp
flattened: :class:`runners.training.exact_common.FlatBucket`); the three before measured those techniques with
the CPU allocator's page faults in them. ``validation-run5/`` (2026-11-29, a quiet host) is the first whose
iteration records keep the runner's ``counters`` (ByteScheduler's negotiated batches and their seconds per step),
made after DDP's buffer broadcast was priced and held out from every change before it.

``published/`` holds collective measurements published by others (nccl-tests tables and benchmark posts on
8x A100, 8x H200 (all-reduce with and without NVLS, all-gather, reduce-scatter), 2 x 8 H100 and PCIe GPUs
without peer-to-peer), transcribed with their sources in
``sources.json`` and turned into records (``origin: published``, with the citation and the commscope
environment that describes the system) by ``tools/make_published_records.py``; :func:`published_comparison`
puts the environment's library prediction beside each.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from runners import results

VALIDATION_DIR = Path(__file__).resolve().parent / "validation"
#: size regimes of the published comparison: label, smallest bytes, bytes from which the next begins
REGIMES = (("small (< 1 MiB)", 0, 2**20), ("mid (1 MiB - 1 GiB)", 2**20, 2**30),
           ("bandwidth (>= 1 GiB)", 2**30, math.inf))
#: the shipped validation runs: directory name -> what it is
RUNS = {"validation": "2026-11-24, a busy host (other work 0-6% of the CPUs)",
        "validation-rerun": "2026-11-27, the same command on a quiet host",
        "validation-run3": "2026-11-27, a third run on a quiet host, fitted as today (gamma where it earns it)",
        "validation-run4": "2026-11-28, a quiet host, the exact runners keeping their flat buffers across steps",
        "validation-run5": "2026-11-29, a quiet host, the runners counting what each technique did per step",
        "validation-run6": "2026-11-29, a quiet host, the sweep timing every size below 4 MiB 100 times"}
#: the run the app opens on: the newest (RUNS is in the order they were made), so made with today's exact runners;
#: the first, ``validation``, stays the functions' default and every test's fixture
DEFAULT_RUN = list(RUNS)[-1]
PUBLISHED_DIR = Path(__file__).resolve().parent / "published"
COMMAND = "commscope validate --suite quick --ranks 4 --emulate 200mbit,1gbit:2,2500mbit"


def run_dir(run: str = "validation") -> Path:
    """The directory of a shipped validation run (a key of :data:`RUNS`)."""
    if run not in RUNS:
        raise KeyError(f"no shipped validation run {run!r}; shipped: {', '.join(RUNS)}")
    return VALIDATION_DIR.parent / run


def validation_records(run: str = "validation") -> list[dict]:
    """The shipped "validation" records of a run (predicted beside measured, per technique and link rate)."""
    return results.load(run_dir(run) / "validation.jsonl").records


def environments(run: str = "validation") -> list[str]:
    """The link rates of a shipped run, in the order they ran."""
    return list(dict.fromkeys(r["config"]["environment"] for r in validation_records(run)))


def records(environment: str, run: str = "validation") -> list[dict]:
    """Every record (collective sweep, environment, profile, iteration) of one link rate of a shipped run."""
    path = run_dir(run) / environment / "records.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no shipped records for {environment!r}; shipped: {', '.join(environments(run))}")
    return results.load(path).records


def profiles(environment: str, run: str = "validation") -> dict[str, Path]:
    """The measured profiles of one environment of a shipped run: model -> its profile JSON (``profile.json``
    holds the suite's first model, ``profile-<model>.json`` the others)."""
    import json

    out = {}
    for path in sorted((run_dir(run) / environment).glob("profile*.json")):
        out[str(json.loads(path.read_text()).get("name", path.stem))] = path
    return out


def published_records() -> list[dict]:
    """The shipped published measurements (collective records with ``origin: published`` and a citation)."""
    return results.load(PUBLISHED_DIR / "records.jsonl").records


def published_systems() -> list[str]:
    """The published systems, in the order they are shipped."""
    return list(dict.fromkeys(r["system"] for r in published_records()))


def published_comparison(system: str | None = None) -> list[dict[str, Any]]:
    """Each published point beside the prediction of its environment's collective library: system, op, p,
    bytes, measured and predicted time and bus bandwidth, their relative error, and the chosen algorithm. The
    prediction is what the source's timing prints (:mod:`costmodels.harness`): the library's device time
    (``device_s``), plus PyTorch's per-call host overhead where each call was timed alone on an idle device."""
    import costmodels as cm

    rows = []
    for r in published_records():
        if system is not None and r["system"] != system:
            continue
        env = cm.environment(r["environment"])
        op, n, p = r["config"]["op"], r["config"]["bytes"], r["run"]["world_size"]
        c = cm.choose(op, float(n), p, env)
        timing = r["config"].get("timing", "back_to_back")
        t = float(cm.harness(timing).measured_time(float(c.time)))
        measured_bw = r["result"]["busbw_GBps"]
        predicted_bw = n / t * cm.busbw_factor(op, p) / 1e9
        rows.append({"system": r["system"], "environment": env.name, "op": op, "p": p, "bytes": n,
                     "measured_s": r["result"]["time_s"], "predicted_s": t, "measured_busbw_GBps": measured_bw,
                     "predicted_busbw_GBps": predicted_bw,
                     "busbw_error": predicted_bw / measured_bw - 1 if measured_bw > 0 else math.nan,
                     "time_error": t / r["result"]["time_s"] - 1, "device_s": float(c.time), "timing": timing,
                     "algorithm": str(c.algorithm),
                     "protocol": str(c.protocol), "library": c.library, "citation": r["citation"]["source"]})
    return rows


def published_regimes(library: str = "nccl") -> dict[str, dict[str, Any]]:
    """How far ``library``'s predictions are from every published point it prices, per size regime
    (:data:`REGIMES`): points, systems, and the median and largest busbw error, predicted / measured - 1 (positive:
    the model is faster than the measurement). Points whose published busbw rounds to 0 have no error and are left
    out."""
    rows = [r for r in published_comparison() if r["library"] == library and math.isfinite(r["busbw_error"])]
    out: dict[str, dict[str, Any]] = {}
    for label, lo, hi in REGIMES:
        mine = [r for r in rows if lo <= r["bytes"] < hi]
        if not mine:
            continue
        errors = [r["busbw_error"] for r in mine]
        out[label] = {"points": len(mine), "systems": len({r["system"] for r in mine}),
                      "median_error": statistics.median(errors),
                      "max_abs_error": max(abs(e) for e in errors), "low": lo, "high": hi}
    return out


def published_check(library: str, sizes: Any) -> str | None:
    """One line on how ``library``'s model compares with the published measurements in the regimes that
    ``sizes`` (bytes) fall in; None where nothing published is priced by that library."""
    regimes = published_regimes(library)
    sizes = [float(x) for x in sizes] if sizes is not None else []
    shown = [(label, r) for label, r in regimes.items() if any(r["low"] <= x < r["high"] for x in sizes)]
    if not shown:
        return None
    parts = [f"{label}: busbw {r['median_error']:+.0%} median, {r['max_abs_error']:.0%} at worst "
             f"({r['points']} points, {r['systems']} systems)" for label, r in shown]
    return (f"{library}'s model against the shipped published measurements (runners/reference/published; positive: "
            f"faster than measured): " + "; ".join(parts))
