"""nccl-tests' JSON output (``-J FILE.json``), with ``-I`` per-iteration timings, into collective records.

The format, as nccl-tests 2.19 writes it (src/util.cu, ``JSON_FILE_VERSION`` 3; README "-J,--output_file" and
"-I,--per_iter_timing"): one object with ``version``, ``args`` (the command line: the binary names the op),
``nccl_version`` (NCCL_VERSION_CODE), ``config`` (``nthreads``, ``ngpus``, ``warmup_iters``, ``iterations``,
``validation``, ..., ``devices``: one ``{rank, group, pid, hostname, device, device_hex, device_info}`` per
process) and ``results``: one object per size with ``size``, ``count``, ``type``, ``redop``, ``root``,
``out_of_place`` / ``in_place`` (``time`` or ``cpu_time`` in us, ``alg_bw``, ``bus_bw``, ``nwrong``; null when
not run; "nan" where undefined), ``actual_iterations`` and, with ``-I 1``, ``out_of_place_per_iter`` /
``in_place_per_iter`` (``skipped_iterations``, ``min_us`` ... ``cv_pct``, ``times_us``: every iteration, and with
several processes ``per_process_max_times_us``: each process's times).

One record per size from the out-of-place numbers (in-place kept as ``inplace_*``), as the text import does
(:mod:`runners.measure.nccl_tests`). Stragglers: iterations (after ``-K``'s skipped ones) slower than 1.5 x the
median, each with the process that was slowest in it, and processes whose median is over 1.5 x the median of
the other processes' medians.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from runners import results
from runners.measure.nccl_tests import BINARIES, OPS, TYPES
from runners.measure.nccl_tests import Imported as TextImported

from .common import ORIGIN, STRAGGLER_FACTOR, FormatError, number, stragglers

FORMAT = "nccl-tests-json"
_BINARY = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(BINARIES, key=len, reverse=True)) + r")_perf(?:_mpi)?\b")


@dataclass
class Imported(TextImported):
    """What the text import gives (records, rows skipped, ops, world size), and the straggler rows."""

    stragglers: list[dict[str, Any]] = field(default_factory=list)


def _version(code: Any) -> str | None:
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return None
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"  # NCCL_VERSION_CODE since 2.9


def per_iteration(block: Any, hosts: list[str], factor: float = STRAGGLER_FACTOR) -> dict[str, Any] | None:
    """The ``*_per_iter`` object with its stragglers: iterations over ``factor`` x the median, and slow processes."""
    if not isinstance(block, dict) or not isinstance(block.get("times_us"), list):
        return None
    times = [number(t) for t in block["times_us"]]
    skip = block.get("skipped_iterations") if isinstance(block.get("skipped_iterations"), int) else 0
    kept = [(i, t) for i, t in enumerate(times) if i >= skip and t is not None]
    if not kept:
        return None
    med, slow = stragglers([t for _, t in kept], factor)
    rows = block.get("per_process_max_times_us")
    procs = [[number(t) for t in r] for r in rows if isinstance(r, list)] if isinstance(rows, list) else []
    out_slow = []
    for j, t, ratio in slow:
        i = kept[j][0]
        row = {"iteration": i, "time_us": t, "x_median": ratio}
        column = [(p[i], k) for k, p in enumerate(procs) if i < len(p) and p[i] is not None]
        if column:
            k = max(column)[1]
            row.update(process=k, host=hosts[k] if k < len(hosts) else None)
        out_slow.append(row)
    medians = [statistics.median(v for v in p[skip:] if v is not None) for p in procs if any(
        v is not None for v in p[skip:])]
    slow_procs = []
    for k, m in enumerate(medians) if len(medians) > 1 else ():
        others = statistics.median(medians[:k] + medians[k + 1:])  # the other processes' median
        if others > 0 and m > factor * others:
            slow_procs.append({"process": k, "host": hosts[k] if k < len(hosts) else None, "median_us": m,
                               "x_others": m / others})
    summary = {k: number(block.get(k)) for k in ("min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us",
                                                  "stdev_us", "cv_pct")}
    return {"times_us": times, "skipped": skip, "median_us": med, **summary, "straggler_factor": factor,
            "stragglers": out_slow, "slow_processes": slow_procs}


def _placement(block: Any, key: str) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        return None
    t = number(block.get("time", block.get("cpu_time")))
    algbw, busbw = number(block.get("alg_bw")), number(block.get("bus_bw"))
    if t is None or algbw is None or busbw is None or t <= 0 or algbw < 0 or busbw < 0:
        raise ValueError(f"{key} time, alg_bw and bus_bw must be numbers (time > 0), got {block.get('time')!r}, "
                         f"{block.get('alg_bw')!r}, {block.get('bus_bw')!r}")
    wrong = number(block.get("nwrong"))
    return {"time_s": t / 1e6, "algbw": algbw, "busbw": busbw, "wrong": None if wrong is None else int(wrong),
            "cpu_time": "cpu_time" in block}


def parse(data: Any, name: str, op: str | None = None, world_size: int | None = None) -> Imported:
    """Records of nccl-tests JSON output ``data`` (``name`` is the file, for messages and ``source``)."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise FormatError(f"{name}: not nccl-tests JSON output (no 'results' list; nccl-tests -J writes one)")
    if op is not None and op not in OPS:
        raise FormatError(f"unknown --op {op!r}; choose from: {', '.join(OPS)}")
    args = [a for a in data.get("args") or [] if isinstance(a, str)]
    found = [BINARIES[m.group(1)] for a in args for m in [_BINARY.search(a)] if m]
    use_op = found[0] if found else op
    if found and op is not None and op != found[0]:
        raise FormatError(f"{name}: the run is {found[0]} (from its command line) but --op is {op}")
    if use_op is None:
        raise FormatError(f"{name}: its command line names no nccl-tests binary (e.g. all_reduce_perf); give --op")
    if use_op not in OPS:
        raise FormatError(f"{name}: {use_op} has no records in commscope; it reads {', '.join(OPS)}")
    cfg = data.get("config") if isinstance(data.get("config"), dict) else {}
    devices = [d for d in cfg.get("devices") or [] if isinstance(d, dict)]
    per_proc = max(1, int(cfg.get("nthreads") or 1)) * max(1, int(cfg.get("ngpus") or 1))
    world = len(devices) * per_proc
    if world_size is not None and world and world_size != world:
        raise FormatError(f"{name} lists {world} ranks ({len(devices)} processes x {per_proc}) but --world-size is "
                          f"{world_size}")
    world = world_size or world
    if not world:
        raise FormatError(f"{name} has no config.devices to count the ranks from; give --world-size N")
    hosts = [str(d.get("hostname", "unknown")) for d in devices]
    per_node = hosts.count(hosts[0]) * per_proc if hosts else world
    names = [str(d.get("device_info") or "unknown") for d in devices for _ in range(per_proc)] or ["unknown"]
    run = {"host": hosts[0] if hosts else "unknown", "backend": "nccl", "world_size": world, "ranks_per_node": per_node,
           "devices": names, "torch": None, "nccl": _version(data.get("nccl_version")), "gloo": None, "network": None,
           "imported_from": name, "nthread": cfg.get("nthreads"), "ngpus": cfg.get("ngpus")}
    out = Imported(world_size=world)
    warmup = cfg.get("warmup_iters") if isinstance(cfg.get("warmup_iters"), int) else 5
    iters = cfg.get("iterations") if isinstance(cfg.get("iterations"), int) else 20
    for i, row in enumerate(data["results"]):
        where = f"{name}: results[{i}]"
        try:
            if not isinstance(row, dict):
                raise ValueError("not an object")
            size, count = row.get("size"), row.get("count")
            if not (isinstance(size, int) and isinstance(count, int) and size > 0 and count > 0):
                raise ValueError(f"size and count must be integers > 0, got {size!r} and {count!r}")
            oop = _placement(row.get("out_of_place"), "out_of_place")
            if oop is None:
                raise ValueError("no out_of_place numbers (null)")
            inp = _placement(row.get("in_place"), "in_place")
        except ValueError as exc:
            out.problems.append(f"{where}: skipped: {exc}")
            continue
        root = str(row.get("root", "-1")).strip()
        dtype = TYPES.get(str(row.get("type")), str(row.get("type")))
        config = {"op": use_op, "bytes": size, "count": count, "dtype": dtype,
                  "warmup": warmup, "iterations": row.get("actual_iterations") if isinstance(
                      row.get("actual_iterations"), int) and row["actual_iterations"] > 0 else iters,
                  "redop": str(row.get("redop", "none")), "root": int(root) if re.fullmatch(r"-?\d+", root) else -1,
                  "nranks": world, "check": oop["wrong"] is not None, "placement": "out-of-place",
                  "timed": "cpu" if oop["cpu_time"] else "gpu"}
        res: dict[str, Any] = {"time_s": oop["time_s"], "algbw_GBps": oop["algbw"], "busbw_GBps": oop["busbw"],
                               "wrong": oop["wrong"] or 0, "checked": oop["wrong"] is not None, "nranks": world,
                               "index": i}
        if inp is not None:
            res.update(inplace_time_s=inp["time_s"], inplace_algbw_GBps=inp["algbw"],
                       inplace_busbw_GBps=inp["busbw"], inplace_wrong=inp["wrong"])
        for key, label in (("out_of_place_per_iter", "out-of-place"), ("in_place_per_iter", "in-place")):
            pi = per_iteration(row.get(key), hosts)
            if pi is not None:
                res["per_iteration" if label == "out-of-place" else "inplace_per_iteration"] = pi
                out.stragglers += [{"op": use_op, "bytes": size, "placement": label, **s} for s in pi["stragglers"]]
        rec = results.record("collective", config, res, run, source=f"nccl-tests:{name}")
        rec.update(origin=ORIGIN, imported_from={"format": FORMAT, "file": name})
        out.records.append(results.validate(rec))
    if use_op not in out.ops:
        out.ops.append(use_op)
    if not out.records:
        why = f"; first problem: {out.problems[0]}" if out.problems else ""
        raise FormatError(f"no usable results in {name}{why}")
    return out
