"""The results store: one versioned record schema for every measurement, in JSON lines files.

A record is one JSON object on one line::

    {"schema": "commscope.result/1", "kind": "collective", "id": "...", "time": "2026-11-22T10:00:00Z",
     "run": {...where it ran...}, "config": {...what was measured...}, "result": {...what came out...},
     "source": "torchrun" | "nccl-tests:LOG" | ...}

``kind`` is one of :data:`KINDS`; each kind fixes the fields ``config`` and ``result`` must have
(:data:`FIELDS`; extra fields are kept). ``run`` always carries the environment: host, backend,
world size, ranks per node, device names, torch / NCCL / gloo versions and the emulated network
spec (or null). Records are validated on write (a bad record raises and nothing is written) and on
read (a bad line is reported with file:line and reason, skipped, and loading goes on).

An append writes all its records or none: whole lines in one buffer on a file opened with O_APPEND, under a
lock, then fsync; a failed write is cut back off. Nothing else is ever rewritten in place. A line left torn by a
crash is reported by the loader, and the next append starts on a fresh line so it cannot glue onto it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError

SCHEMA = "commscope.result/1"
SCHEMA_MAJOR = 1
KINDS = ("collective", "profile", "iteration", "convergence", "environment", "validation", "constants", "llm")
NETWORK_VARIABLE = "COMMSCOPE_NETWORK"  # JSON spec of the emulated network, set by `commscope emulate`

# kind -> part -> {field: (types, constraint description or None)}
_NUM = (int, float)
FIELDS: dict[str, dict[str, dict[str, tuple[tuple[type, ...], str | None]]]] = {
    "collective": {
        "config": {"op": ((str,), None), "bytes": ((int,), ">0"), "count": ((int,), ">0"), "dtype": ((str,), None),
                   "warmup": ((int,), ">=0"), "iterations": ((int,), ">0")},
        "result": {"time_s": (_NUM, ">0"), "algbw_GBps": (_NUM, ">=0"), "busbw_GBps": (_NUM, ">=0"),
                   "wrong": ((int,), ">=0")},
    },
    "profile": {
        "config": {"model": ((str,), None), "batch_size": ((int,), ">0"), "device": ((str,), None)},
        "result": {"layers": ((list,), None)},
    },
    "iteration": {
        "config": {"algorithm": ((str,), None), "model": ((str,), None), "batch_size": ((int,), ">0")},
        "result": {"time_s": (_NUM, ">0")},
    },
    "convergence": {
        "config": {"algorithm": ((str,), None), "model": ((str,), None)},
        "result": {"step": ((int,), ">=0"), "loss": (_NUM, None)},
    },
    "environment": {
        "config": {"primitive": ((str,), None), "algorithm": ((str,), None), "files": ((list,), None)},
        "result": {"environment": ((dict,), None), "fit": ((dict,), None)},
    },
    "validation": {
        "config": {"technique": ((str,), None), "environment": ((str,), None), "world_size": ((int,), ">0")},
        "result": {"measured_s": (_NUM, ">0")},
    },
    "llm": {  # a large-model training run's throughput (published tables: runners/reference/published)
        "config": {"model": ((str,), None), "gpus": ((int,), ">0"), "plan": ((dict,), None)},
        "result": {"tflops_per_gpu": (_NUM, ">0")},
    },
    "constants": {  # runners.constants: problem constants of the convergence bounds measured on real training
        "config": {"model": ((str,), None), "dataset": ((str,), None), "batch_size": ((int,), ">0"),
                   "world_size": ((int,), ">0"), "steps": ((int,), ">=0")},
        "result": {"L": ((dict,), None), "sigma": ((dict,), None), "zeta": ((dict,), None), "Delta": ((dict,), None),
                   "compressors": ((dict,), None)},
    },
}
RUN_FIELDS: dict[str, tuple[tuple[type, ...], str | None]] = {
    "host": ((str,), None), "backend": ((str,), None), "world_size": ((int,), ">0"),
    "ranks_per_node": ((int,), ">0"), "devices": ((list,), None), "torch": ((str, type(None)), None),
    "nccl": ((str, type(None)), None), "gloo": ((str, type(None)), None), "network": ((dict, type(None)), None),
}


class RecordError(CommscopeError):
    """A record that does not follow the schema (the message names the field and what is allowed)."""


def _check_fields(where: str, part: Mapping[str, Any], spec: Mapping[str, tuple[tuple[type, ...], str | None]]) -> None:
    if not isinstance(part, Mapping):
        raise RecordError(f"{where} must be an object, got {type(part).__name__}")
    for name, (types, constraint) in spec.items():
        if name not in part:
            raise RecordError(f"{where}.{name} is missing")
        value = part[name]
        if isinstance(value, bool) or not isinstance(value, types):
            allowed = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise RecordError(f"{where}.{name} must be {allowed}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RecordError(f"{where}.{name} must be finite, got {value!r}")
        if (constraint == ">0" and value <= 0) or (constraint == ">=0" and value < 0):
            raise RecordError(f"{where}.{name} must be {constraint[:-1]} 0, got {value!r}")


def validate(record: Any) -> dict[str, Any]:
    """Check ``record`` against the schema; return it, or raise :class:`RecordError` naming the problem."""
    if not isinstance(record, Mapping):
        raise RecordError(f"a record must be a JSON object, got {type(record).__name__}")
    schema = record.get("schema")
    if not isinstance(schema, str) or not schema.startswith("commscope.result/"):
        raise RecordError(f"schema must be 'commscope.result/<version>', got {schema!r}")
    try:
        major = int(schema.rsplit("/", 1)[1].split(".")[0])
    except ValueError:
        raise RecordError(f"schema version must be a number, got {schema!r}") from None
    if major != SCHEMA_MAJOR:
        raise RecordError(f"schema {schema!r} is not readable by this version (reads {SCHEMA})")
    kind = record.get("kind")
    if kind not in KINDS:
        raise RecordError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for key in ("id", "time"):
        if not isinstance(record.get(key), str) or not record[key]:
            raise RecordError(f"{key} must be a non-empty string, got {record.get(key)!r}")
    _check_fields("run", record.get("run"), RUN_FIELDS)
    for part in ("config", "result"):
        _check_fields(part, record.get(part), FIELDS[kind][part])
    json.dumps(record, allow_nan=False)  # raises ValueError on NaN/inf anywhere
    return dict(record)


def _versions() -> dict[str, str | None]:
    try:
        import torch
    except ImportError:
        return {"torch": None, "nccl": None, "gloo": None}
    nccl = None
    if torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # NCCL absent from this build
            nccl = None
    gloo = None
    if torch.distributed.is_available() and torch.distributed.is_gloo_available():
        gloo = f"bundled with torch {torch.__version__}"  # gloo has no version of its own to ask
    return {"torch": torch.__version__, "nccl": nccl, "gloo": gloo}


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def network_spec() -> dict[str, Any] | None:
    """The emulated network spec ``commscope emulate`` put in the environment, or None."""
    text = os.environ.get(NETWORK_VARIABLE)
    if not text:
        return None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommscopeError(f"{NETWORK_VARIABLE} is not JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise CommscopeError(f"{NETWORK_VARIABLE} must be a JSON object, got {text!r}")
    return spec


def run_info(backend: str, world_size: int, ranks_per_node: int, devices: Sequence[str] | None = None,
             **extra: Any) -> dict[str, Any]:
    """Where a measurement ran: host, backend, world size, ranks per node, devices, versions, network, and the host
    allocator's settings (:func:`runners.torchrun.allocator.recorded`)."""
    if devices is None:
        devices = [cpu_name()]
    from runners.torchrun.allocator import recorded

    info = {"host": socket.gethostname(), "backend": backend, "world_size": int(world_size),
            "ranks_per_node": int(ranks_per_node), "devices": list(devices), **_versions(),
            "network": network_spec(), "python": platform.python_version(), "platform": platform.platform(),
            "malloc": recorded()}
    info.update(extra)
    return info


