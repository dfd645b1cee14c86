"""NCCL Inspector (the NCCL profiler plugin ``libnccl-profiler-inspector.so``) JSON lines into collective records.

The format, from NVIDIA/nccl ``plugins/profiler/inspector`` (README "Output Example", inspector_json.cc,
inspector_json_reader.py): newline-separated JSON objects, one file per process. Output format v4.3 starts each
communicator's dump with a marker ``{"header": {"id", "comm_name", "rank", "n_ranks", "nnodes"}, "metadata":
{"inspector_output_format_version", "dump_timestamp_us", "hostname", "pid", ...}, "dump_stats": {...}}`` whose
context the following ``{"coll_perf": {...}}`` / ``{"p2p_perf": {...}}`` / ``{"proxy_trace": {...}}`` lines share;
v4.0-v4.2 lines carry ``header`` and ``metadata`` themselves. ``coll_perf``: ``coll`` (AllReduce, AllGather,
ReduceScatter, Broadcast, Reduce, All2All, ...), ``coll_algo``, ``coll_proto``, ``coll_sn``,
``coll_msg_size_bytes``, ``coll_exec_time_us`` (integer us), ``coll_timing_source`` (``kernel_gpu``,
``kernel_cpu``, ``collective_cpu``), ``coll_algobw_gbs``, ``coll_busbw_gbs``; ``p2p_perf``: ``p2p`` (Send,
Recv), ``p2p_sn``, ``p2p_peer``, ``p2p_msg_size_bytes``, ``p2p_exec_time_us``, ``p2p_timing_source``. The same
names without the ``coll_`` / ``p2p_`` prefix are read too (``msg_size_bytes``, ``exec_time_us``,
``timing_source``), as some descriptions of the format write them.

The inspector's message size is one rank's share for AllGather and ReduceScatter (its bandwidth multiplies it by
the ranks), so commscope's bytes (nccl-tests': the whole buffer) are that times ``n_ranks``; other ops keep it
(Send / Recv become ``sendrecv``). Proxy records are not collectives and are left out. Each (communicator, op,
bytes, algorithm, protocol, timing source) becomes one record: per sequence number the slowest rank's time (when
several ranks' files are given), then the median over sequence numbers, and the sequence numbers slower than 1.5 x
that median as stragglers. The inspector names no element type: ``dtype`` is "unknown" and ``count`` in bytes.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import FormatError, collective_record, imported_run, number, op_name, read_text, stragglers

FORMAT = "nccl-inspector"


@dataclass
class Imported:
    """The records, what was skipped (``file:line: reason``), the communicators and straggler rows."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    communicators: list[str] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    operations: int = 0


def _get(d: dict[str, Any], prefix: str, key: str) -> Any:
    return d.get(f"{prefix}_{key}", d.get(key))


def _op(rec: dict[str, Any], header: dict[str, Any], meta: dict[str, Any], where: str) -> dict[str, Any]:
    kind = "coll" if "coll_perf" in rec else "p2p"
    body = rec[f"{kind}_perf"]
    if not isinstance(body, dict):
        raise ValueError(f"{kind}_perf is not an object")
    name = str(body.get(kind, ""))
    op = op_name(name)
    if op is None:
        raise ValueError(f"{name!r} is not a collective commscope models")
    size, time_us = number(_get(body, kind, "msg_size_bytes")), number(_get(body, kind, "exec_time_us"))
    nranks = header.get("n_ranks")
    if size is None or size <= 0 or time_us is None:
        raise ValueError(f"needs {kind}_msg_size_bytes > 0 and {kind}_exec_time_us, got {size!r} and {time_us!r}")
    if not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"header.n_ranks must be a positive integer, got {nranks!r}")
    if time_us < 0:
        raise ValueError(f"exec time {time_us!r} us is negative")
    if time_us == 0:
        raise ValueError("exec time 0 us (below the inspector's resolution)")
    nbytes = int(size) * (nranks if op in ("allgather", "reduce_scatter") else 1)
    return {"op": op, "name": name, "bytes": nbytes, "time_us": time_us, "sn": _get(body, kind, "sn"),
            "algo": str(_get(body, kind, "algo") or "-"), "proto": str(_get(body, kind, "proto") or "-"),
            "timing": str(_get(body, kind, "timing_source") or "unknown"), "comm": str(header.get("id", "?")),
            "comm_name": str(header.get("comm_name", "unknown")), "rank": header.get("rank"), "nranks": nranks,
            "nnodes": header.get("nnodes"), "host": str(meta.get("hostname", "unknown")),
            "version": meta.get("inspector_output_format_version"), "peer": body.get("p2p_peer"), "where": where}


