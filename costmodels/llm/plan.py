"""Parallel plans: how a transformer is split over GPUs, one plan (:class:`Plan`) or many (:class:`PlanArray`).

A plan sets tensor parallelism ``tp`` (with sequence parallelism ``sp``), context parallelism ``cp`` (ring
attention), pipeline parallelism ``pp`` with a ``schedule`` (``gpipe``, ``1f1b``, ``interleaved`` with ``v``
virtual stages per GPU, ``zb-h1``), data parallelism ``dp`` with a ZeRO ``zero`` stage (0-3), expert
parallelism ``ep`` (a divisor of dp: the experts of a block are spread over ep of the data-parallel ranks,
as Megatron-core carves its expert-parallel groups out of the data-parallel ones), the micro-batch and the
global batch (sequences), and activation ``recompute`` (``none``, ``selective``, ``full``).
GPUs = tp x cp x pp x dp.

Placement (Megatron-core's default order ``tp-cp-ep-dp-pp``, ``megatron/core/parallel_state.py``; the
Megatron-LM scripts of Narayanan et al. 2021 place the same way: tensor parallelism inside a server,
pipeline stages across servers): ranks of a tensor-parallel group are consecutive, then context, then data
(whose first ep ranks form an expert-parallel group), and pipeline stages are outermost.

:func:`problems` says why a plan is invalid for a spec, a GPU count and an environment (empty: valid); the
planner and :func:`costmodels.llm.plan` share it, and :func:`valid` is its vectorized form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ..errors import CommscopeError
from .specs import TransformerSpec

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved", "zb-h1")
RECOMPUTE = ("none", "selective", "full")
ORDER = ("tp", "cp", "dp", "pp")  # innermost first; ep lies inside dp


@dataclass(frozen=True)
class Plan:
    """One parallel plan (see the module docstring). ``v`` > 1 only with the interleaved schedule."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0
    schedule: str = "1f1b"
    v: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "dp", "cp", "ep", "v", "micro_batch", "global_batch"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise CommscopeError(f"{key} must be a positive integer, got {value!r}")
            object.__setattr__(self, key, int(value))
        if self.zero not in (0, 1, 2, 3):
            raise CommscopeError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.schedule not in SCHEDULE_NAMES:
            raise CommscopeError(f"schedule must be one of {', '.join(SCHEDULE_NAMES)}, got {self.schedule!r}")
        if self.recompute not in RECOMPUTE:
            raise CommscopeError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def micro_batches(self) -> float:
        """Micro-batches per pipeline per iteration: m = global batch / (micro-batch x dp)."""
        return self.global_batch / (self.micro_batch * self.dp)

    def label(self) -> str:
        """A short name: e.g. ``tp8 sp pp16 interleaved(v=2) dp8 zero1 mb1 full``."""
        parts = [f"tp{self.tp}" + (" sp" if self.sp else "")]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.pp > 1:
            parts.append(f"pp{self.pp} " + (f"interleaved(v={self.v})" if self.schedule == "interleaved"
                                           else self.schedule))
        parts.append(f"dp{self.dp}" + (f" zero{self.zero}" if self.zero else ""))
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.micro_batch}")
        parts.append(f"recompute={self.recompute}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


INT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "zero", "v", "micro_batch", "global_batch")


