"""costmodels.llm: the planner (exhaustive, valid, monotone), attribution and the public API."""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pytest

import costmodels as cm
from costmodels.llm import attribute, enumerate_plans, evaluate, search, switch_points
from costmodels.llm.plan import RECOMPUTE, Plan, problems
from costmodels.llm.specs import TransformerSpec

A100 = cm.environment("8xA100-NVLink+IB-HDR")
TINY = TransformerSpec(name="tiny", layers=4, hidden=64, heads=8, kv_heads=8, ffn=256, gated=False, seq_len=128,
                       vocab=100, global_batch=8)


def test_enumeration_counted_by_hand():
    """8 GPUs, ZeRO 0, micro-batch 1, no recomputation: (tp, cp, pp) with tp cp pp | 8 (19 triples);
    x2 with sp where tp > 1; x1 schedule at pp=1, x4 at pp=2 (gpipe, 1f1b, zb-h1, interleaved v=2), x3 at pp=4:
    pp=1: 4 + 6 x 2 = 16; pp=2: (3 + 3 x 2) x 4 = 36; pp=4: (1 + 1 + 2) x 3 = 12; 64 in all."""
    plans = enumerate_plans(TINY, 8, A100, micro_batches=(1,), zero=(0,), recompute=("none",))
    assert len(plans) == 64


def test_enumeration_is_exhaustive_and_valid():
    """Every plan the planner lists passes problems(); every plan of the product that passes is listed."""
    plans = enumerate_plans(TINY, 8, A100)
    listed = {plans.plan(i) for i in range(len(plans))}
    assert len(listed) == len(plans)
    assert all(not problems(TINY, p, 8, 8) for p in listed)
    brute = set()
    for tp, sp, cp, pp, z, mb, rc in itertools.product((1, 2, 4, 8), (False, True), (1, 2, 4, 8), (1, 2, 4),
                                                       range(4), (1, 2, 4, 8, 16), RECOMPUTE):
        if 8 % (tp * cp * pp):
            continue
        for sched, v in [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1)] + [("interleaved", v) for v in range(2, 9)]:
            p = Plan(tp=tp, pp=pp, dp=8 // (tp * cp * pp), cp=cp, sp=sp, zero=z, schedule=sched, v=v,
                     micro_batch=mb, global_batch=8, recompute=rc)
            if not problems(TINY, p, 8, 8):
                brute.add(p)
    assert brute == listed


def test_best_plans_ranked_and_fit():
    best = cm.best_plans("llama3-8b", 64, A100, k=3)
    assert len(best) == 3
    times = [r.iteration_time for r in best]
    assert times == sorted(times)
    assert all(not r.oom for r in best)
    small = cm.best_plans("llama3-8b", 64, A100, k=1, device_memory=24 * 2**30)[0]
    assert small.memory["total"] <= 24 * 2**30 and small.iteration_time >= times[0]


def test_monotone_in_bandwidth():
    """Faster links never slow a plan, nor the best plan."""
    spec = cm.llm("llama3-8b")
    plans = enumerate_plans(spec, 32, A100, micro_batches=(1, 2), zero=(0, 1))
    times = [evaluate(spec, plans, A100.with_(beta=A100.beta / f)).time for f in (0.25, 1.0, 4.0)]
    assert np.all(times[1] <= times[0] * (1 + 1e-12)) and np.all(times[2] <= times[1] * (1 + 1e-12))
    best = [float(np.min(t)) for t in times]
    assert best[0] >= best[1] >= best[2]


def test_monotone_in_gpus():
    """More GPUs: more tokens per second for the best plan (weak: the same global batch)."""
    tps = [search(cm.llm("llama3-8b"), n, A100).best(1)[0].tokens_per_s for n in (16, 32, 64)]
    assert tps[0] < tps[1] < tps[2]


