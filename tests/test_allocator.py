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


def _huge_pages_always() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            return "[always]" in fh.read()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD and glibc's malloc are Linux's")
@pytest.mark.skipif(_huge_pages_always(), reason="transparent huge pages 'always': a fresh map faults 2 MiB at once")
def test_the_counter_counts_memory_faulted_in_afresh() -> None:
    # 10.25 MiB a step = 2,624 pages of 4 KiB: all faulted afresh when glibc maps every allocation from 128 KiB
    # (its default threshold, fixed once set), none once the heap keeps what was freed (threshold 32 MiB, no trim)
    assert _faults_per_step(MAPPED) >= 2600
    assert _faults_per_step(KEPT) <= 16


def test_a_run_whose_faults_cost_two_percent_of_its_step_is_warned() -> None:
    # flattened BSP in a fresh process under glibc's policy (diagnostics_malloc_faults, section 5): 6,458 pages a
    # step x 3.0 us = 19.4 ms of a 287 ms step, 6.8%: warned; ByteScheduler in validate's long-lived ranks under the
    # pinned settings (run16): 1,337 x 3.0 us = 4.0 ms of 477 ms, 0.84%: not
    line = allocator.fault_warning(6458.0, 0.287)
    assert line is not None and line.startswith("# warning: the training thread faulted 6458 pages a step")
    assert "at least 19.4 ms (7% of the step)" in line and "MALLOC_TRIM_THRESHOLD_=68719476736" in line
    assert allocator.fault_warning(1337.0, 0.477) is None
    assert allocator.fault_warning(None, 0.3) is None and allocator.fault_warning(1e6, 0.0) is None
    # the boundary: 2% of a 0.3 s step is 6 ms = 2,000 pages
    assert allocator.fault_warning(2000.0, 0.3) is None and allocator.fault_warning(2001.0, 0.3) is not None
