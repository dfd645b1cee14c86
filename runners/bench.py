"""Collective sweeps with torch.distributed, reported the way nccl-tests reports them.

    torchrun --nproc_per_node=N -m runners.bench collectives [options]
    commscope bench collectives --nproc N [options]          # launches torchrun for you

Ops: allreduce, reduce_scatter, allgather, broadcast, reduce, all_to_all and sendrecv (a ping-pong
between rank 0 and the last rank; its time is half the round trip). Sizes follow nccl-tests: a
geometric range ``-b``/``-e``/``-f``, each size rounded down to a multiple of element size x world
size; ``bytes`` is the buffer nccl-tests counts (the whole allreduce buffer, the gathered output of
allgather, the input of reduce-scatter, one rank's send buffer of all-to-all) and ``count`` its
elements.

Timing: on GPUs (NCCL), CUDA events around each timed iteration; on CPUs (gloo, whose calls are
synchronous), a barrier, then ``time.perf_counter`` around the call. Each iteration's time is the
maximum over ranks (one MAX all-reduce after the timed loop, so it adds nothing to what is timed);
the record keeps the median (``time_s``), p10, p90, min and every iteration's time. Buffers an op
reduces into are restored from a copy before each iteration, outside the timed part, so that
values never grow to inf. ``--check`` fills inputs with rank-dependent values (never all zeros)
and counts the output elements that differ from the expected result, summed over ranks.

Rank 0 prints a table as it goes and appends each size's record to ``--out`` right after it was
measured, so a run that is killed keeps everything it wrote. A collective that takes longer than
``--timeout`` seconds ends the job with a message naming the op and the size.

Where the backend lacks an op (a tiny probe call at start raises), the documented equivalent is
used, said once in the output and recorded as ``config.equivalent``; ``--use-equivalent OPS``
asks for it where the op exists too (to compare, or to test the equivalents):

- reduce_scatter: all_reduce of the whole buffer, each rank keeping its own shard
- allgather: all_gather into a list of per-rank shards
- all_to_all: one isend/irecv per pair of ranks
- reduce: all_reduce, the root using the result
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from costmodels.errors import CommscopeError
from costmodels.nccl_tests import busbw_factor
from costmodels.units import format_size, parse_size, size_range
from runners import results

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
EXIT_FAILED = 1  # a collective failed or timed out
EXIT_USAGE = 2  # bad options


class BenchError(CommscopeError):
    """Bad options of a collective sweep, or a sweep that cannot go on (the message says why)."""


# ------------------------------------------------------------------------------------ options
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
        """The same options as command-line arguments of ``python -m runners.bench collectives``."""
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
    if out is not None:
        parent = Path(out).parent
        if not parent.is_dir():
            raise BenchError(f"cannot write results to {out}: directory {parent} does not exist")
    equivalent = _names(use_equivalent, tuple(EQUIVALENTS), "op with an equivalent")
    return Options(ops=ops, min_size=lo, max_size=hi, factor=float(factor), dtype=name, warmup=int(warmup),
                   iters=int(iters), check=bool(check), out=None if out is None else str(out), resume=bool(resume),
                   timeout=float(timeout), backend=backend, root=int(root), use_equivalent=equivalent)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage block
        raise BenchError(message)


def parse_args(argv: Sequence[str]) -> Options:
    """Options of ``python -m runners.bench collectives ...`` (nccl-tests' -b -e -f -d -w -n -c -r too)."""
    ap = _Parser(prog="python -m runners.bench", description=__doc__.splitlines()[0])
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


# ------------------------------------------------------------------------------ the process group
class _Watchdog:
    """Ends the process with a clear message when the call it was armed for outlives the timeout."""

    def __init__(self, seconds: float, rank: int) -> None:
        self.seconds, self.rank = seconds, rank
        self.local_peers: list[int] = []  # pids of the other ranks on this host
        self._deadline: float | None = None
        self._what = ""
        threading.Thread(target=self._run, name="commscope-watchdog", daemon=True).start()

    def arm(self, what: str) -> None:
        self._what = what
        self._deadline = time.monotonic() + self.seconds

    def disarm(self) -> None:
        self._deadline = None

    def _run(self) -> None:
        woke = time.monotonic()
        while True:
            deadline = self._deadline
            now = time.monotonic()
            frozen = now - woke > 1.0  # this process itself did not run (stopped, or starved of CPU)
            woke = now
            if deadline is None:
                time.sleep(min(0.25, self.seconds))
            elif now < deadline:
                time.sleep(min(deadline - now, 0.25))
            elif self._deadline is deadline:
                # a stopped (SIGSTOP) peer ignores torchrun's SIGTERM until continued, and torchrun would
                # wait 30 s before SIGKILL: continue it, so that the job ends now
                for pid in self.local_peers:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except OSError:
                        pass
                why = "this rank was stopped or starved itself" if frozen else "another rank is hung, stopped or dead"
                fail(f"{self._what} did not finish within --timeout {self.seconds:g} s on rank {self.rank} ({why})")


def fail(message: str, code: int = EXIT_FAILED) -> None:
    """Print ``commscope: error: message`` and end this process at once (torchrun stops the others)."""
    try:
        sys.stdout.flush()
        sys.stderr.write(f"commscope: error: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(code)




@dataclass
class Context:
    """One rank's view of the job: torch, its process group, device and the run description."""

    torch: Any
    dist: Any
    rank: int
    world: int
    local_rank: int
    local_world: int
    backend: str
    device: Any
    timeout: float
    watchdog: _Watchdog
    ranks: list[dict[str, Any]] = field(default_factory=list)  # pid, host, device, name of every rank

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def timing(self) -> str:
        return "cuda events per iteration" if self.cuda else "barrier + perf_counter per iteration"

    def run_info(self) -> dict[str, Any]:
        return results.run_info(self.backend, self.world, self.local_world, [r["name"] for r in self.ranks],
                                local_world_size=self.local_world, nnodes=len({r["host"] for r in self.ranks}),
                                device_type=self.device.type, timing=self.timing)


BACKENDS = ("auto", "gloo", "nccl", "gloo-cuda")


def gloo_cuda_device(torch: Any, local_rank: int, error: type[CommscopeError]) -> Any:
    """The CUDA device of a gloo rank with CUDA tensors (``--backend gloo-cuda``): several ranks may
    share one GPU, round robin (local rank modulo the GPUs), e.g. 4 ranks behind emulated links on one GPU."""
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise error("--backend gloo-cuda needs a CUDA device, and this machine has none; use --backend gloo")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def setup(backend: str = "auto", timeout: float = 60.0) -> Context:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...)."""
    from datetime import timedelta

    from runners._extras import require

    torch = require("torch", "commscope bench collectives")
    dist = torch.distributed
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise BenchError("run this under torchrun (torchrun --nproc_per_node=N -m runners.bench collectives ...) "
                         "or use: commscope bench collectives --nproc N")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise BenchError("--backend nccl needs CUDA devices, and this machine has none; use --backend gloo")
        if local_rank >= torch.cuda.device_count():
            raise BenchError(f"LOCAL_RANK {local_rank} has no GPU: this node has {torch.cuda.device_count()}")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        # the backend's own timeout is a backstop; the watchdog below says which collective hung
        dist.init_process_group("nccl", timeout=timedelta(seconds=timeout + 30), device_id=device)
        name = torch.cuda.get_device_name(device)
    elif backend == "gloo-cuda":
        device = gloo_cuda_device(torch, local_rank, BenchError)
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout + 30))
        name, backend = torch.cuda.get_device_name(device), "gloo"
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout + 30))
        name = results.cpu_name()
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = Context(torch=torch, dist=dist, rank=rank, world=world, local_rank=local_rank,
                  local_world=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))), backend=backend, device=device,
                  timeout=timeout, watchdog=_Watchdog(timeout, rank))
    mine = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "device": str(device), "name": name}
    gathered: list[Any] = [None] * world
    ctx.watchdog.arm("exchanging rank information")
    dist.all_gather_object(gathered, mine)
    ctx.watchdog.disarm()
    ctx.ranks = list(gathered)
    ctx.watchdog.local_peers = [r["pid"] for r in ctx.ranks if r["host"] == mine["host"] and r["rank"] != rank]
    return ctx


def teardown(ctx: Context) -> None:
    ctx.watchdog.arm("leaving the process group")
    ctx.dist.barrier()
    ctx.dist.destroy_process_group()
    ctx.watchdog.disarm()


# ------------------------------------------------------------------------------ one collective
@dataclass
class Prepared:
    """One op at one size, ready to call: buffers allocated and filled."""

    op: str
    nbytes: int
    count: int
    dtype: str
    call: Callable[[], None]
    prepare: Callable[[], None] | None  # restores a buffer the op reduces into (not timed)
    verify: Callable[[], int]  # wrong elements on this rank after a fresh fill and one call
    equivalent: str | None
    redop: str
    root: int
    peer: int | None = None

    def config(self, opts: Options, world: int) -> dict[str, Any]:
        return config_of(self.op, self.nbytes, opts, world, self.equivalent is not None)


def config_of(op: str, nbytes: int, opts: Options, world: int, equivalent: bool) -> dict[str, Any]:
    """The record's ``config`` of ``op`` at ``nbytes`` (rounded): what identifies it for ``--resume``."""
    cfg = {"op": op, "bytes": nbytes, "count": nbytes // DTYPES[opts.dtype][1], "dtype": opts.dtype,
           "warmup": opts.warmup, "iterations": opts.iters, "redop": "sum" if op in REDUCING else "none",
           "root": opts.root if op in ROOTED else -1, "nranks": world,
           "equivalent": EQUIVALENTS[op] if equivalent else None, "check": opts.check}
    if op == "sendrecv":
        cfg["peer"] = world - 1
    return cfg


_EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7, "int32": 0.0}
_PERIOD = 7


