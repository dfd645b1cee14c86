"""How a benchmark times a collective, and what it adds to the time the library's kernels take.

A library model (NCCL's, :mod:`.libraries.nccl`) prices the device time of one call. What a benchmark prints is
that time only when its host runs ahead of the device, so that each call is queued before the previous one ends:
nccl-tests times ``-n`` calls launched back to back (``timing: back_to_back``), and so does ``all_reduce_bench.py``
by default since 2026-08 (it keeps the device busy for 2 ms and queues up to 10 calls behind that). Timed one
call at a time on an idle device, with events around ``dist.all_reduce`` (``timing: one_call_idle_device``; that
benchmark's ``--with-host-overhead``, and its only timing before 2026-08), every call also holds PyTorch's
per-call host overhead: the device is idle from the start event until the host has dispatched the kernel::

    t_measured = o_call + t_device          (one call on an idle device)
    t_measured = t_device                   (calls queued back to back)

o_call is "PyTorch's 20-30 us of host overhead per call" (stas00/ml-engineering,
network/benchmarks/README.md, section "How the calls are timed", commit 0cc3de50b2dd083c34d848a1dcb5bfe65fe3dace);
commscope takes the middle, 25 us. A check derived here: the two tables of one 8x H200 node shipped in
``runners/reference/published`` (one call per trial, NCCL 2.27.7; back to back, NCCL 2.30.7) differ by
17.8-21.6 us per call (median 19.7 us) from 32 KiB to 128 MiB, flat over three decades of size as an additive
host cost is, a little under the source's range (the two runs also differ in NCCL version).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .registry import Registry

#: PyTorch's host overhead per torch.distributed call, seconds (the source's 20-30 us, its middle)
PYTORCH_CALL_OVERHEAD_S = 25e-6
PYTORCH_CALL_OVERHEAD_SOURCE = ("stas00/ml-engineering network/benchmarks/README.md, 'How the calls are timed' "
                                "(commit 0cc3de50b2dd083c34d848a1dcb5bfe65fe3dace): PyTorch's 20-30 us of host "
                                "overhead per call; 25 us taken")


@dataclass(frozen=True)
class Harness:
    """One way of timing a collective: the host time per call it exposes on top of the device time."""

    name: str
    description: str
    exposed_host_s: float
    source: str

    def measured_time(self, device_s: Any) -> Any:
        """What this harness prints for a call whose kernels take ``device_s``: ``exposed_host_s + device_s``."""
        t = np.asarray(device_s, dtype=np.float64) + self.exposed_host_s
        return float(t) if t.ndim == 0 else t


HARNESSES: Registry[Harness] = Registry("benchmark timing")
HARNESSES.register(Harness(
    "back_to_back", "calls queued back to back, the host ahead of the device (nccl-tests; all_reduce_bench.py's "
    "default since 2026-08; commscope sweep)", 0.0,
    "NVIDIA/nccl-tests doc/PERFORMANCE.md: time is the average over -n iterations launched together"))
HARNESSES.register(Harness(
    "one_call_idle_device", "one call per trial from an idle device, events around the call (all_reduce_bench.py "
    "--with-host-overhead, and its only timing before 2026-08)", PYTORCH_CALL_OVERHEAD_S,
    PYTORCH_CALL_OVERHEAD_SOURCE))


def harness(name: str) -> Harness:
    """The registered benchmark timing ``name`` (:data:`HARNESSES`)."""
    return HARNESSES.get(name)