def read_ops(path: str, problems: list[str]) -> list[dict[str, Any]]:
    """The collective and P2P operations of one inspector file (context restored from dump markers)."""
    ops: list[dict[str, Any]] = []
    header: dict[str, Any] | None = None
    meta: dict[str, Any] = {}
    for number_, line in enumerate(read_text(path, "NCCL Inspector log").splitlines(), start=1):
        where = f"{path}:{number_}"
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            problems.append(f"{where}: not JSON ({exc}); skipped")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{where}: not a JSON object; skipped")
            continue
        if "dump_stats" in rec:  # v4.3 marker: the context of the lines after it
            h, m = rec.get("header"), rec.get("metadata")
            header, meta = (h, m if isinstance(m, dict) else {}) if isinstance(h, dict) else (None, {})
            continue
        if "coll_perf" not in rec and "p2p_perf" not in rec:
            continue  # proxy_trace and anything else: not a collective
        h = rec.get("header") if isinstance(rec.get("header"), dict) else header
        m = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else meta
        if h is None:
            problems.append(f"{where}: no communicator header (neither on the line nor a dump_stats marker before "
                            "it); skipped")
            continue
        try:
            ops.append(_op(rec, h, m, where))
        except ValueError as exc:
            problems.append(f"{where}: skipped: {exc}")
    return ops


def _files(paths: list[str | os.PathLike[str]]) -> list[str]:
    out: list[str] = []
    for p in paths:
        q = Path(p)
        out += sorted(str(f) for f in q.iterdir() if f.is_file()) if q.is_dir() else [str(q)]
    if not out:
        raise FormatError("no NCCL Inspector files given (the directories are empty)")
    return out


def parse(paths: list[str | os.PathLike[str]]) -> Imported:
    """Records of the inspector files (or directories of them) ``paths``."""
    out = Imported()
    files = _files(paths)
    ops = [o for f in files for o in read_ops(f, out.problems)]
    out.operations = len(ops)
    if not ops:
        why = f"; first problem: {out.problems[0]}" if out.problems else ""
        raise FormatError(f"no collective records (coll_perf / p2p_perf) in {', '.join(files)}{why}")
    groups: dict[tuple[Any, ...], dict[Any, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for o in ops:
        key = (o["comm"], o["op"], o["bytes"], o["algo"], o["proto"], o["timing"], o["nranks"])
        groups[key][o["sn"] if o["sn"] is not None else id(o)].append(o)
    label = ", ".join(files)
    for (comm, op, nbytes, algo, proto, timing, nranks), by_sn in sorted(groups.items(), key=lambda kv: kv[0][:3]):
        slowest = [max(v, key=lambda o: o["time_us"]) for v in by_sn.values()]
        times = [o["time_us"] / 1e6 for o in slowest]
        _, slow = stragglers(times)
        first = slowest[0]
        nnodes = first["nnodes"] if isinstance(first["nnodes"], int) and first["nnodes"] > 0 else 1
        per_node = nranks // nnodes if nranks % nnodes == 0 else 1
        run = imported_run("nccl", nranks, per_node, ["unknown"], first["host"], communicator=first["comm_name"],
                           comm_id=comm, ranks_seen=sorted({o["rank"] for v in by_sn.values() for o in v
                                                            if isinstance(o["rank"], int)}),
                           inspector_format=first["version"], imported_from=label)
        cfg = {"algorithm": algo.lower(), "protocol": proto, "timing_source": timing, "nccl_op": first["name"],
               "count_unit": "bytes (the inspector names no element type)"}
        if first["peer"] is not None:
            cfg["peer"] = first["peer"]
        slow_rows = [{"sn": slowest[j]["sn"], "time_us": slowest[j]["time_us"], "x_median": r,
                      "rank": slowest[j]["rank"], "host": slowest[j]["host"]} for j, _, r in slow]
        res = {"stragglers": slow_rows, "straggler_factor": 1.5, "time_of_a_call": "the slowest rank's, per coll_sn"}
        out.records.append(collective_record(op, nbytes, "unknown", nranks, times, run, FORMAT, label, cfg, res))
        out.stragglers += [{"op": op, "bytes": nbytes, "communicator": first["comm_name"], **s} for s in slow_rows]
        if first["comm_name"] not in out.communicators:
            out.communicators.append(first["comm_name"])
    return out
