"""Iteration time, MFU and tokens/s of parallel plans, vectorized over the plans.

Per micro-batch, on the busiest pipeline stage (its L/p blocks and the logits, which the last stage adds):

* **compute** = FLOPs / (peak x ``achieved``) (:mod:`.flops`, divided over tp x cp), forward t_f and backward
  twice the forward plus what recomputation adds. ``achieved`` is the fraction of the device's dense 16-bit
  peak that its kernels reach; :data:`ACHIEVED` = 0.48, the single-GPU end-to-end figure of the Megatron
  code (62.4 TFLOP/s of 125 on a V100 DGX-2H for a 1.2B GPT-2: 'MegatronLM's Supercharged V1.0',
  nv-adlr.github.io/MegatronLMV1, 2020), chosen because it is the only single-device figure of that code
  base and was not measured on Narayanan et al.'s runs. With ``achieved=None`` on an A100 or H100, the kernel
  model instead (:mod:`.kernels`: each GEMM by its shape, wave-quantized at the device's measured matmul
  ceiling, or memory-bound; the element-wise work as bytes / HBM bandwidth; ``attention`` 'fused'
  (FlashAttention) or 'materialized' (Megatron 2021: scores written to HBM); the cross-entropy by its bytes per
  logit, ``loss`` 'fp32' (Megatron's default), 'fp16' or 'fused', :data:`.kernels.LOSS_BYTES`). Give ``compute_s`` (a
  measured forward+backward time per micro-batch per stage) to replace either estimate.
* **communication on the critical path** (not overlapped): tensor parallelism (Megatron without its
  communication-overlap options), expert all-to-all, pipeline sends (v per pass), and the part of each
  ring-attention step that its block of attention does not hide.

Per iteration: the pipeline runs m (t_f + t_b) plus its schedule's bubble (:mod:`.pipeline`). Then:

* **data parallelism** overlaps the backward of the last micro-batch (the gradients are final only then)
  when ``overlap_grad_reduce`` (PyTorch DDP and Megatron's --overlap-grad-reduce): exposed
  max(reduction - t_b, last bucket of 25 MiB); otherwise all of it. The ZeRO-1/2 all-gather of updated
  weights follows the optimizer step, exposed. ZeRO-3's per-micro-batch gathers and reduce-scatters are
  prefetched under compute: exposed max(0, communication - compute) plus one block's gather.
* **the optimizer step** reads and writes the model states once: 2 x state bytes / HBM bandwidth
  (memory-bound Adam, derived here), at the bandwidth streaming kernels reach (``Device.streaming_bandwidth``).

MFU = model FLOPs (3 x forward, no recomputation) / (time x GPUs x peak); ``tflops`` counts the recomputed
FLOPs too (as Narayanan et al. 2021's Table 1 does). Interference terms (kappa) of the environment are not
applied here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..environment import Environment
from ..errors import CommscopeError
from .comm import GroupCost, communication
from .flops import attention_core_flops, layer_flops, logits_flops, model_flops_per_token, recompute_flops_per_token
from .groups import p2p_time
from .kernels import GEMM_FRACTION, LOSS_BYTES, SMS, block_forward_time, logits_forward_time, loss_time
from .memory import Memory, memory
from .pipeline import PIPELINE_SCHEDULES
from .plan import RECOMPUTE, SCHEDULE_NAMES, PlanArray
from .specs import TransformerSpec

ACHIEVED = 0.48
BUCKET_BYTES = 25 * 2**20
ATTENTION = ("fused", "materialized")


@dataclass(frozen=True)
class Device:
    """A GPU: dense 16-bit tensor peak (FLOP/s), memory (bytes) and HBM bandwidth (bytes/s), with source;
    ``hbm_fraction`` of that bandwidth is what streaming kernels reach (measured where a source gives it)."""

    name: str
    peak_flops: float
    memory: float
    hbm_bandwidth: float
    source: str
    sms: int = 0
    gemm_fraction: float = 0.0
    hbm_fraction: float = 1.0

    @property
    def streaming_bandwidth(self) -> float:
        """Bytes/s a memory-bound kernel moves: the datasheet bandwidth x :attr:`hbm_fraction`."""
        return self.hbm_bandwidth * self.hbm_fraction


# the share of the A100 80GB's 2,039 GB/s that a streaming kernel reaches: 1.80 TB/s (88%) read by a tuned
# benchmark kernel and confirmed by Nsight Compute, the thread adding that no kernel in an NVIDIA GTC 2025 talk
# passed about 90% (NVIDIA Developer Forums, 'Trouble to Reach Peak Bandwidth of A100', topic 339083). None
# found for the H100 or the V100: they keep the datasheet figure.
A100_HBM_FRACTION = 1.80 / 2.039


DEVICES = {
    70: Device("V100-SXM2-32GB", 125e12, 32 * 2**30, 900e9, "NVIDIA V100 datasheet: 125 TFLOPS tensor, 900 GB/s"),
    80: Device("A100-SXM4-80GB", 312e12, 80 * 2**30, 2039e9,
               "NVIDIA A100 datasheet: 312 TFLOPS BF16/FP16 dense, 80 GB HBM2e at 2,039 GB/s; streaming kernels "
               "reach 1.80 TB/s (NVIDIA Developer Forums topic 339083, Nsight Compute)",
               SMS[80], GEMM_FRACTION[80], A100_HBM_FRACTION),
    90: Device("H100-SXM5-80GB", 989e12, 80 * 2**30, 3350e9,
               "NVIDIA H100 datasheet: 989 TFLOPS BF16 dense (1,979 with sparsity), 80 GB HBM3 at 3.35 TB/s",
               SMS[90], GEMM_FRACTION[90]),
}


def device_of(env: Environment, device: Device | None = None) -> Device:
    """The device given, or the one of the environment's compute capability (A100 without one)."""
    if device is not None:
        return device
    cc = env.compute_capability or 80
    key = 90 if cc >= 90 else 80 if cc >= 80 else 70
    return DEVICES[key]


