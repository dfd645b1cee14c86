"""The rank side of a torchrun job, shared by collective sweeps, training and validation.

A rank joins the process group torchrun describes (:func:`setup`: RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, ...; nccl on CUDA devices, gloo on CPUs or, with ``--backend gloo-cuda``, on CUDA
tensors), exchanges what every rank runs on (pid, host, device) and leaves again (:func:`teardown`).
A watchdog thread ends the process with a message naming the call that outlived ``--timeout``
(:class:`_Watchdog`), and :func:`rank_main` is the one-line error protocol of every rank-side
command: ``commscope: error: ...`` and exit 2 for bad options, exit 1 for a failure on a rank.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from costmodels.errors import CommscopeError
from runners import results

EXIT_FAILED = 1  # a collective failed or timed out
EXIT_USAGE = 2  # bad options
OUTCOME_VARIABLE = "COMMSCOPE_OUTCOME"  # a file the launcher reads after torchrun: a run's recorded failure
BACKENDS = ("auto", "gloo", "nccl", "gloo-cuda")


class RankError(CommscopeError):
    """A rank that cannot start or go on: bad options, not under torchrun, no device for the backend (the
    message says why). A collective sweep's ``BenchError`` is this class."""


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


def report_outcome(text: str) -> None:
    """Tell the launcher (``commscope train``) that the run ended with a recorded failure (e.g. it diverged):
    one line into the file ``COMMSCOPE_OUTCOME`` names; the launcher prints it and exits with
    :data:`runners.torchrun.launcher.EXIT_OUTCOME`. Nothing happens without that variable."""
    path = os.environ.get(OUTCOME_VARIABLE)
    if path:
        with open(path, "w") as fh:
            fh.write(text.strip().replace("\n", " ") + "\n")


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
        raise RankError("run this under torchrun (torchrun --nproc_per_node=N -m runners.measure.sweep collectives "
                        "...) or use: commscope bench collectives --nproc N")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RankError("--backend nccl needs CUDA devices, and this machine has none; use --backend gloo")
        if local_rank >= torch.cuda.device_count():
            raise RankError(f"LOCAL_RANK {local_rank} has no GPU: this node has {torch.cuda.device_count()}")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        # the backend's own timeout is a backstop; the watchdog below says which collective hung
        dist.init_process_group("nccl", timeout=timedelta(seconds=timeout + 30), device_id=device)
        name = torch.cuda.get_device_name(device)
    elif backend == "gloo-cuda":
        device = gloo_cuda_device(torch, local_rank, RankError)
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def rank_main(args: Sequence[str], parse: Callable[[Sequence[str]], Any], setup_rank: Callable[[Any], Any],
              work: Callable[[Any, Any], int], what: str) -> int:
    """The error protocol of a torchrun rank-side command (sweeps, training); the rank first ties its life to
    torchrun's (:func:`.lifeline.follow_launcher`). Bad options end with one
    ``commscope: error:`` line from rank 0 and exit 2; a rank that cannot join the group, or a failure
    during ``work`` (a peer died, out of memory), ends with one line naming the rank and exit 1;
    otherwise ``work(ctx, opts)``'s exit code."""
    from .lifeline import follow_launcher

    follow_launcher()  # torchrun starts each rank in a session of its own: it must not outlive torchrun
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
