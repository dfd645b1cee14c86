"""The allocator settings and page-fault counter of runners/torchrun/allocator.py: the settings are recorded as the
process has them, and the counter counts the pages a thread faults in: in a real process, memory freed and allocated
again faults afresh when glibc maps every allocation from 128 KiB, and not when its heap keeps what was freed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from runners.torchrun import allocator

KEPT = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "68719476736"}
MAPPED = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def test_the_settings_are_recorded_as_the_process_has_them() -> None:
    assert allocator.recorded({"MALLOC_TRIM_THRESHOLD_": "1", "PATH": "/bin"}) == {"MALLOC_MMAP_THRESHOLD_": None,
                                                                                   "MALLOC_TRIM_THRESHOLD_": "1"}
    from runners import results

    assert results.run_info("gloo", 1, 1)["malloc"] == allocator.recorded()


_PROGRAM = textwrap.dedent("""
    import torch
    from runners.torchrun.allocator import thread_minor_faults
    keep = []
    counts = []
    for k in range(6):  # gradients of several sizes, freed and allocated again, as a training step does
        before = thread_minor_faults()
        grads = [torch.empty(n).fill_(1.0) for n in (2**21, 2**18, 2**18, 2**16)]  # 8 MiB, 1, 1 and 0.25 MiB
        keep.append(torch.empty(2**10))
        del grads
        counts.append(thread_minor_faults() - before)
    print(counts[-1])
""")


def _faults_per_step(env: dict[str, str]) -> int:
    env = {**{k: v for k, v in os.environ.items() if k not in KEPT}, **env, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD and glibc's malloc are Linux's")
def test_the_counter_counts_memory_faulted_in_afresh() -> None:
    # 10.25 MiB a step = 2,624 pages of 4 KiB: all faulted afresh when glibc maps every allocation from 128 KiB
    # (its default threshold, fixed once set), none once the heap keeps what was freed (threshold 32 MiB, no trim)
    assert _faults_per_step(MAPPED) >= 2600
    assert _faults_per_step(KEPT) <= 16