@dataclass(frozen=True, eq=False)
class Evaluation:
    """What the model says of each plan (arrays over the plans; times in seconds per iteration)."""

    spec: TransformerSpec
    plans: PlanArray
    device: Device
    time: np.ndarray
    compute: np.ndarray
    bubble: np.ndarray
    exposed: dict[str, np.ndarray]
    t_f: np.ndarray
    t_b: np.ndarray
    t_w: np.ndarray
    t_p2p: np.ndarray
    optimizer: np.ndarray
    mfu: np.ndarray
    tflops: np.ndarray
    tokens_per_s: np.ndarray
    memory: Memory
    groups: dict[str, list[GroupCost]]
    achieved: np.ndarray

    @property
    def fits(self) -> np.ndarray:
        return self.memory.total <= self.device.memory


def evaluate(spec: TransformerSpec, plans: PlanArray, env: Environment, *, achieved: float | None = ACHIEVED,
             device: Device | None = None, compute_s: Any = None, overlap_grad_reduce: Any = True,
             grad_bytes: int | None = None, attention: str = "fused", loss: str = "fp32") -> Evaluation:
    """Evaluate every plan of ``plans`` (see the module docstring)."""
    if achieved is not None and not 0 < achieved <= 1:
        raise CommscopeError(f"achieved must be in (0, 1], got {achieved!r}")
    if attention not in ATTENTION:
        raise CommscopeError(f"attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    if loss not in LOSS_BYTES:
        raise CommscopeError(f"loss must be one of {', '.join(LOSS_BYTES)}, got {loss!r}")
    dev = device_of(env, device)
    kernel = achieved is None and dev.gemm_fraction > 0
    rate = dev.peak_flops * (dev.gemm_fraction if kernel else achieved or ACHIEVED)
    tp, cp, pp, v = (x.astype(np.float64) for x in (plans.tp, plans.cp, plans.pp, plans.v))
    tokens = plans.micro_batch * spec.seq_len / (tp * cp)  # tokens' share of one GPU per micro-batch
    blocks_f = (spec.dense_layers * layer_flops(spec) + spec.moe_layers * layer_flops(spec, moe=True)) / pp
    fwd = tokens * (blocks_f + logits_flops(spec))
    full = plans.recompute == RECOMPUTE.index("full")
    selective = plans.recompute == RECOMPUTE.index("selective")
    if kernel:
        hw = (dev.peak_flops, dev.gemm_fraction, dev.sms, dev.streaming_bandwidth)
        seqs = plans.micro_batch.astype(np.float64)
        opts = {"materialized": attention == "materialized"}
        dense, core = block_forward_time(spec, seqs * spec.seq_len / cp, seqs, tp, cp, plans.sp, *hw, **opts)
        blocks_t = spec.dense_layers * dense
        if spec.moe_layers:
            blocks_t = blocks_t + spec.moe_layers * block_forward_time(spec, seqs * spec.seq_len / cp, seqs, tp, cp,
                                                                       plans.sp, *hw, moe=True, **opts)[0]
        blocks_t = blocks_t / pp
        f_time = blocks_t + logits_forward_time(spec, seqs * spec.seq_len / cp, tp, *hw)
        r_time = np.where(full, blocks_t, np.where(selective, spec.layers * core / pp, 0.0))
        loss_f, loss_b = loss_time(spec, seqs * spec.seq_len / cp, tp, dev.streaming_bandwidth, loss)
        effective = fwd / ((f_time + loss_f) * dev.peak_flops)
    else:
        redo = tokens * np.where(full, blocks_f,
                                 np.where(selective, spec.layers * attention_core_flops(spec) / pp, 0.0))
        f_time, r_time = fwd / rate, redo / rate
        loss_f = loss_b = 0.0  # the single achieved fraction is end to end: the loss is inside it
        effective = np.full(len(plans), rate / dev.peak_flops)
    if compute_s is None:
        c_f, c_b, c_w = f_time + loss_f, 2 * f_time + r_time + loss_b, f_time
    else:
        total = np.asarray(compute_s, dtype=np.float64)
        c_f, c_b, c_w = total / 3, 2 * total / 3, total / 3
    groups = communication(spec, plans, env, grad_bytes=grad_bytes)
    passes = 1 + full

    def split(name: str) -> tuple[np.ndarray, np.ndarray]:
        total = sum((g.total for g in groups[name]), np.zeros(len(plans)))
        return total / (passes + 1), total * passes / (passes + 1)

    tp_f, tp_b = split("tp")
    ep_f, ep_b = split("ep")
    cp_cost = groups["cp"][0]
    step = cp_cost.time
    attn_step = (plans.micro_batch * spec.seq_len / cp) * attention_core_flops(spec, spec.seq_len / cp) / tp / rate
    steps = cp_cost.calls
    cp_exposed = steps * np.maximum(0.0, step - attn_step)
    cp_f, cp_b = cp_exposed / (passes + 2), cp_exposed * (passes + 1) / (passes + 2)
    t_p2p = groups["pp"][0].time
    pp_each = np.where(plans.pp > 1, v * t_p2p, 0.0)
    t_f = c_f + tp_f + ep_f + cp_f + pp_each
    t_b = c_b + tp_b + ep_b + cp_b + pp_each
    m = plans.micro_batches
    bubble = np.zeros(len(plans))
    for k, name in enumerate(SCHEDULE_NAMES):
        where = plans.schedule == k
        if where.any():
            bubble = np.where(where, PIPELINE_SCHEDULES.get(name).bubble(pp, m, v, t_f, t_b, c_w), bubble)
    pipe = m * (t_f + t_b) + bubble

    # data parallelism
    dp_exposed = np.zeros(len(plans))
    zero3 = plans.zero == 3
    for g in groups["dp"]:
        total = g.total
        if g.primitive in ("allreduce", "reduce_scatter"):
            tail = g.time * np.minimum(1.0, BUCKET_BYTES / np.maximum(g.nbytes, 1.0)) * np.minimum(g.calls, 1)
            hidden = np.where(overlap_grad_reduce, np.maximum(total - t_b, tail), total)
            dp_exposed = dp_exposed + np.where(zero3, 0.0, hidden)
        else:
            dp_exposed = dp_exposed + np.where(zero3, 0.0, total)
    z3_comm = sum((g.total for g in groups["dp"]), np.zeros(len(plans)))
    z3_first = sum((g.time for g in groups["dp"] if g.primitive == "allgather"), np.zeros(len(plans)))
    z3_first = z3_first / np.maximum(spec.layers / pp, 1)
    dp_exposed = dp_exposed + np.where(zero3, np.maximum(0.0, z3_comm - m * (c_f + c_b)) + z3_first, 0.0)

    mem = memory(spec, plans)
    optimizer = 2 * (mem.weights + mem.gradients + mem.optimizer) / dev.streaming_bandwidth
    time = pipe + dp_exposed + optimizer
    n_tokens = plans.global_batch * spec.seq_len
    gpus = plans.gpus.astype(np.float64)
    model = model_flops_per_token(spec) * n_tokens
    hardware = model + np.select([full, selective], [recompute_flops_per_token(spec, "full"),
                                                     recompute_flops_per_token(spec, "selective")], 0.0) * n_tokens
    exposed = {"tp": m * (tp_f + tp_b), "pp": m * 2 * pp_each, "dp": dp_exposed, "ep": m * (ep_f + ep_b),
               "cp": m * cp_exposed}
    return Evaluation(spec=spec, plans=plans, device=dev, time=time, compute=m * (c_f + c_b), bubble=bubble,
                      exposed=exposed, t_f=t_f, t_b=t_b, t_w=c_w, t_p2p=t_p2p, optimizer=optimizer,
                      mfu=model / (time * gpus * dev.peak_flops), tflops=hardware / (time * gpus) / 1e12,
                      tokens_per_s=n_tokens / time, memory=mem, groups=groups, achieved=effective)


def pipeline_p2p(env: Environment, nbytes: float, pp: int, stride: int) -> float:
    """One pipeline message's time (for timelines): :func:`.groups.p2p_time`."""
    return float(p2p_time(nbytes, pp, stride, env))
