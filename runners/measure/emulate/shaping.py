"""How each link of an emulated cluster is shaped: rates and delays read, and the tc qdiscs that shape them.

Each node's link is shaped by tc ``tbf`` at ``rate`` on both of its ends: the node's eth0
egress (what the node sends) and the bridge port's egress (what the node receives), like a switch
port, so that several senders into one node share its link. Bytes that tbf counts are whole Ethernet
frames without preamble and FCS (the skb length with the 14-byte L2 header), so one full TCP segment
with timestamps carries ``mtu - 52`` payload bytes (20 IP + 20 TCP + 12 timestamp option) in
``mtu + 14`` frame bytes. The expected inverse bandwidth seen by an application is therefore::

    beta = (8 / rate_bps) * (mtu + 14) / (mtu - 52)   seconds per payload byte

(1gbit, mtu 1500: 8e-9 * 1514 / 1448 = 8.365e-9 s/B, 4.6 % above 8 / rate). ``wire_overhead`` in the
spec is that factor.

Bucket (``burst``): the kernel's tbf keeps time in nanoseconds, so no HZ rule applies, but it sends
only when its watchdog timer or a new packet wakes it, and on a busy machine that comes late (the timer
runs in softirq, which ksoftirqd then shares the CPUs with everything else); tokens beyond the bucket
are lost, so a bucket smaller than that lateness shapes below the rate. The default bucket holds 4 ms of
the rate (rate_bps / 8 / 250 bytes) and at least 4 frames. Chosen by measurement with the start-up rate
check (both directions of one 1 Gbit/s link at once, with :mod:`.tuning`'s settings; 2-core VM, other
work running, 1-minute load 2.6-3.5, 3 clusters each): a 0.25 ms bucket carried 0.39-0.49 of the rate,
0.5 ms 0.42-0.43, 1 ms 0.78-0.995, 2 ms 0.86-0.999, 4 ms 0.992-0.999 and 8 ms 0.992-0.993 (an earlier,
idle measurement with one flow: 3 kB 35 %, 1 ms 97-98 %, 4 ms 99.9 %). A smaller bucket would let less
through at the host's speed after an idle period (issue 15: mid-size messages faster than the wire, a
fitted beta faster than the wire), but it gives up the sustained rate as soon as the machine is busy,
which no fit can correct; 4 ms is the smallest bucket that held the rate. The price stays: after an idle
period up to ``burst`` bytes pass at once, so a message smaller than the bucket that follows a pause is
faster than the link (the spec records ``burst_bytes`` and ``burst_s``; pass ``burst=`` to trade
sustained rate for small-message fidelity on an idle machine).

Queues (``limit``): at a node's eth0 the bucket plus 20 ms of the rate, of which TCP small queues
(:mod:`.tuning`) let one socket fill half, so a node's own queue never drops (it pushes back as a NIC
does) while 10 ms of data waits for a late timer. At a bridge port (``tbf_port``, what a node receives)
the bucket plus 50 ms: its input arrives in bursts when the receive softirq runs late (with 10 ms there,
a loaded host dropped 9-30 GSO packets of up to 44 segments per run at the ports and reno halved its
window: 64 MiB fell to 0.82-0.92 of the rate; with 50 ms none dropped), and several senders into one
node (incast) queue there. Both also hold two ``delay`` of the rate (one round trip).

``delay`` is a one-way node-to-node latency: netem on the node's eth0 egress only (parent of the tbf),
where the kernel has netem; without it a run with a delay is refused, never started without it.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from .system import EmulationError, _names, _run, require_tools

BURST_SECONDS = 0.004  # bucket: 4 ms of the rate (rate / 250) ...
MIN_BURST_FRAMES = 4  # ... and never less than 4 full frames
QUEUE_SECONDS = 0.020  # queue beyond the bucket at a node's eth0: 20 ms of the rate (+ one round trip of --delay)
PORT_QUEUE_SECONDS = 0.050  # ... and at a bridge port, which takes the bursts of a late receive softirq
MIN_QUEUE_FRAMES = 64
NETEM_LIMIT_PACKETS = 100_000
L2_HEADER = 14  # Ethernet header counted by tbf (preamble, FCS and inter-frame gap are not)
TCP_IP_HEADERS = 20 + 20 + 12  # IPv4 + TCP + timestamps option
MIN_RATE_BPS = 1000

_RATE_UNITS = {"": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
               "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40}
_DELAY_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3,
                "us": 1e-6, "usec": 1e-6, "usecs": 1e-6}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_rate(rate: str | int | float) -> int:
    """Bits per second in a tc-style rate: ``'1gbit'``, ``'200mbit'``, ``'64kbit'``, ``'1e9'``, ``1e9``.

    Units (case-insensitive): bit, kbit, mbit, gbit, tbit (powers of 1000), kibit, mibit, gibit, tibit
    (powers of 1024); a plain number is bits per second.
    """
    allowed = "a number of bits/s or a tc-style rate such as 1gbit, 200mbit, 64kbit (units: " + \
        ", ".join(u for u in _RATE_UNITS if u) + ")"
    if isinstance(rate, bool):
        raise EmulationError(f"--rate {rate!r} is not a rate; write {allowed}")
    if isinstance(rate, (int, float)):
        value, unit = float(rate), ""
    else:
        m = _NUMBER.match(str(rate))
        if not m:
            raise EmulationError(f"cannot read --rate {rate!r}; write {allowed}")
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit not in _RATE_UNITS:
            hint = " (tc's 'bps' means bytes per second: write bits, e.g. 8mbit for 1mbps)" \
                if unit.endswith("bps") else ""
            raise EmulationError(f"unknown unit {m.group(2)!r} in --rate {rate!r}{hint}; write {allowed}")
    bps = value * _RATE_UNITS[unit]
    if not math.isfinite(bps) or bps < MIN_RATE_BPS or bps > 10 * 10**12:
        raise EmulationError(f"--rate {rate!r} is out of range: it must be between 1kbit and 10tbit")
    return round(bps)


def format_rate(bps: float) -> str:
    """A rate in tc's words: 1000000000 -> '1gbit', 1500000 -> '1.5mbit'."""
    for unit, factor in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= factor:
            return f"{bps / factor:.6g}{unit}"
    return f"{bps:.6g}bit"


