"""What a message's latency steps cost beside compute: its contended floor, its least time while compute runs
beside it (``Environment.contended_step``), and the compute it takes (``Environment.compute_loss_step``).

A message of S latency steps takes at least S x contended_step beside compute, and takes S x compute_loss_step
from that compute (:mod:`.engine`, where the rates are derived). S is the message's price in the same library
and algorithm on a link of unit alpha (every level) and no bandwidth term: 2 (p - 1) for a ring all-reduce,
(p - 1) below gloo's 8p bytes (``GLOO_RING_SEGMENTS``), one per hop of each level for hierarchical ones.
NCCL's per-hop latencies are its own constants, not alpha: there S counts only what the environment's alpha
prices.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..environment_array import EnvironmentArray
from ..messages import WIRE, Comm

ZEROED = ("gamma", "burst_bytes", "kappa_c", "kappa_m", "host_overhead", "contended_step", "compute_loss_step",
          "host_copy", "host_fault")  # a message's steps, not its host buffers


def latency_steps(comm: Comm, p: np.ndarray, env: EnvironmentArray, sizes: Any) -> Any:
    """S, the latency steps of each message ``comm`` prices, (C, m): its price on a link of unit alpha and no
    bandwidth term (module docstring)."""
    ones, tiny = np.ones(env.shape), np.full(env.shape, 1e-300)  # beta must be > 0: 1e-300 s/B adds nothing
    unit = replace(env, alpha=ones, intra_alpha=ones, beta=tiny, intra_beta=tiny,
                   **{k: np.zeros(env.shape) for k in ZEROED})
    wire = WIRE.get()  # a compressed message: the same primitive, without its decoding
    token = WIRE.set(None if wire is None else replace(wire, decode_per_byte=0.0))
    try:
        return Comm(comm.primitive, p, unit, comm.algorithm, comm.params)(sizes)
    finally:
        WIRE.reset(token)


def contended_floor(comm: Comm, p: np.ndarray, env: EnvironmentArray, sizes: Any) -> Any:
    """S x ``env.contended_step`` of each message ``comm`` prices, (C, m); 0 where no entry has a contended step."""
    step = env.contended_step
    if not np.any(step):
        return 0.0
    return latency_steps(comm, p, env, sizes) * step


def compute_loss(comm: Comm, p: np.ndarray, env: EnvironmentArray, sizes: Any) -> Any:
    """S x ``env.compute_loss_step``: the compute seconds each message ``comm`` prices takes from the compute
    beside it, (C, m); 0 where no entry has one (:mod:`.engine`, where it is spent)."""
    step = env.compute_loss_step
    if not np.any(step):
        return 0.0
    return latency_steps(comm, p, env, sizes) * step
