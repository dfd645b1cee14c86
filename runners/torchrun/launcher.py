"""The launcher side of torchrun work: the command line's ``where`` arguments (one node with ``--standalone``, or
the nodes that ``commscope emulate`` describes in COMMSCOPE_NNODES, COMMSCOPE_NODE_RANK, COMMSCOPE_NPROC_PER_NODE,
MASTER_ADDR and MASTER_PORT: a static rendezvous across the emulated nodes), and running torchrun to the end.
``commscope bench collectives``, ``commscope train`` and ``commscope validate``'s jobs start their ranks here."""

from __future__ import annotations

import importlib.util
import os
import sys

import typer

from costmodels.errors import CommscopeError

EXIT_OUTCOME = 3  # the run finished and recorded that it failed (training diverged); its records say where
NODE_VARIABLES = ("COMMSCOPE_NNODES", "COMMSCOPE_NODE_RANK", "COMMSCOPE_NPROC_PER_NODE", "MASTER_ADDR",
                  "MASTER_PORT")


def _positive(env: dict[str, str], name: str, minimum: int = 1) -> int:
    try:
        v = int(env[name])
    except ValueError:
        raise CommscopeError(f"{name} must be an integer, got {env[name]!r}") from None
    if v < minimum:
        raise CommscopeError(f"{name} must be >= {minimum}, got {v}")
    return v


def launch_args(nproc: int | None, env: dict[str, str] | None = None) -> tuple[list[str], int]:
    """torchrun's arguments for where to run, and the world size: one node (``--standalone``), or the
    nodes that ``commscope emulate`` describes in the environment (static rendezvous)."""
    env = dict(os.environ if env is None else env)
    if nproc is not None and nproc < 1:
        raise CommscopeError(f"--nproc must be >= 1, got {nproc}")
    if env.get("COMMSCOPE_NNODES"):
        missing = [v for v in NODE_VARIABLES if not env.get(v) and not (v == "COMMSCOPE_NPROC_PER_NODE" and nproc)]
        if missing:
            raise CommscopeError(f"COMMSCOPE_NNODES is set but {', '.join(missing)} not; run inside "
                                 "`commscope emulate`, or unset COMMSCOPE_NNODES for a one-node run")
        nnodes = _positive(env, "COMMSCOPE_NNODES")
        node_rank = _positive(env, "COMMSCOPE_NODE_RANK", 0)
        if node_rank >= nnodes:
            raise CommscopeError(f"COMMSCOPE_NODE_RANK {node_rank} is not below COMMSCOPE_NNODES {nnodes}")
        per_node = nproc if nproc is not None else _positive(env, "COMMSCOPE_NPROC_PER_NODE")
        port = _positive(env, "MASTER_PORT")
        return (["--nnodes", str(nnodes), "--node_rank", str(node_rank), "--nproc_per_node", str(per_node),
                 "--master_addr", env["MASTER_ADDR"], "--master_port", str(port)], nnodes * per_node)
    if nproc is None:
        nproc = _gpus() or 2
    return ["--standalone", "--nnodes", "1", "--nproc_per_node", str(nproc)], nproc


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def start_torchrun(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run a torchrun command line to its end under :func:`.lifeline.supervised` and return its exit code:
    torchrun dies with this process (and its ranks with torchrun), SIGTERM/SIGHUP/Ctrl-C here stop torchrun's
    process group (raising :class:`.lifeline.Terminated` or KeyboardInterrupt once it is down)."""
    from . import lifeline

    env = dict(os.environ if env is None else env)
    env[lifeline.LAUNCHER_VARIABLE] = str(os.getpid())  # the ranks check that torchrun's parent is still this one
    return lifeline.run(cmd, env=env)


def run_torchrun(cmd: list[str], feature: str, what: str, threads: int = 1) -> None:
    """Run a torchrun command line and wait; a non-zero exit ends the command with one error line, a run that
    finished but recorded its own failure (rank 0's :func:`.rank.report_outcome`: training diverged) with that
    line and :data:`EXIT_OUTCOME`. SIGTERM, SIGHUP or Ctrl-C stop torchrun and its ranks and end the command
    with 128 + the signal. ``threads`` sets OMP_NUM_THREADS (as torchrun would, without its warning) unless the
    caller's environment already does."""
    import signal

    if importlib.util.find_spec("torch") is None:
        from runners._extras import require

        require("torch", feature)
    import tempfile

    from .rank import OUTCOME_VARIABLE

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    fd, outcome = tempfile.mkstemp(prefix="commscope-outcome-", suffix=".txt")
    os.close(fd)
    env[OUTCOME_VARIABLE] = outcome
    try:
        code = start_torchrun(cmd, env)
        with open(outcome) as fh:
            said = fh.read().strip()
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        print(f"commscope: {signal.Signals(signum).name}: stopped torchrun and its ranks", file=sys.stderr)
        raise typer.Exit(128 + signum) from None
    finally:
        os.unlink(outcome)
    if code != 0:
        print(f"commscope: error: {what} ended with exit code {code} (torchrun); the messages above say why",
              file=sys.stderr)
        raise typer.Exit(code if code > 0 else 1)
    if said:  # the ranks finished and recorded it: not an error of commscope's, but not a success either
        print(f"commscope: {said}", file=sys.stderr)
        raise typer.Exit(EXIT_OUTCOME)
