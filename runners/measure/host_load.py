"""Where the host's CPUs went while a measurement ran: its own processes, interrupts and softirq (mostly the
emulated links), and other work on the machine.

Ranks that share a few cores measure compute and communication under whatever else runs there; other work
that comes and goes between the profile and the training runs moves every prediction (measured: a helper
job at nice 19, in its own autogroup, took 40% of two cores and slowed a profile 1.7x). So every run says how
much of the CPUs other work took, and a share above :data:`DISTURBED` marks it disturbed.

Linux: /proc/stat for the host, ``getrusage`` of the measuring process and its children (children that have
been waited for, which is every job once it ends) for the measurement's own processes.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

DISTURBED = 0.05  # other work above this share of all CPUs' time marks a run disturbed


def cpu_seconds() -> dict[str, float]:
    """CPU seconds of the whole host (busy, and interrupts + softirq of it, from /proc/stat), of this process and
    its waited-for children (the measurement: a driver's own bookkeeping is part of it), and a monotonic wall
    clock."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    own = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return {"busy": (user + nice + system + irq + softirq + steal) / tick, "softirq": (irq + softirq) / tick,
            "ours": sum(u.ru_utime + u.ru_stime for u in own), "wall": time.monotonic()}


def cpu_share(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Fractions of all CPUs' time between two :func:`cpu_seconds` readings: this run's processes
    (``this_run``), interrupts and softirq, and everything else (``other_work``)."""
    cpus = os.cpu_count() or 1
    wall = max((after["wall"] - before["wall"]) * cpus, 1e-9)
    d = {k: after[k] - before[k] for k in ("busy", "softirq", "ours")}
    return {"this_run": d["ours"] / wall, "softirq": d["softirq"] / wall,
            "other_work": max(0.0, d["busy"] - d["softirq"] - d["ours"]) / wall, "cpus": cpus,
            "wall_s": after["wall"] - before["wall"]}


def disturbed(share: dict[str, float], limit: float = DISTURBED) -> bool:
    """Whether other work took more than ``limit`` of the CPUs."""
    return share["other_work"] > limit
