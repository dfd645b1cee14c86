"""Read the standard output of nccl-tests (all_reduce_perf, all_gather_perf, ...) into collective records.

    commscope import nccl-tests LOG [--out results.jsonl] [--world-size N] [--op allreduce]

What is read from the log (the format nccl-tests documents and prints):

- the binary's name anywhere in a line (``# Collective test starting: all_reduce_perf`` or the
  command line a person pasted), giving the op; ``--op`` where the log names none;
- ``# nThread 1 nGpus 8 ... warmup iters: 5 iters: 20 ... validation: 1 ...``: warm-up and timed
  iterations, and whether results were checked (nccl-tests' defaults 5 / 20 where it is missing);
- ``#  Rank  0 Group  0 Pid ... on HOST device  0 [0x..] NAME``: one line per rank, giving the world
  size, the ranks on rank 0's host and the device names; ``--world-size`` where the log has none;
- the column header (``size count type redop root time algbw busbw #wrong ...``), whose names place
  the columns, then one row per size, out-of-place columns first and in-place ones after;
- ``# Avg bus bandwidth``, which ends a table.

One record per row, from the out-of-place columns; the in-place ones are kept as ``inplace_*``
fields. ``count`` and ``bytes`` are nccl-tests' own (their count is per rank for allgather,
reduce-scatter and all-to-all). A row that cannot be read is reported with its line number and
skipped; NCCL's own debug lines (``NCCL INFO``) are ignored. Records carry ``origin: imported`` and
``imported_from`` (as :mod:`runners.imports` writes them). nccl-tests' ``-J`` JSON output:
:mod:`runners.imports.nccl_tests_json`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from runners import results

BINARIES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "sendrecv": "sendrecv",
            "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "all_to_all", "sendrecv")
TYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64", "int32": "int32",
         "int8": "int8", "uint8": "uint8", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
         "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}
DEFAULT_WARMUP, DEFAULT_ITERS = 5, 20  # nccl-tests' -w and -n defaults

_BINARY = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(BINARIES, key=len, reverse=True)) + r")_perf(?:_mpi)?\b")
_SETUP = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_VALIDATION = re.compile(r"validation:\s*(\d+)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\S+)\s+(?:\[[^\]]*\]\s*)?(.*)$")
_NCCL_VERSION = re.compile(r"NCCL version (\S+)|nccl-library=(\d+)")
_DEBUG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")


class LogError(CommscopeError):
    """A log that cannot be imported as a whole (the message says why)."""


@dataclass
class Imported:
    """The records read from a log, and the rows skipped (``file:line: reason``)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    world_size: int = 0


def _library_version(match: re.Match[str]) -> str:
    if match.group(1):
        return match.group(1)
    code = int(match.group(2))  # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def _columns(line: str) -> list[str] | None:
    """The column names of a header line such as ``#  size  count  type  redop  root  time ...``."""
    names = line.lstrip("#").split()
    if "size" in names and "count" in names and "time" in names and "type" in names:
        return names
    return None


def _int(text: str) -> int:
    return int(text)


def _float(text: str) -> float:
    v = float(text)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{text!r} is not finite")
    return v


