"""Iteration schedules: the framework and :func:`simulate` (``core``), shared building blocks (``blocks``),
one module per family (``sequential``, ``overlap``, ``sharded``, each registering its schedules on import),
and the vectorized :func:`sweep` over many configurations (``vectorized``).
"""

from __future__ import annotations

from ..messages import WIRE, Comm, Wire
from .blocks import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    DECOUPLED,
    decoupled,
    greedy_buckets,
    serial_ends,
)
from .core import (
    COMPRESSIBLE,
    SCHEDULES,
    B,
    C,
    Configurations,
    F,
    IterationResult,
    Schedule,
    compressed_profile,
    schedule,
    schedules,
    simulate,
)

# The families register their schedules when imported, in this order (the order of ``schedules()``).
# isort: split
from .sequential import mgwfbp_groups  # bsp, wfbp, fusion, mgwfbp, ps, local_sgd

# isort: split
from .overlap import ITERATIONS, CommPlan, best_dear_buffer, dear_groups  # bytescheduler, dear

# isort: split
from . import sharded  # noqa: F401  (zero, fsdp)

# isort: split
from .vectorized import CHUNK, SweepResult, sweep

__all__ = [
    "CHUNK",
    "COMPRESSIBLE",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "DECOUPLED",
    "ITERATIONS",
    "SCHEDULES",
    "WIRE",
    "B",
    "C",
    "Comm",
    "CommPlan",
    "Configurations",
    "F",
    "IterationResult",
    "Schedule",
    "SweepResult",
    "Wire",
    "best_dear_buffer",
    "compressed_profile",
    "dear_groups",
    "decoupled",
    "greedy_buckets",
    "mgwfbp_groups",
    "schedule",
    "schedules",
    "serial_ends",
    "simulate",
    "sweep",
]