def record(kind: str, config: Mapping[str, Any], result: Mapping[str, Any], run: Mapping[str, Any],
           source: str = "commscope") -> dict[str, Any]:
    """A new, validated record."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return validate({"schema": SCHEMA, "kind": kind, "id": uuid.uuid4().hex, "time": now, "run": dict(run),
                     "config": dict(config), "result": dict(result), "source": source})


def _line(r: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(validate(r), allow_nan=False, separators=(",", ":"), sort_keys=True).encode() + b"\n"
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold (NaN, inf, an object)
        raise RecordError(f"a record cannot be written as JSON: {exc}") from None


def append(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> int:
    """Append records to a JSON lines file, all or none: every record is validated and serialised first (nothing
    is written if one is bad), then the whole buffer goes out through one O_APPEND descriptor under an exclusive
    lock, and the file is fsynced. If the write or the fsync fails (ENOSPC, EIO), the file is cut back to its
    length before the append and a one-line :class:`CommscopeError` says why. Returns the count."""
    import errno
    import fcntl

    lines = [_line(r) for r in records]
    if not lines:
        return 0
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise CommscopeError(f"cannot write results to {target}: directory {target.parent} does not exist")
    try:
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CommscopeError(f"cannot write results to {target}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # other commscope writers wait: the length below stays the file's
        size = os.fstat(fd).st_size
        buffer = b"".join(lines)
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line: keep it apart from the new records
            buffer = b"\n" + buffer
        view, done = memoryview(buffer), 0
        try:
            while done < len(buffer):
                n = os.write(fd, view[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "the write made no progress")
                done += n
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            except OSError as undo:
                raise CommscopeError(f"cannot append {len(lines)} record(s) to {target}: {exc.strerror or exc}; "
                                     f"cutting it back to its {size} bytes failed too ({undo.strerror or undo}): "
                                     "its last line may be torn") from None
            raise CommscopeError(f"cannot append {len(lines)} record(s) to {target}: {exc.strerror or exc}; "
                                 "nothing was written") from None
    finally:
        os.close(fd)
    return len(lines)


@dataclass(frozen=True)
class BadLine:
    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass
class Loaded:
    """Records read from one or more files, and the lines that were skipped (with why)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


