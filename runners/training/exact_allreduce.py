"""All-reduce techniques: bsp, wfbp, fusion (PyTorch DDP) and mgwfbp (MG-WFBP's merged buckets).

Each does what its schedule in :mod:`costmodels.schedules` prices:

- ``bsp``: backward to the end, then one blocking all-reduce per gradient tensor in backward order
  (``flatten=True``: one all-reduce of all gradients flattened); nothing overlaps.
- ``wfbp``: an asynchronous all-reduce per tensor, launched from its gradient hook as soon as the
  gradient is accumulated: communication overlaps the rest of backward.
- ``fusion``: ``torch.nn.parallel.DistributedDataParallel`` as it is: its buckets of ``bucket_cap_mb``,
  all-reduced while backward goes on. The cap is handed to DDP, so the first
  bucket has it too: torch 2.13 keeps the 1 MiB first bucket only for ``bucket_cap_mb=None``
  (``_BucketCapacityConfig.create``; tests/test_ddp_buckets.py reads the buckets DDP builds).
- ``mgwfbp``: the buckets of MG-WFBP's merge rule (``costmodels.schedules.mgwfbp_groups``, the
  function the schedule uses), each flattened and all-reduced asynchronously from the hook of its
  last gradient; communication overlaps the rest of backward.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import costmodels as cm
from costmodels.errors import CommscopeError
from costmodels.messages import Comm
from costmodels.schedules import mgwfbp_groups

from .exact_common import ExactTrainer, FlatBucket, ReadyHooks, sgd_


def _average(params: list[torch.nn.Parameter], world_size: int) -> None:
    for p in params:
        if p.grad is not None:
            p.grad.div_(world_size)


class BSP(ExactTrainer):
    """Backward, then the gradients all-reduced (blocking) and averaged, then SGD: no overlap."""

    def __init__(self, model: Any, lr: float, group: Any = None, *, flatten: bool = False) -> None:
        super().__init__(model, lr, group, flatten=flatten)
        if not isinstance(flatten, bool):
            raise CommscopeError(f"flatten must be True or False, got {flatten!r}")
        self.flatten = flatten
        self._flat: torch.Tensor | None = None  # one persistent message buffer (exact_common.FlatBucket's reason)

    def _after_backward(self) -> None:
        grads = [p.grad for p in reversed(self.params) if p.grad is not None]  # backward order
        if not grads or self.world_size == 1:
            return
        if self.flatten:
            total = sum(g.numel() for g in grads)
            if self._flat is None or self._flat.numel() < total or self._flat.dtype != grads[0].dtype:
                self._flat = torch.empty(sum(p.numel() for p in self.params), dtype=grads[0].dtype,
                                         device=grads[0].device)
            flat = torch.cat([g.reshape(-1) for g in grads], out=self._flat[:total])
            dist.all_reduce(flat, group=self.group)
            off = 0
            for g in grads:
                g.copy_(flat[off:off + g.numel()].view_as(g))
                off += g.numel()
        else:
            for g in grads:
                dist.all_reduce(g, group=self.group)

    def _update(self) -> None:
        _average(self.params, self.world_size)
        sgd_(self.params, self.lr)

    def _extra(self) -> dict[str, float]:
        n = sum(p.grad is not None for p in self.params)
        return {"messages": float(min(n, 1) if self.flatten else n)}


class WFBP(ExactTrainer):
    """Wait-free backpropagation: each gradient all-reduced asynchronously from its post-accumulate hook."""

    def __init__(self, model: Any, lr: float, group: Any = None) -> None:
        super().__init__(model, lr, group)
        self._works: list[Any] = []
        self.hooks = ReadyHooks([[p] for p in self.params], self._launch)

    def _launch(self, b: int) -> None:
        g = self.params[b].grad
        if g is not None and self.world_size > 1:  # no gradient: unused on every rank, nothing to send
            self._works.append(dist.all_reduce(g, group=self.group, async_op=True))

    def _before_backward(self) -> None:
        self._works = []
        self.hooks.reset()

    def _after_backward(self) -> None:
        self.hooks.flush()
        for w in self._works:
            w.wait()

    def _update(self) -> None:
        _average(self.params, self.world_size)
        sgd_(self.params, self.lr)

    def _extra(self) -> dict[str, float]:
        return {"messages": float(len(self._works))}

    def close(self) -> None:
        self.hooks.remove()
        super().close()


class Fusion(ExactTrainer):
    """PyTorch DDP, unmodified: gradient buckets of ``bucket_cap_mb`` all-reduced during backward.

    DDP waits for its last buckets inside backward (in an autograd callback), so on CPUs the step's
    ``exposed_comm`` is estimated as the time from the last gradient hook to the end of backward and
    taken out of ``backward``; on GPUs (where host hook times do not track the device) it stays in
    ``backward`` and ``exposed_comm`` is 0.
    """

    def __init__(self, model: Any, lr: float, group: Any = None, *, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False, broadcast_buffers: bool = True) -> None:
        super().__init__(model, lr, group, bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused_parameters,
                         broadcast_buffers=broadcast_buffers)
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or not bucket_cap_mb > 0:
            raise CommscopeError(f"bucket_cap_mb must be a positive number of MiB, got {bucket_cap_mb!r}")
        for name, flag in (("find_unused_parameters", find_unused_parameters),
                           ("broadcast_buffers", broadcast_buffers)):
            if not isinstance(flag, bool):
                raise CommscopeError(f"{name} must be True or False, got {flag!r}")
        ids = [self.device.index] if self.device.type == "cuda" else None
        # broadcast_buffers (DDP's default, True): rank 0's buffers (BatchNorm's statistics) broadcast before every
        # forward, which the fusion schedule prices (costmodels.schedules.blocks.buffer_broadcasts)
        self.ddp = DistributedDataParallel(model, device_ids=ids, process_group=group, bucket_cap_mb=bucket_cap_mb,
                                           find_unused_parameters=find_unused_parameters,
                                           broadcast_buffers=broadcast_buffers)
        self._last_ready = self._tail = 0.0
        if self.device.type != "cuda":
            self._handles += [p.register_post_accumulate_grad_hook(self._ready) for p in self.params]

    def _ready(self, _p: torch.Tensor) -> None:
        self._last_ready = time.perf_counter()

    def _forward(self, inputs: Any) -> Any:
        return self.ddp(inputs)

    def _before_backward(self) -> None:
        self._last_ready = 0.0

    def _after_backward(self) -> None:
        self._tail = max(0.0, time.perf_counter() - self._last_ready) if self._last_ready else 0.0

    def step(self, inputs: Any, targets: Any, loss_fn: Any) -> Any:
        r = super().step(inputs, targets, loss_fn)
        # CPU: the tail of backward after the last gradient is DDP waiting for buckets; it is part of the
        # backward interval measured around it, so it never exceeds it (the two clocks are read apart)
        tail = min(self._tail, max(r.backward, 0.0))
        r.backward -= tail
        r.exposed_comm += tail
        return r


def synthetic_profile(named: list[tuple[str, torch.nn.Parameter]], layer_s: float) -> cm.ModelProfile:
    """A profile of the trainable tensors with their real sizes and equal per-layer times ``layer_s``."""
    layers = tuple(cm.Layer(n, p.numel(), float(p.numel() * p.element_size()), layer_s, layer_s) for n, p in named)
    dtype = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
             torch.float64: "float64"}.get(named[0][1].dtype, "float32")
    return cm.ModelProfile("model", layers, "unmeasured", dtype, 1, "estimated",
                           f"tensor sizes of the model; every layer's forward and backward set to {layer_s:.3g} s "
                           f"(one empty-message latency): nothing measured")


class MGWFBP(ExactTrainer):
    """MG-WFBP: gradients merged into the buckets of the paper's merge rule, each all-reduced when complete.

    ``profile``: a :class:`costmodels.ModelProfile` (or the path of its JSON file) whose layers are
    the model's trainable parameters by name (in forward order; frozen parameters' layers ignored). ``None``: nothing is
    measured; the tensors' real sizes are used with equal per-layer forward and backward times, each
    one empty-message latency ``a`` of the environment, so that layers merge only where the link is
    still busy when the next gradient arrives. ``env``: a :class:`costmodels.Environment`, a preset
    name or the path of a fitted environment (``commscope fit --out env.json``). ``collective``: the
    algorithm that prices messages, as in ``cm.simulate``; ``None``: the algorithms a fitted
    environment was fitted with (its metadata), else the cheapest at each size.
    The buckets are :func:`costmodels.schedules.mgwfbp_groups` (the schedule's own function).
    """

    def __init__(self, model: Any, lr: float, group: Any = None, *, profile: Any = None, env: Any = "10GbE",
                 collective: str | None = None) -> None:
        super().__init__(model, lr, group, profile=profile, env=env, collective=collective)
        if isinstance(env, str):
            env = cm.environment(env)
        if not isinstance(env, cm.Environment):
            raise CommscopeError(f"env must be a costmodels.Environment, a preset name or a JSON path, got {env!r}")
        if not self.params:
            raise CommscopeError("the model has no trainable parameters")
        if collective is None and isinstance(env.metadata.get("algorithms"), dict):
            collective = dict(env.metadata["algorithms"])  # a fitted environment names its algorithms
        comm = Comm("allreduce", self.world_size, env, collective)
        index = {n: i for i, (n, _) in enumerate(self.named)}
        if isinstance(profile, (str, os.PathLike)):
            profile = cm.load_profile(profile)
        if profile is None:
            prof = synthetic_profile(self.named, comm.latency())
        elif isinstance(profile, cm.ModelProfile):
            frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
            unknown = [x.name for x in profile.layers if x.name not in index and x.name not in frozen]
            missing = sorted(set(index) - {x.name for x in profile.layers})
            if unknown or missing:
                raise CommscopeError(f"profile {profile.name!r} must list the model's trainable parameters by name; "
                                     f"unknown layer(s): {unknown[:5]}, missing parameter(s): {missing[:5]}")
            prof = replace(profile, layers=tuple(x for x in profile.layers if x.name in index))
        else:
            raise CommscopeError(f"profile must be a costmodels.ModelProfile, its JSON path or None, "
                                 f"got {type(profile).__name__}")
        fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
        ready = fwd.sum() + np.cumsum(bwd[::-1])[::-1]
        groups = mgwfbp_groups(ready, np.array(prof.column("grad_bytes")), comm)
        self.profile, self.env = prof, env
        self.groups = [[prof.layers[i].name for i in g] for g in groups]  # backward order, as the schedule sends
        self.buckets = [FlatBucket([self.params[index[n]] for n in reversed(g)], self.world_size, self.rank)
                        for g in self.groups]
        self._sent: dict[int, tuple[Any, torch.Tensor | None]] = {}
        self.hooks = ReadyHooks([b.params for b in self.buckets], self._launch)

    def _launch(self, b: int) -> None:
        bucket = self.buckets[b]
        if self.world_size == 1 or all(p.grad is None for p in bucket.params):
            return
        if len(bucket.params) == 1:
            self._sent[b] = (dist.all_reduce(bucket.params[0].grad, group=self.group, async_op=True), None)
        else:
            flat = bucket.flat_grads()
            self._sent[b] = (dist.all_reduce(flat, group=self.group, async_op=True), flat)

    def _before_backward(self) -> None:
        self._sent = {}
        self.hooks.reset()

    def _after_backward(self) -> None:
        self.hooks.flush()
        for b in self.hooks.order:
            if b in self._sent:
                work, flat = self._sent[b]
                work.wait()
                if flat is not None:
                    self.buckets[b].write_grads(flat)

    def _update(self) -> None:
        _average(self.params, self.world_size)
        sgd_(self.params, self.lr)

    def _extra(self) -> dict[str, float]:
        return {"buckets": float(len(self.buckets)), "messages": float(len(self._sent))}

    def close(self) -> None:
        self.hooks.remove()
        super().close()
