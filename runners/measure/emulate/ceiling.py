"""The host's ceiling for one emulated link, the start-up rate check, and the TCP throughput probe behind both.

The machine itself limits what one emulated link can carry: once a day (or with
``reprobe``) one unshaped TCP flow between two fresh namespaces is timed for about 0.6 s and the
result is cached in ``$XDG_CACHE_HOME/commscope/host_ceiling.json`` (default ``~/.cache``), in wire
bits per second like ``rate``. A rate above 80 % of it is warned about, and the spec says so.

The ceiling says what the host could do once; :func:`check_rate` says what the shaped link does now.
Every cluster of two or more nodes times, at start-up, both directions of the link between nodes 0 and
1 at once for :data:`RATE_PROBE_S` (after its buckets have emptied): ``achieved_rate_fraction`` in the
spec is the slower direction's payload rate over the one the rate carries (``rate / wire_overhead``).
A short attempt is tried once more (a busy moment of a shared host is not the link; every attempt is
recorded). Below :data:`RATE_CHECK_FRACTION` (or above :data:`RATE_CHECK_MAX_FRACTION`) the run warns,
and runs: the records carry the fraction, so a measurement on a busy host is never passed off as the
link's.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .namespaces import EmulatedCluster, _kill_group
from .shaping import wire_overhead
from .system import EmulationError, require_tools

CEILING_WARN_FRACTION = 0.8
CEILING_MAX_AGE_S = 86400.0
CEILING_PROBE_S = 0.6
RATE_PROBE_S = 0.5  # the start-up rate check: each direction timed this long
RATE_CHECK_FRACTION = 0.95  # below this fraction of the configured rate a link falls short ...
RATE_CHECK_MAX_FRACTION = 1.05  # ... and above this one its shaping does not hold
RATE_CHECK_ATTEMPTS = 2  # a short attempt is tried once more (a busy moment of the host is not the link)
CACHE_SCHEMA = "commscope.host_ceiling/1"


_RECEIVER = r"""
import array, fcntl, json, socket, sys, termios, time
port, skip = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port))
srv.listen(1)
print("listening", flush=True)
conn, _ = srv.accept()
buf = bytearray(1 << 22)
got, t0, start = 0, None, 0
while True:
    k = conn.recv_into(buf)
    if not k:
        break
    got += k
    if t0 is None and got >= max(skip, 1):
        t0, queued = time.perf_counter(), array.array("i", [0])
        fcntl.ioctl(conn.fileno(), termios.FIONREAD, queued)  # arrived before t0 but not read yet
        start = got + queued[0]
t1 = time.perf_counter()
conn.close()
n = got - start
print(json.dumps({"bytes": n, "seconds": t1 - t0, "payload_bps": 8 * n / (t1 - t0) if t1 > t0 else None}))
"""

_SENDER = r"""
import socket, sys, time
host, port, nbytes, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for attempt in range(100):
    try:
        conn = socket.create_connection((host, port), timeout=10)
        break
    except OSError:
        time.sleep(0.02)
else:
    raise SystemExit("cannot connect to %s:%d" % (host, port))
chunk = memoryview(bytearray(1 << 20))
sent, end = 0, time.perf_counter() + seconds
while (nbytes <= 0 or sent < nbytes) and (seconds <= 0 or time.perf_counter() < end):
    k = len(chunk) if nbytes <= 0 else min(len(chunk), nbytes - sent)
    conn.sendall(chunk[:k])
    sent += k
