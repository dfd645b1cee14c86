"""Kernel time of a transformer block on one GPU: GEMMs by shape, the rest as memory-bound bytes (vectorized).

Replaces FLOPs / (peak x one achieved fraction) by what the kernels of one micro-batch take on one GPU:

* **a GEMM** (m x k by k x n, ``batch`` of them) takes the larger of its math and its memory time (roofline):
  math = waves x (one tile's 2 T_m T_n k FLOPs) / (the rate of one SM), with tiles of T_m x T_n = 256 x 128
  outputs (the largest cuBLAS tile, NVIDIA 'Matrix Multiplication Background User's Guide', DU-09799-001,
  Section 2.3) over the device's SMs in waves of one tile per SM (same guide, Section 3.2 'Wave
  Quantization'; Section 3.1's tile quantization is the rounding of m and n up to the tile); the SMs run at
  the device's *maximum achievable matmul* rate (:attr:`Device.gemm_fraction` of the dense peak, measured
  by a shape search, :data:`GEMM_FRACTION`); memory = 2 bytes x (mk + kn + mn) / HBM bandwidth.
* **the element-wise work** (layer norms, softmax, dropout, bias + activation, bias + dropout + residual)
  is memory-bound: its bytes / HBM bandwidth (:func:`elementwise_bytes`; the bandwidth a streaming kernel
  reaches, which the caller passes).
* **the loss** (cross-entropy over the vocabulary, on the last pipeline stage) is memory-bound too: the bytes its
  kernels move per logit, forward and backward (:data:`LOSS_BYTES`, :func:`loss_time`).

Per block and micro-batch, the GEMMs are the QKV, output, MLP and (mixture) router projections over the
tokens of the micro-batch, tp-sharded (Megatron's column/row split), and the attention core: either
*materialized* (Megatron 2021: the scores of each head as one batched GEMM s x d by d x s written to HBM,
the fused scale-mask-softmax and dropout on them, the batched GEMM with V) or *fused* (FlashAttention: the
scores never reach HBM; its FLOPs at the GEMM rate). The backward of each GEMM is two GEMMs of the same
FLOPs and the backward of an element-wise op reads its saved input and the output's gradient and writes the
input's gradient: both priced as twice the forward (derived here).

:func:`.iteration.evaluate` uses it with ``achieved=None`` on a device with a measured ceiling (A100, H100).
Checked against published runs with nothing fitted (``tests/test_llm_published.py``): Llama 3 405B on H100
(Dubey et al. 2024, Table 4) within 4-7% (the single fraction 0.48: 28-35% under); Narayanan et al. 2021's
Table 1 on A100 over-predicted by 11-21% on every row, evenly, with the loss in fp32 as those runs had it (0.48:
-27% to +8%): the ceiling is a CUDA 12.1 measurement of 2023 and those runs used the PyTorch 20.12 container
(CUDA 11.1, ``examples/sc21/SRUN.sh``).
The memory-bound work runs at the bandwidth streaming kernels reach (``Device.streaming_bandwidth``: 1.80 of the
A100's 2.039 TB/s), not the datasheet's (which over-predicted by 14-27%).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .specs import TransformerSpec

TILE_M, TILE_N = 256, 128  # the guide's largest cuBLAS tile (module docstring)

# maximum achievable matmul FLOP/s / dense peak, BF16, found by a shape search (mamf-finder.py): S. Bekman,
# 'Machine Learning Engineering', github.com/stas00/ml-engineering, compute/accelerator/README.md, 'Maximum
# Achievable Matmul FLOPS comparison table': A100 SXM 267.9 of 312 (85.9%), H100 SXM 792.1 of 989 (80.1%),
# both CUDA 12.1
GEMM_FRACTION = {80: 267.9 / 312, 90: 792.1 / 989}
# streaming multiprocessors: NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs on A100),
# NVIDIA H100 Tensor Core GPU Architecture whitepaper (132 SMs on H100 SXM5)
SMS = {80: 108, 90: 132}


# HBM bytes per logit (one token x one vocabulary entry on this tp rank), (forward, backward), of each way of
# computing the cross-entropy. Derived here from Megatron-LM's vocab-parallel cross-entropy
# (megatron/mpu/cross_entropy.py of the SC'21 code; tensor_parallel/cross_entropy.py since): forward
# max (read), subtract the max (read + write), exp (read + write), sum (read), divide by the sum (read + write,
# kept for backward); backward multiply by the output's gradient (read + write).
# * "fp32": the logits cast to fp32 first (``vocab_parallel_cross_entropy(output.float(), labels)``, what runs
#   without --fp16-lm-cross-entropy, as in the SC'21 runs' examples/sc21/CONFIG.sh): the cast reads 2 and writes
#   4 bytes, the five passes move 4 + 8 + 8 + 4 + 8 = 32: 38 forward; backward 8 for the multiply and 4 + 2 for
#   the cast's gradient back to 16 bits: 14;
# * "fp16": the same passes on 16-bit logits (--fp16-lm-cross-entropy): 2 + 4 + 4 + 2 + 4 = 16 forward, 4 backward;
# * "fused": one kernel reads each logit once and writes its gradient in place (Megatron-core's
#   --cross-entropy-loss-fusion and similar): 2 + 2 = 4, in the forward.
LOSS_BYTES = {"fp32": (38.0, 14.0), "fp16": (16.0, 4.0), "fused": (4.0, 0.0)}


def loss_time(spec: TransformerSpec, tokens: Any, tp: Any, bandwidth: float, loss: str = "fp32") -> tuple[Any, Any]:
    """(forward, backward) seconds of the cross-entropy over ``tokens`` on each of tp GPUs: tokens x V / tp logits
    x :data:`LOSS_BYTES` / bandwidth (memory-bound, derived in :data:`LOSS_BYTES`)."""
    fwd, bwd = LOSS_BYTES[loss]
    logits = np.asarray(tokens, dtype=np.float64) * spec.vocab / np.asarray(tp, dtype=np.float64)
    return logits * fwd / bandwidth, logits * bwd / bandwidth


def gemm_time(m: Any, n: Any, k: Any, peak: float, fraction: float, sms: int, bandwidth: float,
              batch: Any = 1, value_bytes: int = 2) -> Any:
    """Seconds of ``batch`` GEMMs of (m x k) by (k x n): max(wave-quantized math, bytes / bandwidth)."""
    m, n, k, batch = (np.asarray(x, dtype=np.float64) for x in (m, n, k, batch))
    tiles = batch * np.ceil(m / TILE_M) * np.ceil(n / TILE_N)
    waves = np.ceil(tiles / sms)
    math = waves * (2.0 * TILE_M * TILE_N * k) / (peak * fraction / sms)
    memory = value_bytes * batch * (m * k + k * n + m * n) / bandwidth
    return np.maximum(math, memory)


def _mlp_shapes(spec: TransformerSpec, moe: bool) -> list[tuple[float, float, float, str]]:
    """(rows per token, k, n, the dimension tp splits) of the MLP's GEMMs (Megatron: the first of the pair
    column-parallel 'n', the second row-parallel 'k'; the router whole on every tp rank '')."""
    up = spec.mlp_matrices - 1  # the gated MLP runs gate and up as one GEMM of 2 ffn
    if not moe:
        return [(1.0, spec.hidden, up * spec.ffn, "n"), (1.0, spec.ffn, spec.hidden, "k")]
    routed = float(spec.top_k + spec.shared_experts)  # the token copies through the experts, as one grouped GEMM
    return [(1.0, spec.hidden, spec.experts, ""), (routed, spec.hidden, up * spec.expert_ffn, "n"),
            (routed, spec.expert_ffn, spec.hidden, "k")]


def elementwise_bytes(spec: TransformerSpec, moe: bool, tp: Any, sp: Any, materialized: bool) -> Any:
    """Forward HBM bytes per token of a block's memory-bound kernels (derived here from Megatron's GPT block:
    apex's fused layer norm, the JIT-fused bias + GeLU and bias + dropout + add, the fused scale-mask-softmax;
    a value is ``b`` bytes, a dropout mask 1 byte):

    * two layer norms: read and write h values each: 2 x 2bh;
    * two bias + dropout + residual adds: read the output and the residual, write the sum and the mask:
      2 x (3bh + h); with sequence parallelism these four run on 1/tp of the tokens;
    * the activation: read the MLP's up output (2 ffn if gated), write ffn, on 1/tp of the width:
      b (up + 1) ffn / tp;
    * materialized attention: the softmax reads and writes the heads/tp x s scores, the dropout reads them
      and writes them and its mask: (4b + 1) s heads / tp.
    """
    b = spec.bytes_per_value
    h = spec.hidden
    ffn = spec.expert_ffn * (spec.top_k + spec.shared_experts) if moe else spec.ffn
    up = spec.mlp_matrices - 1
    shared = (4 * b * h + 2 * (3 * b * h + h)) / np.where(sp, tp, 1)
    act = b * (up + 1) * ffn / tp
    scores = (4 * b + 1) * spec.seq_len * spec.heads / tp if materialized else 0.0
    return shared + act + scores


def block_forward_time(spec: TransformerSpec, tokens: Any, seqs: Any, tp: Any, cp: Any, sp: Any,
                       peak: float, fraction: float, sms: int, bandwidth: float, *, moe: bool = False,
                       materialized: bool = False) -> tuple[Any, Any]:
    """Forward seconds of one block over ``tokens`` = micro-batch x sequence / cp (``seqs`` sequences of
    s / cp queries) on each of tp GPUs: (all of it, the attention core alone: scores, softmax, values)."""
    args = (peak, fraction, sms, bandwidth)
    tokens, tp = np.asarray(tokens, dtype=np.float64), np.asarray(tp, dtype=np.float64)
    h, b = spec.hidden, spec.bytes_per_value
    qkv = spec.attention_weights / h - h  # Q, K and V outputs per token: h + 2 kv (or the override's)
    t = gemm_time(tokens, qkv / tp, h, *args, value_bytes=b) + gemm_time(tokens, h, h / tp, *args, value_bytes=b)
    for rows, k, n, split in _mlp_shapes(spec, moe):
        t = t + gemm_time(tokens * rows, n / tp if split == "n" else n, k / tp if split == "k" else k, *args,
                          value_bytes=b)
    dqk = spec.qk_head_dim or spec.head_dim
    dv = spec.v_head_dim or spec.head_dim
    heads = seqs * spec.heads / tp
    q = tokens / np.maximum(seqs, 1e-300)  # queries per sequence on this GPU: s / cp
    if materialized:
        core = (gemm_time(q, spec.seq_len, dqk, *args, batch=heads, value_bytes=b)
                + gemm_time(q, dv, spec.seq_len, *args, batch=heads, value_bytes=b)
                + tokens * (4 * b + 1) * spec.seq_len * spec.heads / tp / bandwidth)
    else:
        core = 2.0 * heads * q * spec.seq_len * (dqk + dv) / (peak * fraction)
    wide = elementwise_bytes(spec, moe, tp, sp, False) * tokens / bandwidth
    return t + core + wide, core


def logits_forward_time(spec: TransformerSpec, tokens: Any, tp: Any, peak: float, fraction: float, sms: int,
                        bandwidth: float) -> Any:
    """Forward seconds of the output projection (tokens x h by h x V/tp) on each of tp GPUs."""
    tp = np.asarray(tp, dtype=np.float64)
    return gemm_time(tokens, spec.vocab / tp, spec.hidden, peak, fraction, sms, bandwidth,
                     value_bytes=spec.bytes_per_value)
