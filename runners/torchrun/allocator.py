"""The host allocator's policy for the ranks commscope launches, and the page faults a rank's training thread takes.

**Why (measured here).** glibc's malloc returns memory to the kernel by its own history: a freed chunk at or
above the dynamic mmap threshold is unmapped, and the main heap is trimmed whenever its free top exceeds the
trim threshold (twice the mmap threshold, which itself rises with the largest mapped chunk freed so far, up to
32 MiB). Memory handed back is faulted in afresh, page by page, when it is used again. Whether a rank's backward
re-faults its gradients every step therefore depends on what the process allocated and freed before, not on the
technique's own work. 4 ranks on 2 cores, gpt_wide (22 MiB of gradients), the runner's own trainers, 4 nodes at
2.5 Gbit/s, minor faults of the training thread per step (``getrusage(RUSAGE_THREAD)``), in one process:

* with glibc's defaults: per-tensor BSP 6,112 in the first round and 0 in the second; ZeRO and DeAR 3,600-5,616
  in every round, all in backward (14-22 MiB of pages, every step);
* with the policy below: 0 in every phase of every technique.

At the host's measured fault cost (``host_buffers.json``, ``host_fault``: 0.75 ns/B with 4 ranks on 2 cores) those
pages cost 11-17 ms per step: the size of what the validation under-predicted ZeRO and DeAR by on gpt_wide on every
run (-9.3% and -7.6% median at 2.5 Gbit/s, -26 and -19 ms at 200 Mbit/s), while the compute probes, with another
allocation history, did not fault. With the mmap threshold left at glibc's default (128 KiB, fixed once any
threshold is set) every large allocation faults: backward 144-152 ms instead of 98-102 ms, 19,000 faults a step.

**The policy.** ``MALLOC_MMAP_THRESHOLD_`` = 32 MiB, the ceiling glibc's dynamic threshold climbs to by itself
(allocations from 32 MiB are still mapped afresh each time, as :mod:`costmodels.collectives.host_buffers` prices
gloo's large buffers), and ``MALLOC_TRIM_THRESHOLD_`` = 64 GiB, so the heap is never trimmed. Memory a rank has
freed is reused without faults, as CUDA's caching allocator reuses device memory: a rank's compute no longer
depends on the history of its process, and the probes time the compute the techniques run. A variable the
caller has set already is kept; ``COMMSCOPE_MALLOC_POLICY=glibc`` leaves glibc's own policy. Every record's run
info says which policy its ranks ran under (:func:`recorded`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

POLICY_VARIABLE = "COMMSCOPE_MALLOC_POLICY"
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 64 * 2**30
POLICY = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def with_policy(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the ranks' allocator policy added (variables already set are kept; none with
    ``COMMSCOPE_MALLOC_POLICY=glibc``)."""
    out = dict(env)
    if out.get(POLICY_VARIABLE, "").strip().lower() == "glibc":
        return out
    for name, value in POLICY.items():
        out.setdefault(name, value)
    return out


def recorded(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The allocator settings this process runs under, for a record's run info (None: glibc's own)."""
    env = os.environ if env is None else env
    return {name: env.get(name) for name in POLICY}


def thread_minor_faults() -> int | None:
    """Minor page faults the calling thread has taken so far (Linux's ``RUSAGE_THREAD``); None elsewhere."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    return int(resource.getrusage(who).ru_minflt)