def test_plan_api_result():
    r = cm.plan("gpt3-175b", gpus=1024, env="8xH100-NVLink+IB-NDR", tp=8, pp=8, v=3, micro_batch=1,
                recompute="selective", sp=True, zero=1)
    assert r.plan.dp == 16 and r.plan.schedule == "interleaved"
    assert 0 < r.mfu < 1 and r.tokens_per_s == pytest.approx(1536 * 2048 / r.iteration_time)
    assert r.iteration_time == pytest.approx(r.compute + r.bubble + sum(r.exposed.values()) + r.optimizer, rel=0.05)
    kinds = {(g.group, g.primitive) for g in r.groups}
    assert {("tp", "reduce_scatter"), ("tp", "allgather"), ("pp", "send_recv"), ("dp", "reduce_scatter"),
            ("dp", "allgather")} <= kinds
    assert all(g.algorithm and g.time > 0 for g in r.groups)
    json.dumps(r.to_dict())
    trace = r.timeline().to_chrome_trace()
    assert any(e.get("tid") == 7 for e in trace["traceEvents"])  # 8 stages
    with pytest.raises(cm.CommscopeError, match="invalid plan"):
        cm.plan("gpt3-175b", gpus=1024, env=A100, tp=16)
    assert cm.plan("gpt3-175b", gpus=64, env=A100, tp=8, pp=1).oom  # 175B on 64 GPUs without sharding


def test_moe_and_context_parallel_groups():
    r = cm.plan("mixtral-8x7b", gpus=128, env=A100, tp=2, pp=4, ep=8, cp=2, sp=True, recompute="full",
                global_batch=64)
    prims = {(g.group, g.primitive) for g in r.groups}
    assert ("ep", "all_to_all") in prims and ("cp", "send_recv") in prims and ("dp (experts)", "allreduce") in prims


def test_attribution_and_switch():
    r = cm.plan("llama3-70b", gpus=64, env=A100, tp=8, pp=4, v=5, micro_batch=1, recompute="selective", sp=True)
    a = attribute(r)
    assert a.strategy == pytest.approx(r.exposed_comm + r.bubble)
    assert a.network > 0  # 4x faster links help
    assert set(a.shares()) == {"compute", "strategy", "library", "network"}
    sw = switch_points(cm.llm("llama3-8b"), 16, A100, factors=[1 / 16, 1, 16])
    assert len(sw.best) == 3 and np.all(np.diff(sw.times) <= 1e-12)


@pytest.mark.parametrize(("model", "gpus", "env"), [("gpt3-175b", 768, "8xH100-NVLink+IB-NDR"),
                                                    ("mixtral-8x7b", 64, "8xA100-NVLink+IB-HDR"),
                                                    ("llama3-8b", 16, "8xV100-NVLink+100GbE-sockets")])
def test_distinct_messages_priced_once_agree_with_every_plan_priced(monkeypatch, model, gpus, env):
    """The planner prices each distinct (message, group size, stride) once and spreads it over the plans
    (comm.DEDUP): every array of the evaluation is bit-identical to pricing every plan (DEDUP off)."""
    comm = sys.modules["costmodels.llm.comm"]
    spec, e = cm.llm(model), cm.environment(env)
    plans = enumerate_plans(spec, gpus, e)
    assert comm.distinct(*(np.asarray(a) for a in (plans.micro_batch * 1.0, plans.tp, plans.stride("tp")))) is not None
    fast = evaluate(spec, plans, e)
    monkeypatch.setattr(comm, "DEDUP", False)
    slow = evaluate(spec, plans, e)
    for name in ("time", "compute", "bubble", "t_f", "t_b", "t_p2p", "optimizer", "mfu", "tokens_per_s"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    assert all(np.array_equal(fast.exposed[k], slow.exposed[k]) for k in slow.exposed)
    for group in slow.groups:
        for a, b in zip(fast.groups[group], slow.groups[group], strict=True):
            for name in ("nbytes", "calls", "time", "algorithm", "protocol", "ranks", "volume"):
                x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
                assert x.dtype == y.dtype and np.array_equal(x, y), (group, a.primitive, name)


def test_distinct_keys():
    comm = sys.modules["costmodels.llm.comm"]
    n = np.array([1.0, 2.0, 1.0, 1.0] * 20)
    k = np.array([2, 2, 2, 4] * 20)
    s = np.array([1, 1, 1, 1] * 20)
    first, inverse = comm.distinct(n, k, s)
    assert len(first) == 3  # (1, 2, 1), (2, 2, 1), (1, 4, 1)
    assert np.array_equal(n[first][inverse], n) and np.array_equal(k[first][inverse], k)
    assert comm.distinct(n[:8], k[:8], s[:8]) is None  # too few to pay
    assert comm.distinct(np.arange(80.0), k, s) is None  # nearly all distinct
