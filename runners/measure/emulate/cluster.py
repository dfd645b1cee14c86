"""Creating an emulated cluster: the settings validated, the system checked, the host ceiling probed, the
spec written and the shaped namespaces built.

``emulated_cluster(nodes, ranks_per_node, rate)`` (and ``commscope emulate``) builds, as root, the
namespaces that :mod:`.namespaces` describes, each link shaped as :mod:`.shaping` describes.

The spec (``cluster.spec``) is passed to every command as JSON in ``COMMSCOPE_NETWORK``, which
:func:`runners.results.run_info` puts into every result record's ``run.network``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import tuning
from .ceiling import CEILING_WARN_FRACTION, RATE_CHECK_MAX_FRACTION, check_rate, host_ceiling
from .namespaces import DEFAULT_MASTER_PORT, INTERFACE, SUBNET, EmulatedCluster, remove_stale
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
RETRANSMIT_WARN_FRACTION = 0.001  # after a run, more retransmitted TCP segments than this are warned about
MIN_MTU, MAX_MTU = 576, 65535


def _stderr_warning(message: str) -> None:
    print(f"commscope: warning: {message}", file=sys.stderr, flush=True)


def _tcp_congestion_control() -> str | None:
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return None


def build_spec(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
               mtu: int = 1500, burst: int | None = None, ceiling: Mapping[str, Any] | None = None,
               congestion_control: str = tuning.CONGESTION_CONTROL) -> dict[str, Any]:
    """The emulated network's spec (what ``COMMSCOPE_NETWORK`` carries); validates every setting."""
    _check_int("--nodes", nodes, 1, MAX_NODES)
    _check_int("--ranks-per-node", ranks_per_node, 1)
    _check_int("--mtu", mtu, MIN_MTU, MAX_MTU)
    rate_bps = parse_rate(rate)
    delay_s = None if delay is None else parse_delay(delay)
    tbf = tbf_params(rate_bps, mtu, burst, delay_s)
    port = tbf_params(rate_bps, mtu, burst, delay_s, port=True)
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
                  "tbf_port": {k: v for k, v in port.items() if k != "kind"},
                  "placement": ["node eth0 egress (tbf)", "bridge port egress, what the node receives (tbf_port)"],
                  "netem": netem, "counts": "Ethernet frames without preamble/FCS (mtu + 14 bytes per full frame)"},
        "frame_bytes": mtu + L2_HEADER, "payload_bytes": mtu - TCP_IP_HEADERS,
        "wire_overhead": wire_overhead(mtu), "expected_beta_s_per_byte": expected_beta(rate_bps, mtu),
        "intra_node": "loopback, not shaped",
        "host_ceiling_bps": ceiling_bps,
        "host_ceiling": None if ceiling is None else {k: ceiling.get(k) for k in (
            "bps", "payload_bps", "measured", "cached", "mtu")},
        "rate_above_ceiling": None if ceiling_bps is None else rate_bps > CEILING_WARN_FRACTION * ceiling_bps,
        "kernel": platform.release(), "tcp_congestion_control": congestion_control,
        "host_tcp_congestion_control": _tcp_congestion_control(),
        "settings": None, "host_load_average": None, "rate_check": None, "achieved_rate_fraction": None,
    }


def create_cluster(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
                   mtu: int = 1500, *, burst: int | None = None, master_port: int = DEFAULT_MASTER_PORT,
                   reprobe: bool = False, measure_ceiling: bool = True,
                   congestion_control: str = tuning.CONGESTION_CONTROL, verify_rate: bool = True,
                   warn: Callable[[str], None] | None = _stderr_warning) -> EmulatedCluster:
    """Build the emulated cluster and return it; the caller must ``close()`` it (or use it in ``with``). Namespaces
    of commscope runs that are gone (:func:`.namespaces.stale_namespaces`) are removed first, and ``warn`` told."""
    build_spec(nodes, ranks_per_node, rate, delay, mtu, burst)  # validate before touching the system
    _check_int("--master-port", master_port, 1, 65535)
    require_root()
    tools = require_tools()
    removed = remove_stale(tools)  # a commscope killed (SIGKILL) before its teardown left these behind
    if removed and warn is not None:
        warn(removed)
    if delay is not None:
        require_netem()
    ceiling = host_ceiling(mtu, reprobe=reprobe, tools=tools) if measure_ceiling else None
    spec = build_spec(nodes, ranks_per_node, rate, delay, mtu, burst, ceiling, congestion_control)
    if spec["rate_above_ceiling"] and warn is not None:
        warn(f"--rate {spec['rate']} is above {CEILING_WARN_FRACTION:.0%} of what this host carries through one "
             f"emulated link ({format_rate(spec['host_ceiling_bps'])}, measured {ceiling and ceiling['measured']}); "
             "the results will show the host, not the emulated network")
    cluster = EmulatedCluster(nodes, ranks_per_node, spec, tools, master_port, mtu)
    netem = spec["qdisc"]["netem"]
    try:
        cluster._build(spec["qdisc"]["tbf"], netem, spec["qdisc"]["tbf_port"])
        settings = tuning.apply_settings(cluster, congestion_control=congestion_control)
        cluster.spec["settings"] = settings
        cluster.spec["tcp_congestion_control"] = settings["sysctl"]["net.ipv4.tcp_congestion_control"]
        if warn is not None and (settings["errors"] or not settings["uniform"]):
            warn("the kernel refused some link settings of the emulated nodes (recorded as network.settings): " +
                 "; ".join(settings["errors"][:3] or ["the namespaces read back different values"]))
        cluster.spec["host_load_average"] = [round(x, 2) for x in os.getloadavg()]
        if nodes < 2:
            cluster.spec["rate_check"] = {"skipped": "one node: no link between nodes to check"}
        elif verify_rate:
            _record_rate_check(cluster, check_rate(cluster), warn)
    except BaseException:
        cluster.close()
        raise
    return cluster


