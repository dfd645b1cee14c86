"""Large-model training: transformer specs, parallel plans (TP/SP/PP/DP/ZeRO/EP/CP), their communication,
memory, pipeline bubble and iteration time, a vectorized planner, and attribution to the three layers.

Modules, one job each: ``specs`` (the shipped transformers, ``LLM_SPECS``), ``flops``, ``plan`` (``Plan``,
``PlanArray``, validity, placement), ``groups`` (the environment a group sees), ``comm`` (bytes and times per
group through the library layer), ``memory``, ``pipeline`` (``PIPELINE_SCHEDULES``, bubbles, timelines),
``iteration`` (the vectorized model), ``result`` (one plan's ``PlanResult``), ``planner``, ``attribution``,
``published`` (Narayanan et al. 2021's Table 1, predicted).

>>> import costmodels as cm
>>> r = cm.plan("gpt3-175b", gpus=1024, env="8xH100-NVLink+IB-NDR", tp=8, pp=8, v=3, micro_batch=1)
>>> r.plan.dp, r.oom
(16, False)
"""

from __future__ import annotations

from typing import Any

from ..environment import Environment
from ..errors import CommscopeError
from ..presets import PRESETS
from .attribution import Attribution, Switch, attribute, switch_points
from .iteration import ACHIEVED, DEVICES, Device, Evaluation, evaluate
from .pipeline import PIPELINE_SCHEDULES, PipelineSchedule, bubble_fraction, timeline
from .plan import Plan, PlanArray, problems
from .planner import Search, enumerate_plans, search
from .planner import best_plans as _best_plans
from .result import PlanResult, result_of
from .specs import LLM_SPECS, TransformerSpec, llm, llms


def _env(env: str | Environment) -> Environment:
    if isinstance(env, Environment):
        return env
    if env not in PRESETS and (env.endswith(".json") or "/" in env):  # as costmodels.environment does
        return Environment.load(env)
    return PRESETS.get(env)


def plan(spec: str | TransformerSpec, gpus: int | None = None, env: str | Environment = "8xH100-NVLink+IB-NDR", *,
         tp: int = 1, pp: int = 1, dp: int | None = None, cp: int = 1, ep: int = 1, sp: bool = False, zero: int = 0,
         schedule: str | None = None, v: int = 1, micro_batch: int = 1, global_batch: int | None = None,
         recompute: str = "none", **options: Any) -> PlanResult:
    """Predict one plan: iteration time, MFU, tokens/s, communication per group, bubble, memory per GPU
    (``.oom``) and the pipeline timeline. ``gpus`` or ``dp`` fixes the other (tp x cp x pp x dp GPUs); the
    schedule defaults to 1F1B, interleaved when v > 1; ``options``: achieved, device, compute_s,
    overlap_grad_reduce, grad_bytes (:func:`costmodels.llm.iteration.evaluate`)."""
    s = llm(spec)
    e = _env(env)
    if dp is None:
        if gpus is None:
            raise CommscopeError("give gpus or dp")
        if gpus % (tp * cp * pp):
            raise CommscopeError(f"gpus ({gpus}) must be a multiple of tp x cp x pp ({tp * cp * pp})")
        dp = gpus // (tp * cp * pp)
    sched = schedule or ("interleaved" if v > 1 else "1f1b")
    p = Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=sp, zero=zero, schedule=sched, v=v, micro_batch=micro_batch,
             global_batch=s.global_batch if global_batch is None else global_batch, recompute=recompute)
    bad = problems(s, p, gpus, (e.gpus_per_node if e.link == "network" else p.gpus))
    if bad:
        raise CommscopeError(f"invalid plan {p.label()} for {s.name}: " + "; ".join(bad))
    return result_of(evaluate(s, PlanArray.of([p]), e, **options), 0, e)


def best_plans(spec: str | TransformerSpec, gpus: int, env: str | Environment = "8xH100-NVLink+IB-NDR", *,
               device_memory: float | None = None, k: int = 3, global_batch: int | None = None,
               **options: Any) -> list[PlanResult]:
    """The k fastest valid plans of ``spec`` on ``gpus`` GPUs that fit in ``device_memory`` bytes per GPU
    (the device's by default), fastest first."""
    return _best_plans(llm(spec), gpus, _env(env), device_memory=device_memory, k=k, global_batch=global_batch,
                       **options)


__all__ = [
    "ACHIEVED", "DEVICES", "LLM_SPECS", "PIPELINE_SCHEDULES", "Attribution", "Device", "Evaluation",
    "PipelineSchedule", "Plan", "PlanArray", "PlanResult", "Search", "Switch", "TransformerSpec", "attribute",
    "best_plans", "bubble_fraction", "enumerate_plans", "evaluate", "llm", "llms", "plan", "problems", "result_of",
    "search", "switch_points", "timeline",
]
