"""The ranks' host allocator policy (runners/torchrun/allocator.py): set by the launcher, kept when the caller set
it, left out on request, recorded; and what it is for, measured in a real process: memory freed and allocated again
is not faulted in afresh under it, where glibc's fixed default threshold maps every large allocation anew."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from runners.torchrun import allocator, launcher

POLICY = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "68719476736"}


def test_the_policy_is_added_and_a_callers_own_setting_kept() -> None:
    assert allocator.POLICY == POLICY  # 32 MiB (glibc's own ceiling for its dynamic threshold), 64 GiB
    assert allocator.with_policy({"PATH": "/bin"}) == {"PATH": "/bin", **POLICY}
    mine = {"MALLOC_MMAP_THRESHOLD_": "65536"}
    assert allocator.with_policy(mine) == {**POLICY, **mine}
    assert allocator.with_policy({"COMMSCOPE_MALLOC_POLICY": " GLIBC "}) == {"COMMSCOPE_MALLOC_POLICY": " GLIBC "}
    assert allocator.recorded({"MALLOC_TRIM_THRESHOLD_": "1"}) == {"MALLOC_MMAP_THRESHOLD_": None,
                                                                    "MALLOC_TRIM_THRESHOLD_": "1"}


def test_start_torchrun_gives_the_ranks_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.torchrun import lifeline

    seen = {}
    monkeypatch.setattr(lifeline, "run", lambda cmd, env: seen.update(env) or 0)
    monkeypatch.delenv("COMMSCOPE_MALLOC_POLICY", raising=False)
    for name in POLICY:
        monkeypatch.delenv(name, raising=False)
    assert launcher.start_torchrun(["true"]) == 0
    assert {k: seen[k] for k in POLICY} == POLICY and seen[lifeline.LAUNCHER_VARIABLE] == str(os.getpid())
    seen.clear()
    assert launcher.start_torchrun(["true"], {"COMMSCOPE_MALLOC_POLICY": "glibc"}) == 0
    assert not any(k in seen for k in POLICY)


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
    env = {**{k: v for k, v in os.environ.items() if k not in POLICY}, **env, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD and glibc's malloc are Linux's")
def test_under_the_policy_freed_memory_is_reused_without_faults() -> None:
    # 10.25 MiB a step = 2,624 pages of 4 KiB: all of them faulted afresh when glibc maps every allocation from
    # 128 KiB (its default threshold, fixed once set), none once the policy's heap holds them
    assert _faults_per_step(allocator.POLICY) <= 16
    assert _faults_per_step({"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}) >= 2600
