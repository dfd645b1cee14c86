"""Which of the three layers (Wei et al. 2024: parallelization strategy, collective library, network) a
plan's iteration time is spent on, and what would change the best plan.

Each share is a difference of two predictions of the same model (derived here):

* **strategy**: the exposed communication and the pipeline bubble, i.e. the time above a plan that hides
  them (the same compute, with nothing else on the critical path);
* **library**: the plan's time with the environment's library (NCCL's choice of algorithm and protocol)
  minus its time with the ``ideal`` library (the cheapest registered algorithm for every message); negative
  where the library beats the registered algorithms;
* **network**: the plan's time minus its time on a faster tier: both links' bandwidth times ``faster``
  (4 by default), the same latency;
* **compute**: the rest.

:func:`switch_points` answers "what would change the best plan": the inter-node bandwidth is scaled over
a grid (every plan that fits evaluated at each point, vectorized over the plans) and the points where the
best plan changes are reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..environment import Environment
from .iteration import device_of, evaluate
from .memory import memory
from .plan import PlanArray
from .planner import enumerate_plans
from .result import PlanResult
from .specs import TransformerSpec


@dataclass(frozen=True)
class Attribution:
    """Seconds per iteration attributed to each layer (see the module docstring)."""

    iteration_time: float
    compute: float
    strategy: float
    library: float
    network: float
    exposed: dict[str, float]
    bubble: float
    faster: float

    def shares(self) -> dict[str, float]:
        """Each layer's seconds over the iteration time."""
        t = self.iteration_time
        return {"compute": self.compute / t, "strategy": self.strategy / t, "library": self.library / t,
                "network": self.network / t}

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "shares": self.shares()}


def attribute(result: PlanResult, *, faster: float = 4.0, **options: Any) -> Attribution:
    """Attribute one plan's iteration time to strategy, library and network (module docstring)."""
    env, spec = result.env, result.spec
    plans = PlanArray.of([result.plan])
    ideal = float(evaluate(spec, plans, env.with_(library="ideal"), **options).time[0])
    change: dict[str, Any] = {"beta": env.beta / faster}
    if env.two_level:
        change["intra_beta"] = env.intra_beta / faster
    quick = float(evaluate(spec, plans, env.with_(**change), **options).time[0])
    strategy = result.exposed_comm + result.bubble
    return Attribution(iteration_time=result.iteration_time, compute=result.compute, strategy=strategy,
                       library=result.iteration_time - ideal, network=result.iteration_time - quick,
                       exposed=dict(result.exposed), bubble=result.bubble, faster=faster)


@dataclass(frozen=True)
class Switch:
    """The best plan at each inter-node bandwidth of a scan, and where it changes."""

    bandwidths: np.ndarray  # bytes/s of the inter-node link (per NIC)
    best: list[str]
    times: np.ndarray
    switches: list[tuple[float, str, str]]  # (bandwidth at which the next best begins, before, after)


def switch_points(spec: TransformerSpec, gpus: int, env: Environment, *, factors: Any = None,
                  device_memory: float | None = None, global_batch: int | None = None, **options: Any) -> Switch:
    """Scale the inter-node bandwidth by ``factors`` (default 1/16 to 16 in steps of sqrt 2) and report the
    best plan that fits at each (:class:`Switch`)."""
    f = 2.0 ** np.arange(-4, 4.01, 0.5) if factors is None else np.asarray(factors, dtype=np.float64)
    plans = enumerate_plans(spec, gpus, env, global_batch=global_batch)
    # what fits does not depend on the bandwidth: the memory model alone (as evaluate computes it)
    limit = device_of(env, options.get("device")).memory if device_memory is None else device_memory
    plans = plans[memory(spec, plans).total <= limit]
    best, times = [], []
    for x in f:
        ev = evaluate(spec, plans, env.with_(beta=env.beta / x), **options)
        i = int(np.argmin(ev.time))
        best.append(plans.plan(i).label())
        times.append(float(ev.time[i]))
    bw = 1.0 / (env.beta / f)
    switches = [(float(bw[k]), best[k - 1], best[k]) for k in range(1, len(f)) if best[k] != best[k - 1]]
    return Switch(bw, best, np.asarray(times), switches)
