"""Memory per GPU: model states by ZeRO stage and activations by recomputation mode.

**Model states** (Rajbhandari et al. 2020, 'ZeRO', Section 3.1 and Figure 1): mixed-precision Adam keeps
2 Psi bytes of 16-bit weights, 2 Psi of 16-bit gradients and K Psi = 12 Psi of optimizer states (fp32
weights, momentum and variance): 16 Psi in all. ZeRO shards over the N_d data-parallel ranks the
optimizer states (stage 1: 4 Psi + 12 Psi / N_d), and the gradients (stage 2: 2 Psi + 14 Psi / N_d), and the
weights (stage 3: 16 Psi / N_d). Psi is what one GPU holds after tensor, pipeline and expert parallelism
(:func:`.comm.stage_weights`); expert weights are sharded over dp x cp / ep ranks, the others over dp x cp.

**Activations** (Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models',
Section 4): one GPT block stores s b h (34 + 5 a s / h) bytes with 16-bit activations (Section 4.1,
eq. (1)); with tensor parallelism t, s b h (10 + 24/t + 5 a s / (h t)) (Section 4.2.1, eq. (2)); with
sequence parallelism too, s b h / t (34 + 5 a s / h) (Section 4.2.2, eq. (4)); selective recomputation
drops the 5 a s / h term (Section 5: 34 s b h / t); full recomputation keeps the block's input, 2 s b h
(Section 5; / t with sequence parallelism), plus one block's activations while it is recomputed (derived
here). :func:`layer_activations` derives the coefficients for other shapes by the same accounting (Section
4.1: 2 bytes per stored 16-bit value, 1 per dropout-mask byte): attention 7 sbh + 4 sb kv + 5 a s^2 b
(11 sbh with kv = h), MLP 3 sbh + 4 sb F (gated: 3 sbh + 8 sb F; 19 sbh for F = 4h), layer norms 4 sbh;
10 sbh of them are not split by tensor parallelism without sequence parallelism. A mixture block stores
its MLP's activations for top_k copies of each token. s is the sequence / cp.

**In flight** (Korthikanti et al. 2022, Section 4.2.3): with 1F1B the first stage holds p micro-batches of
its L/p blocks, L blocks in all; interleaved, L (1 + (p - 1)/(p v)); GPipe holds all m micro-batches of its
blocks; ZB-H1 as 1F1B (Qi et al. 2023, Section 3.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .comm import stage_weights
from .plan import RECOMPUTE, SCHEDULE_NAMES, PlanArray
from .specs import TransformerSpec

OPTIMIZER_BYTES = 12  # ZeRO's K for mixed-precision Adam


def model_state_bytes(psi: np.ndarray, shards: np.ndarray, zero: np.ndarray, *, weight_bytes: int = 2,
                      grad_bytes: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer states) bytes per GPU of Psi weights sharded by ZeRO ``zero`` over
    ``shards`` ranks: ZeRO Section 3.1 / Figure 1 (16 Psi without sharding)."""
    weights = psi * weight_bytes / np.where(zero >= 3, shards, 1)
    grads = psi * grad_bytes / np.where(zero >= 2, shards, 1)
    optimizer = psi * OPTIMIZER_BYTES / np.where(zero >= 1, shards, 1)
    return weights, grads, optimizer


def layer_activations(spec: TransformerSpec, b: np.ndarray, s: np.ndarray, t: np.ndarray, sp: np.ndarray,
                      recompute: np.ndarray, moe: bool = False) -> np.ndarray:
    """Bytes one block keeps for one micro-batch of b sequences of s tokens on one GPU (module docstring)."""
    h, a, kv, F = spec.hidden, spec.heads, spec.kv_dim, spec.ffn
    sbh = s * b * h
    if moe:
        F = spec.expert_ffn
    mlp = 3 * sbh + (8 if spec.gated else 4) * s * b * F
    if moe:
        mlp = mlp * spec.top_k
    attn_linear = 7 * sbh + 4 * s * b * kv
    scores = 5.0 * a * s * s * b
    norms = 4 * sbh
    replicated = 10 * sbh  # layer-norm inputs, dropout masks, QKV and MLP inputs (Section 4.2.1)
    whole = attn_linear + mlp + norms + scores
    split = np.where(sp, whole / t, replicated + (whole - replicated) / t)
    selective = np.where(sp, (whole - scores) / t, replicated + (whole - replicated - scores) / t)
    full = 2 * sbh / np.where(sp, t, 1)
    return np.select([recompute == RECOMPUTE.index("none"), recompute == RECOMPUTE.index("selective")],
                     [split, selective], full)


def in_flight(plans: PlanArray) -> np.ndarray:
    """Micro-batches of a stage's blocks the busiest stage holds at once, as a multiple of one micro-batch
    of L/p blocks (module docstring)."""
    p, v, m = plans.pp, plans.v, plans.micro_batches
    schedule = plans.schedule
    one_f_one_b = np.minimum(p, m)
    interleaved = np.minimum(p * (1 + (p - 1) / (p * v)), m)
    return np.select([schedule == SCHEDULE_NAMES.index("gpipe"), schedule == SCHEDULE_NAMES.index("interleaved")],
                     [m, interleaved], one_f_one_b)


@dataclass(frozen=True, eq=False)
class Memory:
    """Bytes per GPU on the busiest stage (arrays over plans): weights, gradients, optimizer states,
    activations, and their total."""

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.weights + self.gradients + self.optimizer + self.activations


def memory(spec: TransformerSpec, plans: PlanArray) -> Memory:
    """Memory per GPU of each plan (see the module docstring)."""
    dense, experts = stage_weights(spec, plans)
    shards = plans.dp * plans.cp
    B = spec.bytes_per_value
    wd, gd, od = model_state_bytes(dense, shards, plans.zero, weight_bytes=B, grad_bytes=B)
    we, ge, oe = model_state_bytes(experts, np.maximum(shards // plans.ep, 1), plans.zero, weight_bytes=B,
                                   grad_bytes=B)
    b = plans.micro_batch.astype(np.float64)
    s = spec.seq_len / plans.cp
    t = plans.tp.astype(np.float64)
    dense_blocks = spec.dense_layers / plans.pp
    moe_blocks = spec.moe_layers / plans.pp
    per_mb = (dense_blocks * layer_activations(spec, b, s, t, plans.sp, plans.recompute)
              + moe_blocks * layer_activations(spec, b, s, t, plans.sp, plans.recompute, moe=spec.moe))
    acts = per_mb * in_flight(plans)
    none = np.full_like(plans.recompute, RECOMPUTE.index("none"))
    working = layer_activations(spec, b, s, t, plans.sp, none, moe=spec.moe and spec.moe_layers == spec.layers)
    acts = acts + np.where(plans.recompute == RECOMPUTE.index("full"), working, 0.0)
    return Memory(wd + we, gd + ge, od + oe, acts)
