"""The host allocator settings a rank runs under, and the page faults its training thread takes.

**Why they are recorded (measured here).** glibc's malloc hands memory back to the kernel by its own history: a
freed chunk at or above the dynamic mmap threshold is unmapped, and the main heap is trimmed whenever its free top
exceeds the trim threshold (twice the mmap threshold, which rises with the largest mapped chunk freed so far, up to
32 MiB). Memory handed back is faulted in afresh, page by page, when it is used again, at about 3 us a page with
4 ranks on 2 cores (``host_buffers.json``'s ``host_fault``, 0.75 ns/B). In one long-lived process of 4 ranks at
2.5 Gbit/s, gpt_wide's 22 MiB of gradients, the runner's ZeRO and DeAR re-faulted 3,600-5,616 pages a step in
backward while per-tensor BSP, after its first round, faulted none (``bench/results/diagnostics_malloc_faults``).

**Tested and not kept: pinning glibc's policy for the ranks** (``MALLOC_MMAP_THRESHOLD_`` = 32 MiB,
``MALLOC_TRIM_THRESHOLD_`` = 64 GiB). It stopped every fault in that process, but in a validation run under it
(``bench/results/validation_4ranks_run16``) ZeRO, DeAR and ByteScheduler still faulted 250-1,450 pages a step, from
something the two settings do not govern, and the rule written before the run asked for fewer than 200 in every
cell. The launchers leave glibc's own policy; every record's run info says which one its ranks ran under
(:func:`recorded`) and every iteration record carries the training thread's faults per step
(:func:`thread_minor_faults`, ``minor_faults_per_step``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def recorded(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """glibc's malloc settings this process runs under, for a record's run info (None: glibc's own)."""
    env = os.environ if env is None else env
    return {name: env.get(name) for name in SETTINGS}


def thread_minor_faults() -> int | None:
    """Minor page faults the calling thread has taken so far (Linux's ``RUSAGE_THREAD``); None elsewhere."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", None)
    if who is None:
        return None
    return int(resource.getrusage(who).ru_minflt)
