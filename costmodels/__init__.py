"""commscope's cost models: symbolic alpha-beta-gamma models of collective communication.

Pure math (numpy, sympy, scipy); never imports torch, streamlit or plotly.

>>> import costmodels as cm
>>> c = cm.collective("ring_allreduce")
>>> round(c.time(n=2**20, p=8, env=cm.environment("10GbE")) * 1e3, 3)  # milliseconds
1.842
"""

from __future__ import annotations

from .analysis import Cheapest, Crossover, cheapest, crossover, crossover_expr
from .collectives import COLLECTIVES, PRIMITIVES, Collective, Domain, Param, collective, collectives, lower_bound
from .compression import Compressor, compressor, compressors, parse_compressor
from .default_terms import default_terms
from .environment import Environment
from .environment_array import EnvironmentArray
from .errors import CommscopeError, DomainError, UnknownNameError
from .harness import HARNESSES, Harness, harness
from .libraries import LIBRARIES, Choice, Library, choice_bands, choose, libraries, library
from .nccl_tests import algbw, busbw, busbw_factor
from .presets import PRESETS
from .profiles import Layer, ModelProfile, load_profile, profile, profiles
from .registry import Registry
from .schedules import SCHEDULES, IterationResult, Schedule, SweepResult, schedule, schedules, simulate, sweep
from .timeline import Event, Timeline
from .units import format_size, parse_size, size_range


def environments() -> list[str]:
    """Names of the preset environments."""
    return PRESETS.names()


def environment(name: str) -> Environment:
    """A preset environment by name (case-insensitive), or an environment JSON file by path."""
    if name not in PRESETS and (name.endswith(".json") or "/" in name):
        return Environment.load(name)
    return PRESETS.get(name)


__all__ = [
    "COLLECTIVES",
    "HARNESSES",
    "LIBRARIES",
    "PRESETS",
    "PRIMITIVES",
    "SCHEDULES",
    "Cheapest",
    "Choice",
    "Collective",
    "CommscopeError",
    "Compressor",
    "Crossover",
    "Domain",
    "DomainError",
    "Environment",
    "EnvironmentArray",
    "Event",
    "Harness",
    "IterationResult",
    "Layer",
    "Library",
    "ModelProfile",
    "Param",
    "Registry",
    "Schedule",
    "SweepResult",
    "Timeline",
    "UnknownNameError",
    "algbw",
    "busbw",
    "busbw_factor",
    "cheapest",
    "choice_bands",
    "choose",
    "collective",
    "collectives",
    "compressor",
    "compressors",
    "crossover",
    "crossover_expr",
    "default_terms",
    "environment",
    "environments",
    "format_size",
    "harness",
    "libraries",
    "library",
    "load_profile",
    "lower_bound",
    "parse_compressor",
    "parse_size",
    "profile",
    "profiles",
    "schedule",
    "schedules",
    "simulate",
    "size_range",
    "sweep",
]

# large models (issue 18): transformer specs, parallel plans, the planner (costmodels/llm/)
from .llm import LLM_SPECS, PIPELINE_SCHEDULES, Plan, PlanResult, TransformerSpec, best_plans, llm, llms, plan  # noqa: E402

__all__ += ["LLM_SPECS", "PIPELINE_SCHEDULES", "Plan", "PlanResult", "TransformerSpec", "best_plans", "llm", "llms",
            "plan"]
