"""Sharded techniques: dear (DeAR), zero (ZeRO-1/2) and fsdp (PyTorch FSDP, full shard).

- ``dear`` (Zhang et al., ICDCS 2023): the gradients of fused groups (``costmodels`` ``dear_groups``:
  consecutive tensors in backward order, each group filled up to ``buffer_bytes``) are
  reduce-scattered asynchronously from the hook of the group's last gradient, overlapping the rest of
  backward. After backward each rank waits for its shards and updates the parameters it owns
  (per-group SGD on the shard); the groups' all-gathers are then issued in forward order and each is
  awaited in the forward pre-hook of the first module that needs it in the next step, so that
  all-gathers overlap the next forward.
- ``zero`` (Rajbhandari et al., SC 2020, stages 1/2): the same bucketed reduce-scatter in backward
  (buckets of ``bucket_bytes`` in backward order; the full gradients are dropped once a bucket is
  sent, as in stage 2), the owned shards updated, then the updated parameters all-gathered before the
  step returns, several buckets per message up to ``allgather_bucket_bytes`` (forward order).
  Only the all-gather after the update is exposed besides the reduce-scatter's tail.
- ``fsdp``: ``torch.distributed.fsdp.FullyShardedDataParallel`` (full shard, units wrapped by size
  with ``unit_bytes``, forward prefetch and BACKWARD_PRE prefetch as the schedule models), with SGD
  on its local shards.

A rank owns the r-th of p equal shards of each group's flattened (zero-padded) vector.
``equivalents`` records how reduce-scatter and all-gather are carried: torch's single-tensor
collectives where the backend has them (gloo does in torch 2.13: ``reduce_scatter_single``), else an
all-reduce of which the rank keeps its shard, and a list all-gather (:func:`shard_collectives`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from costmodels.errors import CommscopeError
from costmodels.schedules import DDP_BUCKET_BYTES, dear_groups, greedy_buckets

from .exact_common import ExactTrainer, FlatBucket, ReadyHooks, size_option

_PROBE_ERRORS = (RuntimeError, NotImplementedError, ValueError, TypeError, AttributeError)


class _Then:
    """A pending collective followed by a local step once it completes (``wait()``)."""

    def __init__(self, work: Any, after: Callable[[], None]) -> None:
        self.work, self.after = work, after

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
            self.work = None
            self.after()


def _native(name: str, legacy: str) -> Callable[..., Any] | None:
    return getattr(dist, name, None) or getattr(dist, legacy, None)


def shard_collectives(group: Any, device: torch.device, world_size: int, rank: int
                      ) -> tuple[Callable[..., Any], Callable[..., Any], dict[str, str]]:
    """Asynchronous ``reduce_scatter(out, flat)`` (sum) and ``all_gather(flat, shard)`` for this group.

    Each is probed once with a tiny collective on every rank of the group (so all ranks take the
    same path). Where the native single-tensor call is missing or refused, the equivalents are:
    reduce-scatter = all-reduce of the whole vector, of which the rank keeps its shard (twice the
    traffic of a ring reduce-scatter); all-gather = ``dist.all_gather`` into the shard views of the
    output. Returns the two functions (each returns an object with ``wait()``) and what carries each.
    """
    names: dict[str, str] = {}
    rs_native = _native("reduce_scatter_single", "reduce_scatter_tensor")
    ag_native = _native("all_gather_single", "all_gather_into_tensor")
    ok_rs = ok_ag = False
    if rs_native is not None:
        try:
            out = torch.zeros(1, device=device)
            rs_native(out, torch.ones(world_size, device=device), group=group)
            ok_rs = float(out) == world_size
        except _PROBE_ERRORS:
            ok_rs = False
    if ag_native is not None:
        try:
            out = torch.zeros(world_size, device=device)
            ag_native(out, torch.full((1,), float(rank), device=device), group=group)
            ok_ag = out.tolist() == [float(r) for r in range(world_size)]
        except _PROBE_ERRORS:
            ok_ag = False

    if ok_rs:
        names["reduce_scatter"] = f"dist.{rs_native.__name__} (native)"

        def reduce_scatter(out: torch.Tensor, flat: torch.Tensor) -> Any:
            return rs_native(out, flat, group=group, async_op=True)
    else:
        names["reduce_scatter"] = "dist.all_reduce of the whole vector, keeping the own shard (equivalent)"

        def reduce_scatter(out: torch.Tensor, flat: torch.Tensor) -> Any:
            n = out.numel()
            work = dist.all_reduce(flat, group=group, async_op=True)
            return _Then(work, lambda: out.copy_(flat[rank * n:(rank + 1) * n]))

    if ok_ag:
        names["all_gather"] = f"dist.{ag_native.__name__} (native)"

        def all_gather(flat: torch.Tensor, shard: torch.Tensor) -> Any:
            return ag_native(flat, shard, group=group, async_op=True)
    else:
        names["all_gather"] = "dist.all_gather into the shard views of the output (equivalent)"

        def all_gather(flat: torch.Tensor, shard: torch.Tensor) -> Any:
            return dist.all_gather(list(flat.chunk(world_size)), shard, group=group, async_op=True)

    return reduce_scatter, all_gather, names


class _ShardedTrainer(ExactTrainer):
    """Bucketed reduce-scatter of gradients from hooks, SGD on the owned shard of each bucket."""

    def _setup_buckets(self, cap: int) -> None:
        if not self.params:
            raise CommscopeError("the model has no trainable parameters")
        nbytes = np.array([p.numel() * p.element_size() for p in self.params], dtype=float)
        groups = dear_groups(nbytes, cap)  # greedy in backward order: lists of indices, backward order
        self.groups = [[self.named[i][0] for i in g] for g in groups]
        self.buckets = [FlatBucket([self.params[i] for i in sorted(g)], self.world_size, self.rank) for g in groups]
        self._bucket_of = {id(p): b for b, bucket in enumerate(self.buckets) for p in bucket.params}
        rs, ag, self.equivalents = shard_collectives(self.group, self.device, self.world_size, self.rank)
        self._rs, self._ag = rs, ag
        self._rs_sent: dict[int, tuple[Any, torch.Tensor]] = {}
        self.hooks = ReadyHooks([b.params for b in self.buckets], self._launch_rs)

    def _launch_rs(self, b: int) -> None:
        bucket = self.buckets[b]
        flat = bucket.flat_grads()
        for p in bucket.params:  # the full gradients are no longer needed (ZeRO-2 / DeAR free them)
            p.grad = None
        out = bucket.buffer("reduced", bucket.shard)
        self._rs_sent[b] = (self._rs(out, flat), out)

    def _before_backward(self) -> None:
        self._rs_sent = {}
        self.hooks.reset()

    def _after_backward(self) -> None:
        self.hooks.flush()
        for b in self.hooks.order:
            self._rs_sent[b][0].wait()

    def _update(self) -> None:
        for b, (_work, shard) in self._rs_sent.items():
            shard.div_(self.world_size)
            self.buckets[b].update_own(shard, self.lr)

    def close(self) -> None:
        super().close()
        self.hooks.remove()


class DeAR(_ShardedTrainer):
    """DeAR: reduce-scatter in backward hooks, shard update, all-gather awaited in the next forward's pre-hooks."""

    def __init__(self, model: Any, lr: float, group: Any = None, *, buffer_bytes: Any = DDP_BUCKET_BYTES) -> None:
        super().__init__(model, lr, group, buffer_bytes=buffer_bytes)
        self.buffer_bytes = size_option("buffer_bytes", buffer_bytes)
        self._setup_buckets(self.buffer_bytes)
        self._gathering: dict[int, tuple[Any, torch.Tensor]] = {}
        self._pre_hooks(lambda p: (self._bucket_of[id(p)],), self._ensure)

    def _after_update(self) -> None:
        # issued in forward order right after the update; each awaited before its first use
        for b in sorted(self._rs_sent, reverse=True):  # buckets are numbered in backward order
            bucket = self.buckets[b]
            full = bucket.buffer("gathered", bucket.padded)
            self._gathering[b] = (self._ag(full, bucket.own_shard()), full)

    def _ensure(self, buckets: Sequence[int]) -> None:
        for b in buckets:
            if b in self._gathering:
                work, full = self._gathering.pop(b)
                self._hook_time(work.wait, lambda full=full, b=b: self.buckets[b].write_params(full))

    def _before_backward(self) -> None:
        self._ensure(sorted(self._gathering))  # groups no module's forward asked for
        super()._before_backward()

    def finish(self) -> None:
        self._ensure(sorted(self._gathering))

    def _extra(self) -> dict[str, float]:
        return {"buckets": float(len(self.buckets))}


