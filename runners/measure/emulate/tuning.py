"""The kernel settings that decide the rate an emulated link achieves: set in every namespace, read back, recorded.

A new namespace inherits its TCP settings from the host (congestion control, tcp_rmem/tcp_wmem) or from
the kernel's defaults (tcp_limit_output_bytes, per kernel version), and veth devices come up with the
kernel's (or the distribution's) offloads and no RPS. Each of these changed the achieved rate, so
:func:`apply` writes them in every node namespace and on every veth end, and the spec (``settings``)
records what the kernel reads back, with the host's own values beside them. What was measured, 2 nodes at
1 Gbit/s, 4 ms bucket, on a 2-core VM whose host runs bbr (``ss -ti``, ``nstat``, ``tc -s qdisc``):

- **Reordering (RPS on).** A veth hands each packet to the receive backlog of the CPU that sent it,
  and a tbf dequeues from whichever CPU its timer or its sender runs on, so consecutive segments of one
  flow were processed on both CPUs at once and arrived out of order: a bad 64 MiB run had 10,633 and
  12,508 retransmitted segments, every one spurious (``TCPDSACKRecvSegs`` = ``TcpRetransSegs``, with
  ``TCPSACKReorder`` and ``TCPOFOQueue`` counts), with no drop in any qdisc or device, and ran at 0.78 of
  the rate; how often it happens depends on what else the CPUs run. RPS over every CPU (``rps_cpus`` of
  every receive queue of every veth end) sends a flow's packets to one CPU chosen by its hash: the
  reordering and DSACK counters stay at 0.
- **Congestion control (reno, not bbr).** bbr paces at the largest delivery rate it saw and caps what is
  in flight at twice that rate times the smallest round trip. A full token bucket delivers at the host's
  speed, so during a gloo 64 MiB allreduce bbr's estimate swung between 0.97 and 40 Gbit/s, its minimum
  round trip was 7 us (veth) against 1-6 ms smoothed (the reverse flow's data queue holds the ACKs),
  and what it kept in flight came from its allowances for ACK aggregation, not from the path: a
  timing-dependent rate. reno
  only grows its window until the link's queue pushes back, whatever the bucket does, and it is built
  into every kernel and allowed in every namespace (cubic may be refused in a namespace: only the host's
  ``tcp_allowed_congestion_control`` are).
- **TCP small queues (tcp_limit_output_bytes = half the eth0 queue).** This kernel's default (4 MiB)
  exceeds the 1.75 MB eth0 queue, so one flow overflowed its own node's tbf (1-4 GSO packets of up to
  44 segments per run) and reno halved its window; with half the queue the node's own queue never drops
  (0 drops), and one flow backs off as a NIC's flow would.
- **Socket buffers (tcp_rmem/tcp_wmem max = 4 MiB or two eth0 queues).** Explicit, because the host's
  (6 MiB on older kernels, 32 MiB here) decide how far a window grows: with 8 or 32 MiB and the kernel's
  small queues, windows outgrew the queue and 4 of 6 repetitions fell to 0.78-0.88 with losses.
  ``net.core.rmem_max`` and ``wmem_max`` (which cap SO_RCVBUF/SO_SNDBUF) are the host's in every namespace
  and read-only there: they are recorded, not set (gloo does not set its buffers; autotuning up to
  tcp_rmem/tcp_wmem decides).
- **Offloads (sg, tso, gso on; gro off).** veth's defaults, set so that a distribution that changes them
  (GRO on puts veth into NAPI mode) does not change the emulation: tbf then counts GSO packets of up to
  64 KiB, which the bucket holds whole. Set and read through the legacy ethtool ioctls (no ethtool needed).
- **tcp_slow_start_after_idle = 0**, so a message after a pause longer than one RTO does not restart
  from a 10-segment window: a link's speed does not depend on how long it was idle (beyond the bucket).

The host's own settings are never changed. The bucket, queue and port queue are :mod:`.shaping`'s; the
start-up check that the link carries its rate is :func:`.ceiling.check_rate`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .system import EmulationError

if TYPE_CHECKING:
    from .namespaces import EmulatedCluster

CONGESTION_CONTROL = "reno"  # always built in and allowed in every namespace (see the docstring for why not bbr)
MIN_SOCKET_BUFFER = 4 * 2**20  # autotuning limit of tcp_rmem/tcp_wmem: at least 4 MiB ...
SOCKET_BUFFER_QUEUES = 2  # ... and two full tbf queues (bucket + queue) of the rate
SLOW_START_AFTER_IDLE = 0
OFFLOADS = {"sg": True, "tso": True, "gso": True, "gro": False}  # veth's defaults, set so no distro differs
RECORDED_SYSCTLS = ("net.ipv4.tcp_reordering", "net.ipv4.tcp_recovery", "net.ipv4.tcp_autocorking",
                    "net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_available_congestion_control")
HOST_SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_allowed_congestion_control",
                "net.ipv4.tcp_available_congestion_control", "net.core.rmem_max", "net.core.wmem_max")

# Run in each namespace (``ip netns exec NS python -I -c HELPER JSON``, which mounts that namespace's /sys):
# writes the sysctls, the RPS masks of every receive queue and the offloads of the named devices, reads
# them all back, prints JSON. Offloads through the legacy ethtool ioctls (no ethtool command needed).
_HELPER = r"""
import array, fcntl, glob, json, socket, struct, sys
want = json.loads(sys.argv[1])
GET = {"sg": 0x18, "tso": 0x1e, "gso": 0x23, "gro": 0x2b}
SET = {"sg": 0x19, "tso": 0x1f, "gso": 0x24, "gro": 0x2c}
out = {"sysctl": {}, "devices": {}, "errors": [], "device_errors": []}
def path(key):
    return "/proc/sys/" + key.replace(".", "/")
