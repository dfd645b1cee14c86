"""An emulated cluster on one Linux machine: network namespaces, veth pairs, a bridge and tc shaping. Created by
:mod:`.cluster` (namespaces in :mod:`.namespaces`, links shaped as :mod:`.shaping` says, the kernel settings
that decide the achieved rate set and recorded by :mod:`.tuning`, the host's ceiling and the start-up rate check
from :mod:`.ceiling`, the machine's tools in :mod:`.system`); :mod:`.nodes` runs and supervises the nodes' commands."""

from __future__ import annotations

from .ceiling import (
    CACHE_SCHEMA,
    CEILING_MAX_AGE_S,
    CEILING_PROBE_S,
    CEILING_WARN_FRACTION,
    RATE_CHECK_FRACTION,
    RATE_CHECK_MAX_FRACTION,
    RATE_PROBE_S,
    cache_dir,
    check_rate,
    host_ceiling,
    tcp_flows,
    tcp_throughput,
)
from .cluster import MAX_MTU, MAX_NODES, MIN_MTU, build_spec, create_cluster, emulated_cluster
from .namespaces import (
    BRIDGE,
    DEFAULT_MASTER_PORT,
    INTERFACE,
    STOP_GRACE_S,
    SUBNET,
    EmulatedCluster,
    list_namespaces,
    remove_stale,
    stale_namespaces,
)
from .nodes import forward, supervise
from .shaping import (
    BURST_SECONDS,
    L2_HEADER,
    MIN_BURST_FRAMES,
    MIN_QUEUE_FRAMES,
    MIN_RATE_BPS,
    NETEM_LIMIT_PACKETS,
    PORT_QUEUE_SECONDS,
    QUEUE_SECONDS,
    TCP_IP_HEADERS,
    expected_beta,
    format_rate,
    netem_available,
    parse_delay,
    parse_rate,
    require_netem,
    tbf_params,
    wire_overhead,
)
from .system import EmulationError, require_root, require_tools
from .tuning import CONGESTION_CONTROL, OFFLOADS, apply_settings, node_sysctls, rps_mask, socket_buffer_bytes

__all__ = ["BRIDGE", "BURST_SECONDS", "CACHE_SCHEMA", "CEILING_MAX_AGE_S", "CEILING_PROBE_S",
           "CEILING_WARN_FRACTION", "CONGESTION_CONTROL", "DEFAULT_MASTER_PORT", "INTERFACE", "L2_HEADER", "MAX_MTU",
           "MAX_NODES", "MIN_BURST_FRAMES", "MIN_MTU", "MIN_QUEUE_FRAMES", "MIN_RATE_BPS", "NETEM_LIMIT_PACKETS",
           "OFFLOADS", "PORT_QUEUE_SECONDS", "QUEUE_SECONDS", "RATE_CHECK_FRACTION", "RATE_CHECK_MAX_FRACTION",
           "RATE_PROBE_S", "STOP_GRACE_S", "SUBNET", "TCP_IP_HEADERS", "EmulatedCluster", "EmulationError",
           "apply_settings", "build_spec", "cache_dir", "check_rate", "create_cluster", "emulated_cluster",
           "expected_beta", "format_rate", "forward", "host_ceiling", "list_namespaces", "netem_available",
           "node_sysctls", "parse_delay", "parse_rate", "remove_stale", "require_netem", "require_root",
           "require_tools", "rps_mask", "socket_buffer_bytes", "stale_namespaces", "supervise", "tbf_params",
           "tcp_flows", "tcp_throughput", "wire_overhead"]
