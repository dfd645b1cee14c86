"""costmodels.llm: specs, FLOPs, communication volumes, memory and bubbles against the papers, by hand."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.llm import PlanArray, bubble_fraction, timeline
from costmodels.llm.comm import communication, stage_weights
from costmodels.llm.flops import forward_flops_per_token, layer_flops, narayanan_eq3, recompute_flops_per_token
from costmodels.llm.memory import layer_activations, memory, model_state_bytes
from costmodels.llm.plan import RECOMPUTE, Plan
from costmodels.llm.specs import TransformerSpec

A100 = cm.environment("8xA100-NVLink+IB-HDR")
GPT = TransformerSpec(name="gpt-test", layers=24, hidden=2304, heads=24, kv_heads=24, ffn=4 * 2304, gated=False,
                      seq_len=2048, vocab=51200, global_batch=512, tied_embeddings=True)


def test_specs_and_parameter_counts():
    assert set(cm.llms()) >= {"gpt3-175b", "llama3-8b", "llama3-70b", "mixtral-8x7b", "deepseek-v3"}
    gpt3 = cm.llm("GPT3-175B")
    assert gpt3.params == pytest.approx(174.6e9, rel=0.005)  # Narayanan et al. 2021 Table 2: 174.6B
    assert cm.llm("llama3-8b").params == pytest.approx(8.03e9, rel=0.01)
    assert cm.llm("llama3-70b").params == pytest.approx(70.6e9, rel=0.01)
    mixtral = cm.llm("mixtral-8x7b")
    assert mixtral.params == pytest.approx(46.7e9, rel=0.01)
    assert mixtral.active_params == pytest.approx(12.9e9, rel=0.02)
    ds = cm.llm("deepseek-v3")
    assert ds.params == pytest.approx(671e9, rel=0.01) and ds.active_params == pytest.approx(37e9, rel=0.03)
    for name in cm.llms():
        assert cm.llm(name).source
    with pytest.raises(cm.CommscopeError):
        TransformerSpec(name="bad", layers=2, hidden=8, heads=3, kv_heads=2, ffn=8, gated=False, seq_len=4, vocab=4,
                        global_batch=1)


def test_flops_match_narayanan_eq3():
    """24 h^2 + 4 s h per token per block; x4 with full recomputation, + 6 h V logits = eq. (3)."""
    h, s = GPT.hidden, GPT.seq_len
    assert layer_flops(GPT) == pytest.approx(24 * h * h + 4 * s * h)
    total = (3 * forward_flops_per_token(GPT) + recompute_flops_per_token(GPT, "full")) * 512 * s
    eq3 = narayanan_eq3(512, s, GPT.layers, h, GPT.vocab)
    # eq. (3) leaves out the layer norms (none here) and is exact for the blocks and logits
    assert total == pytest.approx(eq3, rel=1e-12)


def _plans(**kw) -> PlanArray:
    base = {"global_batch": 512}
    base.update(kw)
    return PlanArray.of([Plan(**base)])


def test_tp_volumes_per_layer():
    """Shoeybi et al. 2019: 2 allreduces of b s h forward and 2 backward per block; SP: RS + AG of each."""
    b, s, h, L = 4, GPT.seq_len, GPT.hidden, GPT.layers
    plans = _plans(tp=8, dp=4, micro_batch=b)
    tp = {g.primitive: g for g in communication(GPT, plans, A100)["tp"]}
    assert tp["allreduce"].calls[0] == 4 * L and tp["allreduce"].volume[0] == b * s * h
    assert tp["allreduce"].nbytes[0] == 2 * b * s * h
    assert tp["reduce_scatter"].calls[0] == 0
    sp = {g.primitive: g for g in communication(GPT, _plans(tp=8, dp=4, micro_batch=b, sp=True), A100)["tp"]}
    assert sp["allreduce"].calls[0] == 0
    assert sp["reduce_scatter"].calls[0] == sp["allgather"].calls[0] == 4 * L
    assert sp["allgather"].volume[0] == b * s * h
    full = {g.primitive: g for g in communication(GPT, _plans(tp=8, dp=4, micro_batch=b, recompute="full"),
                                                   A100)["tp"]}
    assert full["allreduce"].calls[0] == 6 * L  # the recomputed forward's 2 more
    # the library's time for the group: an allreduce inside one node, as cm.choose prices it
    t = cm.choose("allreduce", 2 * b * s * h, 8, A100).time
    assert tp["allreduce"].time[0] == pytest.approx(float(t))


def test_pipeline_message_is_bsh_over_t():
    b = 2
    pp = communication(GPT, _plans(tp=8, pp=4, dp=2, micro_batch=b, schedule="interleaved", v=2), A100)["pp"][0]
    assert pp.volume[0] == b * GPT.seq_len * GPT.hidden / 8 and pp.calls[0] == 2 * 2
    # stages 64 ranks apart cross nodes: alpha + n beta at one NIC's share
    assert pp.time[0] == pytest.approx(A100.alpha + pp.nbytes[0] * A100.beta)


@pytest.mark.parametrize(("zero", "volume"), [(0, 2), (1, 2), (2, 2), (3, 3)])
def test_zero_volumes(zero, volume):
    """ZeRO Section 7: 2 Psi for stages 0-2 (an allreduce is a reduce-scatter and an all-gather), 3 Psi for 3."""
    plans = _plans(dp=8, zero=zero, micro_batch=64)  # one micro-batch per iteration
    psi = stage_weights(GPT, plans)[0][0]
    per = {"allreduce": 2, "reduce_scatter": 1, "allgather": 1}
    total = sum(g.calls[0] * g.volume[0] * per[g.primitive] for g in communication(GPT, plans, A100)["dp"])
    assert total == pytest.approx(volume * psi)


def test_model_states_16_psi():
    """ZeRO Section 3.1: 2 + 2 + 12 = 16 Psi; stages 1-3 shard optimizer, gradients, weights over N_d."""
    psi, nd = np.float64(1e9), np.int64(4)
    def total(z):
        return sum(model_state_bytes(psi, nd, np.int64(z)))
    assert total(0) == 16 * psi
    assert total(1) == pytest.approx(4 * psi + 12 * psi / nd)
    assert total(2) == pytest.approx(2 * psi + 14 * psi / nd)
    assert total(3) == pytest.approx(16 * psi / nd)
    mem = memory(GPT, _plans(dp=4, zero=0, micro_batch=1))
    assert mem.weights[0] + mem.gradients[0] + mem.optimizer[0] == pytest.approx(16 * GPT.params)


def test_activation_formulas_korthikanti():
    """Korthikanti et al. 2022 Section 4: sbh(34 + 5as/h); TP sbh(10 + 24/t + 5as/(ht)); SP sbh/t(34 + 5as/h);
    selective 34 sbh/t; full 2 sbh."""
    s, b, h, a = 2048.0, 1.0, float(GPT.hidden), GPT.heads
    sbh = s * b * h
    one = np.float64(1)
    def act(t, sp, mode):
        return float(layer_activations(GPT, one * b, one * s, one * t, np.bool_(sp), np.int64(RECOMPUTE.index(mode))))
    assert act(1, False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert act(8, False, "none") == pytest.approx(sbh * (10 + 24 / 8 + 5 * a * s / (h * 8)))
    assert act(8, True, "none") == pytest.approx(sbh / 8 * (34 + 5 * a * s / h))
    assert act(8, True, "selective") == pytest.approx(34 * sbh / 8)
    assert act(8, False, "full") == pytest.approx(2 * sbh)
    # 1F1B: the first stage holds p micro-batches of L/p blocks = L blocks
    plans = _plans(pp=4, dp=2, micro_batch=1)
    mem = memory(GPT, plans)
    assert mem.activations[0] == pytest.approx(GPT.layers * act(1, False, "none"))


def test_bubble_fractions():
    assert bubble_fraction("1f1b", 8, 32) == pytest.approx(7 / 32)
    assert bubble_fraction("gpipe", 8, 32) == pytest.approx(7 / 32)
    assert bubble_fraction("interleaved", 8, 32, 2) == pytest.approx(7 / 64)
    assert bubble_fraction("zb-h1", 8, 32) == pytest.approx(7 / 96)  # Qi et al.: 1/3 of 1F1B's when F = B = W


@pytest.mark.parametrize(("schedule", "v", "expected"), [("gpipe", 1, (8 + 3) * 3), ("1f1b", 1, (8 + 3) * 3),
                                                         ("interleaved", 2, 8 * 3 + 3 * 3 / 2),
                                                         ("zb-h1", 1, 8 * 3 + 3 * 1)])
def test_timeline_makespan_matches_bubble(schedule, v, expected):
    tl = timeline(schedule, 4, 8, v, 1.0, 2.0, 1.0)
    assert tl.end == pytest.approx(expected)
    assert len(tl.on("stage 0")) == 8 * v * (3 if schedule == "zb-h1" else 2)
    assert tl.to_chrome_trace()["traceEvents"]
