"""Pipeline schedules: their bubble, and a timeline of one iteration (stages as streams, Chrome trace).

``PIPELINE_SCHEDULES`` holds one entry per schedule, with the bubble (idle time of the busiest stage per
iteration) from its paper, for p stages, m micro-batches, v virtual stages per GPU and the forward and
backward time of one micro-batch on one stage (all its chunks), t_f and t_b:

* ``gpipe`` (Huang et al. 2019, GPipe, Section 2.3; Narayanan et al. 2021, Section 2.2.1): (p - 1)(t_f + t_b),
  a fraction (p - 1)/m of the ideal time m (t_f + t_b);
* ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021, Section 2.2.1): the same bubble as GPipe, fewer
  micro-batches in flight;
* ``interleaved`` (Narayanan et al. 2021, Section 2.2.2): (p - 1)(t_f + t_b)/v, a fraction (p - 1)/(m v);
* ``zb-h1`` (Qi et al. 2023, 'Zero Bubble Pipeline Parallelism', Section 3.1): the backward split into the
  input gradient B and the weight gradient W, W's deferred into the bubble: (p - 1)(T_F + T_B - T_W), with
  T_W the weight-gradient GEMMs (half of the backward's, t_w) and T_B = t_b - t_w: 1/3 of 1F1B's when
  T_F = T_B = T_W.

:func:`timeline` simulates the schedule's order of operations per stage (derived here: each stage runs its
list in order; a forward waits for the previous stage's, a backward for the next stage's, plus one
point-to-point message) and returns a :class:`~costmodels.timeline.Timeline` with one stream per stage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..registry import Registry
from ..timeline import Event, Timeline


@dataclass(frozen=True)
class PipelineSchedule:
    """A pipeline schedule: ``bubble(p, m, v, t_f, t_b, t_w)`` seconds per iteration (arrays broadcast)."""

    name: str
    description: str
    source: str
    bubble: Callable[..., Any]


PIPELINE_SCHEDULES: Registry[PipelineSchedule] = Registry("pipeline schedule")


def _flush(p: Any, m: Any, v: Any, tf: Any, tb: Any, tw: Any) -> Any:
    return (np.asarray(p) - 1) * (np.asarray(tf) + tb)


PIPELINE_SCHEDULES.register(PipelineSchedule(
    "gpipe", "all forwards, then all backwards; m micro-batches of activations in flight",
    "Huang et al. 2019, GPipe, Section 2.3; bubble (p-1)/m: Narayanan et al. 2021, Section 2.2.1", _flush))
PIPELINE_SCHEDULES.register(PipelineSchedule(
    "1f1b", "PipeDream-Flush: one forward, one backward in steady state; at most p micro-batches in flight",
    "Narayanan et al. 2021, SC'21, Section 2.2.1 (bubble (p-1)/m, as GPipe)", _flush))
PIPELINE_SCHEDULES.register(PipelineSchedule(
    "interleaved", "1F1B over v model chunks per GPU: the bubble divided by v, v times the pipeline messages",
    "Narayanan et al. 2021, SC'21, Section 2.2.2 (bubble (p-1)/(m v))",
    lambda p, m, v, tf, tb, tw: (np.asarray(p) - 1) * (np.asarray(tf) + tb) / v))
PIPELINE_SCHEDULES.register(PipelineSchedule(
    "zb-h1", "zero-bubble H1: weight-gradient passes deferred into the bubble; 1F1B's memory",
    "Qi et al. 2023, 'Zero Bubble Pipeline Parallelism' (ICLR 2024), Section 3.1: bubble (p-1)(T_F + T_B - T_W)",
    lambda p, m, v, tf, tb, tw: (np.asarray(p) - 1) * np.maximum(np.asarray(tf) + tb - 2 * np.asarray(tw), tf)))


def bubble_fraction(schedule: str, p: Any, m: Any, v: Any = 1) -> Any:
    """The bubble over the ideal time m (t_f + t_b) with t_f = t_b / 2 = t_w: (p-1)/m, (p-1)/(m v), or
    (p-1)/(3m) for ZB-H1."""
    tf, tb, tw = 1.0, 2.0, 1.0
    return PIPELINE_SCHEDULES.get(schedule).bubble(p, m, v, tf, tb, tw) / (np.asarray(m) * (tf + tb))


def _order(schedule: str, stage: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """(kind, micro-batch, chunk) in the order stage ``stage`` runs them."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    total = m * v

    def ident(k: int, forward: bool) -> tuple[int, int]:  # Megatron's virtual micro-batch k -> (mb, chunk)
        chunk = (k // p) % v
        return (k // (p * v)) * p + k % p, chunk if forward else v - 1 - chunk

    warm = min(total, (p - stage - 1) * 2 + (v - 1) * p) if v > 1 else min(m, p - stage - 1)
    out: list[tuple[str, int, int]] = []
    f = b = 0
    for _ in range(warm):
        out.append(("F", *ident(f, True)))
        f += 1
    while b < total:
        if f < total:
            out.append(("F", *ident(f, True)))
            f += 1
        out.append(("B", *ident(b, False)))
        b += 1
    return out


def timeline(schedule: str, p: int, m: int, v: int, t_f: float, t_b: float, t_w: float = 0.0,
             t_p2p: float = 0.0) -> Timeline:
    """One iteration's pipeline: each stage's forward (t_f / v per chunk) and backward (t_b / v) in the
    schedule's order; messages take t_p2p between stages. ZB-H1 runs B (t_b - t_w) and W (t_w) apart, greedily
    (:func:`_zero_bubble`)."""
    if schedule == "zb-h1":
        return _zero_bubble(p, m, t_f, t_b - t_w, t_w, t_p2p)
    dur = {"F": t_f / v, "B": t_b / v}
    orders = [_order(schedule, i, p, m, v) for i in range(p)]
    done: dict[tuple[str, int, int, int], float] = {}
    free = [0.0] * p
    pos = [0] * p
    events: list[Event] = []
    while any(pos[i] < len(orders[i]) for i in range(p)):
        progressed = False
        for i in range(p):
            while pos[i] < len(orders[i]):
                kind, mb, c = orders[i][pos[i]]
                dep = _dependency(kind, i, mb, c, p, v)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (t_p2p if dep[1] != i else 0.0)
                start = max(free[i], ready)
                end = start + dur[kind]
                done[(kind, i, mb, c)] = end
                free[i] = end
                events.append(Event(f"stage {i}", KINDS[kind], f"mb{mb}" + (f" chunk{c}" if v > 1 else ""),
                                    start, end))
                pos[i] += 1
                progressed = True
        if not progressed:  # an order that waits on itself (never with the schedules above)
            raise RuntimeError(f"{schedule} order deadlocks at p={p}, m={m}, v={v}")
    return Timeline.of(events)


KINDS = {"F": "forward", "B": "backward", "W": "weight-gradient"}


def _zero_bubble(p: int, m: int, t_f: float, t_b: float, t_w: float, t_p2p: float) -> Timeline:
    """ZB-H1 as a greedy list schedule (derived here from Qi et al. 2023, Section 3.1): at each moment a stage
    runs a ready B first, else a ready F while it holds fewer than p - i micro-batches (1F1B's memory), else a
    deferred W; the earliest possible operation of all stages is committed first."""
    f_done: dict[tuple[int, int], float] = {}
    b_done: dict[tuple[int, int], float] = {}
    next_f, next_b, free = [0] * p, [0] * p, [0.0] * p
    pending: list[list[int]] = [[] for _ in range(p)]
    events: list[Event] = []
    rank = {"B": 0, "F": 1, "W": 2}
    while any(next_b[i] < m or pending[i] for i in range(p)):
        best: tuple[float, int, str, int] | None = None
        for i in range(p):
            cands = []
            if next_b[i] < m:
                mb = next_b[i]
                dep = f_done.get((i, mb)) if i == p - 1 else b_done.get((i + 1, mb))
                if dep is not None:
                    cands.append((max(free[i], dep + (0.0 if i == p - 1 else t_p2p)), "B", mb))
            if next_f[i] < m and next_f[i] - next_b[i] < p - i:
                mb = next_f[i]
                dep = 0.0 if i == 0 else f_done.get((i - 1, mb))
                if dep is not None:
                    cands.append((max(free[i], dep + (t_p2p if i else 0.0)), "F", mb))
            if pending[i]:
                cands.append((free[i], "W", pending[i][0]))
            if not cands:
                continue
            now = [c for c in cands if c[0] <= free[i]]
            start, kind, mb = min(now or cands, key=lambda c: (rank[c[1]], c[0]) if now else (c[0], rank[c[1]]))
            if best is None or start < best[0]:
                best = (start, i, kind, mb)
        if best is None:
            raise RuntimeError(f"zb-h1 deadlocks at p={p}, m={m}")
        start, i, kind, mb = best
        end = start + {"F": t_f, "B": t_b, "W": t_w}[kind]
        if kind == "F":
            f_done[(i, mb)] = end
            next_f[i] += 1
        elif kind == "B":
            b_done[(i, mb)] = end
            next_b[i] += 1
            pending[i].append(mb)
        else:
            pending[i].pop(0)
        free[i] = end
        events.append(Event(f"stage {i}", KINDS[kind], f"mb{mb}", start, end))
    return Timeline.of(events)


def _dependency(kind: str, stage: int, mb: int, chunk: int, p: int, v: int) -> tuple[str, int, int, int] | None:
    """What an operation waits for: the previous stage's forward, or the next stage's backward."""
    if kind == "F":
        if stage > 0:
            return ("F", stage - 1, mb, chunk)
        return None if chunk == 0 else ("F", p - 1, mb, chunk - 1)
    if stage < p - 1:
        return ("B", stage + 1, mb, chunk)
    return ("F", stage, mb, chunk) if chunk == v - 1 else ("B", 0, mb, chunk + 1)
