"""Communication per group of a plan: how many bytes each collective moves, how often, and its time.

Every collective is priced by the environment's library (:func:`costmodels.choose`, vectorized over the
plans) on the view of the environment that its group sees (:mod:`.groups`); point-to-point messages by
:func:`.groups.p2p_time`. Sizes follow the library's conventions (:data:`costmodels.PRIMITIVES`: n is the
whole buffer of an allreduce, reduce-scatter or all-gather; for all-to-all what each rank sends). Counts
are per micro-batch on the busiest pipeline stage (L/pp blocks), or per iteration for gradients. The
planner's tens of thousands of plans share a few dozen messages per collective (size, group size, stride):
each distinct one is priced once and its price spread over the plans (:func:`distinct`; the same numbers as
pricing every plan, which ``DEDUP = False`` does).

* **tp** (Shoeybi et al. 2019, Section 3; Narayanan et al. 2021, Section 3.2): per block 2 allreduces of
  b s h values in the forward pass and 2 in the backward, 2 more in a fully recomputed forward; with
  sequence parallelism (Korthikanti et al. 2022, Section 4.2.2) each allreduce becomes a reduce-scatter and
  an all-gather of the same buffer. On the critical path (Megatron without communication-overlap options).
* **pp**: each micro-batch crosses each stage boundary once forward and once backward, v times with v
  virtual stages; b s h / tp values per message (Narayanan et al. 2021, Section 4.1: scatter/gather over the
  tensor-parallel ranks; sequence parallelism shards it the same way).
* **dp** (Rajbhandari et al. 2020, ZeRO, Section 7): gradients of the stage's weights, reduced over the
  dp x cp ranks that hold the same weights: stage 0 one allreduce (2 Psi of traffic), stages 1-2 a
  reduce-scatter of gradients and an all-gather of updated weights (2 Psi), stage 3 an all-gather of weights
  in the forward and again in the backward and a reduce-scatter of gradients (3 Psi), per micro-batch.
  Expert weights are reduced over dp x cp / ep ranks.
* **ep** (Lepikhin et al. 2021, GShard, Section 2.2; Fedus et al. 2022, Switch): per mixture block an
  all-to-all dispatch and combine of b s top_k h values forward, 2 backward, 2 more when recomputed.
* **cp** (Liu et al. 2023, Ring Attention, Section 3): per block cp - 1 ring steps, each passing the local
  K and V (2 b (s/cp) kv values / tp) forward, K, V and their gradients backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..environment import Environment
from ..libraries import choose
from .groups import group_view, p2p_time
from .plan import RECOMPUTE, PlanArray
from .specs import TransformerSpec

FULL = RECOMPUTE.index("full")
DEDUP = True  # price each distinct message once (tests compare with False: every plan priced)
DEDUP_MIN = 64


@dataclass(frozen=True, eq=False)
class GroupCost:
    """One collective (or point-to-point message) of a group, over the plans: ``nbytes`` per call,
    ``calls`` on the busiest stage per micro-batch (``per`` = "micro-batch") or per iteration, the time
    of one call, the library's algorithm and protocol, ``ranks`` in the group, and ``volume``: values
    per call that the formula counts (b s h for tp, Psi for dp), for checks against the papers."""

    group: str
    primitive: str
    per: str
    nbytes: np.ndarray
    calls: np.ndarray
    time: np.ndarray
    algorithm: Any
    protocol: Any
    ranks: np.ndarray
    volume: np.ndarray

    @property
    def total(self) -> np.ndarray:
        """Time of all calls (per micro-batch or per iteration, as ``per`` says)."""
        return self.calls * self.time


def distinct(nbytes: np.ndarray, k: np.ndarray, stride: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The first index of each distinct (nbytes, k, stride) triple of 1-d arrays and, for every element, which
    of them it is (``first[inverse]`` gives back equal triples); None where dedup does not pay (a few elements,
    or nearly all distinct). Tens of thousands of plans share a few dozen messages per collective."""
    if nbytes.ndim != 1 or len(nbytes) < DEDUP_MIN:
        return None
    _, sizes = np.unique(nbytes, return_inverse=True)
    k_max, s_max = int(k.max()) + 1, int(stride.max()) + 1
    if k.min() < 0 or stride.min() < 0 or k_max * s_max * (len(nbytes) + 1) >= 2**62:
        return None
    key = (sizes.astype(np.int64) * k_max + k) * s_max + stride
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return (first, inverse) if len(first) * 2 <= len(nbytes) else None


