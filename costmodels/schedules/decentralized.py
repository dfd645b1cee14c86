"""Decentralised SGD: D-PSGD (Lian et al., NeurIPS 2017), each rank gossiping its model with its neighbours.

Every iteration: forward, backward, the local SGD step (the optimizer step), then one gossip exchange of the
whole model (every gradient tensor's bytes) with the topology's neighbours, priced by the ``gossip``
collectives (``gossip_ring``: min(p - 1, 2) (alpha + n beta + n gamma), the neighbours' models summed at
gamma per byte; ``gossip_torus`` for ``topology="torus"``). Nothing overlaps: the exchange starts after the
step (``runners/training/decentralized.py``: DPSGD communicates after the local step). Host overhead: the
training thread posts one exchange per neighbour, o each, before it waits (derived here: the posts are serial
on that thread and the transfers cannot finish before the last post), so T = F + B + U + d o + gossip, with d
the neighbours (ring: min(p - 1, 2); torus: 4). Interference has nothing to act on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..environment import Environment
from ..errors import CommscopeError
from ..messages import Comm
from ..profiles import ModelProfile
from ..timeline import Event, Timeline
from .blocks import _compute_events, _validated
from .core import SCHEDULES, TERMS, Configurations, IterationResult, Schedule, TermsRun

ALGORITHMS = {"ring": "gossip_ring", "torus": "gossip_torus"}


def _algorithm(topology: Any) -> str:
    if topology not in ALGORITHMS:
        raise CommscopeError(f"topology {topology!r} has no gossip cost model; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[topology]


def neighbours(topology: str, p: Any) -> np.ndarray:
    """Neighbours each rank exchanges with: ring min(p - 1, 2), torus 4 (p >= 9)."""
    p = np.asarray(p)
    return np.minimum(p - 1, 2) if topology == "ring" else np.full(p.shape, 4)


def _dpsgd(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *, topology: str = "ring",
           **params: Any) -> IterationResult:
    nbytes, _ = _validated(prof, env, p)
    algorithm = _algorithm(topology)
    events, _ = _compute_events(prof)
    total = float(nbytes.sum())
    if p > 1:
        t = float(Comm("gossip", p, env, algorithm, params)(total)[0])
        events.append(Event("comm", "gossip", f"model with the {topology} neighbours", prof.compute_s,
                            prof.compute_s + t, total))
    tl = Timeline.of(events)
    return IterationResult("dpsgd", p, max(tl.end, prof.compute_s), prof.compute_s, prof.batch_size, tl,
                           {"topology": topology, "messages": int(neighbours(topology, p)) if p > 1 else 0})


def _dpsgd_kernel(cfg: Configurations, collective: str | None = None, *, topology: str = "ring",
                  **params: Any) -> np.ndarray:
    gossip = cfg.comm("gossip", _algorithm(topology), params)(np.array([[cfg.nbytes.sum()]]))[:, 0]
    return cfg.prof.compute_s + np.where(cfg.p[:, 0] > 1, gossip, 0.0)


def _dpsgd_terms(cfg: Configurations, collective: str | None, record: bool, *, topology: str = "ring",
                 **params: Any) -> TermsRun:
    prof = cfg.prof
    total = float(cfg.nbytes.sum())
    many = cfg.p[:, 0] > 1
    gossip = np.where(many, cfg.comm("gossip", _algorithm(topology), params)(np.array([[total]]))[:, 0], 0.0)
    posts = np.where(many, neighbours(topology, cfg.p[:, 0]) * cfg.overhead[:, 0], 0.0)
    step = prof.compute_s + prof.optimizer_s
    evs = None
    if record:
        evs, _ = _compute_events(prof)
        evs.append(Event("compute", "optimizer", "step", prof.compute_s, step))
        if bool(many[0]):
            start = step + float(posts[0])
            evs.append(Event("comm", "gossip", f"model with the {topology} neighbours", start,
                             start + float(gossip[0]), total))
    return TermsRun(step + posts + gossip, evs,
                    {"topology": topology, "communication_s": gossip, "host_overhead_s": posts,
                     "optimizer_s": np.full(len(gossip), prof.optimizer_s)})


SCHEDULES.register(Schedule(
    "dpsgd", "local step, then the model exchanged with the topology's neighbours and averaged (no overlap)",
    "Lian et al., 'Can decentralized algorithms outperform centralized algorithms?', NeurIPS 2017 (D-PSGD)",
    "gossip", {"topology": "ring"}, _dpsgd, vectorized=_dpsgd_kernel,
    placement="o: the training thread posts one exchange per neighbour (d o) after the local step, then waits "
              "(runners/training/decentralized.py: DPSGD's isend/irecv); optimizer step: the local step, before "
              "the exchange; interference: nothing overlaps"))
TERMS["dpsgd"] = _dpsgd_terms
