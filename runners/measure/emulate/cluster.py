"""Creating an emulated cluster: the settings validated, the system checked, the host ceiling probed, the
spec written and the shaped namespaces built.

``emulated_cluster(nodes, ranks_per_node, rate)`` (and ``commscope emulate``) builds, as root, the
namespaces that :mod:`.namespaces` describes, each link shaped as :mod:`.shaping` describes.

The spec (``cluster.spec``) is passed to every command as JSON in ``COMMSCOPE_NETWORK``, which
:func:`runners.results.run_info` puts into every result record's ``run.network``.
"""

from __future__ import annotations

import contextlib
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .ceiling import CEILING_WARN_FRACTION, host_ceiling
from .namespaces import DEFAULT_MASTER_PORT, INTERFACE, SUBNET, EmulatedCluster
from .shaping import (
    L2_HEADER,
    NETEM_LIMIT_PACKETS,
    TCP_IP_HEADERS,
    _check_int,
    expected_beta,
    format_rate,
    parse_delay,
    parse_rate,
    require_netem,
    tbf_params,
    wire_overhead,
)
from .system import require_root, require_tools

MAX_NODES = 254
MIN_MTU, MAX_MTU = 576, 65535


def _stderr_warning(message: str) -> None:
    print(f"commscope: warning: {message}", file=sys.stderr, flush=True)


def _tcp_congestion_control() -> str | None:
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return None


def build_spec(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
               mtu: int = 1500, burst: int | None = None, ceiling: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The emulated network's spec (what ``COMMSCOPE_NETWORK`` carries); validates every setting."""
    _check_int("--nodes", nodes, 1, MAX_NODES)
    _check_int("--ranks-per-node", ranks_per_node, 1)
    _check_int("--mtu", mtu, MIN_MTU, MAX_MTU)
    rate_bps = parse_rate(rate)
    delay_s = None if delay is None else parse_delay(delay)
    tbf = tbf_params(rate_bps, mtu, burst, delay_s)
    netem = None if delay_s is None else {
        "kind": "netem", "delay_s": delay_s, "limit_packets": NETEM_LIMIT_PACKETS,
        "placement": "node eth0 egress, parent of the tbf (one-way node-to-node delay)",
        "args": f"netem delay {delay_s * 1e6:.3f}us limit {NETEM_LIMIT_PACKETS}"}
    ceiling_bps = None if ceiling is None else float(ceiling["bps"])
    return {
        "emulated": True, "method": "netns + veth + linux bridge + tc", "nodes": nodes,
        "ranks_per_node": ranks_per_node, "world_size": nodes * ranks_per_node,
        "rate": str(rate) if isinstance(rate, str) else format_rate(rate_bps), "rate_bps": rate_bps,
        "delay": None if delay is None else str(delay), "delay_s": delay_s, "mtu": mtu, "interface": INTERFACE,
        "addresses": [f"{SUBNET}.{i + 1}" for i in range(nodes)],
        "qdisc": {"tbf": {k: v for k, v in tbf.items() if k != "kind"},
                  "placement": ["node eth0 egress", "bridge port egress (what the node receives)"],
                  "netem": netem, "counts": "Ethernet frames without preamble/FCS (mtu + 14 bytes per full frame)"},
        "frame_bytes": mtu + L2_HEADER, "payload_bytes": mtu - TCP_IP_HEADERS,
        "wire_overhead": wire_overhead(mtu), "expected_beta_s_per_byte": expected_beta(rate_bps, mtu),
        "intra_node": "loopback, not shaped",
        "host_ceiling_bps": ceiling_bps,
        "host_ceiling": None if ceiling is None else {k: ceiling.get(k) for k in (
            "bps", "payload_bps", "measured", "cached", "mtu")},
        "rate_above_ceiling": None if ceiling_bps is None else rate_bps > CEILING_WARN_FRACTION * ceiling_bps,
        "kernel": platform.release(), "tcp_congestion_control": _tcp_congestion_control(),
    }


def create_cluster(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
                   mtu: int = 1500, *, burst: int | None = None, master_port: int = DEFAULT_MASTER_PORT,
                   reprobe: bool = False, measure_ceiling: bool = True,
                   warn: Callable[[str], None] | None = _stderr_warning) -> EmulatedCluster:
    """Build the emulated cluster and return it; the caller must ``close()`` it (or use it in ``with``)."""
    build_spec(nodes, ranks_per_node, rate, delay, mtu, burst)  # validate before touching the system
    _check_int("--master-port", master_port, 1, 65535)
    require_root()
    tools = require_tools()
    if delay is not None:
        require_netem()
    ceiling = host_ceiling(mtu, reprobe=reprobe, tools=tools) if measure_ceiling else None
    spec = build_spec(nodes, ranks_per_node, rate, delay, mtu, burst, ceiling)
    if spec["rate_above_ceiling"] and warn is not None:
        warn(f"--rate {spec['rate']} is above {CEILING_WARN_FRACTION:.0%} of what this host carries through one "
             f"emulated link ({format_rate(spec['host_ceiling_bps'])}, measured {ceiling and ceiling['measured']}); "
             "the results will show the host, not the emulated network")
    cluster = EmulatedCluster(nodes, ranks_per_node, spec, tools, master_port, mtu)
    netem = spec["qdisc"]["netem"]
    try:
        cluster._build(spec["qdisc"]["tbf"], netem)
    except BaseException:
        cluster.close()
        raise
    return cluster


@contextlib.contextmanager
def emulated_cluster(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
                     mtu: int = 1500, **options: Any) -> Iterator[EmulatedCluster]:
    """An emulated cluster of ``nodes`` namespaces joined by ``rate``-shaped links, removed on exit.

    ``rate``: tc-style text ('1gbit') or bits/s; ``delay``: one-way, text ('20us') or seconds (needs
    netem); options: ``burst`` (bytes of the token bucket), ``master_port``, ``reprobe`` (measure the host
    ceiling again), ``measure_ceiling`` (False: skip it), ``warn`` (callable for warnings or None)::

        with emulated_cluster(2, 1, "200mbit") as c:
            procs = c.run([sys.executable, "train.py"])   # one Popen per node
            c.exec(1, ["ping", "-c1", c.master_addr])
    """
    cluster = create_cluster(nodes, ranks_per_node, rate, delay, mtu, **options)
    try:
        yield cluster
    finally:
        cluster.close()
