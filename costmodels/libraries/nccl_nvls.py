"""NCCL's NVLS (NVLink SHARP) graph and kernels, as they set the bandwidth and the pipeline of an NVLS collective
on one node: pure functions of :mod:`.nccl_constants` (NCCL 2.21.5, and the NVLS bandwidth of 2.28 and later)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import nccl_constants as tables


def nvls_channel_speed(ppn: Any, link_gbps: Any, cc: int) -> np.ndarray:
    """The per-channel speed (GB/s) of NCCL's NVLS graph on one node of ``ppn`` GPUs: the fastest of the speed
    array with ``(ppn + 1) * speed <= link_gbps``, a GPU's NVLink bandwidth to the switch (the slowest speed
    when none fits), from ``src/graph/search.cc`` (:data:`.nccl_constants.SPEEDS_INTRA_SM90`). Its bus
    bandwidth is ``ppn * speed``: 8 x H100 (18 x 20.6 = 370.8 GB/s) give 370.8 / 9 = 41.2 -> 40 GB/s, 320 in
    all, not the 370.8 of the links."""
    speeds = np.asarray(tables.SPEEDS_INTRA_SM90 if cc >= 90 else tables.SPEEDS_INTRA)
    per_path = np.asarray(link_gbps, dtype=np.float64) / (np.asarray(ppn, dtype=np.float64) + 1.0)
    fits = speeds <= per_path[..., None] * (1 + 1e-12)  # speeds fall: the first that fits is the fastest
    return np.where(fits.any(axis=-1), speeds[np.argmax(fits, axis=-1)], speeds[-1])


def nvls_chunk(n: Any, ops: Any) -> np.ndarray:
    """NCCL's NVLS chunk (bytes) for a buffer of ``n`` bytes over ``ops`` = channels x heads concurrent operations:
    128 KiB, halved to 64, 32 and 16 KiB below 64, 8 and 2 x ops x chunk in turn (enqueue.cc 1742-1750; e.g.
    8 x H200, ops 128: 64 KiB below 1 GiB, 32 KiB below 64 MiB, 16 KiB below 8 MiB)."""
    chunk = np.full(np.broadcast_shapes(np.shape(n), np.shape(ops)), float(tables.NVLS_CHUNK_BYTES))
    for times, smaller in tables.NVLS_CHUNK_HALVING:
        chunk = np.where((n < times * ops * chunk) & (chunk > smaller), float(smaller), chunk)
    return chunk


def nvls_pipeline_fill(primitive: str, n: Any, ppn: Any, inv_bw: Any) -> np.ndarray:
    """Seconds an NVLS collective of ``n`` bytes spends filling and draining its pipeline, beyond n / algBw.

    Derived here from NCCL's kernels (:data:`.nccl_constants.NVLS_PIPELINE_STAGES`): each channel moves its
    share of n in steps of nHeads x chunk through S stages (allreduce 3: scatter, NVLS reduce, gather), each
    stage a step behind the one before. With the stages balanced (NCCL sizes each stage's warps so that none
    starves the reduction), a step takes tau = ops x chunk / algBw at the pipeline's rate, and N steps take
    (N + S - 1) tau: the fill is (S - 1) tau, one step of less than nHeads x chunk when the channel holds less.
    NCCL's tuning model leaves it out (it prices lat + n / algBw), so it moves the price, not the choice.
    8 x H200 (ppn 8, ops 128, the price's algBw 272 GB/s: :func:`nvls_bandwidth`), allreduce of 8 MiB: chunk
    32 KiB, steps of 4 MiB, fill 2 x 4 MiB / 272 GB/s = 30.8 us; of 1 GiB: 2 x 16 MiB / 272 GB/s = 123.4 us."""
    ops = tables.NVLS_CHANNELS * np.asarray(ppn, dtype=np.float64)
    step = np.minimum(n, ops * nvls_chunk(n, ops))
    return (tables.NVLS_PIPELINE_STAGES[primitive] - 1) * step * inv_bw


def nvls_bandwidth(primitive: str, ppn: Any, speed: Any, cc: int) -> np.ndarray:
    """NVLS algorithm bandwidth (GB/s) by NCCL 2.28's model (:data:`.nccl_constants.NVLS_EFFICIENCY_V2_28`):
    ppn graph channels of ``speed`` GB/s, each at speed x efficiency x (ppn - 1) / ppn, x 2 for allreduce, whose
    algBw is busBw x ppn / (2 (ppn - 1)); x (ppn - 1) / ppn for allgather and reduce-scatter, whose algBw is busBw.
    8 x H200 (speed 40, Hopper 0.85) allreduce: 8 x 40 x 0.85 x 7/8 x 2 = 476 bus, x 8/14 = 272.0 GB/s (2.21's
    5/6 x 320 = 266.7); allgather: 8 x 40 x 0.85 x 7/8 x 7/8 = 208.25 GB/s."""
    ppn = np.asarray(ppn, dtype=np.float64)
    efficiency = tables.NVLS_EFFICIENCY_V2_28[100 if cc >= 100 else 90]
    if primitive == "allreduce":  # ppn x (speed x eff x (ppn - 1) / ppn x 2) x ppn / (2 (ppn - 1))
        return ppn * np.asarray(speed, dtype=np.float64) * efficiency
    return np.asarray(speed, dtype=np.float64) * efficiency * (ppn - 1) ** 2 / ppn