class ZeRO(_ShardedTrainer):
    """ZeRO-1/2: bucketed reduce-scatter in backward, shard update, then all-gather of the parameters."""

    def __init__(self, model: Any, lr: float, group: Any = None, *, bucket_bytes: Any = DDP_BUCKET_BYTES,
                 allgather_bucket_bytes: Any = DDP_BUCKET_BYTES) -> None:
        super().__init__(model, lr, group, bucket_bytes=bucket_bytes, allgather_bucket_bytes=allgather_bucket_bytes)
        self.bucket_bytes = size_option("bucket_bytes", bucket_bytes)
        self.allgather_bucket_bytes = size_option("allgather_bucket_bytes", allgather_bucket_bytes)
        self._setup_buckets(self.bucket_bytes)
        forward = list(range(len(self.buckets)))[::-1]  # buckets are numbered in backward order
        sizes = np.array([self.buckets[b].nbytes for b in forward], dtype=float)
        self.allgather_groups = [[forward[j] for j in g] for g in greedy_buckets(sizes, self.allgather_bucket_bytes)]

    def _after_update(self) -> None:
        pending = []
        for g in self.allgather_groups:
            first = self.buckets[g[0]]  # a message's buffers live with its first bucket
            if len(g) > 1:
                send = first.buffer("message", sum(self.buckets[b].shard for b in g))
                torch.cat([self.buckets[b].own_shard() for b in g], out=send)
            else:
                send = first.own_shard()
            full = first.buffer("gathered", self.world_size * send.numel())
            pending.append((self._ag(full, send), full, g))
        for work, full, g in pending:
            work.wait()
            rows = full.view(self.world_size, -1)
            off = 0
            for b in g:
                bucket = self.buckets[b]
                bucket.write_params(rows[:, off:off + bucket.shard].reshape(-1))
                off += bucket.shard

    def _extra(self) -> dict[str, float]:
        return {"buckets": float(len(self.buckets)), "allgather_messages": float(len(self.allgather_groups))}


