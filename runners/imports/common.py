"""What the imports share: reading files, op and dtype names, imported collective records, stragglers.

Imported records are ordinary results-store records (:mod:`runners.results`) with two top-level fields more:
``origin: "imported"`` and ``imported_from: {"format": ..., "file": ...}``; ``source`` is ``"<format>:<file>"``.
Sizes follow nccl-tests (``costmodels.PRIMITIVES``): the whole buffer for allreduce, reduce-scatter (input)
and allgather (output), the bytes each rank sends for all-to-all; ``count`` is per rank for allgather,
reduce-scatter and all-to-all, as nccl-tests prints it.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from costmodels.nccl_tests import busbw_factor
from runners import results

ORIGIN = "imported"
STRAGGLER_FACTOR = 1.5  # an iteration or call slower than 1.5 x the median is reported as a straggler
OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "all_to_all", "sendrecv")
PER_RANK_COUNT = ("allgather", "reduce_scatter", "all_to_all")

# spellings of collectives in torch (c10d op names, "Collective name"), NCCL (ncclFunc names), DeepSpeed and gloo,
# lower-cased with "_" removed and the suffixes in _SUFFIXES dropped
_OP_NAMES = {
    "allreduce": "allreduce", "inferenceallreduce": "allreduce",
    "allgather": "allgather", "allgatherv": "allgather",
    "reducescatter": "reduce_scatter", "reducescatterv": "reduce_scatter",
    "alltoall": "all_to_all", "all2all": "all_to_all", "alltoallv": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce",
    "sendrecv": "sendrecv", "send": "sendrecv", "recv": "sendrecv", "isend": "sendrecv", "irecv": "sendrecv",
    "batchisendirecv": "sendrecv",
}
_SUFFIXES = re.compile(r"(?:base|coalesced|intotensor|tensor|single|fn)+$")

# element types as Kineto ("Float", "c10::Half", "long int"), NCCL kernel names ("f32") and nccl-tests ("float")
# write them
_DTYPES: dict[str, tuple[str, int]] = {}
for _name, _size, _spellings in (
        ("float32", 4, "float float32 f32 fp32 c10::float"), ("float16", 2, "half float16 f16 fp16 c10::half"),
        ("bfloat16", 2, "bfloat16 bf16 c10::bfloat16"), ("float64", 8, "double float64 f64 fp64"),
        ("int32", 4, "int int32 i32 int32_t"), ("int64", 8, "long longint int64 i64 int64_t"),
        ("int8", 1, "char int8 i8 int8_t signedchar"), ("uint8", 1, "byte uint8 u8 uint8_t unsignedchar"),
        ("uint32", 4, "uint32 u32 uint32_t unsignedint"), ("uint64", 8, "uint64 u64 uint64_t"),
        ("bool", 1, "bool"), ("float8_e4m3", 1, "f8e4m3 float8_e4m3fn float8_e4m3"),
        ("float8_e5m2", 1, "f8e5m2 float8_e5m2")):
    for _s in _spellings.split():
        _DTYPES[_s] = (_name, _size)


class FormatError(CommscopeError):
    """A file that cannot be imported as a whole (the message names the file and why)."""


def op_name(name: str) -> str | None:
    """commscope's op for a collective's name in torch, NCCL, DeepSpeed or gloo (None: not a collective it models)."""
    key = _SUFFIXES.sub("", name.strip().lower().lstrip("_").replace("_", "").replace(" ", ""))
    return _OP_NAMES.get(key)


def dtype_of(name: str) -> tuple[str, int] | None:
    """(commscope dtype name, bytes per element) of an element type as traces and logs write it, or None."""
    return _DTYPES.get(name.strip().lower().replace(" ", ""))


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """A text file (gzip-compressed when its name ends in .gz); unreadable files raise one-line errors."""
    p = Path(path)
    if not p.exists():
        raise FormatError(f"no {what} {str(p)!r}")
    if not p.is_file():
        raise FormatError(f"{what} {str(p)!r} is not a file")
    try:
        data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise FormatError(f"cannot read {what} {str(p)!r}: {exc}") from None
    return data.decode("utf-8", errors="replace")


def load_json(path: str | os.PathLike[str], what: str) -> Any:
    """A JSON file (gzip-compressed when its name ends in .gz); anything else raises a one-line error."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: {what} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise FormatError(f"{path}: {what} is not JSON this reader can take (nested too deeply)") from None


def number(value: Any) -> float | None:
    """A finite number, or None (nccl-tests writes "nan" as a string, JSON has no inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def imported_run(backend: str, world_size: int, ranks_per_node: int, devices: Sequence[str], host: str,
                 **extra: Any) -> dict[str, Any]:
    """``run`` of an imported record: what the file says about where it ran (versions unknown unless given)."""
    run: dict[str, Any] = {"host": host or "unknown", "backend": backend, "world_size": int(world_size),
                           "ranks_per_node": int(ranks_per_node), "devices": list(devices) or ["unknown"],
                           "torch": None, "nccl": None, "gloo": None, "network": None}
    run.update(extra)
    return run


def collective_record(op: str, nbytes: int, dtype: str, nranks: int, times_s: Sequence[float], run: Mapping[str, Any],
                      fmt: str, file: str, config: Mapping[str, Any] | None = None,
                      result: Mapping[str, Any] | None = None, element_bytes: int = 1) -> dict[str, Any]:
    """One collective record from the times of calls of one op and size: the median time, nccl-tests' algbw and
    busbw (``costmodels.nccl_tests``), the spread; ``origin: imported``."""
    if op not in OPS:
        raise FormatError(f"{file}: op {op!r} has no records in commscope; it reads {', '.join(OPS)}")
    times = sorted(float(t) for t in times_s)
    t = statistics.median(times)
    per_rank = nranks if op in PER_RANK_COUNT else 1
    count = max(1, int(nbytes) // max(1, element_bytes) // per_rank)
    algbw = nbytes / t / 1e9
    cfg = {"op": op, "bytes": int(nbytes), "count": count, "dtype": dtype, "warmup": 0, "iterations": len(times),
           "nranks": int(nranks), **(config or {})}
    res = {"time_s": t, "algbw_GBps": algbw, "busbw_GBps": algbw * float(busbw_factor(op, max(1, int(nranks)))),
           "wrong": 0, "checked": False, "nranks": int(nranks), "calls": len(times), "time_min_s": times[0],
           "time_max_s": times[-1], "time_mean_s": sum(times) / len(times), **(result or {})}
    rec = results.record("collective", cfg, res, run, source=f"{fmt}:{file}")
    rec.update(origin=ORIGIN, imported_from={"format": fmt, "file": file})
    return results.validate(rec)


def stragglers(times: Sequence[float], factor: float = STRAGGLER_FACTOR,
               ) -> tuple[float, list[tuple[int, float, float]]]:
    """The median of ``times`` and the (index, time, time / median) of those over ``factor`` x the median."""
    med = statistics.median(times)
    return med, [(i, t, t / med) for i, t in enumerate(times) if med > 0 and t > factor * med]


def write_records(out: str | os.PathLike[str] | None, records: Sequence[Mapping[str, Any]]) -> int:
    """Append ``records`` to ``out`` (all validated first: all or nothing); 0 when ``out`` is None."""
    return 0 if out is None else results.append(out, records)


def write_beside(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, fsync, then rename it over ``path``: a failure leaves any
    old file as it was."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
