"""The host's ceiling for one emulated link, and the TCP throughput probe that measures it.

The machine itself limits what one emulated link can carry: once a day (or with
``reprobe``) one unshaped TCP flow between two fresh namespaces is timed for about 0.6 s and the
result is cached in ``$XDG_CACHE_HOME/commscope/host_ceiling.json`` (default ``~/.cache``), in wire
bits per second like ``rate``. A rate above 80 % of it is warned about, and the spec says so.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .namespaces import EmulatedCluster, _kill_group
from .shaping import wire_overhead
from .system import EmulationError, require_tools

CEILING_WARN_FRACTION = 0.8
CEILING_MAX_AGE_S = 86400.0
CEILING_PROBE_S = 0.6
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


def tcp_throughput(cluster: EmulatedCluster, sender: int = 1, receiver: int = 0, *, nbytes: int = 0,
                   seconds: float = 0.0, skip: int = 0, port: int = 5201, timeout: float = 120) -> dict[str, Any]:
    """One TCP flow from ``sender`` to ``receiver`` (``nbytes`` bytes, or for ``seconds``), timed at the
    receiver from the moment it has ``skip`` bytes (leave out slow start and a full token bucket) to the
    end: ``{"bytes", "seconds", "payload_bps"}`` counted after that moment."""
    if nbytes <= 0 and seconds <= 0:
        raise EmulationError("tcp_throughput needs nbytes or seconds")
    rx = cluster.popen(receiver, [sys.executable, "-c", _RECEIVER, str(port), str(skip)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rx.stdout is not None
        if rx.stdout.readline().strip() != "listening":
            raise EmulationError(f"throughput receiver in node {receiver} did not start: {rx.communicate()[1]}")
        tx = cluster.exec(sender, [sys.executable, "-c", _SENDER, cluster.addresses[receiver], str(port),
                                   str(int(nbytes)), str(seconds)], timeout=timeout)
        out, err = rx.communicate(timeout=timeout)
    finally:
        if rx.poll() is None:
            _kill_group(rx, signal.SIGKILL)
            rx.communicate()
    if tx.returncode != 0 or rx.returncode != 0:
        raise EmulationError(f"throughput probe failed: {' '.join((tx.stderr + err).split())}")
    return json.loads(out.strip().splitlines()[-1])


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