class FSDP(ExactTrainer):
    """PyTorch FSDP (FullyShardedDataParallel, FULL_SHARD) with plain SGD on the local shards.

    Units: ``size_based_auto_wrap_policy`` with ``unit_bytes`` worth of parameters; forward
    prefetch and ``BackwardPrefetch.BACKWARD_PRE`` as the fsdp schedule assumes; ``use_orig_params``
    so that frozen and trainable parameters may share a unit. FSDP waits for its reduce-scatters
    inside backward, so ``exposed_comm`` is 0 and that waiting is part of ``backward``; the
    all-gathers before each unit's forward are part of ``forward``.
    """

    def __init__(self, model: Any, lr: float, group: Any = None, *, unit_bytes: Any = DDP_BUCKET_BYTES) -> None:
        super().__init__(model, lr, group, unit_bytes=unit_bytes)
        from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

        self.unit_bytes = size_option("unit_bytes", unit_bytes)
        elem = next(model.parameters()).element_size()
        policy = functools.partial(size_based_auto_wrap_policy, min_num_params=max(1, self.unit_bytes // elem))
        self.fsdp = FullyShardedDataParallel(
            model, process_group=group, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=policy,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True, use_orig_params=True,
            device_id=self.device)
        self.params = [p for p in self.fsdp.parameters() if p.requires_grad]  # the local shards
        self.equivalents = {"reduce_scatter": "inside FSDP", "all_gather": "inside FSDP"}

    def _forward(self, inputs: Any) -> Any:
        return self.fsdp(inputs)

    def _extra(self) -> dict[str, float]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return {"units": float(len(FullyShardedDataParallel.fsdp_modules(self.fsdp)))}

    def full_parameters(self) -> dict[str, torch.Tensor]:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrapped = "_fsdp_wrapped_module."
        with FullyShardedDataParallel.summon_full_params(self.fsdp, writeback=False):
            return {n.replace(wrapped, ""): p.detach().cpu().clone() for n, p in self.fsdp.named_parameters()}