def _row(fields: list[str], columns: list[str]) -> dict[str, Any]:
    """The values of one row; raises ValueError saying what is wrong."""
    first_time = columns.index("time")
    fixed = columns[:first_time]
    groups = [columns[i:i + 4] for i in range(first_time, len(columns), 4)]
    if len(fields) not in (first_time + 4, len(columns)) or not groups:
        raise ValueError(f"expected {len(columns)} fields ({' '.join(columns)}), got {len(fields)}")
    out: dict[str, Any] = {}
    for name, text in zip(fixed, fields, strict=False):
        if name in ("size", "count", "root"):
            try:
                out[name] = _int(text)
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {text!r}") from None
        else:
            out[name] = text
    for g, place in enumerate(("out-of-place", "in-place")[:len(groups)]):
        start = first_time + 4 * g
        if start >= len(fields):
            break
        t, algbw, busbw, wrong = fields[start:start + 4]
        key = "" if g == 0 else "inplace_"
        try:
            out[key + "time_us"] = _float(t)
            out[key + "algbw"] = _float(algbw)
            out[key + "busbw"] = _float(busbw)
        except ValueError as exc:
            raise ValueError(f"{place} time, algbw and busbw must be numbers ({exc})") from None
        if out[key + "time_us"] <= 0 or out[key + "algbw"] < 0 or out[key + "busbw"] < 0:
            raise ValueError(f"{place} time must be > 0 and bandwidths >= 0, got {t} {algbw} {busbw}")
        label = groups[g][3] if len(groups[g]) == 4 else "#wrong"
        if wrong.upper() == "N/A":
            out[key + "wrong"] = None
        elif label == "#wrong":
            try:
                out[key + "wrong"] = _int(wrong)
            except ValueError:
                raise ValueError(f"{place} #wrong must be an integer or N/A, got {wrong!r}") from None
        else:  # old nccl-tests print the largest error instead of a count
            try:
                out[key + "error"] = _float(wrong)
            except ValueError:
                raise ValueError(f"{place} {label} must be a number, got {wrong!r}") from None
            out[key + "wrong"] = None
    if out["size"] <= 0 or out["count"] <= 0:
        raise ValueError(f"size and count must be > 0, got {out['size']} and {out['count']}")
    return out


