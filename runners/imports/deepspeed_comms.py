"""DeepSpeed's ``comms_logger`` summary (the table ``deepspeed.comm.log_summary()`` prints) into collective records.

The format, from deepspeed/utils/comms_logging.py (``CommsLogger.log_all``): a header of 20-character columns
``Comm. Op  Message Size  Count  Total Latency(ms)  Avg Latency(ms)  tput_avg (Gbps)  busbw_avg (Gbps)``, then
per op a line with its name alone (``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
``broadcast``, ``all_to_all_single``, ``send``, ...) and one indented line per message size: the size as
``convert_size`` writes it (powers of 1024, two decimals: ``12.5 MB``), the count, the total latency, the
average latency (a 10%-trimmed mean, ms) and the trimmed means of algbw and busbw (Gbps). With
``show_straggler`` a second table follows ("Breakdown with straggler effect": ``Total comm lat(ms)``, ``Total
straggler(ms)``, ``Avg comm lat(ms)``, ``Avg straggler(ms)``). Launcher prefixes such as ``[rank0]:`` or
``[default0]:`` are ignored.

DeepSpeed logs an all-gather's size per rank (its bandwidth multiplies it by the world size) and the other ops'
whole buffers, so commscope's bytes (nccl-tests') are the logged size times the world size for all-gather. The
world size is ``--world-size``, else read from the table: DeepSpeed's busbw / tput is (n-1)/n for all-reduce,
all-gather, reduce-scatter and all-to-all. Sizes are rounded to two decimals in the log, so bytes are within
0.5% of the real ones (``bytes_rounded``). The time of a record is DeepSpeed's average latency; barrier and
names DeepSpeed was told to log under (``log_name``) that are not collectives are skipped and reported.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from .common import FormatError, collective_record, imported_run, op_name, read_text

FORMAT = "deepspeed-comms"
_PREFIX = re.compile(r"^\s*\[[^\]]*\]:\s?")
_ROW = re.compile(r"^\s+(\d+(?:\.\d+)?)\s*([KMGTPEZY]?B)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
_NAME = re.compile(r"^([A-Za-z_][\w.\-]*)\s*$")
_UNITS = {u: 1024 ** i for i, u in enumerate(("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"))}
_RATIO_OPS = ("allreduce", "allgather", "reduce_scatter", "all_to_all")


@dataclass
class Imported:
    """The records, what was skipped (``file:line: reason``), the world size and where it came from."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    world_size: int = 0
    world_size_from: str = ""


def _rows(text: str, name: str) -> tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, float]]]:
    rows: list[dict[str, Any]] = []
    straggle: dict[tuple[str, str], dict[str, float]] = {}
    section, op = None, None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw.rstrip("\n"))
        if "Comm. Op" in line and "Message Size" in line:
            section = "straggler" if "straggler" in line else "summary"
            op = None
            continue
        if section is None:
            continue
        m = _ROW.match(line)
        if m and op is not None:
            size = f"{m.group(1)} {m.group(2)}"
            try:
                vals = [float(m.group(i)) for i in range(4, 8)]
            except ValueError:
                section = None
                continue
            if section == "summary":
                rows.append({"op_name": op, "size": size, "bytes": round(float(m.group(1)) * _UNITS[m.group(2)]),
                             "rounded": m.group(2) != "B", "count": int(m.group(3)), "total_ms": vals[0],
                             "avg_ms": vals[1], "tput_Gbps": vals[2], "busbw_Gbps": vals[3],
                             "where": f"{name}:{number}"})
            else:
                straggle[(op, size)] = {"comm_lat_total_ms": vals[0], "straggler_total_ms": vals[1],
                                        "comm_lat_avg_ms": vals[2], "straggler_avg_ms": vals[3]}
            continue
        m = _NAME.match(line)
        if m and not line.startswith(" "):
            op = m.group(1)
        elif line.strip() and not line.strip().startswith(("_", "-", "Breakdown")):
            section, op = None, None  # the table ended
    return rows, straggle


def _world_from_ratios(rows: list[dict[str, Any]]) -> int | None:
    guesses = []
    for r in rows:
        if op_name(r["op_name"]) in _RATIO_OPS and r["tput_Gbps"] >= 1.0:
            ratio = r["busbw_Gbps"] / r["tput_Gbps"]
            if 0 < ratio < 1:
                guesses.append(round(1 / (1 - ratio)))
    return int(statistics.median(guesses)) if guesses else None


def parse(text: str, name: str, world_size: int | None = None) -> Imported:
    """Records of a log holding DeepSpeed's comms summary (``name`` is the file, for messages and ``source``)."""
    if world_size is not None and world_size < 1:
        raise FormatError(f"--world-size must be >= 1, got {world_size}")
    rows, straggle = _rows(text, name)
    if not rows:
        raise FormatError(f"{name}: no DeepSpeed comms summary found (a 'Comm. Op  Message Size  Count ...' table "
                          "followed by op names and size rows)")
    out = Imported()
    guessed = _world_from_ratios(rows)
    if world_size is not None:
        out.world_size, out.world_size_from = world_size, "given"
    elif guessed:
        out.world_size, out.world_size_from = guessed, "busbw / tput of the table, (n-1)/n"
    else:
        raise FormatError(f"{name}: cannot tell the world size from the table (no all-reduce, all-gather, "
                          "reduce-scatter or all-to-all above 1 Gbps); give --world-size N")
    n = out.world_size
    run = imported_run("unknown", n, n, ["unknown"], "unknown", imported_from=name, world_size_from=out.world_size_from,
                       ranks_per_node_from="assumed: all ranks on one node (the summary does not say)")
    for r in rows:
        op = op_name(r["op_name"])
        if op is None:
            out.problems.append(f"{r['where']}: {r['op_name']} is not a collective commscope models; skipped")
            continue
        if r["avg_ms"] <= 0 or r["count"] <= 0 or r["bytes"] <= 0:
            bad = ", ".join(f"{k} {r[k]!r}" for k in ("bytes", "count", "avg_ms") if r[k] <= 0)
            out.problems.append(f"{r['where']}: {r['op_name']} {r['size']}: {bad} (must be > 0); skipped")
            continue
        nbytes = r["bytes"] * (n if op == "allgather" else 1)
        cfg = {"iterations": r["count"], "deepspeed_op": r["op_name"], "logged_size": r["size"],
               "bytes_rounded": r["rounded"], "count_unit": "bytes (the summary names no element type)"}
        res = {"calls": r["count"], "time_min_s": None, "time_max_s": None, "time_mean_s": None,
               "time_from": "DeepSpeed's average latency (10%-trimmed mean)", "total_latency_s": r["total_ms"] / 1e3,
               "deepspeed_tput_avg_Gbps": r["tput_Gbps"], "deepspeed_busbw_avg_Gbps": r["busbw_Gbps"],
               **straggle.get((r["op_name"], r["size"]), {})}
        out.records.append(collective_record(op, nbytes, "unknown", n, [r["avg_ms"] / 1e3], run, FORMAT, name, cfg,
                                             res))
    if not out.records:
        raise FormatError(f"{name}: no collective rows to import; {out.problems[0]}")
    return out


def import_file(path: str, world_size: int | None = None) -> Imported:
    """Parse the log at ``path``."""
    return parse(read_text(path, "DeepSpeed log"), path, world_size)