def _torch_dtype(ctx: Context, dtype: str) -> Any:
    return getattr(ctx.torch, dtype)


def _pattern(ctx: Context, n: int, rank: int, dtype: str, start: int = 0) -> Any:
    """Rank-dependent values 1..7 (small integers: exact in every dtype, sums too)."""
    t = ctx.torch
    idx = t.arange(start, start + n, device=ctx.device, dtype=t.int64)
    return ((idx + 3 * rank) % _PERIOD + 1).to(_torch_dtype(ctx, dtype))


def _summed(ctx: Context, n: int, start: int = 0) -> Any:
    """The sum over ranks of :func:`_pattern` (float64)."""
    t = ctx.torch
    table = t.tensor([sum((k + 3 * r) % _PERIOD + 1 for r in range(ctx.world)) for k in range(_PERIOD)],
                     dtype=t.float64, device=ctx.device)
    return table[t.arange(start, start + n, device=ctx.device, dtype=t.int64) % _PERIOD]


def _wrong(ctx: Context, got: Any, expected: Any, dtype: str) -> int:
    tol = _EPS[dtype] * max(ctx.world, 2) / 2  # rounding of one partial sum per rank at most
    diff = (got.to(ctx.torch.float64) - expected).abs()
    return int((diff > tol * expected.abs()).sum().item())