def parse(text: str, name: str, op: str | None = None, world_size: int | None = None) -> Imported:
    """Records of the nccl-tests output ``text`` (``name`` is the file, for messages and ``source``)."""
    if op is not None and op not in OPS:
        raise LogError(f"unknown --op {op!r}; choose from: {', '.join(OPS)}")
    if world_size is not None and world_size < 1:
        raise LogError(f"--world-size must be >= 1, got {world_size}")
    lines = text.splitlines()
    # the job as a whole: ranks, iterations, versions
    ranks: dict[int, tuple[str, str]] = {}
    warmup = iters = None
    validation = None
    version = None
    nthread = ngpus = None
    for line in lines:
        m = _RANK.match(line)
        if m:
            ranks.setdefault(int(m.group(1)), (m.group(2), m.group(4).strip() or f"device {m.group(3)}"))
        m = _SETUP.match(line)
        if m:
            nthread, ngpus = int(m.group(1)), int(m.group(2))
        m = _ITERS.search(line) if line.startswith("#") else None
        if m and warmup is None:
            warmup, iters = int(m.group(1)), int(m.group(2))
        m = _VALIDATION.search(line) if line.startswith("#") else None
        if m and validation is None:
            validation = int(m.group(1))
        m = _NCCL_VERSION.search(line)
        if m and version is None:
            version = _library_version(m)
    if ranks and world_size is not None and world_size != len(ranks):
        raise LogError(f"{name} lists {len(ranks)} ranks but --world-size is {world_size}")
    world = world_size or len(ranks)
    if not world:
        raise LogError(f"{name} has no '#  Rank ...' lines to count the ranks from; give --world-size N")
    hosts = [h for _, (h, _) in sorted(ranks.items())]
    per_node = hosts.count(hosts[0]) if hosts else min(world, (nthread or 1) * (ngpus or 1))
    devices = [d for _, (_, d) in sorted(ranks.items())] or ["unknown"]
    run = results.run_info("nccl", world, per_node, devices, host=hosts[0] if hosts else "unknown", torch=None,
                           gloo=None, nccl=version, network=None, imported_from=name, nthread=nthread, ngpus=ngpus)
    out = Imported(world_size=world)
    source = f"nccl-tests:{name}"
    current_op = None
    columns: list[str] | None = None
    in_table = False
    for number, line in enumerate(lines, start=1):
        m = _BINARY.search(line)
        if m:
            found = BINARIES[m.group(1)]
            if found not in OPS:
                raise LogError(f"{name}:{number}: {m.group(0)} measures {found}, which commscope has no "
                                   f"records for; it reads {', '.join(OPS)}")
            if op is not None and op != found:
                raise LogError(f"{name}:{number}: the log is from {m.group(0)} ({found}) but --op is {op}")
            current_op = found
        stripped = line.strip()
        if not stripped or _DEBUG.search(line):
            continue
        if stripped.startswith("#"):
            cols = _columns(stripped)
            if cols is not None:
                columns, in_table = cols, True
            elif "Avg bus bandwidth" in stripped or "Out of bounds values" in stripped:
                in_table = False
            continue
        if not in_table or columns is None:
            continue  # text around the tables: the command line, the shell prompt, ...
        try:
            row = _row(stripped.split(), columns)
        except ValueError as exc:
            out.problems.append(f"{name}:{number}: malformed row skipped: {exc}")
            continue
        use_op = current_op or op
        if use_op is None:
            raise LogError(f"{name} does not name the nccl-tests binary (e.g. all_reduce_perf); give --op")
        dtype = TYPES.get(row["type"], row["type"])
        cfg = {"op": use_op, "bytes": row["size"], "count": row["count"], "dtype": dtype,
               "warmup": DEFAULT_WARMUP if warmup is None else warmup,
               "iterations": DEFAULT_ITERS if iters is None else iters,
               "redop": row.get("redop", "none"), "root": row.get("root", -1), "nranks": world,
               "check": bool(validation) if validation is not None else row["wrong"] is not None,
               "placement": "out-of-place"}
        res: dict[str, Any] = {"time_s": row["time_us"] / 1e6, "algbw_GBps": row["algbw"],
                               "busbw_GBps": row["busbw"], "wrong": row["wrong"] or 0,
                               "checked": row["wrong"] is not None, "nranks": world, "line": number}
        if "error" in row:
            res["max_error"] = row["error"]
        if "inplace_time_us" in row:
            res.update({"inplace_time_s": row["inplace_time_us"] / 1e6, "inplace_algbw_GBps": row["inplace_algbw"],
                        "inplace_busbw_GBps": row["inplace_busbw"], "inplace_wrong": row["inplace_wrong"]})
            if "inplace_error" in row:
                res["inplace_max_error"] = row["inplace_error"]
        rec = results.record("collective", cfg, res, run, source)
        rec.update(origin="imported", imported_from={"format": "nccl-tests", "file": name})
        out.records.append(results.validate(rec))
        if use_op not in out.ops:
            out.ops.append(use_op)
    if not out.records:
        why = f"; {len(out.problems)} malformed row(s), first: {out.problems[0]}" if out.problems else ""
        raise LogError(f"no result rows found in {name} (is it nccl-tests output?){why}")
    return out


def import_log(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, op: str | None = None,
               world_size: int | None = None) -> Imported:
    """Parse the log at ``path``; append its records to ``out`` when given (all or none)."""
    p = Path(path)
    if not p.is_file():
        raise LogError(f"no nccl-tests log {str(p)!r}")
    text = p.read_bytes().decode("utf-8", errors="replace")
    imported = parse(text, str(path), op, world_size)
    if out is not None:
        results.append(out, imported.records)
    return imported


def summary_rows(records: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Table rows (op, size, count, type, redop, root, time us, algbw, busbw, #wrong) of records."""
    rows = []
    for r in records:
        c, x = r["config"], r["result"]
        rows.append((c["op"], str(c["bytes"]), str(c["count"]), c["dtype"], str(c["redop"]), str(c["root"]),
                     f"{x['time_s'] * 1e6:.2f}", f"{x['algbw_GBps']:.2f}", f"{x['busbw_GBps']:.2f}",
                     str(x["wrong"]) if x.get("checked") else "N/A"))
    return rows
