"""The exact techniques: data-parallel SGD whose result equals single-process SGD on the concatenated batch.

Registered under the names of their schedules (``cm.schedules()``), each with ``exact=True``,
``schedule`` = its name and the ``sgd`` convergence bound. What each runs, and what its
communication overlaps:

- ``bsp``: a blocking all-reduce per gradient after backward; overlaps nothing.
- ``wfbp``: an asynchronous all-reduce per tensor from its gradient hook; overlaps the rest of backward.
- ``fusion``: PyTorch DDP (``bucket_cap_mb``); bucket all-reduces overlap the rest of backward.
- ``mgwfbp``: MG-WFBP's merged buckets, an asynchronous all-reduce per bucket; the rest of backward.
- ``bytescheduler``: partitions by priority within a credit, from a communication thread; the rest
  of backward and the next step's forward (each layer is updated right before its next forward).
- ``dear``: reduce-scatter of fused groups in backward (overlapping it), all-gathers awaited in the
  next step's forward pre-hooks (overlapping the next forward).
- ``zero``: bucketed reduce-scatter in backward (overlapping it), shard update, then an exposed
  all-gather of the parameters.
- ``fsdp``: FullyShardedDataParallel, full shard; FSDP's own forward and backward prefetching.

The trainers live in :mod:`.exact_allreduce`, :mod:`.exact_sharded` and :mod:`.exact_bytescheduler`
(imported when a trainer is built, so that listing techniques needs no torch). Every trainer has
``finish()`` (complete communication the last step left pending: bytescheduler and dear overlap it
with the next step), ``close()`` (finish and remove hooks) and ``full_parameters()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from costmodels.schedules import DDP_BUCKET_BYTES

from .base import TECHNIQUES, Technique, Trainer


def _lazy(module: str, cls: str) -> Callable[..., Trainer]:
    def factory(model: Any, lr: float, group: Any = None, **options: Any) -> Trainer:
        return getattr(importlib.import_module(f"{__package__}.{module}"), cls)(model, lr, group, **options)

    factory.__qualname__ = f"{cls}"
    return factory


_ENTRIES = (
    ("bsp", "backward, then a blocking all-reduce of every gradient tensor (flatten=True: one message), average, "
            "SGD", "exact_allreduce", "BSP", {"flatten": False}),
    ("wfbp", "an asynchronous all-reduce per tensor launched from its gradient hook during backward; wait; SGD",
     "exact_allreduce", "WFBP", {}),
    ("fusion", "PyTorch DistributedDataParallel (gradient buckets of bucket_cap_mb, handed to DDP, which then "
                "caps the first bucket at it too); SGD",
     "exact_allreduce", "Fusion", {"bucket_cap_mb": 25.0, "find_unused_parameters": False, "broadcast_buffers": True}),
    ("mgwfbp", "buckets of MG-WFBP's merge rule for a profile and an environment, each all-reduced when "
               "complete; SGD", "exact_allreduce", "MGWFBP", {"profile": None, "env": "10GbE", "collective": None}),
    ("bytescheduler", "gradient partitions all-reduced by priority (input layers first) within a credit of bytes "
                      "in flight; each layer updated before its forward in the next step",
     "exact_bytescheduler", "ByteScheduler", {"partition_bytes": 4 * 2**20, "credit_bytes": 16 * 2**20}),
    ("dear", "reduce-scatter of fused groups in backward hooks, SGD on the owned shard, all-gather awaited in the "
             "next forward's pre-hooks", "exact_sharded", "DeAR", {"buffer_bytes": DDP_BUCKET_BYTES}),
    ("zero", "ZeRO-1/2: bucketed reduce-scatter of gradients in backward, SGD on the owned shard, all-gather of "
             "the parameters", "exact_sharded", "ZeRO",
     {"bucket_bytes": DDP_BUCKET_BYTES, "allgather_bucket_bytes": DDP_BUCKET_BYTES}),
    ("fsdp", "PyTorch FullyShardedDataParallel (full shard, units of unit_bytes, forward and backward prefetch); "
             "SGD on the shards", "exact_sharded", "FSDP", {"unit_bytes": DDP_BUCKET_BYTES}),
)

# how the runner sends, in its cost model's terms: ZeRO reduces from the gradient hooks while backward goes on
# (DeepSpeed's overlap_comm; the model's default is DeepSpeed's False for stages 1 and 2)
# the runner's ByteScheduler: rank 0 decides each batch and broadcasts it before it is sent (exact_bytescheduler.py)
_SCHEDULE_OPTIONS = {"zero": {"overlap_comm": True}, "bytescheduler": {"negotiation": True}}
# steps that return with messages in flight: ByteScheduler's partitions and DeAR's all-gathers are awaited in the
# next forward's pre-hooks
_RETURNS_IN_FLIGHT = {"bytescheduler", "dear"}

for _name, _description, _module, _cls, _options in _ENTRIES:
    TECHNIQUES.register(Technique(_name, _description, _lazy(_module, _cls), exact=True, schedule=_name,
                                  bound="sgd", options=_options, schedule_options=_SCHEDULE_OPTIONS.get(_name, {}),
                                  returns_in_flight=_name in _RETURNS_IN_FLIGHT))