def parse_delay(delay: str | int | float) -> float:
    """Seconds in a tc-style time: ``'20us'``, ``'1.5ms'``, ``'0.1s'``; a number is seconds."""
    allowed = "a time with a unit such as 20us, 1.5ms, 0.1s (units: s, ms, us; also sec, msec, usec)"
    if isinstance(delay, bool):
        raise EmulationError(f"--delay {delay!r} is not a time; write {allowed}")
    if isinstance(delay, (int, float)):
        seconds = float(delay)
    else:
        m = _NUMBER.match(str(delay))
        if not m or m.group(2).lower() not in _DELAY_UNITS:
            raise EmulationError(f"cannot read --delay {delay!r}; write {allowed}")
        seconds = float(m.group(1)) * _DELAY_UNITS[m.group(2).lower()]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > 10:
        raise EmulationError(f"--delay {delay!r} must be > 0 and at most 10 s (leave --delay out for none)")
    return seconds


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        upper = f" and <= {high}" if high is not None else ""
        raise EmulationError(f"{name} must be a whole number >= {low}{upper}, got {value!r}")
    return value


def wire_overhead(mtu: int = 1500) -> float:
    """Frame bytes tbf counts per TCP payload byte of full segments: (mtu + 14) / (mtu - 52)."""
    return (mtu + L2_HEADER) / (mtu - TCP_IP_HEADERS)


def expected_beta(rate_bps: float, mtu: int = 1500) -> float:
    """Seconds per payload byte through a tbf-shaped link: 8 / rate_bps * (mtu + 14) / (mtu - 52)."""
    return 8.0 / rate_bps * wire_overhead(mtu)


def tbf_params(rate_bps: int, mtu: int = 1500, burst: int | None = None, delay_s: float | None = None,
               port: bool = False) -> dict:
    """Bucket and queue of the tbf that shapes one link end, a node's eth0 or (``port``) a bridge port (see the
    module docstring for the why)."""
    rate_Bps = rate_bps / 8.0
    frame = mtu + L2_HEADER
    if burst is None:
        burst = max(math.ceil(rate_Bps * BURST_SECONDS), MIN_BURST_FRAMES * frame)
    elif isinstance(burst, bool) or not isinstance(burst, int) or burst < frame:
        raise EmulationError(f"--burst must hold at least one frame (mtu + 14 = {frame} bytes), got {burst!r}")
    queue_s = (PORT_QUEUE_SECONDS if port else QUEUE_SECONDS) + 2 * (delay_s or 0.0)
    limit = burst + max(math.ceil(rate_Bps * queue_s), MIN_QUEUE_FRAMES * frame)
    return {"kind": "tbf", "rate_bps": rate_bps, "burst_bytes": burst, "burst_s": burst / rate_Bps,
            "limit_bytes": limit, "queue_s": (limit - burst) / rate_Bps,
            "args": f"tbf rate {rate_bps}bit burst {burst} limit {limit}"}


_netem: dict[str, bool] = {}


def netem_available() -> bool:
    """Whether the kernel has the netem qdisc: tried once per process on ``lo`` of a throwaway namespace."""
    if "ok" not in _netem:
        tools = require_tools()
        name = f"cs{os.getpid()}-{next(_names)}-netem"
        try:
            _run([tools["ip"], "netns", "add", name], "creating a namespace to look for netem")
            tried = _run([tools["tc"], "-n", name, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                         "tc netem", check=False)
            _netem["ok"] = tried.returncode == 0
        finally:
            _run([tools["ip"], "netns", "del", name], "removing the netem probe namespace", check=False)
    return _netem["ok"]


def require_netem() -> None:
    if not netem_available():
        raise EmulationError("--delay needs the netem queueing discipline (kernel module sch_netem), which this "
                             "kernel lacks ('tc qdisc add ... netem' fails); no delay-free run is started instead: "
                             "load it (modprobe sch_netem; on Ubuntu it is in linux-modules-extra) or leave out "
                             "--delay")