def _record_rate_check(cluster: EmulatedCluster, check: dict[str, Any], warn: Callable[[str], None] | None) -> None:
    """Put the start-up rate check into the spec, and say so when the link carried less (or more) than its rate."""
    spec = cluster.spec
    spec["rate_check"] = check
    spec["achieved_rate_fraction"] = fraction = check["achieved_rate_fraction"]
    if warn is None:
        return
    if check["short"]:
        warn(f"the emulated link carried {fraction:.2f} of --rate {spec['rate']} at start-up (both directions "
             f"{', '.join(f'{f:.2f}' for f in check['fractions'])}; wanted >= {check['threshold']:.2f}; 1-minute load "
             f"average {spec['host_load_average'][0]:.2f} on {os.cpu_count()} CPUs): this host is too busy or too slow "
             "for this rate and the measurements will show it; recorded as network.achieved_rate_fraction")
    elif fraction > RATE_CHECK_MAX_FRACTION:
        warn(f"the emulated link carried {fraction:.2f} of --rate {spec['rate']} at start-up: more than the rate, "
             "the shaping is not holding; recorded as network.achieved_rate_fraction")


@contextlib.contextmanager
def emulated_cluster(nodes: int, ranks_per_node: int, rate: str | int | float, delay: str | float | None = None,
                     mtu: int = 1500, **options: Any) -> Iterator[EmulatedCluster]:
    """An emulated cluster of ``nodes`` namespaces joined by ``rate``-shaped links, removed on exit.

    ``rate``: tc-style text ('1gbit') or bits/s; ``delay``: one-way, text ('20us') or seconds (needs
    netem); options: ``burst`` (bytes of the token bucket), ``master_port``, ``reprobe`` (measure the host
    ceiling again), ``measure_ceiling`` (False: skip it), ``congestion_control`` (the nodes' TCP congestion
    control, default reno), ``verify_rate`` (False: skip the start-up rate check), ``warn`` (callable for
    warnings or None). After a block that ends normally the links' drops and retransmissions are reported
    (:func:`_report_counters`); one that raises (Ctrl-C, SIGTERM, an error) has the nodes stopped and the
    namespaces removed at once::

        with emulated_cluster(2, 1, "200mbit") as c:
            procs = c.run([sys.executable, "train.py"])   # one Popen per node
            c.exec(1, ["ping", "-c1", c.master_addr])
    """
    cluster = create_cluster(nodes, ranks_per_node, rate, delay, mtu, **options)
    try:
        yield cluster
    except BaseException:
        cluster.close()  # interrupted (Ctrl-C, SIGTERM) or failed: stop the nodes now, no counters of a cut run
        raise
    try:
        _report_counters(cluster, options.get("warn", _stderr_warning))
    finally:
        cluster.close()


def _report_counters(cluster: EmulatedCluster, warn: Callable[[str], None] | None) -> None:
    """After a run, say when the links dropped packets or TCP retransmitted more than 0.1 % of its segments: the
    rate the run saw was then not the link's alone."""
    if warn is None or cluster.nodes < 2 or cluster._closed:
        return
    counts = cluster.link_counters()
    out, again = counts["tcp_out_segments"], counts["tcp_retransmitted_segments"]
    if counts["tbf_drops"] or again > RETRANSMIT_WARN_FRACTION * max(out, 1):
        warn(f"during this run the emulated links dropped {counts['tbf_drops']} packets and the nodes retransmitted "
             f"{again} of {out} TCP segments ({again / max(out, 1):.2%}); 1-minute load average now "
             f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
