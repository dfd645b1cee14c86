"""The planner: every valid plan for a model, a GPU count and an environment, ranked by iteration time among
those that fit in the device's memory.

:func:`enumerate_plans` builds the product of the choices (tp among the divisors of a node's GPUs, with and
without sequence parallelism; cp in 1, 2, 4, 8; pp among the common divisors of the layers and the GPUs,
each schedule, v from 2 to 8 where the chunks divide the layers; ep among the divisors of dp and of the
experts; ZeRO 0-3; micro-batches 1-16 in powers of two; three recomputation modes) as arrays and keeps the
valid ones (:func:`.plan.valid`). :func:`search` evaluates them in one vectorized pass (:mod:`.iteration`);
:func:`best_plans` returns the k fastest that fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..environment import Environment
from ..errors import CommscopeError
from .groups import nodes_of
from .iteration import Evaluation, evaluate
from .plan import RECOMPUTE, SCHEDULE_NAMES, PlanArray, valid
from .result import PlanResult, result_of
from .specs import TransformerSpec

MICRO_BATCHES = (1, 2, 4, 8, 16)
CONTEXT = (1, 2, 4, 8)
MAX_V = 8


MAX_GPUS = 2**24  # the planner's limit (16.7M GPUs, beyond any cluster): divisors are found up to sqrt(gpus)


def _divisors(n: int) -> list[int]:
    """The divisors of n in increasing order, by trial division up to sqrt(n)."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def enumerate_plans(spec: TransformerSpec, gpus: int, env: Environment, *, global_batch: int | None = None,
                    micro_batches: tuple[int, ...] = MICRO_BATCHES, zero: tuple[int, ...] = (0, 1, 2, 3),
                    recompute: tuple[str, ...] = RECOMPUTE) -> PlanArray:
    """All valid plans (see the module docstring) as a :class:`PlanArray`."""
    if isinstance(gpus, bool) or not isinstance(gpus, (int, np.integer)) or not 1 <= gpus <= MAX_GPUS:
        raise CommscopeError(f"gpus must be an integer from 1 to {MAX_GPUS:,}, got {gpus!r}")
    gbs = spec.global_batch if global_batch is None else global_batch
    g = nodes_of(env) or gpus
    tps = [d for d in _divisors(min(g, gpus)) if gpus % d == 0]
    pps = [d for d in _divisors(gpus) if spec.layers % d == 0]
    # (pp, schedule, v) triples
    sched: list[tuple[int, int, int]] = []
    for p in pps:
        if p == 1:
            sched.append((1, SCHEDULE_NAMES.index("1f1b"), 1))
            continue
        for name in ("gpipe", "1f1b", "zb-h1"):
            sched.append((p, SCHEDULE_NAMES.index(name), 1))
        sched += [(p, SCHEDULE_NAMES.index("interleaved"), v) for v in range(2, MAX_V + 1)
                  if spec.layers % (p * v) == 0]
    eps = [d for d in _divisors(gpus) if (d == 1) or (spec.moe and spec.experts % d == 0)]
    axes = [np.asarray(tps), np.array([False, True]), np.asarray([c for c in CONTEXT if gpus % c == 0]),
            np.arange(len(sched)), np.asarray(eps), np.asarray(zero), np.asarray(micro_batches),
            np.asarray([RECOMPUTE.index(r) for r in recompute])]
    grid = np.meshgrid(*axes, indexing="ij")
    tp, sp, cp, si, ep, z, mb, rc = (a.ravel() for a in grid)
    table = np.asarray(sched, dtype=np.int64).reshape(-1, 3)
    pp, schedule, v = table[si, 0], table[si, 1], table[si, 2]
    dp = gpus // (tp * cp * pp)
    keep = (tp * cp * pp * dp == gpus) & (dp >= 1)
    plans = PlanArray(tp=tp, pp=pp, dp=np.maximum(dp, 1), cp=cp, ep=ep, sp=sp, zero=z, schedule=schedule, v=v,
                      micro_batch=mb, global_batch=np.full(tp.shape, gbs), recompute=rc)[keep]
    return plans[valid(spec, plans, gpus, g)]


@dataclass(frozen=True, eq=False)
class Search:
    """Every valid plan evaluated: ``order`` ranks those that fit (fastest first)."""

    evaluation: Evaluation
    order: np.ndarray
    device_memory: float
    env: Environment

    @property
    def count(self) -> int:
        return len(self.evaluation.plans)

    def best(self, k: int = 3) -> list[PlanResult]:
        return [result_of(self.evaluation, int(i), self.env) for i in self.order[:k]]


def search(spec: TransformerSpec, gpus: int, env: Environment, *, device_memory: float | None = None,
           global_batch: int | None = None, **options: Any) -> Search:
    """Evaluate every valid plan; ``options`` go to :func:`.iteration.evaluate` (achieved, device, ...)."""
    plans = enumerate_plans(spec, gpus, env, global_batch=global_batch)
    if len(plans) == 0:
        raise CommscopeError(f"no valid plan of {spec.name} on {gpus} GPUs")
    ev = evaluate(spec, plans, env, **options)
    limit = ev.device.memory if device_memory is None else float(device_memory)
    fits = np.flatnonzero(ev.memory.total <= limit)
    order = fits[np.argsort(ev.time[fits], kind="stable")]
    return Search(ev, order, limit, env)


def best_plans(spec: TransformerSpec, gpus: int, env: Environment, *, device_memory: float | None = None,
               k: int = 3, global_batch: int | None = None, **options: Any) -> list[PlanResult]:
    """The k fastest valid plans that fit in ``device_memory`` bytes per GPU (the device's by default)."""
    found = search(spec, gpus, env, device_memory=device_memory, global_batch=global_batch, **options)
    if len(found.order) == 0:
        raise CommscopeError(f"no plan of {spec.name} on {gpus} GPUs fits in {found.device_memory / 2**30:.1f} GiB "
                             "per GPU")
    return found.best(k)

