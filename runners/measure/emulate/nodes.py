"""Running commands on the nodes of an emulated cluster: their output forwarded line by line with a prefix,
and their exit codes supervised (the first failure in time decides).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO


def forward(stream: IO[bytes], out: IO[str], prefix: str, lock: threading.Lock) -> threading.Thread:
    """A daemon thread copying ``stream`` line by line to ``out``, each line prefixed."""

    def pump() -> None:
        broken = False  # once ``out`` fails (a closed pipe), keep draining so the node never blocks on a write
        with contextlib.suppress(ValueError, OSError):
            for raw in iter(stream.readline, b""):
                if broken:
                    continue
                line = raw.decode(errors="replace")
                try:
                    with lock:
                        out.write(prefix + line + ("" if line.endswith("\n") else "\n"))
                        out.flush()
                except (OSError, ValueError):
                    broken = True

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def supervise(procs: Sequence[subprocess.Popen], grace_s: float = 5.0,
              on_failure: Callable[[int, int], None] | None = None) -> int:
    """Wait for the node commands; exit code = the first non-zero one in time (killed by signal S: 128 + S),
    or 0. After a failure the others get ``grace_s`` seconds to finish before the caller's teardown."""
    pending = set(range(len(procs)))
    first = 0
    deadline = math.inf
    while pending and time.monotonic() < deadline:
        for i in sorted(pending):
            rc = procs[i].poll()
            if rc is None:
                continue
            pending.discard(i)
            code = rc if rc >= 0 else 128 - rc
            if code and not first:
                first = code
                deadline = time.monotonic() + grace_s
                if on_failure is not None:
                    on_failure(i, code)
        if pending:
            time.sleep(0.02)
    return first
