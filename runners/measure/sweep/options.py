"""What a collective sweep measures: its options, the command line that gives them, the sizes and the
``config`` of each record.

    torchrun --nproc_per_node=N -m runners.measure.sweep collectives [options]
    commscope bench collectives --nproc N [options]          # launches torchrun for you

Ops: allreduce, reduce_scatter, allgather, broadcast, reduce, all_to_all and sendrecv (a ping-pong
between rank 0 and the last rank; its time is half the round trip). Sizes follow nccl-tests: a
geometric range ``-b``/``-e``/``-f``, each size rounded down to a multiple of element size x world
size; ``bytes`` is the buffer nccl-tests counts (the whole allreduce buffer, the gathered output of
allgather, the input of reduce-scatter, one rank's send buffer of all-to-all) and ``count`` its
elements.

Where the backend lacks an op, the documented equivalent is used (:data:`EQUIVALENTS`, see
:func:`runners.measure.sweep.timing.probe`); ``--use-equivalent OPS`` asks for it where the op exists
too (to compare, or to test the equivalents).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from costmodels._io import check_writable
from costmodels.errors import CommscopeError
from costmodels.units import format_size, parse_size, size_range
from runners.torchrun.rank import BACKENDS, RankError

OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "all_to_all", "sendrecv")
# dtype -> (nccl-tests type name, bytes per element)
DTYPES = {"float32": ("float", 4), "float16": ("half", 2), "bfloat16": ("bfloat16", 2), "float64": ("double", 8),
          "int32": ("int32", 4)}
DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16", "bf16": "bfloat16",
                 "double": "float64", "fp64": "float64", "int": "int32"}
EQUIVALENTS = {
    "reduce_scatter": "all_reduce, each rank keeps its own shard",
    "allgather": "all_gather into a list of shards",
    "all_to_all": "isend/irecv per pair of ranks",
    "reduce": "all_reduce, the root uses the result",
}
REDUCING = ("allreduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce")
SOURCE = "torchrun"


BenchError = RankError  # bad options of a collective sweep, or a sweep that cannot go on (the message says why)


@dataclass(frozen=True)
class Options:
    """What a collective sweep measures; validated by :func:`make_options`."""

    ops: tuple[str, ...] = OPS
    min_size: int = 2**20
    max_size: int = 64 * 2**20
    factor: float = 2.0
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20
    check: bool = False
    out: str | None = None
    resume: bool = False
    timeout: float = 60.0
    backend: str = "auto"
    root: int = 0
    use_equivalent: tuple[str, ...] = ()

    @property
    def sizes(self) -> list[int]:
        """Sizes before rounding to the world size: ``min, min*f, ... <= max``."""
        return size_range(self.min_size, self.max_size, self.factor)

    def argv(self) -> list[str]:
        """The same options as command-line arguments of ``python -m runners.measure.sweep collectives``."""
        args = ["--op", ",".join(self.ops), "--min-size", str(self.min_size), "--max-size", str(self.max_size),
                "--factor", repr(self.factor), "--dtype", self.dtype, "--warmup", str(self.warmup),
                "--iters", str(self.iters), "--timeout", repr(self.timeout), "--backend", self.backend,
                "--root", str(self.root)]
        if self.check:
            args.append("--check")
        if self.out is not None:
            args += ["--out", self.out]
        if self.resume:
            args.append("--resume")
        if self.use_equivalent:
            args += ["--use-equivalent", ",".join(self.use_equivalent)]
        return args


def _names(items: str | Sequence[str] | None, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    if items is None:
        return ()
    texts = [items] if isinstance(items, str) else list(items)
    out: list[str] = []
    for text in texts:
        for name in (x.strip().lower() for x in text.split(",")):
            if not name:
                continue
            if name == "all":
                out.extend(x for x in allowed if x not in out)
                continue
            if name not in allowed:
                raise BenchError(f"unknown {what} {name!r}; choose from: {', '.join(allowed)} (or all)")
            if name not in out:
                out.append(name)
    return tuple(out)


def make_options(op: str | Sequence[str] | None = None, min_size: str | int = "1MiB", max_size: str | int = "64MiB",
                 factor: float = 2.0, dtype: str = "float32", warmup: int = 5, iters: int = 20, check: bool = False,
                 out: str | os.PathLike[str] | None = None, resume: bool = False, timeout: float = 60.0,
                 backend: str = "auto", root: int = 0, use_equivalent: str | Sequence[str] | None = None) -> Options:
    """Validated sweep options; raises :class:`BenchError` (or the size parser's error) naming the problem."""
    ops = _names(op, OPS, "op") if op is not None else OPS
    if not ops:
        raise BenchError("--op is empty; give one or more of: " + ", ".join(OPS))
    lo, hi = parse_size(min_size), parse_size(max_size)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
        raise BenchError(f"--factor must be a number > 1, got {factor!r}")
    size_range(lo, hi, float(factor))  # min > 0 and max >= min
    name = DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if name not in DTYPES:
        raise BenchError(f"unknown --dtype {dtype!r}; choose from: {', '.join(DTYPES)}")
    if warmup < 0:
        raise BenchError(f"--warmup must be >= 0, got {warmup}")
    if iters < 1:
        raise BenchError(f"--iters must be >= 1, got {iters}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise BenchError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
    if backend not in BACKENDS:
        raise BenchError(f"unknown --backend {backend!r}; choose from: {', '.join(BACKENDS)}")
    if root < 0:
        raise BenchError(f"--root must be a rank >= 0, got {root}")
    if resume and out is None:
        raise BenchError("--resume needs --out FILE (the results to resume from)")
    if out is not None:  # before the sweep: a directory or a read-only file would lose every measurement
        try:
            check_writable(out, "the results", append=True)
        except CommscopeError as exc:
            raise BenchError(str(exc)) from None
    equivalent = _names(use_equivalent, tuple(EQUIVALENTS), "op with an equivalent")
    return Options(ops=ops, min_size=lo, max_size=hi, factor=float(factor), dtype=name, warmup=int(warmup),
                   iters=int(iters), check=bool(check), out=None if out is None else str(out), resume=bool(resume),
                   timeout=float(timeout), backend=backend, root=int(root), use_equivalent=equivalent)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage block
        raise BenchError(message)


def parse_args(argv: Sequence[str]) -> Options:
    """Options of ``python -m runners.measure.sweep collectives ...`` (nccl-tests' -b -e -f -d -w -n -c -r too)."""
    ap = _Parser(prog="python -m runners.measure.sweep",
                 description="Collective sweeps with torch.distributed, reported the way nccl-tests reports them.")
    ap.add_argument("what", choices=["collectives"], help="what to sweep")
    ap.add_argument("--op", "-o", action="append", help="ops, comma-separated: " + ", ".join(OPS) + " (default all)")
    ap.add_argument("--min-size", "-b", default="1MiB", help="smallest size, e.g. 1MiB or 1M")
    ap.add_argument("--max-size", "-e", default="64MiB", help="largest size")
    ap.add_argument("--factor", "-f", type=float, default=2.0, help="growth factor between sizes (> 1)")
    ap.add_argument("--dtype", "-d", default="float32", help=", ".join(DTYPES))
    ap.add_argument("--warmup", "-w", type=int, default=5, help="untimed iterations per size")
    ap.add_argument("--iters", "-n", type=int, default=20, help="timed iterations per size")
    ap.add_argument("--check", "-c", type=int, nargs="?", const=1, default=0,
                    help="count wrong elements of the output (nccl-tests -c 1)")
    ap.add_argument("--out", help="append one JSON line per size to this results file")
    ap.add_argument("--resume", action="store_true", help="skip what --out already holds for this configuration")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one collective may take")
    ap.add_argument("--backend", default="auto",
                    help="auto (nccl with CUDA, else gloo), gloo, nccl or gloo-cuda (gloo with CUDA tensors)")
    ap.add_argument("--root", "-r", type=int, default=0, help="root rank of broadcast and reduce")
    ap.add_argument("--use-equivalent", action="append", help="ops to run as their documented equivalent")
    a = ap.parse_args(list(argv))
    return make_options(op=a.op, min_size=a.min_size, max_size=a.max_size, factor=a.factor, dtype=a.dtype,
                        warmup=a.warmup, iters=a.iters, check=bool(a.check), out=a.out, resume=a.resume,
                        timeout=a.timeout, backend=a.backend, root=a.root, use_equivalent=a.use_equivalent)


def round_size(nbytes: int, dtype: str, world: int) -> int:
    """``nbytes`` rounded down to a multiple of element size x world size (at least one such multiple)."""
    unit = DTYPES[dtype][1] * max(1, world)
    return max(unit, nbytes // unit * unit)


def describe(op: str, nbytes: int) -> str:
    return f"{op} of {format_size(nbytes)} ({nbytes} B)"



TIMING = "back_to_back"  # the calls run back to back after one barrier (timing.py); records without it: one per barrier


def config_of(op: str, nbytes: int, opts: Options, world: int, equivalent: bool) -> dict[str, Any]:
    """The record's ``config`` of ``op`` at ``nbytes`` (rounded): what identifies it for ``--resume``."""
    cfg = {"op": op, "bytes": nbytes, "count": nbytes // DTYPES[opts.dtype][1], "dtype": opts.dtype,
           "warmup": opts.warmup, "iterations": opts.iters, "redop": "sum" if op in REDUCING else "none",
           "root": opts.root if op in ROOTED else -1, "nranks": world,
           "equivalent": EQUIVALENTS[op] if equivalent else None, "check": opts.check,
           "timing": TIMING}
    if op == "sendrecv":
        cfg["peer"] = world - 1
    return cfg

