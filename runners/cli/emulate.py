"""``commscope emulate``: run a command on every node of an emulated cluster (see :mod:`runners.measure.emulate`).

The emulation itself is imported only when the command runs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Annotated

import typer

FORWARD_DRAIN_S = 2.0  # after the nodes are stopped, how long their last output may take to come through


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an exception so that the teardown runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


def emulate(
    command: Annotated[list[str], typer.Argument(
        help="the command to run on every node, after --", metavar="-- COMMAND [ARGS]...", show_default=False)],
    nodes: Annotated[int, typer.Option(help="emulated nodes (one network namespace each)")],
    rate: Annotated[str, typer.Option(help="link rate, tc-style: 1gbit, 200mbit, 10gbit (bit/kbit/mbit/gbit/tbit)")],
    ranks_per_node: Annotated[int, typer.Option(
        "--ranks-per-node", help="ranks per node (COMMSCOPE_NPROC_PER_NODE)")] = 1,
    delay: Annotated[str | None, typer.Option(help="one-way node-to-node delay, e.g. 20us, 1ms (needs netem)")] = None,
    mtu: Annotated[int, typer.Option(help="MTU of every link, bytes")] = 1500,
    burst: Annotated[str | None, typer.Option(
        help="token bucket of each tbf, e.g. 64KiB (default: 4 ms of the rate, at least 4 frames)")] = None,
    master_port: Annotated[int, typer.Option("--master-port", help="MASTER_PORT on node 0")] = 29500,
    reprobe: Annotated[bool, typer.Option(
        "--reprobe", help="measure the host ceiling again (else cached a day)")] = False,
    grace: Annotated[float, typer.Option(help="seconds the other nodes get after one fails")] = 5.0,
) -> None:
    """Run COMMAND in every node of an emulated cluster (namespaces + veth + bridge + tc tbf), then remove it.

    Each node gets MASTER_ADDR, MASTER_PORT, WORLD_SIZE, GLOO/NCCL_SOCKET_IFNAME=eth0, COMMSCOPE_NNODES,
    COMMSCOPE_NODE_RANK, COMMSCOPE_NPROC_PER_NODE and COMMSCOPE_NETWORK (the network spec as JSON). Output
    lines are prefixed with [node I]; the exit code is the first non-zero exit of the nodes, or 0. Needs root.
    """
    import shutil

    from costmodels.units import parse_size
    from runners.measure import emulate as em

    if not command:
        raise em.EmulationError("give the command to run on every node after --, e.g. "
                                "commscope emulate --nodes 2 -- python train.py")
    if shutil.which(command[0]) is None:
        raise em.EmulationError(f"command not found: {command[0]!r}")
    if not grace >= 0:
        raise em.EmulationError(f"--grace must be >= 0 seconds, got {grace!r}")
    burst_bytes = None if burst is None else parse_size(burst)
    main_thread = threading.current_thread() is threading.main_thread()
    old = {}
    if main_thread:
        old = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    lock = threading.Lock()
    threads: list[threading.Thread] = []
    code = 0
    try:
        with em.emulated_cluster(nodes, ranks_per_node, rate, delay, mtu, burst=burst_bytes,
                                 master_port=master_port, reprobe=reprobe) as cluster:
            procs = cluster.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i, p in enumerate(procs):
                threads.append(em.forward(p.stdout, sys.stdout, f"[node {i}] ", lock))  # type: ignore[arg-type]
                threads.append(em.forward(p.stderr, sys.stderr, f"[node {i}] ", lock))  # type: ignore[arg-type]

            def failed(node: int, rc: int) -> None:
                with lock:
                    print(f"commscope: node {node} exited with code {rc}; stopping the others in {grace:g} s "
                          "unless they finish", file=sys.stderr, flush=True)

            code = em.supervise(procs, grace, failed)
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, _Terminated) else signal.SIGINT
        code = 128 + int(signum)
        print(f"commscope: {signal.Signals(signum).name}: stopped the nodes and removed the emulated network",
              file=sys.stderr, flush=True)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        end = time.monotonic() + FORWARD_DRAIN_S  # one deadline for all: not 2 s per thread of every node
        for t in threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
    if code:
        # SystemExit, not typer.Exit: runners.cli.entry.main runs click with standalone_mode=False, where an Exit's
        # code is returned by click and then dropped, so a failing node would end with status 0
        raise SystemExit(code)


def register(app: typer.Typer) -> None:
    """Add ``emulate`` to the ``commscope`` app."""
    app.command("emulate", context_settings={"allow_interspersed_args": False})(emulate)
