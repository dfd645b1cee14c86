"""ByteScheduler (Peng et al., SOSP 2019) over all-reduce, exact: partitions sent by priority within a credit.

Every trainable tensor's gradient is cut into partitions of ``partition_bytes`` (contiguous slices
of ``p.grad``; the last may be smaller). Priority follows the parameter registration order, the
forward order for sequential models: the layers nearest the input first. A communication thread
sends the partitions as asynchronous in-place all-reduces, always the highest-priority partitions
whose gradients are ready, keeping at most ``credit_bytes`` in flight (at least one partition): as
in the schedule in :mod:`costmodels.schedules.overlap`.

What overlaps: partitions are sent while backward still computes later gradients, and the step
returns right after backward without waiting for them. Each parameter is updated (averaged
gradient, SGD) in the forward pre-hook of its module in the next step, after its partitions have
completed, so the next forward starts as soon as the first layers' partitions are done and the rest
of the communication overlaps it. That keeps the result exact: no layer computes with a stale
parameter. ``exposed_comm`` of a step is therefore the time its forward (and the start of its
backward) waited for the previous step's partitions; call :meth:`finish` to complete the last step.
Requirement: a parameter is used only inside the forward of a module that holds it (true of
``nn.Module`` layers and of parameters used by the module that registers them).

All ranks must send the same partitions in the same order, but readiness is a matter of timing on
each rank. As Horovod's coordinator does, rank 0 decides: each time it can send, it broadcasts the
set of partitions it sends (a mask over the partitions, over a gloo group of its own), and every rank
sends that set once its own gradients are ready. The partitions travel over a second private group
of the trainer's backend, so the trainer's group stays free for other work.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from costmodels.errors import CommscopeError

from .exact_common import ExactTrainer, size_option

PARTITION_BYTES = 4 * 2**20
CREDIT_BYTES = 16 * 2**20
_WAIT_S = 600.0  # a step waiting this long for the communication thread reports it as hung


class ByteScheduler(ExactTrainer):
    """Priority-scheduled, credit-limited partition all-reduces overlapping backward and the next forward."""

    def __init__(self, model: Any, lr: float, group: Any = None, *, partition_bytes: Any = PARTITION_BYTES,
                 credit_bytes: Any = CREDIT_BYTES) -> None:
        super().__init__(model, lr, group, partition_bytes=partition_bytes, credit_bytes=credit_bytes)
        self.partition_bytes = size_option("partition_bytes", partition_bytes)
        self.credit_bytes = size_option("credit_bytes", credit_bytes)
        if self.credit_bytes < self.partition_bytes:
            raise CommscopeError(f"credit_bytes ({self.credit_bytes}) must be at least one partition "
                                 f"({self.partition_bytes} bytes)")
        if not self.params:
            raise CommscopeError("the model has no trainable parameters")
        # partitions in priority order: (parameter index, start, stop) in elements
        self.partitions: list[tuple[int, int, int]] = []
        self._parts_of: list[range] = []
        for i, p in enumerate(self.params):
            step = max(1, self.partition_bytes // p.element_size())
            first = len(self.partitions)
            self.partitions += [(i, a, min(a + step, p.numel())) for a in range(0, max(p.numel(), 1), step)]
            self._parts_of.append(range(first, len(self.partitions)))
        self._bytes = [(b - a) * self.params[i].element_size() for i, a, b in self.partitions]
        self._index = {id(p): i for i, p in enumerate(self.params)}
        n = len(self.partitions)
        # shared state, guarded by _cond: generation (step number) in which each partition became ready / was sent
        self._cond = threading.Condition()
        self._ready = [0] * n
        self._issued = [0] * n
        self._works: list[Any] = [None] * n
        self._pending = [False] * len(self.params)  # gradient of the current generation not yet applied
        self._gen = 0  # generation of the gradients the main thread produces / applies
        self._stop = False
        self._error: BaseException | None = None
        self._events: list[Any] = [None] * len(self.params)
        self.batches = 0  # batches negotiated, and seconds the communication thread spent in their broadcasts
        self.negotiation_s = 0.0
        self._counted = (0, 0.0)  # (batches, negotiation_s) when _extra last reported
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        self._root = ranks[0]
        self._is_root = dist.get_rank() == ranks[0]
        self._data_pg = dist.new_group(ranks, backend=dist.get_backend(group), use_local_synchronization=True)
        self._ctrl_pg = dist.new_group(ranks, backend="gloo", use_local_synchronization=True)
        self.equivalents = {"all_reduce": "dist.all_reduce (native), one per partition",
                            "schedule": "rank 0 decides each batch and broadcasts it over a gloo group"}
        self._handles += [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self.params]
        self._pre_hooks(lambda p: (self._index[id(p)],), self._ensure)
        self._thread = threading.Thread(target=self._run, name="commscope-bytescheduler", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ main thread
    def _zero_grad(self) -> None:
        pass  # gradients of the previous step are in flight; they are cleared when applied

    def _mark_ready(self, i: int) -> None:
        if self.device.type == "cuda":
            ev = torch.cuda.Event()
            ev.record()
            self._events[i] = ev
        with self._cond:
            self._pending[i] = True
            for c in self._parts_of[i]:
                self._ready[c] = self._gen
            self._cond.notify_all()

    def _grad_ready(self, p: torch.Tensor) -> None:
        self._mark_ready(self._index[id(p)])

    def _wait_for(self, predicate: Any) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: self._error is not None or predicate(), timeout=_WAIT_S)
        if self._error is not None:
            raise CommscopeError(f"the bytescheduler communication thread failed: {self._error!r}") from self._error
        if not ok:
            raise CommscopeError(f"bytescheduler: partitions not sent within {_WAIT_S:g} s")

    def _apply(self, i: int) -> None:
        """Wait for parameter i's partitions, then average its gradient and take the SGD step."""
        if not self._pending[i]:
            return
        parts, gen = self._parts_of[i], self._gen

        def wait() -> None:
            self._wait_for(lambda: all(self._issued[c] == gen for c in parts))
            for c in parts:
                self._works[c].wait()

        def apply() -> None:
            p = self.params[i]
            with torch.no_grad():
                p.grad.div_(self.world_size)
                p.add_(p.grad, alpha=-self.lr)
            p.grad = None
            self._pending[i] = False
            self._events[i] = None

        self._hook_time(wait, apply)

    def _ensure(self, indices: Any) -> None:
        for i in indices:
            self._apply(i)

    def finish(self) -> None:
        self._ensure(range(len(self.params)))

    def _before_backward(self) -> None:
        self.finish()  # parameters no forward pre-hook asked for
        self._gen += 1

    def _after_backward(self) -> None:
        for i, p in enumerate(self.params):  # no gradient (unused on every rank): send zeros, update by nothing
            if not self._pending[i]:
                p.grad = torch.zeros_like(p)
                self._mark_ready(i)

    def _update(self) -> None:
        pass  # in the next forward's pre-hooks (or finish())

    def _extra(self) -> dict[str, float]:
        """The partitions, and the batches and negotiation seconds since the last step (the thread's batches
        straddle steps; over many steps the mean per step is exact). A negotiation is a rendezvous: gloo's
        broadcast returns on rank 0 only once every rank has entered it, and a rank enters it once it has a ready
        gradient, so its seconds include waiting for the slowest rank."""
        with self._cond:
            batches, seconds = self.batches, self.negotiation_s
        last, self._counted = self._counted, (batches, seconds)
        return {"partitions": float(len(self.partitions)), "batches": float(batches - last[0]),
                "negotiation_s": seconds - last[1]}

    def close(self) -> None:
        super().close()
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=60)

    # ---------------------------------------------------------- communication thread
    def _unsent(self, gen: int) -> list[int]:
        return [c for c in range(len(self.partitions)) if self._ready[c] == gen and self._issued[c] != gen]

    def _run(self) -> None:
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
                self._side = torch.cuda.Stream(self.device)
            self._loop()
        except BaseException as exc:  # reported to the main thread
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _loop(self) -> None:
        n = len(self.partitions)
        gen, sent = 1, 0
        inflight: deque[tuple[Any, int]] = deque()
        held = 0  # bytes in flight
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or bool(self._unsent(gen)))
                if not self._unsent(gen):
                    return  # stopped between steps
            mask = torch.zeros(n, dtype=torch.uint8)
            if self._is_root:
                while True:  # the highest-priority ready partitions that fit in the credit
                    with self._cond:
                        candidates = self._unsent(gen)
                    batch, total = [], held
                    for c in candidates:
                        if total + self._bytes[c] > self.credit_bytes and (batch or inflight):
                            break
                        batch.append(c)
                        total += self._bytes[c]
                    if batch:
                        break
                    work, nbytes = inflight.popleft()  # no credit left: wait for the oldest partition
                    work.wait()
                    held -= nbytes
                mask[batch] = 1
            started = time.perf_counter()
            dist.broadcast(mask, src=self._root, group=self._ctrl_pg)
            negotiated = time.perf_counter() - started
            batch = mask.nonzero().flatten().tolist()
            size = sum(self._bytes[c] for c in batch)
            while inflight and held + size > self.credit_bytes:
                work, nbytes = inflight.popleft()
                work.wait()
                held -= nbytes
            with self._cond:  # other ranks: wait for the chosen gradients to be ready here too
                self._cond.wait_for(lambda: all(self._ready[c] == gen for c in batch))
            works = [self._send(c) for c in batch]
            for c, w in zip(batch, works, strict=True):
                inflight.append((w, self._bytes[c]))
            held += size
            sent += len(batch)
            with self._cond:
                self.batches += 1
                self.negotiation_s += negotiated
                for c, w in zip(batch, works, strict=True):
                    self._works[c] = w
                    self._issued[c] = gen
                if sent == n:
                    gen, sent = gen + 1, 0
                self._cond.notify_all()

    def _send(self, c: int) -> Any:
        i, a, b = self.partitions[c]
        grad = self.params[i].grad
        if self.device.type == "cuda":
            ev = self._events[i]
            if ev is not None:
                self._side.wait_event(ev)
            with torch.cuda.stream(self._side):
                return dist.all_reduce(grad.view(-1)[a:b], group=self._data_pg, async_op=True)
        return dist.all_reduce(grad.view(-1)[a:b], group=self._data_pg, async_op=True)