def _native(ctx: Context, name: str, old: str) -> Callable[..., Any]:
    """torch's current name of a collective, or the one older torch releases have."""
    return getattr(ctx.dist, name, None) or getattr(ctx.dist, old)


def build(ctx: Context, op: str, nbytes: int, dtype: str, root: int = 0, equivalent: bool = False) -> Prepared:
    """Buffers and the call of ``op`` on ``nbytes`` (already rounded), native or its equivalent."""
    t, dist, rank, world = ctx.torch, ctx.dist, ctx.rank, ctx.world
    size = DTYPES[dtype][1]
    count = nbytes // size
    chunk = count // world
    tdt = _torch_dtype(ctx, dtype)
    eq = EQUIVALENTS[op] if equivalent else None
    redop = "sum" if op in REDUCING else "none"
    rooted = root if op in ROOTED else -1

    def make(call: Callable[[], None], verify: Callable[[], int], prepare: Callable[[], None] | None = None,
             peer: int | None = None) -> Prepared:
        return Prepared(op, nbytes, count, dtype, call, prepare, verify, eq, redop, rooted, peer)

    if op == "allreduce" or (op == "reduce" and equivalent) or (op == "reduce_scatter" and equivalent):
        src = _pattern(ctx, count, rank, dtype)
        buf = src.clone()

        def restore() -> None:
            buf.copy_(src)

        def call() -> None:
            dist.all_reduce(buf)

        def verify() -> int:
            restore()
            call()
            if op == "allreduce":
                return _wrong(ctx, buf, _summed(ctx, count), dtype)
            if op == "reduce":
                return _wrong(ctx, buf, _summed(ctx, count), dtype) if rank == root else 0
            return _wrong(ctx, buf[rank * chunk:(rank + 1) * chunk], _summed(ctx, chunk, rank * chunk), dtype)

        return make(call, verify, restore)

    if op == "reduce_scatter":
        inp = _pattern(ctx, count, rank, dtype)
        out = t.empty(chunk, dtype=tdt, device=ctx.device)
        rs = _native(ctx, "reduce_scatter_single", "reduce_scatter_tensor")

        def call() -> None:
            rs(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            return _wrong(ctx, out, _summed(ctx, chunk, rank * chunk), dtype)

        return make(call, verify)

    if op == "allgather":
        inp = _pattern(ctx, chunk, rank, dtype)
        out = t.empty(count, dtype=tdt, device=ctx.device)
        if equivalent:
            shards = list(out.split(chunk))

            def call() -> None:
                dist.all_gather(shards, inp)
        else:
            ag = _native(ctx, "all_gather_single", "all_gather_into_tensor")

            def call() -> None:
                ag(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            expected = t.cat([_pattern(ctx, chunk, r, dtype) for r in range(world)]).to(t.float64)
            return _wrong(ctx, out, expected, dtype)

        return make(call, verify)

    if op == "broadcast":
        src = _pattern(ctx, count, root, dtype)
        buf = src.clone()

        def call() -> None:
            dist.broadcast(buf, root)

        def verify() -> int:
            if rank == root:
                buf.copy_(src)
            else:
                buf.fill_(-1)
            call()
            return _wrong(ctx, buf, src.to(t.float64), dtype)

        return make(call, verify)

    if op == "reduce":
        src = _pattern(ctx, count, rank, dtype)
        buf = src.clone()

        def restore() -> None:
            buf.copy_(src)

        def call() -> None:
            dist.reduce(buf, root)

        def verify() -> int:
            restore()
            call()
            return _wrong(ctx, buf, _summed(ctx, count), dtype) if rank == root else 0

        return make(call, verify, restore)

    if op == "all_to_all":
        inp = _pattern(ctx, count, rank, dtype)
        out = t.empty(count, dtype=tdt, device=ctx.device)
        if equivalent:
            ins, outs = list(inp.split(chunk)), list(out.split(chunk))
            pairs = []  # one batch: NCCL groups them (no order deadlock), gloo posts them all at once
            for k in range(1, world):
                dst, src_ = (rank + k) % world, (rank - k) % world
                pairs += [dist.P2POp(dist.irecv, outs[src_], src_), dist.P2POp(dist.isend, ins[dst], dst)]

            def call() -> None:
                works = dist.batch_isend_irecv(pairs) if pairs else []
                outs[rank].copy_(ins[rank])
                for w in works:
                    w.wait()
        else:

            def call() -> None:
                dist.all_to_all_single(out, inp)

        def verify() -> int:
            out.fill_(-1)
            call()
            expected = t.cat([_pattern(ctx, chunk, r, dtype, start=rank * chunk) for r in range(world)])
            return _wrong(ctx, out, expected.to(t.float64), dtype)

        return make(call, verify)

    if op == "sendrecv":
        if world < 2:
            raise BenchError("sendrecv needs at least 2 ranks")
        peer = world - 1
        sbuf = _pattern(ctx, count, rank, dtype)
        rbuf = t.empty(count, dtype=tdt, device=ctx.device)
        if rank == 0:

            def call() -> None:
                dist.send(sbuf, peer)
                dist.recv(rbuf, peer)
        elif rank == peer:

            def call() -> None:
                dist.recv(rbuf, 0)
                dist.send(sbuf, 0)
        else:

            def call() -> None:
                return None

        def verify() -> int:
            rbuf.fill_(-1)
            call()
            if rank not in (0, peer):
                return 0
            return _wrong(ctx, rbuf, _pattern(ctx, count, peer if rank == 0 else 0, dtype).to(t.float64), dtype)

        return make(call, verify, peer=peer)

    raise BenchError(f"unknown op {op!r}; choose from: {', '.join(OPS)}")


@dataclass
class Measurement:
    """Per-iteration times (max over ranks, seconds) and their summary, with the wrong-element count."""

    times: list[float]
    wrong: int
    checked: bool

    def _q(self, q: float) -> float:
        s = sorted(self.times)
        pos = (len(s) - 1) * q
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def median(self) -> float:
        return self._q(0.5)

    @property
    def p10(self) -> float:
        return self._q(0.1)

    @property
    def p90(self) -> float:
        return self._q(0.9)

    @property
    def min(self) -> float:
        return min(self.times)


def measure(ctx: Context, prep: Prepared, warmup: int, iters: int, check: bool = False) -> Measurement:
    """Time ``iters`` calls after ``warmup`` ones; each iteration's time is the maximum over ranks.

    sendrecv: rank 0's round trip halved (the other ranks only wait). Raises whatever the backend
    raises; a call that outlives the context's timeout ends the process (see :class:`_Watchdog`).
    """
    t, dist, dog = ctx.torch, ctx.dist, ctx.watchdog
    what = describe(prep.op, prep.nbytes)
    call, prepare, barrier, arm = prep.call, prep.prepare, dist.barrier, dog.arm
    counted = prep.op != "sendrecv" or ctx.rank == 0
    elapsed: list[float] = []
    if ctx.cuda:
        events = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for i in range(warmup + iters):
            if prepare is not None:
                prepare()
            arm(what)
            barrier()
            if i < warmup:
                call()
                continue
            start, end = events[i - warmup]
            start.record()
            call()
            end.record()
        arm(what)
        t.cuda.synchronize(ctx.device)
        elapsed = [s.elapsed_time(e) / 1e3 for s, e in events]
    else:
        clock = time.perf_counter
        for i in range(warmup + iters):
            if prepare is not None:
                prepare()
            arm(what)
            barrier()
            t0 = clock()
            call()
            t1 = clock()
            if i >= warmup:
                elapsed.append(t1 - t0)
    if not counted:
        elapsed = [0.0] * iters
    arm(what)
    times = t.tensor(elapsed, dtype=t.float64, device=ctx.device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    per_iter = [float(x) * (0.5 if prep.op == "sendrecv" else 1.0) for x in times.cpu().tolist()]
    wrong = 0
    if check:
        arm(what + " (checking the result)")
        mine = t.tensor([prep.verify()], dtype=t.int64, device=ctx.device)
        dist.all_reduce(mine)
        wrong = int(mine.item())
    dog.disarm()
    return Measurement(per_iter, wrong, check)


def probe(ctx: Context, ops: Sequence[str], dtype: str, use_equivalent: Sequence[str] = (),
          ) -> dict[str, tuple[str, str | None]]:
    """For each op: ("native" | "equivalent" | "unsupported", why). A tiny call of each native op tells."""
    out: dict[str, tuple[str, str | None]] = {}
    t = ctx.torch
    for op in ops:
        if op == "sendrecv" and ctx.world < 2:
            out[op] = ("unsupported", "needs at least 2 ranks")
            continue
        if op in use_equivalent:
            out[op] = ("equivalent", "asked for with --use-equivalent")
            continue
        reason = None
        ctx.watchdog.arm(f"probing {op}")
        try:
            build(ctx, op, round_size(1, dtype, ctx.world), dtype, 0).call()
        except (RuntimeError, NotImplementedError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        ok = t.tensor([0 if reason else 1], dtype=t.int64, device=ctx.device)
        ctx.dist.all_reduce(ok, op=ctx.dist.ReduceOp.MIN)
        ctx.watchdog.disarm()
        if int(ok.item()) == 1:
            out[op] = ("native", None)
        elif op in EQUIVALENTS:
            out[op] = ("equivalent", f"{ctx.backend} lacks it for {dtype} ({reason or 'on another rank'})")
        else:
            out[op] = ("unsupported", f"{ctx.backend} lacks it for {dtype} ({reason or 'on another rank'})")
    return out


# ----------------------------------------------------------------------------------- the sweep
HEADER = ("#{:>8} {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}".format(
    "", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong") + "\n"
    + "#{:>8} {:>12} {:>12} {:>8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>7}".format(
    "", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""))


def row(step: str, cfg: dict[str, Any], res: dict[str, Any]) -> str:
    wrong = str(res["wrong"]) if cfg["check"] else "N/A"
    return (f"{step:>9} {cfg['bytes']:>12} {cfg['count']:>12} {DTYPES[cfg['dtype']][0]:>8} {cfg['redop']:>6} "
            f"{cfg['root']:>6} {res['time_s'] * 1e6:>10.2f} {res['algbw_GBps']:>8.3f} {res['busbw_GBps']:>8.3f} "
            f"{wrong:>7}")


def result_of(op: str, nbytes: int, world: int, m: Measurement) -> dict[str, Any]:
    algbw = nbytes / m.median / 1e9
    busbw = algbw * float(busbw_factor(op, world)) if world > 1 else 0.0  # one rank moves nothing
    return {"time_s": m.median, "algbw_GBps": algbw, "busbw_GBps": busbw, "wrong": m.wrong, "checked": m.checked,
            "time_min_s": m.min,
            "time_p10_s": m.p10, "time_p90_s": m.p90, "times": m.times, "nranks": world}


def _plan(ctx: Context, opts: Options, modes: dict[str, tuple[str, str | None]], run: dict[str, Any],
          ) -> tuple[list[tuple[str, int]], list[str]]:
    """(op, bytes) still to measure, and notes; on rank 0 (reads --out for --resume)."""
    sizes: list[int] = []
    for s in opts.sizes:
        r = round_size(s, opts.dtype, ctx.world)
        if r not in sizes:
            sizes.append(r)
    done: set[str] = set()
    notes: list[str] = []
    if opts.resume and opts.out and Path(opts.out).is_file():
        loaded = results.load(opts.out, "collective")
        done = {results.config_key(r) for r in loaded.records}
        if loaded.bad:
            notes.append(f"resume: {len(loaded.bad)} unreadable line(s) in {opts.out} ignored, first: {loaded.bad[0]}")
    todo: list[tuple[str, int]] = []
    skipped = 0
    for op in opts.ops:
        mode = modes[op][0]
        if mode == "unsupported":
            continue
        for nbytes in sizes:
            cfg = config_of(op, nbytes, opts, ctx.world, mode == "equivalent")
            if results.config_key({"kind": "collective", "config": cfg, "run": run}) in done:
                skipped += 1
            else:
                todo.append((op, nbytes))
    if opts.resume:
        notes.append(f"resume: {skipped} of {skipped + len(todo)} measurement(s) already in {opts.out}; "
                     "skipping them")
    return todo, notes


def sweep(ctx: Context, opts: Options, stdout: TextIO | None = None) -> list[dict[str, Any]]:
    """Measure every op x size of ``opts``; rank 0 prints the table and appends records. Returns the
    records (on rank 0; empty elsewhere)."""
    out = stdout or sys.stdout
    lead = ctx.rank == 0

    def say(text: str) -> None:
        if lead:
            print(text, file=out, flush=True)

    if opts.root >= ctx.world:
        raise BenchError(f"--root {opts.root} is not a rank of this {ctx.world}-rank job")
    modes = probe(ctx, opts.ops, opts.dtype, opts.use_equivalent)
    run = ctx.run_info()
    plan: list[Any] = [None]
    if lead:
        try:
            plan[0] = _plan(ctx, opts, modes, run)
        except CommscopeError as exc:
            plan[0] = str(exc)
    ctx.watchdog.arm("agreeing on the plan")
    ctx.dist.broadcast_object_list(plan, src=0)
    ctx.watchdog.disarm()
    if isinstance(plan[0], str):
        raise BenchError(plan[0])
    todo, notes = plan[0]
    torch_version = ctx.torch.__version__
    say(f"# commscope collectives: torch {torch_version}, backend {ctx.backend}, {ctx.world} rank(s), "
        f"{ctx.local_world} per node, timing: {ctx.timing}, max over ranks")
    say(f"# warmup iters: {opts.warmup} iters: {opts.iters} validation: {int(opts.check)} "
        f"dtype: {opts.dtype} timeout: {opts.timeout:g} s")
    for r in ctx.ranks:
        say(f"#  Rank {r['rank']:>3} Pid {r['pid']:>7} on {r['host']:>10} device {r['device']:>7} {r['name']}")
    for op in opts.ops:
        mode, why = modes[op]
        if mode == "equivalent":
            say(f"# note: {op} is measured as {EQUIVALENTS[op]}: {why}")
        elif mode == "unsupported":
            say(f"# note: {op} is skipped: {why}")
    for note in notes:
        say(f"# {note}")
    written: list[dict[str, Any]] = []
    total = len(todo)
    current = None
    bus: dict[str, list[float]] = {}
    for k, (op, nbytes) in enumerate(todo, start=1):
        if op != current:
            current = op
            say("#")
            say(f"# {op}" + (f" (as {EQUIVALENTS[op]})" if modes[op][0] == "equivalent" else ""))
            say(HEADER)
        what = describe(op, nbytes)
        try:
            prep = build(ctx, op, nbytes, opts.dtype, opts.root, equivalent=modes[op][0] == "equivalent")
            m = measure(ctx, prep, opts.warmup, opts.iters, opts.check)
        except CommscopeError:
            raise
        except Exception as exc:  # the backend's errors: a peer died, a timeout, out of memory
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            fail(f"{what} failed on rank {ctx.rank}: {first}")
        cfg = prep.config(opts, ctx.world)
        res = result_of(op, nbytes, ctx.world, m)
        del prep
        if lead:
            rec = results.record("collective", cfg, res, run, SOURCE)
            if opts.out:
                results.append(opts.out, [rec])
            written.append(rec)
            bus.setdefault(op, []).append(res["busbw_GBps"])
            say(row(f"[{k}/{total}]", cfg, res))
    say("#")
    for op, values in bus.items():
        say(f"# Avg bus bandwidth ({op}) : {sum(values) / len(values):.4f} GB/s")
    wrong = sum(r["result"]["wrong"] for r in written)
    if opts.check:
        say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if opts.out and lead:
        say(f"# wrote {len(written)} record(s) to {opts.out}")
    return written


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def rank_main(args: Sequence[str], parse: Callable[[Sequence[str]], Any], setup_rank: Callable[[Any], Any],
              work: Callable[[Any, Any], int], what: str) -> int:
    """The error protocol of a torchrun rank-side command (sweeps, training): bad options end with one
    ``commscope: error:`` line from rank 0 and exit 2; a rank that cannot join the group, or a failure
    during ``work`` (a peer died, out of memory), ends with one line naming the rank and exit 1;
    otherwise ``work(ctx, opts)``'s exit code."""
    leader = os.environ.get("RANK", "0") == "0"
    try:
        opts = parse(args)
        ctx = setup_rank(opts)
    except CommscopeError as exc:
        if leader:
            print(f"commscope: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except Exception as exc:  # the backend's: no rendezvous, a peer that never came, no device
        print(f"commscope: error: rank {os.environ.get('RANK')} could not join the process group: "
              f"{_first_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    try:
        return work(ctx, opts)
    except CommscopeError as exc:
        if ctx.rank == 0:
            print(f"commscope: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except Exception as exc:
        print(f"commscope: error: {what} failed on rank {ctx.rank}: {_first_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_FAILED


def _sweep_and_finish(ctx: Context, opts: Options) -> int:
    written = sweep(ctx, opts)
    teardown(ctx)
    return EXIT_FAILED if opts.check and ctx.rank == 0 and any(r["result"]["wrong"] for r in written) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.bench collectives [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, lambda opts: setup(opts.backend, opts.timeout), _sweep_and_finish, "the sweep")


if __name__ == "__main__":
    sys.exit(main())