conn.shutdown(socket.SHUT_WR)
conn.settimeout(60)
conn.recv(1)
"""


def tcp_flows(cluster: EmulatedCluster, flows: Sequence[tuple[int, int]], *, nbytes: int = 0, seconds: float = 0.0,
              skip: int = 0, port: int = 5201, timeout: float = 120) -> list[dict[str, Any]]:
    """TCP flows ``(sender, receiver)`` run at once (``nbytes`` bytes each, or for ``seconds``), each timed at
    its receiver from the moment it has ``skip`` bytes (leave out slow start and a full token bucket) to the
    end: one ``{"bytes", "seconds", "payload_bps"}`` per flow, counted after that moment."""
    if nbytes <= 0 and seconds <= 0:
        raise EmulationError("tcp_throughput needs nbytes or seconds")
    receivers: list[subprocess.Popen] = []
    try:
        for k, (_, receiver) in enumerate(flows):
            rx = cluster.popen(receiver, [sys.executable, "-c", _RECEIVER, str(port + k), str(skip)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            receivers.append(rx)
            assert rx.stdout is not None
            if rx.stdout.readline().strip() != "listening":
                raise EmulationError(f"throughput receiver in node {receiver} did not start: {rx.communicate()[1]}")
        senders = [cluster.popen(sender, [sys.executable, "-c", _SENDER, cluster.addresses[receiver], str(port + k),
                                          str(int(nbytes)), str(seconds)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for k, (sender, receiver) in enumerate(flows)]
        done = [(tx.communicate(timeout=timeout), rx.communicate(timeout=timeout))
                for tx, rx in zip(senders, receivers, strict=True)]
    finally:
        for p in receivers:
            if p.poll() is None:
                _kill_group(p, signal.SIGKILL)
                p.communicate()
    results = []
    for tx, rx, ((_, tx_err), (out, rx_err)) in zip(senders, receivers, done, strict=True):
        if tx.returncode != 0 or rx.returncode != 0:
            raise EmulationError(f"throughput probe failed: {' '.join((tx_err + rx_err).split())}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def tcp_throughput(cluster: EmulatedCluster, sender: int = 1, receiver: int = 0, *, nbytes: int = 0,
                   seconds: float = 0.0, skip: int = 0, port: int = 5201, timeout: float = 120) -> dict[str, Any]:
    """One TCP flow from ``sender`` to ``receiver``: :func:`tcp_flows` of one flow."""
    return tcp_flows(cluster, [(sender, receiver)], nbytes=nbytes, seconds=seconds, skip=skip, port=port,
                     timeout=timeout)[0]


def check_rate(cluster: EmulatedCluster, seconds: float = RATE_PROBE_S, port: int = 5301,
               attempts: int = RATE_CHECK_ATTEMPTS) -> dict[str, Any]:
    """The rate one shaped link achieves, measured at start-up: node 1 -> node 0 and node 0 -> node 1 at once
    (both directions of one link, as a collective uses it), each flow timed for ``seconds`` after the first
    two buckets and 20 ms of the rate (plus ten round trips of ``delay``: slow start). ``achieved_rate_fraction``:
    the slower flow's payload rate over the payload rate the configured rate carries (rate / wire_overhead);
    below :data:`RATE_CHECK_FRACTION` the link falls short. A short (or too fast) attempt is tried again, up to
    ``attempts`` in all, so that a busy moment of the host is not taken for the link: the best attempt is the
    result, and ``attempts`` keeps every one."""
    spec = cluster.spec
    rate_bps, mtu = spec["rate_bps"], spec["mtu"]
    expected = rate_bps / wire_overhead(mtu)
    lead_s = 0.02 + 20 * (spec.get("delay_s") or 0.0)
    skip = 2 * spec["qdisc"]["tbf"]["burst_bytes"] + round(expected / 8 * lead_s)
    lead_s = skip * 8 / expected
    tries: list[dict[str, Any]] = []
    for k in range(max(1, attempts)):
        got = tcp_flows(cluster, [(1, 0), (0, 1)], seconds=lead_s + seconds, skip=skip, port=port + 10 * k,
                        timeout=60 + 10 * (lead_s + seconds))
        fractions = [g["payload_bps"] / expected if g["payload_bps"] else 0.0 for g in got]
        tries.append({"achieved_rate_fraction": min(fractions), "fractions": fractions,
                      "payload_bps": [g["payload_bps"] for g in got]})
        if RATE_CHECK_FRACTION <= min(fractions) <= RATE_CHECK_MAX_FRACTION:
            break
    best = max(tries, key=lambda t: t["achieved_rate_fraction"] if t["achieved_rate_fraction"] <=
               RATE_CHECK_MAX_FRACTION else -t["achieved_rate_fraction"])
    achieved = best["achieved_rate_fraction"]
    return {**best, "expected_payload_bps": expected, "attempts": tries,
            "probe": f"TCP node 1 -> node 0 and node 0 -> node 1 at once, timed {seconds:g} s at each receiver "
                     f"after its first {skip} bytes; best of up to {attempts} attempts",
            "threshold": RATE_CHECK_FRACTION, "short": achieved < RATE_CHECK_FRACTION}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "commscope"


def _measure_ceiling(mtu: int, tools: Mapping[str, str]) -> dict[str, Any]:
    """One unshaped TCP flow between two fresh namespaces (bridge in between) for CEILING_PROBE_S."""
    with EmulatedCluster(2, 1, None, tools, mtu=mtu) as probe:
        probe._build(None, None)
        got = tcp_throughput(probe, 1, 0, seconds=CEILING_PROBE_S, port=5201)
    payload_bps = float(got["payload_bps"])
    return {"bps": payload_bps * wire_overhead(mtu), "payload_bps": payload_bps, "bytes": got["bytes"],
            "seconds": got["seconds"], "mtu": mtu}


def host_ceiling(mtu: int = 1500, *, reprobe: bool = False, tools: Mapping[str, str] | None = None,
                 max_age_s: float = CEILING_MAX_AGE_S) -> dict[str, Any]:
    """The host's ceiling for one emulated link at ``mtu``, in wire bits/s (``bps``): cached for a day."""
    path = cache_dir() / "host_ceiling.json"
    try:
        cache = json.loads(path.read_text())
        entries = cache["entries"] if cache.get("schema") == CACHE_SCHEMA else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        entries = {}
    key = f"mtu={mtu}"
    entry = entries.get(key) if isinstance(entries, dict) else None
    fresh = (isinstance(entry, dict) and isinstance(entry.get("unix"), (int, float))
             and isinstance(entry.get("bps"), (int, float)) and 0 <= time.time() - entry["unix"] < max_age_s
             and entry.get("kernel") == platform.release())
    if fresh and not reprobe:
        return {**entry, "cached": True}
    entry = _measure_ceiling(mtu, tools or require_tools())
    now = time.time()
    entry.update({"unix": now, "measured": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "kernel": platform.release()})
    entries = dict(entries) if isinstance(entries, dict) else {}
    entries[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"schema": CACHE_SCHEMA, "entries": entries}, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        print(f"commscope: warning: cannot cache the host ceiling in {path}: {exc}", file=sys.stderr)
    return {**entry, "cached": False}
