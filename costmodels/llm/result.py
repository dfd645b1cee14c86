"""One plan's prediction as plain values (:class:`PlanResult`): what ``cm.plan`` returns and a CLI or app shows.

It reads one row of an :class:`~.iteration.Evaluation`: iteration time and its parts, MFU, TFLOP/s per GPU,
tokens/s, each group's collectives (bytes, calls, the library's algorithm and protocol, time, exposed time
and what it overlaps with), the memory per GPU against the device, and the pipeline timeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..environment import Environment
from ..timeline import Timeline
from .iteration import Evaluation
from .pipeline import timeline
from .plan import Plan
from .specs import TransformerSpec

OVERLAPS = {  # what each group's communication overlaps with (see costmodels.llm.iteration)
    "tp": "nothing: on the critical path",
    "pp": "nothing: between a stage's micro-batches",
    "dp": "the last micro-batch's backward (gradients); nothing (ZeRO-1/2 weight all-gather); compute (ZeRO-3)",
    "ep": "nothing: on the critical path",
    "cp": "each ring step's block of attention",
}


@dataclass(frozen=True)
class GroupRow:
    """One collective of one group for this plan."""

    group: str
    primitive: str
    ranks: int
    nbytes: float
    calls: float
    per: str
    algorithm: str
    protocol: str
    time: float
    total: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PlanResult:
    """The prediction for one plan (times in seconds per iteration, memory in bytes per GPU)."""

    spec: TransformerSpec
    plan: Plan
    env: Environment
    device: str
    iteration_time: float
    compute: float
    bubble: float
    exposed: dict[str, float]
    optimizer: float
    mfu: float
    tflops_per_gpu: float
    tokens_per_s: float
    memory: dict[str, float]
    device_memory: float
    groups: list[GroupRow] = field(default_factory=list)
    t_f: float = 0.0
    t_b: float = 0.0
    t_w: float = 0.0
    t_p2p: float = 0.0

    @property
    def oom(self) -> bool:
        """True when the memory per GPU exceeds the device's."""
        return self.memory["total"] > self.device_memory

    @property
    def bubble_fraction(self) -> float:
        return self.bubble / self.iteration_time

    @property
    def exposed_comm(self) -> float:
        return sum(self.exposed.values())

    def timeline(self) -> Timeline:
        """The pipeline of one iteration, one stream per stage (:func:`.pipeline.timeline`); export it with
        ``.to_chrome_trace()``."""
        p = self.plan
        return timeline(p.schedule, p.pp, int(p.micro_batches), p.v, self.t_f, self.t_b, self.t_w, self.t_p2p)

    def summary(self) -> str:
        gib = 2**30
        return (f"{self.spec.name} on {self.plan.gpus} GPUs, {self.plan.label()}: "
                f"{self.iteration_time:.3g} s/iteration, "
                f"MFU {self.mfu:.1%}, {self.tokens_per_s:,.0f} tokens/s, {self.memory['total'] / gib:.1f} GiB/GPU"
                + (" (OOM)" if self.oom else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec.name, "plan": self.plan.to_dict(), "label": self.plan.label(),
                "environment": self.env.name, "device": self.device, "iteration_time_s": self.iteration_time,
                "compute_s": self.compute, "bubble_s": self.bubble, "exposed_s": dict(self.exposed),
                "optimizer_s": self.optimizer, "mfu": self.mfu, "tflops_per_gpu": self.tflops_per_gpu,
                "tokens_per_s": self.tokens_per_s, "memory_bytes": dict(self.memory),
                "device_memory_bytes": self.device_memory, "oom": self.oom,
                "groups": [g.to_dict() for g in self.groups]}


def result_of(ev: Evaluation, i: int, env: Environment) -> PlanResult:
    """Row ``i`` of an evaluation as a :class:`PlanResult`."""
    rows = []
    for name, costs in ev.groups.items():
        for g in costs:
            calls = float(g.calls[i])
            if calls <= 0:
                continue
            rows.append(GroupRow(name if g.group == name else g.group, g.primitive, int(g.ranks[i]),
                                 float(g.nbytes[i]), calls, g.per, str(g.algorithm[i]), str(g.protocol[i]),
                                 float(g.time[i]), float(g.total[i])))
    mem = ev.memory
    memory = {"weights": float(mem.weights[i]), "gradients": float(mem.gradients[i]),
              "optimizer": float(mem.optimizer[i]), "activations": float(mem.activations[i]),
              "total": float(mem.total[i])}
    return PlanResult(spec=ev.spec, plan=ev.plans.plan(i), env=env, device=ev.device.name,
                      iteration_time=float(ev.time[i]), compute=float(ev.compute[i]), bubble=float(ev.bubble[i]),
                      exposed={k: float(v[i]) for k, v in ev.exposed.items()}, optimizer=float(ev.optimizer[i]),
                      mfu=float(ev.mfu[i]), tflops_per_gpu=float(ev.tflops[i]),
                      tokens_per_s=float(ev.tokens_per_s[i]), memory=memory, device_memory=ev.device.memory,
                      groups=rows, t_f=float(ev.t_f[i]), t_b=float(ev.t_b[i]), t_w=float(ev.t_w[i]),
                      t_p2p=float(ev.t_p2p[i]))