for key, value in want["sysctl"].items():
    try:
        with open(path(key), "w") as f:
            f.write(str(value))
    except OSError as exc:
        out["errors"].append("%s = %s: %s" % (key, value, exc.strerror))
for key in [*want["sysctl"], *want["read"]]:
    try:
        with open(path(key)) as f:
            out["sysctl"][key] = " ".join(f.read().split())
    except OSError as exc:
        out["sysctl"][key] = None
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def ethtool(dev, cmd, data=0):
    buf = array.array("I", [cmd, data])
    addr = buf.buffer_info()[0]
    fcntl.ioctl(sock.fileno(), 0x8946, struct.pack("16sP", dev.encode(), addr).ljust(40, b"\0"))
    return buf[1]
for dev, spec in want["devices"].items():
    got = {"rps_cpus": {}, "offloads": {}}
    queues = sorted(glob.glob("/sys/class/net/%s/queues/rx-*/rps_cpus" % dev))
    if spec.get("rps_cpus") is not None and not queues:
        out["device_errors"].append("%s: no rps_cpus (a kernel without RPS)" % dev)
    for q in queues:
        name = q.split("/")[-2]
        try:
            if spec.get("rps_cpus") is not None:
                with open(q, "w") as f:
                    f.write(spec["rps_cpus"])
            with open(q) as f:
                got["rps_cpus"][name] = f.read().strip()
        except OSError as exc:
            out["device_errors"].append("%s %s rps_cpus = %s: %s" % (dev, name, spec.get("rps_cpus"), exc.strerror))
    refused = {}
    for feature, on in spec.get("offloads", {}).items():
        try:
            ethtool(dev, SET[feature], int(bool(on)))
        except OSError as exc:
            refused[feature] = exc.strerror
    for feature in GET:
        try:
            got["offloads"][feature] = bool(ethtool(dev, GET[feature]))
        except OSError:
            got["offloads"][feature] = None
    for feature, why in refused.items():
        if got["offloads"][feature] != bool(spec["offloads"][feature]):
            state = "on" if spec["offloads"][feature] else "off"
            out["device_errors"].append("%s %s %s: %s" % (dev, feature, state, why))
    out["devices"][dev] = got
print(json.dumps(out))
"""


def rps_mask(cpus: int | None = None) -> str:
    """The rps_cpus mask of every online CPU (hex, a comma every 32 CPUs as the kernel writes it)."""
    n = cpus or os.cpu_count() or 1
    digits = f"{(1 << n) - 1:x}"
    groups = [digits[max(0, i - 8):i] for i in range(len(digits), 0, -8)]
    return ",".join(reversed(groups))


def socket_buffer_bytes(tbf: Mapping[str, Any] | None) -> int:
    """The autotuning limit of the nodes' socket buffers: at least 4 MiB and two full tbf queues."""
    queue = 0 if tbf is None else int(tbf["limit_bytes"])
    return max(MIN_SOCKET_BUFFER, SOCKET_BUFFER_QUEUES * queue)


