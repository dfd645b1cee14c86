"""Iteration schedules: the framework and :func:`simulate` (``core``), shared building blocks (``blocks``),
one module per family (``sequential``, ``overlap``, ``sharded``, ``decentralized``, each registering its
schedules on import), and the vectorized :func:`sweep` over many configurations (``vectorized``).
Interference, host overhead and the optimizer step: the piecewise-rate engine (``engine``) and each schedule
as a task graph on it (``terms``, ``terms_overlap``, ``terms_bytescheduler``, and ``decentralized``'s own).
"""

from __future__ import annotations

from ..messages import WIRE, Comm, Wire
from .blocks import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    DECOUPLED,
    bounded_buckets,
    chain_prices,
    decoupled,
    greedy_buckets,
    partitions,
    serial_ends,
)
from .core import (
    COMPRESSED,
    COMPRESSIBLE,
    SCHEDULES,
    B,
    C,
    Compressed,
    Configurations,
    F,
    IterationResult,
    Schedule,
    compress,
    compressed_profile,
    schedule,
    schedules,
    simulate,
)

# The families register their schedules when imported, in this order (the order of ``schedules()``).
# isort: split
from .sequential import BYTEPS_PARTITION_BYTES, mgwfbp_groups  # bsp, wfbp, fusion, mgwfbp, ps, local_sgd

# isort: split
from .overlap import ITERATIONS, CommPlan, best_dear_buffer, dear_groups  # bytescheduler, dear

# isort: split
from .sharded import DEEPSPEED_BUCKET_ELEMENTS, zero_buckets  # zero, fsdp

# isort: split
from . import decentralized  # noqa: F401  (dpsgd)

# isort: split
from . import terms, terms_bytescheduler, terms_overlap  # noqa: F401  (register each schedule with interference, overhead, optimizer)

# isort: split
from .vectorized import CHUNK, SweepResult, sweep

__all__ = [
    "BYTEPS_PARTITION_BYTES",
    "CHUNK",
    "COMPRESSED",
    "COMPRESSIBLE",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "DECOUPLED",
    "DEEPSPEED_BUCKET_ELEMENTS",
    "ITERATIONS",
    "SCHEDULES",
    "WIRE",
    "B",
    "C",
    "Comm",
    "CommPlan",
    "Compressed",
    "Configurations",
    "F",
    "IterationResult",
    "Schedule",
    "SweepResult",
    "Wire",
    "best_dear_buffer",
    "bounded_buckets",
    "chain_prices",
    "compress",
    "compressed_profile",
    "dear_groups",
    "decoupled",
    "greedy_buckets",
    "mgwfbp_groups",
    "partitions",
    "schedule",
    "schedules",
    "serial_ends",
    "simulate",
    "sweep",
    "zero_buckets",
]
