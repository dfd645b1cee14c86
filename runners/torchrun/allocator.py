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

**Where it matters most: a fresh process.** ``commscope train`` starts one per run. 4 ranks at 200 Mbit/s,
resnet_small, three alternations: flattened BSP faulted 5,801-7,014 pages a step under glibc's policy and took
245-287 ms, 123-152 pages and 220-238 ms with the two settings above (validate's long-lived ranks measured
211-263 ms there over thirteen runs, median 219); ByteScheduler 8,844-9,380 against 1,708-2,141 pages, 415
against 397 ms (mean over ranks, medians). ``commscope train`` therefore says so when a run's faults cost at
least 2% of its step (:func:`fault_warning`), and how to keep them out: the launchers pass the caller's
environment to the ranks.
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


# The wall time one page fault costs a rank, at least: the host_buffers probe's fault cost on this project's host
# (0.75 ns/B with 4 ranks on 2 cores, bench/results/validation_4ranks_run15/host_buffers.json) x 4 KiB = 3.1 us.
# A floor: flattened BSP in fresh processes (diagnostics_malloc_faults, section 5) lost about 7 us a page.
FAULT_S_PER_PAGE = 3.0e-6
WARN_SHARE = 0.02  # warn when the faults' floor exceeds this share of the step


def fault_warning(faults_per_step: float | None, step_s: float) -> str | None:
    """One line when a run's training thread faulted enough pages per step to take at least ``WARN_SHARE`` of its
    step time at :data:`FAULT_S_PER_PAGE` (None otherwise): what the measurement holds besides the technique."""
    if faults_per_step is None or not step_s > 0 or faults_per_step * FAULT_S_PER_PAGE <= WARN_SHARE * step_s:
        return None
    cost = faults_per_step * FAULT_S_PER_PAGE
    return (f"# warning: the training thread faulted {faults_per_step:.0f} pages a step, at least {cost * 1e3:.1f} "
            f"ms ({cost / step_s:.0%} of the step): memory glibc handed back to the kernel and faulted in again, "
            "which the cost models do not price; MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=68719476736 "
            "in the environment keep it (runners/torchrun/allocator.py)")
