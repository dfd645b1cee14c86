"""What a collective library's own host buffers cost on this host: ``host_copy`` and ``host_fault`` (s per byte) of
:mod:`costmodels.collectives.host_buffers`, measured the way gloo's ranks pay them.

``ranks`` processes (one intra-op thread each, as the ranks run) start each measurement together at a barrier,
as a sweep's ranks enter a collective together, so the cores and the memory bus are shared as they are then:

* **copy**: ``dst.copy_(src)`` of ``nbytes`` into a buffer whose pages are resident (the copy of a shard, or of
  an all-gather's result): ``host_copy`` = its median time per byte;
* **fresh**: ``src.clone()`` of ``nbytes`` >= 32 MiB, which glibc maps afresh on every call (the clone of a
  reduce-scatter's input), and its release, which unmaps it: ``host_fault`` = their median time per byte less
  ``host_copy``, counted only where the
  clone's minor page faults show that the pages were mapped afresh (a host whose allocator keeps the memory gets
  0, and the record says so).

The result is a JSON object (:data:`SCHEMA`) that ``commscope fit --host-buffers`` and ``commscope validate`` pass
to the fit (:func:`runners.measure.fit.fit`'s ``host``), which then prices gloo's reduce-scatter and all-gather
with them rather than fold them into the link.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from costmodels._io import atomic_write_text, read_json
from costmodels.collectives.host_buffers import MMAP_THRESHOLD_MAX
from costmodels.errors import CommscopeError

SCHEMA = "commscope.host_buffers/1"
PAGE = 4096
FRESH_FAULTS = 0.5  # a clone whose minor faults cover at least this share of its pages was mapped afresh
TIMEOUT_S = 120.0


def _worker(rank: int, nbytes: int, repeats: int, barrier: Any, queue: Any) -> None:  # pragma: no cover - child
    try:
        _measure_rank(rank, nbytes, repeats, barrier, queue)
    except Exception as exc:  # told to the parent, which says it in one line (no traceback from a rank)
        barrier.abort()
        queue.put(("error", rank, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))


def _measure_rank(rank: int, nbytes: int, repeats: int, barrier: Any, queue: Any) -> None:  # pragma: no cover
    import torch

    torch.set_num_threads(1)
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # its pages resident, as a buffer in use is
    copies, clones, faults = [], [], []
    for _ in range(repeats + 1):  # the first of each is a warm-up, left out
        barrier.wait()
        t0 = time.perf_counter()
        dst.copy_(src)
        copies.append(time.perf_counter() - t0)
        barrier.wait()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        fresh = src.clone()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        del fresh  # returned to the system (munmap) as gloo's buffer is when its work is released
        clones.append(time.perf_counter() - t0)
    queue.put((rank, copies[1:], clones[1:], faults[1:]))


def measure(ranks: int, nbytes: int = 2 * MMAP_THRESHOLD_MAX, repeats: int = 5) -> dict[str, Any]:
    """``host_copy`` and ``host_fault`` of ``ranks`` processes copying ``nbytes`` together (module doc)."""
    for name, value, least in (("ranks", ranks, 1), ("repeats", repeats, 1), ("nbytes", nbytes, MMAP_THRESHOLD_MAX)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            why = " (32 MiB: below it glibc keeps the buffer the probe must map afresh)" if name == "nbytes" else ""
            raise CommscopeError(f"host buffer probe: {name} must be an integer >= {least}{why}, got {value!r}")
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(ranks), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, nbytes, repeats, barrier, queue), daemon=True)
             for r in range(ranks)]
    results: list[Any] = []
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + TIMEOUT_S
        while len(results) < ranks:
            try:
                got = queue.get(timeout=1.0)
            except queue_module.Empty:  # a rank that died or hung: one line, and no rank left behind
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    why = f"a rank exited with code {dead[0]}" if dead else f"not done within {TIMEOUT_S:.0f} s"
                    raise CommscopeError(f"host buffer probe: {why}") from None
                continue
            if got[0] == "error":
                raise CommscopeError(f"host buffer probe: rank {got[1]} failed ({got[2]})")
            results.append(got)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(5)
    copies = [t / nbytes for _, c, _, _ in results for t in c]
    clones = [t / nbytes for _, _, c, _ in results for t in c]
    faults = [f for _, _, _, fs in results for f in fs]
    pages = nbytes / PAGE
    fault_share = statistics.median(faults) / pages
    copy = statistics.median(copies)
    mapped = fault_share >= FRESH_FAULTS
    fault = max(statistics.median(clones) - copy, 0.0) if mapped else 0.0
    return {"schema": SCHEMA, "ranks": ranks, "bytes": nbytes, "repeats": repeats, "cores": os.cpu_count(),
            "host_copy": copy, "host_fault": fault, "fresh_pages_faulted": fault_share,
            "copy_s_per_byte": sorted(copies), "clone_s_per_byte": sorted(clones),
            "note": ("the clone's pages were mapped afresh" if mapped else
                     f"only {fault_share:.0%} of the clone's pages faulted: this host's allocator keeps the memory, "
                     "so host_fault is 0"),
            "load_average": list(os.getloadavg()), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "method": f"runners.measure.host_buffers: {ranks} process(es) at once, one thread each, median of "
                      f"{repeats} x {ranks} copies and clones of {nbytes} B"}


def save(result: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a probe result atomically."""
    import json

    return atomic_write_text(path, json.dumps(result, indent=1) + "\n")


def load(path: str | os.PathLike[str]) -> tuple[float, float]:
    """(host_copy, host_fault) of a probe result file; one clear error when it is not one."""
    data = read_json(path, "host buffer file")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CommscopeError(f"{path}: not a host buffer file (schema {SCHEMA!r}; write one with "
                             "'commscope bench host-buffers --out FILE')")
    pair = (data.get("host_copy"), data.get("host_fault"))
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e-6 for v in pair):
        raise CommscopeError(f"{path}: host_copy and host_fault must be numbers of s/byte in [0, 1e-6), got {pair}")
    return float(pair[0]), float(pair[1])  # type: ignore[arg-type]