def small_queue_bytes(tbf: Mapping[str, Any] | None) -> int:
    """TCP small queues' limit per socket (tcp_limit_output_bytes): half the tbf queue beyond its bucket, so
    that one flow (two, at most) backs off before it overflows its own link's queue."""
    if tbf is None:
        return MIN_SOCKET_BUFFER
    frame = int(tbf.get("frame_bytes", 1514))
    return max((int(tbf["limit_bytes"]) - int(tbf["burst_bytes"])) // 2, 4 * frame)


def node_sysctls(tbf: Mapping[str, Any] | None, congestion_control: str = CONGESTION_CONTROL) -> dict[str, str]:
    """The sysctls written in every node namespace (each namespace has its own copy of these)."""
    buffer = socket_buffer_bytes(tbf)
    return {"net.ipv4.tcp_congestion_control": congestion_control,
            "net.ipv4.tcp_rmem": f"4096 131072 {buffer}", "net.ipv4.tcp_wmem": f"4096 16384 {buffer}",
            "net.ipv4.tcp_limit_output_bytes": str(small_queue_bytes(tbf)),
            "net.ipv4.tcp_slow_start_after_idle": str(SLOW_START_AFTER_IDLE)}


def read_host_sysctls(keys: tuple[str, ...] = HOST_SYSCTLS) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key in keys:
        try:
            out[key] = " ".join(Path("/proc/sys", *key.split(".")).read_text().split())
        except OSError:
            out[key] = None
    return out


def _run_helpers(jobs: Mapping[str, Mapping[str, Any]], ip: str, at_once: int = 16) -> dict[str, dict[str, Any]]:
    """The helper in each namespace, ``at_once`` of them at a time; its JSON per namespace."""
    results: dict[str, dict[str, Any]] = {}
    names = list(jobs)
    for start in range(0, len(names), at_once):
        procs = {ns: subprocess.Popen([ip, "netns", "exec", ns, sys.executable, "-I", "-c", _HELPER,
                                       json.dumps(jobs[ns])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for ns in names[start:start + at_once]}
        for ns, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            if proc.returncode != 0:
                raise EmulationError(f"setting the link settings in namespace {ns} failed: {' '.join(err.split())}")
            results[ns] = json.loads(out)
    return results


def apply(namespaces: list[str], bridge_namespace: str, ip: str, tbf: Mapping[str, Any] | None, *,
          congestion_control: str = CONGESTION_CONTROL,
          rps: bool = True, offloads: Mapping[str, bool] | None = None,
          extra_sysctls: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Set the settings in the node namespaces (sysctls, eth0) and the bridge's (its ports); return what the
    kernel reads back, for the spec. A sysctl the kernel refuses is an error; a device setting it refuses is
    recorded (``errors``) and the read-back value says what is in effect."""
    offloads = dict(OFFLOADS if offloads is None else offloads)
    mask = rps_mask() if rps else None
    sysctls = {**node_sysctls(tbf, congestion_control), **(extra_sysctls or {})}
    device = {"rps_cpus": mask, "offloads": offloads}
    jobs = {ns: {"sysctl": sysctls, "read": list(RECORDED_SYSCTLS), "devices": {"eth0": device}} for ns in namespaces}
    jobs[bridge_namespace] = {"sysctl": {}, "read": [],
                              "devices": {f"p{i}": device for i in range(len(namespaces))}}
    got = _run_helpers(jobs, ip)
    refused = [f"{ns}: {e}" for ns in namespaces for e in got[ns]["errors"]]
    if refused:
        allowed = read_host_sysctls(("net.ipv4.tcp_allowed_congestion_control",))
        raise EmulationError("the kernel refused a setting of the emulated nodes: " + "; ".join(refused[:3]) +
                             f" (congestion controls a namespace may use: {allowed})")
    node0 = got[namespaces[0]]
    port0 = got[bridge_namespace]["devices"]["p0"]
    uniform = all(got[ns]["sysctl"] == node0["sysctl"] and got[ns]["devices"]["eth0"] == node0["devices"]["eth0"]
                  for ns in namespaces) and all(d == port0 for d in got[bridge_namespace]["devices"].values())
    errors = sorted({e for ns in got for e in got[ns]["device_errors"]})
    return {
        "sysctl": node0["sysctl"], "sysctl_set": sorted(sysctls),
        "rps_cpus": {"node eth0": node0["devices"]["eth0"]["rps_cpus"], "bridge ports": port0["rps_cpus"]},
        "offloads": {"node eth0": node0["devices"]["eth0"]["offloads"], "bridge ports": port0["offloads"],
                     "set": offloads},
        "host": read_host_sysctls(), "uniform": uniform, "errors": errors,
    }


def apply_settings(cluster: EmulatedCluster, **options: Any) -> dict[str, Any]:
    """:func:`apply` to the namespaces of ``cluster`` (options: congestion_control, rps, offloads, extra_sysctls)."""
    tbf = (cluster.spec.get("qdisc") or {}).get("tbf")
    return apply(cluster.namespaces, cluster.bridge_namespace, cluster._tools["ip"], tbf, **options)
