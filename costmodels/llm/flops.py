"""Matrix-multiply FLOPs of a transformer, per token and per layer (forward), and Narayanan et al.'s total.

Counting (derived here, the counting of Narayanan et al. 2021, Section 5.1, generalised to grouped-query
attention, gated MLPs and experts): a GEMM of (m x k) by (k x n) is 2mkn FLOPs; per token of a sequence of
s tokens a block's forward runs

* the Q, K, V and output projections: 2 x (attention weights);
* the scores QK^T and their product with V: 2 s heads qk_head_dim + 2 s heads v_head_dim (the full s x s
  products, as Narayanan et al. count them; a causal kernel skips half);
* the MLP: 2 x (weights that the token runs through): the dense MLP, or top_k routed plus the shared
  experts and the router.

The logits add 2 h V per token once. The backward pass is twice the forward (one GEMM for the input's
gradient, one for the weights'); full recomputation runs the forward once more, selective recomputation the
score and value products once more (Korthikanti et al. 2022, Section 5). With these counts a GPT block is
24 h^2 + 4 s h per token forward, and the total is Narayanan et al.'s eq. (3) (:func:`narayanan_eq3`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .specs import TransformerSpec


def attention_core_flops(spec: TransformerSpec, seq: Any = None) -> Any:
    """Forward FLOPs per token of the score and value products of one block: 2 s a (d_qk + d_v) (see module)."""
    s = spec.seq_len if seq is None else seq
    dqk = spec.qk_head_dim or spec.head_dim
    dv = spec.v_head_dim or spec.head_dim
    return 2 * np.asarray(s, dtype=np.float64) * spec.heads * (dqk + dv)


def layer_flops(spec: TransformerSpec, moe: bool = False, seq: Any = None) -> Any:
    """Forward FLOPs per token of one block (dense MLP, or the mixture with ``moe``): see the module docstring."""
    if moe:
        mlp = (spec.top_k + spec.shared_experts) * spec.expert_weights + spec.hidden * spec.experts
    else:
        mlp = spec.dense_mlp_weights
    return 2.0 * (spec.attention_weights + mlp) + attention_core_flops(spec, seq)


def logits_flops(spec: TransformerSpec) -> float:
    """Forward FLOPs per token of the output projection: 2 h V."""
    return 2.0 * spec.hidden * spec.vocab


def forward_flops_per_token(spec: TransformerSpec) -> float:
    """Forward FLOPs per token of the whole model (blocks and logits)."""
    return float(spec.dense_layers * layer_flops(spec) + spec.moe_layers * layer_flops(spec, moe=True)
                 + logits_flops(spec))


def model_flops_per_token(spec: TransformerSpec) -> float:
    """Training FLOPs per token without recomputation (forward + backward = 3 x forward): MFU's numerator."""
    return 3.0 * forward_flops_per_token(spec)


def recompute_flops_per_token(spec: TransformerSpec, recompute: str) -> float:
    """FLOPs per token that recomputation adds: the blocks' forward (full), the attention core (selective)."""
    if recompute == "full":
        return float(spec.dense_layers * layer_flops(spec) + spec.moe_layers * layer_flops(spec, moe=True))
    if recompute == "selective":
        return float(spec.layers * attention_core_flops(spec))
    return 0.0


def narayanan_eq3(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """FLOPs per iteration of a GPT model with full activation recomputation: Narayanan et al. 2021, SC'21,
    'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM', Section 5.1, eq. (3):
    F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). The TFLOP/s of their Table 1 are this F over the time."""
    b, s, ell, h, v = (float(x) for x in (batch, seq, layers, hidden, vocab))
    return 96.0 * b * s * ell * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * ell * h))