def load(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], kind: str | None = None) -> Loaded:
    """Read records; each bad line is reported (``Loaded.bad``: file:line and reason) and skipped."""
    if kind is not None and kind not in KINDS:
        raise CommscopeError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out = Loaded()
    for p in files:
        path = Path(p)
        if not path.is_file():
            raise CommscopeError(f"no results file {str(path)!r}")
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                text = raw.strip()
                if not text:
                    continue
                try:
                    rec = validate(json.loads(text.decode("utf-8")))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    out.bad.append(BadLine(str(path), number, f"not JSON ({exc})"))
                    continue
                except RecursionError:
                    out.bad.append(BadLine(str(path), number, "not a record (JSON nested too deeply)"))
                    continue
                except (RecordError, ValueError) as exc:
                    out.bad.append(BadLine(str(path), number, str(exc)))
                    continue
                if kind is None or rec["kind"] == kind:
                    out.records.append(rec)
    return out


def parse_lines(text: str | bytes, source: str = "<text>", kind: str | None = None) -> Loaded:
    """Records from JSON lines text (e.g. an uploaded file's contents), checked like :func:`load`: each bad
    line is reported (``Loaded.bad``: ``source``:line and reason) and skipped. Only ``json.loads`` reads
    the text; nothing in it is evaluated."""
    if kind is not None and kind not in KINDS:
        raise CommscopeError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    raw_lines = text.split(b"\n") if isinstance(text, bytes) else text.split("\n")  # as a file reads: on \n only
    out = Loaded()
    for number, raw in enumerate(raw_lines, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            rec = validate(json.loads(line.decode("utf-8") if isinstance(line, bytes) else line))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            out.bad.append(BadLine(source, number, f"not JSON ({exc})"))
            continue
        except RecursionError:
            out.bad.append(BadLine(source, number, "not a record (JSON nested too deeply)"))
            continue
        except (RecordError, ValueError) as exc:
            out.bad.append(BadLine(source, number, str(exc)))
            continue
        if kind is None or rec["kind"] == kind:
            out.records.append(rec)
    return out


def dataframe(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Loaded, kind: str | None = None,
              ) -> Any:
    """All records as one pandas DataFrame, nested fields flattened (``config.op``, ``result.time_s``,
    ``run.world_size``, ...). Bad lines are skipped (use :func:`load` to see them)."""
    import pandas as pd

    loaded = paths if isinstance(paths, Loaded) else load(paths, kind)
    recs = loaded.records if kind is None else loaded.of_kind(kind)
    return pd.json_normalize(recs, sep=".")


def config_key(rec: Mapping[str, Any]) -> str:
    """What identifies a measurement for ``--resume``: its kind, config and where it ran (backend,
    world size, ranks per node, network), not when or with which id."""
    run = rec["run"]
    ident = {"kind": rec["kind"], "config": rec["config"],
             "run": {k: run.get(k) for k in ("backend", "world_size", "ranks_per_node", "network", "devices")}}
    return json.dumps(ident, sort_keys=True, separators=(",", ":"))
