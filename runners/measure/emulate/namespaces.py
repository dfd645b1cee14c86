"""The namespaces of an emulated cluster on one Linux machine, their addresses, and the commands run in them.

An emulated cluster (:func:`.cluster.emulated_cluster`, ``commscope emulate``) is, built as root::

    cs<pid>-<k>-n0 .. n<N-1>   one network namespace per node: lo up, eth0 = 10.231.0.<i+1>/24
    cs<pid>-<k>-br             one namespace holding the Linux bridge br0 with a port p<i> per node

Every node's eth0 is one end of a veth pair whose other end, p<i>, is enslaved to br0, so the host's
own network is never touched and everything vanishes with the namespaces. Traffic between ranks of
one node goes over that node's loopback and is not shaped (as NVLink or shared memory would not be).

:class:`EmulatedCluster` creates them (shaped or not: see :mod:`.shaping`), starts commands in the
nodes with the cluster's environment, and removes everything again on ``close()``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.torchrun import lifeline

from .shaping import _check_int
from .system import EmulationError, _names, _run

SUBNET = "10.231.0"  # private addresses, used only inside the namespaces this module creates
INTERFACE = "eth0"
BRIDGE = "br0"
DEFAULT_MASTER_PORT = 29500
STOP_GRACE_S = 2.0
NAME = re.compile(r"cs(\d+)-\d+-(?:n\d+|br)")  # cs<owner pid>-<k>-n<i> or -br: the names this module gives


class EmulatedCluster:
    """Namespaces of one emulated cluster; made by :func:`emulated_cluster`. Close it (idempotent) to remove all.

    ``namespaces[i]`` is node i's namespace, ``addresses[i]`` its eth0 address, ``bridge_namespace`` the
    bridge's; ``spec`` is what ``COMMSCOPE_NETWORK`` carries. ``run(command)`` starts the command in every
    node at once and returns the Popen objects; ``exec(node, command)`` runs one to completion.
    """

    def __init__(self, nodes: int, ranks_per_node: int, spec: dict[str, Any] | None, tools: Mapping[str, str],
                 master_port: int = DEFAULT_MASTER_PORT, mtu: int = 1500) -> None:
        self.prefix = f"cs{os.getpid()}-{next(_names)}"
        self.nodes, self.ranks_per_node, self.mtu = nodes, ranks_per_node, mtu
        self.namespaces = [f"{self.prefix}-n{i}" for i in range(nodes)]
        self.bridge_namespace = f"{self.prefix}-br"
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self.interface = INTERFACE
        self.master_port = master_port
        self.spec: dict[str, Any] = dict(spec or {})
        self._tools = dict(tools)
        self._created: list[str] = []
        self._procs: list[subprocess.Popen] = []
        self._closed = False

    # -------------------------------------------------------------------------------- set-up
    @property
    def master_addr(self) -> str:
        return self.addresses[0]

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def _ip(self, netns: str | None, lines: Sequence[str], what: str) -> None:
        argv = [self._tools["ip"], *(["-n", netns] if netns else []), "-batch", "-"]
        _run(argv, what, input="\n".join(lines) + "\n")

    def _tc(self, netns: str, lines: Sequence[str], what: str) -> None:
        _run([self._tools["tc"], "-n", netns, "-batch", "-"], what, input="\n".join(lines) + "\n")

    def _build(self, tbf: Mapping[str, Any] | None, netem: Mapping[str, Any] | None,
               port_tbf: Mapping[str, Any] | None = None) -> None:
        all_ns = [self.bridge_namespace, *self.namespaces]
        self._created.extend(all_ns)  # known before they exist: teardown removes whatever got made
        self._ip(None, [f"netns add {ns}" for ns in all_ns], "creating the network namespaces")
        br, mtu = self.bridge_namespace, self.mtu
        lines = ["link set lo up", f"link add {BRIDGE} mtu {mtu} type bridge", f"link set {BRIDGE} addrgenmode none"]
        for i, ns in enumerate(self.namespaces):
            lines += [f"link add p{i} mtu {mtu} type veth peer name {INTERFACE} netns {ns} mtu {mtu}",
                      f"link set p{i} addrgenmode none", f"link set p{i} master {BRIDGE}", f"link set p{i} up"]
        self._ip(br, [*lines, f"link set {BRIDGE} up"], "creating the bridge and veth pairs")
        for i, ns in enumerate(self.namespaces):
            self._ip(ns, ["link set lo up", f"link set {INTERFACE} addrgenmode none",
                          f"addr add {self.addresses[i]}/24 dev {INTERFACE}", f"link set {INTERFACE} up"],
                     f"configuring node {i}'s namespace")
        if tbf is None:
            return
        port_args = (port_tbf or tbf)["args"]
        self._tc(br, [f"qdisc add dev p{i} root handle 1: {port_args}" for i in range(self.nodes)],
                 "shaping the bridge ports with tc tbf")
        for ns in self.namespaces:
            if netem is None:
                self._tc(ns, [f"qdisc add dev {INTERFACE} root handle 1: {tbf['args']}"], "shaping eth0 with tc tbf")
            else:
                self._tc(ns, [f"qdisc add dev {INTERFACE} root handle 1: {netem['args']}",
                              f"qdisc add dev {INTERFACE} parent 1:1 handle 10: {tbf['args']}"],
                         "shaping eth0 with tc netem + tbf")

    # --------------------------------------------------------------------------------- running
    def env(self, node: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of ``node``'s command: ``base`` (default: this process's) plus the cluster's."""
        env = dict(os.environ if base is None else base)
        env.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the [node i] forwarder as they are printed
        env.update({
            "MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port), "WORLD_SIZE": str(self.world_size),
            "GLOO_SOCKET_IFNAME": INTERFACE, "NCCL_SOCKET_IFNAME": INTERFACE,
            "COMMSCOPE_NNODES": str(self.nodes), "COMMSCOPE_NODE_RANK": str(node),
            "COMMSCOPE_NPROC_PER_NODE": str(self.ranks_per_node),
            "COMMSCOPE_NETWORK": json.dumps(self.spec, sort_keys=True, allow_nan=False),
        })
        return env

    def argv(self, node: int, command: str | Sequence[str]) -> list[str]:
        """``ip netns exec NODE_NS COMMAND...``"""
        cmd = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
        if not cmd:
            raise EmulationError("give the command to run in the nodes")
        return [self._tools["ip"], "netns", "exec", self.namespaces[node], *cmd]

    def popen(self, node: int, command: str | Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``command`` in ``node``'s namespace (own session, stdin from /dev/null unless given); it gets
        SIGTERM if this process dies without closing the cluster."""
        if self._closed:
            raise EmulationError("this emulated cluster is closed")
        _check_int("node", node, 0, self.nodes - 1)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("start_new_session", True)
        # the command gets SIGTERM when this process dies, even by SIGKILL (see runners.torchrun.lifeline)
        proc = subprocess.Popen(lifeline.wrap(self.argv(node, command)), env=self.env(node, kwargs.pop("env", None)),
                                **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, command: str | Sequence[str], **kwargs: Any) -> list[subprocess.Popen]:
        """Start ``command`` in every node at once; one Popen per node, in node order."""
        return [self.popen(i, command, **kwargs) for i in range(self.nodes)]

    def exec(self, node: int, command: str | Sequence[str], timeout: float | None = 60, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess:
        """Run ``command`` in ``node`` to completion; its output is captured as text."""
        proc = self.popen(node, command, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            proc.communicate()
            raise
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def link_counters(self) -> dict[str, int]:
        """Since the cluster was built: packets the tbfs of both ends of every link dropped, and TCP segments
        the nodes sent and retransmitted (``/proc/net/snmp`` of each node)."""
        counts = {"tbf_drops": 0, "tcp_out_segments": 0, "tcp_retransmitted_segments": 0}
        for ns in [*self.namespaces, self.bridge_namespace]:
            shown = _run([self._tools["tc"], "-n", ns, "-s", "-j", "qdisc", "show"], "tc -s qdisc", check=False)
            with contextlib.suppress(ValueError):
                counts["tbf_drops"] += sum(int(q.get("drops", 0)) for q in json.loads(shown.stdout or "[]")
                                           if q.get("kind") == "tbf")
        for ns in self.namespaces:
            snmp = _run([self._tools["ip"], "netns", "exec", ns, "cat", "/proc/net/snmp"], "reading TCP counters",
                        check=False).stdout.splitlines()
            tcp = [line.split()[1:] for line in snmp if line.startswith("Tcp:")]
            if len(tcp) == 2:
                row = dict(zip(tcp[0], tcp[1], strict=True))
                counts["tcp_out_segments"] += int(row.get("OutSegs", 0))
                counts["tcp_retransmitted_segments"] += int(row.get("RetransSegs", 0))
        return counts

    # -------------------------------------------------------------------------------- teardown
    def close(self) -> None:
        """Stop every process started here (their process groups and anything left in the namespaces),
        then delete the namespaces (which removes the veths and the bridge). Safe to call again."""
        with _signals_held():
            self._closed = True
            live = [p for p in self._procs if p.poll() is None]
            for p in live:
                _kill_group(p, signal.SIGTERM)
            end = time.monotonic() + STOP_GRACE_S
            while any(p.poll() is None for p in live) and time.monotonic() < end:
                time.sleep(0.02)
            for p in live:
                if p.poll() is None:
                    _kill_group(p, signal.SIGKILL)
            existing = set(list_namespaces())
            mine = [ns for ns in self._created if ns in existing]
            for ns in mine:  # orphans that left the process groups (daemons, setsid) go too
                pids = _run([self._tools["ip"], "netns", "pids", ns], "ip netns pids", check=False).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)
            for p in live:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=1.0)
            if mine:
                _run([self._tools["ip"], "-force", "-batch", "-"], "deleting the namespaces", check=False,
                     input="".join(f"netns del {ns}\n" for ns in reversed(mine)))
            left = sorted(set(list_namespaces()) & set(self._created))
            if left:
                raise EmulationError(f"could not delete namespaces {', '.join(left)}; remove them with "
                                     f"'ip netns del NAME'")
            self._created.clear()

    def __enter__(self) -> EmulatedCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while tearing down (main thread only): one that arrives meanwhile is delivered
    when the teardown is done. So a second Ctrl-C cannot leave half of the namespaces behind, and a first one is
    not lost either (ignoring it, as before, dropped a Ctrl-C that came during the teardown of the host-ceiling
    probe or of a failed set-up: the command then ran to its end)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    old = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(held):
            signal.raise_signal(s)  # to the handler that was in place: KeyboardInterrupt, commscope's, or default


def list_namespaces() -> list[str]:
    """Names of the network namespaces that ``ip netns list`` shows."""
    where = Path("/run/netns")
    try:
        return sorted(p.name for p in where.iterdir())
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_namespaces(names: Sequence[str] | None = None) -> list[str]:
    """The namespaces named as this module names them (``cs<pid>-<k>-n<i>``, ``cs<pid>-<k>-br``) whose owner pid is
    no live process: left behind by a commscope killed before it could remove them. Other names, and names of a
    live pid, are never listed."""
    names = list_namespaces() if names is None else list(names)
    return sorted(n for n in names if (m := NAME.fullmatch(n)) and not _alive(int(m.group(1))))


def remove_stale(tools: Mapping[str, str]) -> str | None:
    """Remove :func:`stale_namespaces`: kill what still runs in them, delete them (their veths and bridge go with
    them). Returns one line saying what was removed, and what could not be, or None when there was nothing."""
    stale = stale_namespaces()
    if not stale:
        return None
    for ns in stale:
        pids = _run([tools["ip"], "netns", "pids", ns], "ip netns pids", check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
    _run([tools["ip"], "-force", "-batch", "-"], "deleting stale namespaces", check=False,
         input="".join(f"netns del {ns}\n" for ns in stale))
    left = sorted(set(list_namespaces()) & set(stale))
    gone = [ns for ns in stale if ns not in left]
    owners = sorted({int(NAME.fullmatch(ns).group(1)) for ns in stale})  # type: ignore[union-attr]
    line = (f"removed {len(gone)} stale emulated-network namespace(s) of commscope runs that are gone (pid "
            f"{', '.join(map(str, owners))}): {', '.join(gone)}" if gone else "")
    if left:
        line += ("; " if line else "") + (f"could not delete stale namespace(s) {', '.join(left)}; remove them with "
                                          "'ip netns del NAME'")
    return line