@dataclass(frozen=True, eq=False)
class PlanArray:
    """Many plans as int arrays of one length (``schedule`` and ``recompute`` as indices into
    :data:`SCHEDULE_NAMES` and :data:`RECOMPUTE`, ``sp`` as bools), for vectorized evaluation."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    sp: np.ndarray
    zero: np.ndarray
    schedule: np.ndarray
    v: np.ndarray
    micro_batch: np.ndarray
    global_batch: np.ndarray
    recompute: np.ndarray

    @classmethod
    def of(cls, plans: Sequence[Plan]) -> PlanArray:
        cols: dict[str, Any] = {f: np.array([getattr(p, f) for p in plans], dtype=np.int64) for f in INT_FIELDS}
        cols["sp"] = np.array([p.sp for p in plans], dtype=bool)
        cols["schedule"] = np.array([SCHEDULE_NAMES.index(p.schedule) for p in plans], dtype=np.int64)
        cols["recompute"] = np.array([RECOMPUTE.index(p.recompute) for p in plans], dtype=np.int64)
        return cls(**cols)

    def __len__(self) -> int:
        return int(self.tp.size)

    def __getitem__(self, index: Any) -> PlanArray:
        return PlanArray(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def plan(self, i: int) -> Plan:
        """Plan ``i`` as a :class:`Plan`."""
        kw: dict[str, Any] = {f: int(getattr(self, f)[i]) for f in INT_FIELDS}
        return Plan(**kw, sp=bool(self.sp[i]), schedule=SCHEDULE_NAMES[int(self.schedule[i])],
                    recompute=RECOMPUTE[int(self.recompute[i])])

    @property
    def gpus(self) -> np.ndarray:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def micro_batches(self) -> np.ndarray:
        return self.global_batch / (self.micro_batch * self.dp)

    def stride(self, group: str) -> np.ndarray:
        """Rank distance between neighbours of a group in the placement order :data:`ORDER` (ep: dp's)."""
        out = np.ones_like(self.tp)
        for g in ORDER:
            if g == ("dp" if group == "ep" else group):
                return out
            out = out * getattr(self, g)
        raise CommscopeError(f"unknown group {group!r}")


def valid(spec: TransformerSpec, plans: PlanArray, gpus: int, gpus_per_node: int) -> np.ndarray:
    """Where the plans are valid (the rules of :func:`problems`, vectorized)."""
    m = plans.micro_batches
    layers_per_chunk = spec.layers / (plans.pp * plans.v)
    interleaved = plans.schedule == SCHEDULE_NAMES.index("interleaved")
    ok = plans.gpus == gpus
    ok &= plans.tp <= gpus_per_node
    ok &= (spec.heads % plans.tp == 0) & (spec.kv_heads % plans.tp == 0)
    ok &= ~plans.sp | (plans.tp > 1)
    ok &= spec.seq_len % (2 * plans.cp * np.where(plans.sp, plans.tp, 1)) == 0
    ok &= (plans.cp == 1) | (spec.seq_len % (2 * plans.cp) == 0)
    ok &= layers_per_chunk == np.floor(layers_per_chunk)
    ok &= m == np.floor(m)
    ok &= np.where(interleaved, (plans.v > 1) & (plans.pp > 1) & (np.mod(m, plans.pp) == 0), plans.v == 1)
    ok &= (plans.pp > 1) | (plans.schedule == SCHEDULE_NAMES.index("1f1b"))
    ok &= (plans.dp % plans.ep == 0)
    ok &= (plans.ep == 1) | ((spec.experts > 0) & (spec.experts % np.maximum(plans.ep, 1) == 0))
    ok &= (plans.zero == 0) | (plans.dp > 1)
    return ok


def problems(spec: TransformerSpec, plan: Plan, gpus: int | None = None, gpus_per_node: int = 8) -> list[str]:
    """Why ``plan`` cannot run ``spec`` (on ``gpus`` GPUs, nodes of ``gpus_per_node``); empty: it can."""
    out = []
    if gpus is not None and plan.gpus != gpus:
        out.append(f"tp x cp x pp x dp = {plan.gpus}, not {gpus} GPUs")
    if plan.tp > gpus_per_node:
        out.append(f"tp ({plan.tp}) must fit in a node ({gpus_per_node} GPUs)")
    if spec.heads % plan.tp or spec.kv_heads % plan.tp:
        out.append(f"tp ({plan.tp}) must divide the heads ({spec.heads}) and KV heads ({spec.kv_heads})")
    if plan.sp and plan.tp == 1:
        out.append("sequence parallelism needs tp > 1")
    if spec.seq_len % (2 * plan.cp * (plan.tp if plan.sp else 1)):
        out.append(f"the sequence ({spec.seq_len}) must split into 2 x cp x (tp with sp) equal chunks")
    if spec.layers % (plan.pp * plan.v):
        out.append(f"pp x v ({plan.pp} x {plan.v}) must divide the layers ({spec.layers})")
    m = plan.micro_batches
    if m != int(m):
        out.append(f"the global batch ({plan.global_batch}) must be a multiple of micro-batch x dp "
                   f"({plan.micro_batch} x {plan.dp})")
    if plan.schedule == "interleaved":
        if plan.v < 2 or plan.pp < 2:
            out.append("the interleaved schedule needs v >= 2 and pp >= 2")
        elif m % plan.pp:
            out.append(f"the interleaved schedule needs the micro-batches ({m:g}) to be a multiple of pp "
                       "(Narayanan et al. 2021, Section 2.2.2)")
    elif plan.v != 1:
        out.append("v > 1 needs the interleaved schedule")
    if plan.pp == 1 and plan.schedule != "1f1b":
        out.append("a schedule other than 1f1b needs pp > 1 (one stage has no pipeline)")
    if plan.dp % plan.ep:
        out.append(f"ep ({plan.ep}) must divide dp ({plan.dp})")
    if plan.ep > 1 and (not spec.moe or spec.experts % plan.ep):
        out.append(f"ep ({plan.ep}) needs a mixture of experts whose experts ({spec.experts}) it divides")
    if plan.zero and plan.dp == 1:
        out.append("ZeRO needs dp > 1")
    return out