def _once(values: Any, k: Any, stride: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`distinct` of a group's messages (``values``: what each moves, up to a constant factor), shared
    by the group's collectives (None: every plan priced, :data:`DEDUP` off)."""
    if not DEDUP:
        return None
    values, k, stride = np.broadcast_arrays(np.asarray(values, dtype=np.float64), np.asarray(k, dtype=np.int64),
                                            np.asarray(stride, dtype=np.int64))
    return distinct(values, k, stride)


def _collective(group: str, primitive: str, per: str, nbytes: Any, calls: Any, k: Any, stride: Any,
                env: Environment, volume: Any, once: tuple[np.ndarray, np.ndarray] | None = None) -> GroupCost:
    """One collective of a group over the plans; ``once``: :func:`_once` of (values proportional to ``nbytes``,
    ``k``, ``stride``), so that each distinct message is priced once (None: every plan's)."""
    k = np.asarray(k, dtype=np.int64)
    nbytes, calls, k, stride, volume = np.broadcast_arrays(np.asarray(nbytes, dtype=np.float64),
                                                           np.asarray(calls, dtype=np.float64), k,
                                                           np.asarray(stride, dtype=np.int64),
                                                           np.asarray(volume, dtype=np.float64))
    # the library prices each distinct message once (its choice at a point does not depend on the others)
    if once is None:
        c = choose(primitive, nbytes, k, group_view(k, stride, env))
        time = np.asarray(c.time, dtype=np.float64)
        algorithm, protocol = np.where(k > 1, c.algorithm, "-"), np.where(k > 1, c.protocol, "-")
    else:
        first, inverse = once
        c = choose(primitive, nbytes[first], k[first], group_view(k[first], stride[first], env))
        time = np.asarray(c.time, dtype=np.float64)[inverse]
        several = k[first] > 1
        algorithm = np.where(several, c.algorithm, "-")[inverse]
        protocol = np.where(several, c.protocol, "-")[inverse]
    return GroupCost(group, primitive, per, nbytes, np.where(k > 1, calls, 0.0), time, algorithm, protocol, k, volume)


def _p2p(group: str, per: str, nbytes: Any, calls: Any, k: Any, stride: Any, env: Environment,
         volume: Any) -> GroupCost:
    nbytes, calls, k, stride, volume = np.broadcast_arrays(np.asarray(nbytes, dtype=np.float64),
                                                           np.asarray(calls, dtype=np.float64), np.asarray(k),
                                                           np.asarray(stride), np.asarray(volume, dtype=np.float64))
    t = p2p_time(nbytes, k, stride, env)
    calls = np.where(k > 1, calls, 0.0)
    return GroupCost(group, "send_recv", per, nbytes, calls, t, np.where(k > 1, "p2p", "-"),
                     np.where(k > 1, "alpha+n*beta", "-"), k, volume)


def stage_weights(spec: TransformerSpec, plans: PlanArray) -> tuple[np.ndarray, np.ndarray]:
    """(non-expert, expert) weights per GPU on the busiest stage: its blocks / tp, the embedding (the input
    one, and with one stage the output one too), routed experts / (tp ep) (derived here)."""
    blocks = spec.params - spec.embedding_weights - spec.expert_params
    emb = np.where(plans.pp == 1, spec.embedding_weights, spec.vocab * spec.hidden)
    dense = (blocks / plans.pp + emb) / plans.tp
    experts = spec.expert_params / (plans.pp * plans.tp * plans.ep)
    return dense, experts


def communication(spec: TransformerSpec, plans: PlanArray, env: Environment, *,
                  grad_bytes: int | None = None) -> dict[str, list[GroupCost]]:
    """Every group's collectives for each plan (see the module docstring), keyed by group."""
    B = spec.bytes_per_value
    gb = B if grad_bytes is None else grad_bytes
    b = plans.micro_batch.astype(np.float64)
    s_local = spec.seq_len / plans.cp
    h = spec.hidden
    blocks = spec.layers / plans.pp
    moe_blocks = spec.moe_layers / plans.pp
    forward_passes = 1 + (plans.recompute == FULL)
    out: dict[str, list[GroupCost]] = {}

    # tensor parallelism: 2 per block per pass
    act = b * s_local * h
    tp_calls = blocks * 2 * (forward_passes + 1)
    stride_tp = plans.stride("tp")
    no_sp = np.where(plans.sp, 0.0, tp_calls)
    with_sp = np.where(plans.sp, tp_calls, 0.0)
    once = _once(act, plans.tp, stride_tp)
    out["tp"] = [_collective("tp", prim, "micro-batch", act * B, calls, plans.tp, stride_tp, env, act, once)
                 for prim, calls in (("allreduce", no_sp), ("reduce_scatter", with_sp), ("allgather", with_sp))]

    # pipeline: forward and backward send per virtual stage
    pp_values = act / plans.tp
    out["pp"] = [_p2p("pp", "micro-batch", pp_values * B, 2 * plans.v, plans.pp, plans.stride("pp"), env, pp_values)]

    # data parallelism (and ZeRO) over dp x cp ranks holding the same weights
    dense, experts = stage_weights(spec, plans)
    dpk = plans.dp * plans.cp
    stride_dp = plans.stride("cp")
    m = plans.micro_batches
    dp_groups = []
    for weights, k, stride, tag in ((dense, dpk, stride_dp, ""), (experts, dpk // plans.ep, stride_dp * plans.ep,
                                                                    " (experts)")):
        z0, z12, z3 = plans.zero == 0, (plans.zero == 1) | (plans.zero == 2), plans.zero == 3
        has = weights > 0
        once = _once(weights, k, stride)
        dp_groups += [
            _collective("dp" + tag, "allreduce", "iteration", weights * gb, z0 & has, k, stride, env, weights, once),
            _collective("dp" + tag, "reduce_scatter", "iteration", weights * gb, np.where(z3, m, z12) * has, k,
                        stride, env, weights, once),
            _collective("dp" + tag, "allgather", "iteration", weights * B, np.where(z3, 2 * m, z12) * has, k,
                        stride, env, weights, once),
        ]
    out["dp"] = dp_groups

    # expert parallelism: dispatch and combine per mixture block per pass
    tokens = b * s_local * spec.top_k * h / np.where(plans.sp, plans.tp, 1)
    ep_calls = moe_blocks * 2 * (forward_passes + 1)
    stride_ep = plans.stride("ep")
    out["ep"] = [_collective("ep", "all_to_all", "micro-batch", tokens * B, np.where(plans.ep > 1, ep_calls, 0),
                             plans.ep, stride_ep, env, tokens, _once(tokens, plans.ep, stride_ep))]

    # context parallelism: cp - 1 ring steps per block, K and V forward, twice that backward
    kv = 2 * b * s_local * spec.kv_dim / plans.tp
    cp_calls = blocks * (plans.cp - 1) * (forward_passes + 2)
    out["cp"] = [_p2p("cp", "micro-batch", kv * B, cp_calls, plans.cp, plans.stride("cp"), env, kv)]
    return out
