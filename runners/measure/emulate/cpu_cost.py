"""The host's CPU seconds per byte that crosses an emulated link: what its ranks' communication takes from compute.

One TCP flow between two fresh namespaces of an emulated link at ``rate`` runs in a CPU-accounting cgroup of its
own (cgroup v1 ``cpuacct.usage`` or v2 ``cpu.stat`` ``usage_usec``), plus the time the kernel's ksoftirqd
threads spent meanwhile (receive processing deferred to them; on a host with other network traffic this part
counts theirs too). A flow of ``small_bytes`` is subtracted from a flow of ``seconds`` at the rate, so that the
processes' start-up does not count: c = (CPU_long - CPU_short) / (bytes_long - bytes_short), CPU seconds per
byte sent and received once. CPU time, unlike wall time, is what the flow itself used, so other work on the host
changes it little (cache and scheduling effects remain: the load average is recorded). The median over
``repeats`` pairs is the result; :mod:`costmodels.cpu_sharing` turns it into interference terms.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from .ceiling import tcp_flows
from .system import EmulationError

CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct")
CGROUP_V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
SCHEMA = "commscope.host_network_cpu/1"


class _Accounting:
    """A cgroup that counts the CPU time of the processes put in it (v1 cpuacct, else v2)."""

    def __init__(self) -> None:
        name = f"commscope-cpu-{os.getpid()}"
        if (CGROUP_V1 / "cpuacct.usage").is_file():
            self.path, self.v2 = CGROUP_V1 / name, False
        else:
            root = next((r for r in CGROUP_V2_ROOTS if (r / "cgroup.controllers").is_file()), None)
            if root is None:
                raise EmulationError("no CPU-accounting cgroup (v1 cpuacct or v2) to measure the network's CPU cost")
            self.path, self.v2 = root / name, True
        try:
            self.path.mkdir(exist_ok=True)
        except OSError as exc:
            raise EmulationError(f"cannot make the cgroup {self.path}: {exc.strerror}") from None

    def add(self, pid: int) -> None:
        (self.path / ("cgroup.procs" if self.v2 else "tasks")).write_text(str(pid))

    def seconds(self) -> float:
        if self.v2:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec"):
                    return int(line.split()[1]) / 1e6
            raise EmulationError(f"{self.path}/cpu.stat has no usage_usec")
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def _softirq_seconds() -> float:
    """CPU seconds the ksoftirqd threads have used so far."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if not Path(f"/proc/{pid}/comm").read_text().startswith("ksoftirqd"):
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


class _Counted:
    """The cluster, with every process it starts put in the accounting cgroup."""

    def __init__(self, cluster: Any, accounting: _Accounting) -> None:
        self._cluster, self._accounting = cluster, accounting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def popen(self, node: int, command: Any, **kwargs: Any) -> Any:
        proc = self._cluster.popen(node, command, **kwargs)
        self._accounting.add(proc.pid)  # before its Python has started: it and its children are counted
        return proc


def _flow_cpu(cluster: Any, accounting: _Accounting, **flow: Any) -> tuple[int, float, float]:
    cpu0, soft0 = accounting.seconds(), _softirq_seconds()
    result = tcp_flows(cluster, [(1, 0)], **flow)[0]
    return int(result["bytes"]), accounting.seconds() - cpu0 + _softirq_seconds() - soft0, result["payload_bps"]


def network_cpu_cost(rate: str = "1gbit", *, seconds: float = 1.5, repeats: int = 3,
                     small_bytes: int = 2_000_000) -> dict[str, Any]:
    """CPU seconds per byte of one TCP flow over an emulated link at ``rate`` (module docstring), with each
    measurement, the host's cores and load average."""
    from .cluster import emulated_cluster

    if repeats < 1 or seconds <= 0 or small_bytes < 1:
        raise EmulationError(f"need repeats >= 1, seconds > 0 and small_bytes >= 1, got {repeats}, {seconds}, "
                             f"{small_bytes}")
    accounting = _Accounting()
    runs = []
    try:
        with emulated_cluster(2, 1, rate, measure_ceiling=False, verify_rate=False) as cluster:
            counted = _Counted(cluster, accounting)
            for _ in range(repeats):
                n0, cpu0, _ = _flow_cpu(counted, accounting, nbytes=small_bytes)
                n1, cpu1, bps = _flow_cpu(counted, accounting, seconds=seconds)
                if n1 <= n0:
                    raise EmulationError(f"the flow at {rate} carried no more than the short one ({n1} bytes)")
                runs.append({"bytes": n1 - n0, "cpu_s": cpu1 - cpu0, "cpu_s_per_byte": (cpu1 - cpu0) / (n1 - n0),
                             "payload_bps": bps})
    finally:
        accounting.remove()
    cores = len(os.sched_getaffinity(0))
    return {"schema": SCHEMA, "rate": rate, "cpu_s_per_byte": statistics.median(r["cpu_s_per_byte"] for r in runs),
            "runs": runs, "cores": cores, "load_average": list(os.getloadavg()),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "method": "runners.measure.emulate.cpu_cost: cgroup CPU time plus ksoftirqd time of one TCP flow over "
                      "an emulated link, long minus short flow, median over repeats"}


def load(path: Path) -> dict[str, Any] | None:
    """A saved measurement (``host_network_cpu.json``), or None where there is none or it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and data.get("schema") == SCHEMA and isinstance(data.get("cpu_s_per_byte"), float)
    return data if ok else None
