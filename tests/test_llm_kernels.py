"""The kernel model of compute (costmodels/llm/kernels.py): GEMMs by shape, element-wise work by bytes."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.llm import PlanArray, evaluate, kernels
from costmodels.llm.iteration import ACHIEVED, DEVICES
from costmodels.llm.plan import Plan
from costmodels.llm.specs import TransformerSpec

A100 = DEVICES[80]
HW = (A100.peak_flops, A100.gemm_fraction, A100.sms, A100.hbm_bandwidth)


def test_ceilings_name_their_source():
    # Bekman, ml-engineering, 'Maximum Achievable Matmul FLOPS comparison table' (CUDA 12.1)
    assert A100.gemm_fraction == pytest.approx(267.9 / 312) and A100.sms == 108
    assert DEVICES[90].gemm_fraction == pytest.approx(792.1 / 989) and DEVICES[90].sms == 132
    assert DEVICES[70].gemm_fraction == 0.0  # no measured ceiling: the V100 keeps the achieved fraction
    source = open(kernels.__file__).read()
    assert "stas00/ml-engineering" in source and "Matrix Multiplication Background" in kernels.__doc__


def test_streaming_kernels_run_at_the_measured_share_of_the_datasheet_bandwidth():
    # A100 80GB: 1.80 TB/s read by a tuned kernel, Nsight Compute agreeing (NVIDIA Developer Forums topic 339083),
    # of the datasheet's 2.039: the element-wise work and the optimizer step move their bytes at 1.80e12 B/s;
    # the H100 and V100 have no such measurement and keep their datasheet figure
    from costmodels.llm import iteration

    assert A100.streaming_bandwidth == pytest.approx(1.80e12, rel=1e-12)
    assert A100.hbm_fraction == pytest.approx(0.8828, abs=1e-4) and "339083" in A100.source
    assert DEVICES[90].streaming_bandwidth == DEVICES[90].hbm_bandwidth == 3.35e12
    assert "339083" in open(iteration.__file__).read()
    # one token of the 1.7B GPT's block (529,920 element-wise bytes, test below) costs 529,920 / 1.80e12 =
    # 2.944e-7 s of memory-bound work, where the datasheet would give 2.599e-7 s
    spec = TransformerSpec(name="gpt-1.7b", layers=24, hidden=2304, heads=24, kv_heads=24, ffn=9216, gated=False,
                           seq_len=2048, vocab=51200, global_batch=512, dtype="fp16")
    assert kernels.elementwise_bytes(spec, False, 1, False, True) / A100.streaming_bandwidth == pytest.approx(
        2.944e-7, rel=1e-3)


def test_large_gemm_is_wave_quantized_math():
    # 8192^3 on an A100: 32 x 64 = 2048 tiles of 256 x 128, ceil(2048 / 108) = 19 waves; one wave is
    # 2 x 256 x 128 x 8192 = 536,870,912 FLOPs per SM at 267.9e12 / 108 = 2.4806e12 FLOP/s per SM:
    # 19 x 2.16432e-4 = 4.11221e-3 s (memory: 2 x 3 x 8192^2 / 2.039e12 = 1.97e-4 s, hidden)
    t = kernels.gemm_time(8192, 8192, 8192, *HW)
    assert t == pytest.approx(19 * 536_870_912 / (267.9e12 / 108), rel=1e-12)
    assert t == pytest.approx(4.11221e-3, rel=1e-5)
    assert 2 * 8192**3 / t / 1e12 == pytest.approx(267.9 * 2048 / 2052, rel=1e-9)  # the ceiling x 2048/2052


def test_attention_scores_are_memory_bound():
    # 24 heads of 2048 x 96 by 96 x 2048 (1.7B GPT, micro-batch 1): bytes 2 x 24 x (2 x 2048 x 96 + 2048^2)
    # = 220,200,960 -> 1.07995e-4 s at 2.039e12 B/s; math: 24 x 8 x 16 = 3072 tiles, 29 waves of
    # 2 x 256 x 128 x 96 FLOPs per SM: 7.355e-5 s, shorter
    t = kernels.gemm_time(2048, 2048, 96, *HW, batch=24)
    assert t == pytest.approx(220_200_960 / 2.039e12, rel=1e-12)
    assert 29 * 2 * 256 * 128 * 96 / (267.9e12 / 108) < t


def test_elementwise_bytes_by_hand():
    spec = TransformerSpec(name="gpt-1.7b", layers=24, hidden=2304, heads=24, kv_heads=24, ffn=9216, gated=False,
                           seq_len=2048, vocab=51200, global_batch=512, dtype="fp16")
    # layer norms 2 x 2 x 2 x 2304 = 18,432; two bias+dropout+adds 2 x (3 x 2 x 2304 + 2304) = 32,256;
    # GeLU 2 x 2 x 9216 = 36,864; scores (4 x 2 + 1) x 2048 x 24 = 442,368: 529,920 bytes per token
    assert kernels.elementwise_bytes(spec, False, 1, False, True) == 529_920
    # tp 8 with sequence parallelism: (18,432 + 32,256) / 8 + 36,864 / 8 + 442,368 / 8 = 66,240
    assert kernels.elementwise_bytes(spec, False, 8, True, True) == pytest.approx(529_920 / 8)
    assert kernels.elementwise_bytes(spec, False, 8, False, False) == pytest.approx(50_688 + 36_864 / 8)


def test_kernel_model_is_opt_in_and_slower_than_the_ceiling():
    spec, env = cm.llm("gpt3-175b"), cm.environment("8xA100-NVLink+IB-HDR")
    plans = PlanArray.of([Plan(tp=8, pp=8, dp=2, micro_batch=1, global_batch=64),
                          Plan(tp=4, pp=16, dp=2, micro_batch=2, global_batch=64, recompute="full")])
    old, new = evaluate(spec, plans, env), evaluate(spec, plans, env, achieved=None)
    assert np.all(old.achieved == ACHIEVED)
    assert np.all((new.achieved < A100.gemm_fraction) & (new.achieved > ACHIEVED)), new.achieved
    slower = evaluate(spec, plans, env, achieved=None, attention="materialized")
    assert np.all(slower.compute > new.compute)
    with pytest.raises(cm.CommscopeError, match="attention"):
        evaluate(spec, plans, env, achieved=None, attention="flash3")


def test_loss_bytes_by_hand():
    # Megatron's vocab-parallel cross-entropy on logits cast to fp32 (the SC'21 runs: no --fp16-lm-cross-entropy):
    # forward cast 2 + 4, max 4, subtract 8, exp 8, sum 4, divide 8 = 38 bytes per logit; backward multiply 8 and
    # the cast's gradient 4 + 2 = 14. The 1.7B row's micro-batch: 16 x 2048 = 32,768 tokens x 51,200 logits
    # = 1,677,721,600 logits: 63,753,420,800 B / 1.80e12 B/s = 3.54186e-2 s forward and 23,488,102,400 B
    # = 1.30489e-2 s backward
    spec = TransformerSpec(name="gpt-1.7b", layers=24, hidden=2304, heads=24, kv_heads=24, ffn=9216, gated=False,
                           seq_len=2048, vocab=51200, global_batch=512, dtype="fp16")
    assert kernels.LOSS_BYTES == {"fp32": (38.0, 14.0), "fp16": (16.0, 4.0), "fused": (4.0, 0.0)}
    f, b = kernels.loss_time(spec, 32_768, 1, 1.80e12)
    assert f == pytest.approx(3.54186e-2, rel=1e-5) and b == pytest.approx(1.30489e-2, rel=1e-5)
    f8, b8 = kernels.loss_time(spec, 32_768, 8, 1.80e12, "fp16")  # tp 8: 6,400 logits per token; 16 + 4 bytes
    assert f8 == pytest.approx(32_768 * 6_400 * 16 / 1.80e12) and b8 == pytest.approx(32_768 * 6_400 * 4 / 1.80e12)


def test_the_loss_adds_its_bytes_to_the_kernel_model_only():
    # one micro-batch on one stage (pp 1, dp 1): the forward and backward differ by the loss's bytes alone
    spec, env = cm.llm("gpt3-175b"), cm.environment("8xA100-NVLink+IB-HDR")
    plans = PlanArray.of([Plan(tp=8, pp=1, dp=1, micro_batch=1, global_batch=1, recompute="full")])
    runs = {loss: evaluate(spec, plans, env, achieved=None, loss=loss) for loss in kernels.LOSS_BYTES}
    logits = spec.seq_len * spec.vocab / 8
    for loss, (fwd, bwd) in kernels.LOSS_BYTES.items():
        extra = logits * (fwd + bwd) / A100.streaming_bandwidth
        assert runs[loss].compute - runs["fused"].compute == pytest.approx(
            extra - logits * 4.0 / A100.streaming_bandwidth, rel=1e-9)
    assert runs["fused"].time[0] < runs["fp16"].time[0] < runs["fp32"].time[0]
    single = [evaluate(spec, plans, env, loss=loss).time[0] for loss in kernels.LOSS_BYTES]
    assert single[0] == single[1] == single[2]  # an achieved fraction is end to end: the loss is inside it
    with pytest.raises(cm.CommscopeError, match="loss must be one of fp32, fp16, fused, got 'bf16'"):
        evaluate(spec, plans, env, achieved=None, loss="bf16")
