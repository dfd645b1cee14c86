"""Interference (kappa_c, kappa_m), host overhead (o) and the optimizer step in every schedule (issue 16).

Hand examples use p = 2 and ring_allreduce on alpha = 1 ms, beta = 1 us/B, gamma = 0, as in
tests/test_schedules.py: a message of m bytes costs c(m) = 2 ms + m us; a ring reduce-scatter or
all-gather costs 1 ms + m/2 us. With kappa_c = kappa_m = 1, compute and communication that run together
both progress at half speed.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import costmodels as cm
from costmodels.messages import Comm
from costmodels.schedules import COMPRESSIBLE, B, C, F
from costmodels.schedules.core import TERMS, Configurations, L, O, U, kappa_c, kappa_m
from costmodels.schedules.engine import COMM, COMPUTE, HOST, Graph, run_many, run_one

MS = 1e-3
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)
TERMS_OFF = {"kappa_c": 0.0, "kappa_m": 0.0, "host_overhead": 0.0}
BASELINE = json.loads((Path(__file__).parent / "data" / "schedule_baseline.json").read_text())


def profile(name: str, *layers: tuple[float, float, float]) -> cm.ModelProfile:
    """Layers (grad bytes, forward ms, backward ms) in forward order, named l0, l1, ..."""
    return cm.ModelProfile(name=name, device="hand", dtype="float32", batch_size=4, origin="estimated",
                           source="hand example", layers=tuple(cm.Layer(f"l{i}", 1, g, f * MS, b * MS)
                                                               for i, (g, f, b) in enumerate(layers)))


THREE = profile("three", (1000.0, 1, 2), (2000.0, 2, 4), (3000.0, 3, 6))  # c = 3, 4, 5 ms; ready at 18, 16, 12 ms


def hand(schedule: str, prof: cm.ModelProfile, env: cm.Environment, **options) -> cm.IterationResult:
    return cm.simulate(prof, env, 2, schedule, collective="ring_allreduce", **options)


def no_passes(prof: cm.ModelProfile) -> cm.ModelProfile:
    """The profile with gradient passes measured at 0 s/B, so that o and U are placed alone (the passes'
    own hand examples: tests/test_gradient_passes.py)."""
    return replace(prof, metadata={**prof.metadata, "pass_s_per_byte": 0.0})


def spans(r: cm.IterationResult, stream: str = "comm") -> list[tuple[str, float, float]]:
    return [(e.label, round(e.start / MS, 9), round(e.end / MS, 9)) for e in r.timeline.on(stream)]


# ----------------------------------------------------------------------------------- by hand
def test_wfbp_backward_slowed_by_one_message_by_hand() -> None:
    # l1 (2000 B, no compute) is ready at 0: its message (c = 4 ms) runs from 0 while l0's backward (10 ms) runs.
    # kappa_c = 0.5, kappa_m = 0: the message takes its 4 ms; meanwhile backward does 4 / 1.5 = 2.667 ms of its
    # work and the 7.333 ms left run alone: backward ends at 11.333 ms (10 + 4 x 0.5 / 1.5). l0's message
    # (0 B, c = 2 ms) follows: 13.333 ms.
    two = profile("two", (0.0, 0, 10), (2000.0, 0, 0))
    r = hand("wfbp", two, ENV.with_(kappa_c=0.5))
    assert r.iteration_time == pytest.approx(40 / 3 * MS, rel=1e-12)
    assert spans(r) == [("l1", 0, 4), ("l0", 11.333333333, 13.333333333)]
    assert hand("wfbp", two, ENV).iteration_time == pytest.approx(12 * MS)  # without: 10 + 2


def test_wfbp_both_slowed_by_hand() -> None:
    # kappa_c = kappa_m = 1. Forward 0-6, backward of l2 6-12 alone. From 12, l2's message (5 ms) and l1's backward
    # (4 ms) run together at half speed: the backward ends at 20, the message has done 4 of 5 ms. l0's backward
    # (2 ms) starts at 20: the message's last ms takes 2, ending at 22, while l0's backward does 1 ms. From 22 l1's
    # message (4 ms) and the rest of l0's backward (1 ms) run together: backward ends at 24, the message has done
    # 1 ms and does its last 3 alone: 27. l0's message (3 ms): 27-30 ms (24 ms without interference).
    r = hand("wfbp", THREE, ENV.with_(kappa_c=1.0, kappa_m=1.0))
    assert spans(r) == [("l2", 12, 22), ("l1", 22, 27), ("l0", 27, 30)]
    assert spans(r, "compute")[3:] == [("l2", 6, 12), ("l1", 12, 20), ("l0", 20, 24)]
    assert r.iteration_time == pytest.approx(30 * MS, rel=1e-12)


def test_wfbp_host_overhead_on_the_backward_thread_by_hand() -> None:
    # o = 1 ms after each layer's backward, on the backward thread. The sweep's price c(m) = 2 ms + m us holds the o
    # of its blocking call, so a message holds the link for c(m) - o = 1 ms + m us (LinkComm): 4, 3 and 2 ms.
    # l2: backward 6-12, issue 12-13, message 13-17; l1: backward 13-17, issue 17-18, message 18-21; l0: backward
    # 18-20, issue 20-21, message 21-23 ms. 24 ms without o: issued during backward, the o's hide behind it.
    r = hand("wfbp", THREE, ENV.with_(host_overhead=1 * MS))
    assert spans(r) == [("l2", 13, 17), ("l1", 18, 21), ("l0", 21, 23)]
    assert [e.label for e in r.timeline.on("compute") if e.kind == "issue"] == ["l2", "l1", "l0"]
    assert r.iteration_time == pytest.approx(23 * MS, rel=1e-12)
    assert r.details["host_overhead_s"] == pytest.approx(3 * MS)
    assert r.details["communication_s"] == pytest.approx(9 * MS)


def test_bsp_overhead_and_optimizer_by_hand() -> None:
    # BSP issues after backward (18 ms) one blocking all-reduce at a time from the training thread, o = 1 ms each,
    # then the message holds the link for c(m) - o: issue 18-19, l2 19-23; issue 23-24, l1 24-27; issue 27-28,
    # l0 28-30; then the optimizer step (3 ms): 33 ms, as with o = 0: a chain of blocking calls costs what the
    # sweep timed (18 + 5 + 4 + 3 + 3). Nothing overlaps compute, so interference changes nothing.
    prof = no_passes(THREE.with_optimizer(3 * MS))
    r = hand("bsp", prof, ENV.with_(host_overhead=1 * MS))
    assert spans(r) == [("l2", 19, 23), ("l1", 24, 27), ("l0", 28, 30)]
    assert r.iteration_time == pytest.approx(33 * MS, rel=1e-12)
    assert hand("bsp", prof, ENV).iteration_time == pytest.approx(33 * MS, rel=1e-12)
    assert hand("bsp", prof, ENV.with_(host_overhead=1 * MS, kappa_c=1.0, kappa_m=1.0)).iteration_time == \
        pytest.approx(33 * MS, rel=1e-12)
    assert r.compute_time == pytest.approx(21 * MS)  # a single worker's forward, backward and step
    # flatten: one o, then one message of all 6000 B: 2 alpha + 6000 B x 1 us/B - o = 7 ms, 19-26; the step to 29 ms
    flat = hand("bsp", prof, ENV.with_(host_overhead=1 * MS), flatten=True)
    assert [(a, b) for _, a, b in spans(flat)] == [(19, 26)]
    assert flat.iteration_time == pytest.approx(29 * MS, rel=1e-12)


def test_an_overhead_larger_than_the_price_leaves_the_link_at_zero() -> None:
    # o = 3 ms against l0's c(1000) = 3 ms and l1's c(0) = 2 ms: l0 holds the link 0 ms, l1 max(2 - 3, 0) = 0 ms.
    two = profile("two", (1000.0, 0, 1), (0.0, 0, 1))
    r = hand("bsp", no_passes(two), ENV.with_(host_overhead=3 * MS))
    assert [(a, b) for _, a, b in spans(r)] == [(5, 5), (8, 8)]
    assert r.iteration_time == pytest.approx(8 * MS, rel=1e-12)


def test_dear_by_hand() -> None:
    # Two layers of 2000 B (forward 2, backward 4 ms), buffer 3000 B: groups [l0], [l1]; RS = AG = 2 ms.
    # The period starts when l0's all-gather ends. Without interference: AG of l1 0-2 beside l0's forward 0-2;
    # l1's forward 2-4; backward of l1 4-8, RS l1 8-10 beside l0's backward 8-12; RS l0 12-14; AG l0 14-16.
    # kappa_c = kappa_m = 1: AG l1 and l0's forward together at half speed, both 0-4; l1's forward 4-6; l1's
    # backward 6-10; RS l1 (2 ms) beside l0's backward (4 ms): RS 10-14, then the backward's 2 ms left alone, to 16;
    # RS l0 16-18; AG l0 18-20: period 20 ms.
    two = profile("two", (2000.0, 2, 4), (2000.0, 2, 4))
    assert hand("dear", two, ENV, buffer_bytes=3000).iteration_time == pytest.approx(16 * MS, rel=1e-12)
    r = hand("dear", two, ENV.with_(kappa_c=1.0, kappa_m=1.0), buffer_bytes=3000)
    assert r.iteration_time == pytest.approx(20 * MS, rel=1e-12)
    assert [(e.kind, *s) for e, s in zip(r.timeline.on("comm"), spans(r), strict=True)] == [
        ("allgather", "l1", 0, 4), ("reduce_scatter", "l1", 10, 14), ("reduce_scatter", "l0", 16, 18),
        ("allgather", "l0", 18, 20)]
    # The optimizer step per module, right before its forward (dopt_rsag.py): 1 ms each. l0's step and forward
    # (3 ms) beside AG l1 (2 ms): the AG ends at 4, the 1 ms left runs alone to 5; l1's step and forward 5-8;
    # backward l1 8-12, RS l1 12-16 beside l0's backward, which ends at 18; RS l0 18-20; AG l0 20-22.
    r = hand("dear", no_passes(two.with_optimizer(2 * MS)), ENV.with_(kappa_c=1.0, kappa_m=1.0), buffer_bytes=3000)
    assert r.iteration_time == pytest.approx(22 * MS, rel=1e-12)
    assert [e.label for e in r.timeline.on("compute") if e.kind == "optimizer"] == ["l0", "l1"]


def test_sharded_optimizer_step_is_a_shard_of_it() -> None:
    # ZeRO and FSDP update 1/p of the parameters: with p = 2 an optimizer time of 4 ms costs 2 ms.
    prof = no_passes(THREE.with_optimizer(4 * MS))
    for schedule in ("zero", "fsdp"):
        base = hand(schedule, THREE, ENV).iteration_time
        assert hand(schedule, prof, ENV).iteration_time == pytest.approx(base + 2 * MS, rel=1e-12)
    assert hand("wfbp", prof, ENV).iteration_time == pytest.approx(hand("wfbp", THREE, ENV).iteration_time + 4 * MS)


def test_one_worker_pays_its_step_but_no_overhead() -> None:
    prof = cm.profile("resnet50").with_optimizer(0.01)
    env = cm.environment("10GbE").with_(host_overhead=1e-3, kappa_c=0.5, kappa_m=0.5)
    for schedule in cm.schedules():
        r = cm.simulate(prof, env, 1, schedule)
        assert r.iteration_time == pytest.approx(prof.compute_s + 0.01, rel=1e-12), schedule
        assert r.timeline.on("comm") == []


# ------------------------------------------------------------------------------ the engine
def random_graph(rng: np.random.Generator, configs: int) -> Graph:
    """Tasks numbered in a global order; each waits at most for an earlier one, so no graph deadlocks."""
    g = Graph(configs)
    ids: list[int] = []
    for k in range(15):
        stream = str(rng.integers(3))
        kind = int(rng.choice([HOST, COMPUTE, COMM]))
        dep = int(rng.choice(ids)) if ids and rng.random() < 0.4 else -1
        work = rng.uniform(0, 1, (configs, 1)) * (rng.random() > 0.1)
        ids.append(int(g.add(stream, kind, work, k, dep)[0]))
    return g


def fluid(g: Graph, kc: float, km: float, row: int = 0, dt: float = 1e-3) -> float:
    """The same model by brute force: advance every running task by dt at its rate until all are done."""
    f = g.freeze()
    work = f.work[:-1, row].copy()
    done = np.zeros(f.tasks, dtype=bool)
    t = 0.0
    while not done.all():
        heads = [f.off[s] + int(done[f.off[s]:f.off[s + 1]].sum()) for s in range(len(f.streams))]
        run = [i for s, i in enumerate(heads) if i < f.off[s + 1] and (f.dep[i] < 0 or done[f.dep[i]])]
        zero = [i for i in run if work[i] <= 0]
        if zero:
            done[zero] = True
            continue
        comp, comm = any(f.kind[i] == COMPUTE for i in run), any(f.kind[i] == COMM for i in run)
        for i in run:
            work[i] -= dt / (1 + (kc * comm if f.kind[i] == COMPUTE else km * comp if f.kind[i] == COMM else 0.0))
        t += dt
    return t


def test_engine_equals_a_brute_force_fluid_simulation() -> None:
    rng = np.random.default_rng(5)
    for _ in range(3):
        g = random_graph(rng, 1)
        for kc, km in ((0.0, 0.0), (0.7, 0.3), (2.0, 1.5)):
            exact = run_one(g.freeze(), kc, km)[0]
            assert exact == pytest.approx(fluid(g, kc, km), abs=0.015)  # each task's end rounds up to a dt
            assert exact > 2  # the graphs do take time


def test_run_many_equals_run_one_and_merging_changes_nothing() -> None:
    rng = np.random.default_rng(11)
    g = random_graph(rng, 6)
    kc, km = rng.uniform(0, 2, 6), rng.uniform(0, 2, 6)
    many = run_many(g.freeze(), kc, km)
    merged = run_many(g.freeze(merge=True), kc, km)
    one = [run_one(g.freeze(), kc[c], km[c], c)[0] for c in range(6)]
    np.testing.assert_allclose(many, one, rtol=1e-12)
    np.testing.assert_allclose(merged, one, rtol=1e-12)


# ------------------------------------------------------------------- exactness at zero
def frozen_env(name: str) -> cm.Environment:
    """The preset as it was when the fixture was written (its JSON has no terms: they load as 0)."""
    env = cm.Environment.from_dict(BASELINE["environments"][name])
    assert not env.has_terms
    return env


AFTER_BASELINE = {"dpsgd"}  # schedules registered after the baseline was frozen: nothing of theirs to keep


def test_every_schedule_but_the_later_ones_is_in_the_baseline() -> None:
    assert set(cm.schedules()) - {c["schedule"] for c in BASELINE["cases"]} == AFTER_BASELINE


@pytest.mark.parametrize("schedule", sorted(set(cm.schedules()) - AFTER_BASELINE))
def test_zero_terms_give_the_frozen_times(schedule: str) -> None:
    """tests/data/schedule_baseline.json was written by tools/make_schedule_baseline.py before issue 16 (repriced
    with --reprice when gloo's two-rank allgather was modelled: only 10GbE cases at p = 2 that all-gather moved)."""
    cases = [c for c in BASELINE["cases"] if c["schedule"] == schedule]
    assert cases
    for c in cases:
        env = frozen_env(c["env"])
        r = cm.simulate(cm.profile(c["profile"]), env, c["p"], schedule, compressor=c["compressor"])
        assert r.iteration_time == pytest.approx(c["iteration_time"], rel=1e-12, abs=0), c
    for model in cm.profiles():
        for compressor in (None, *sorted({c["compressor"] for c in cases if c["profile"] == model} - {None})):
            want = {(c["env"], c["p"]): c["iteration_time"] for c in cases
                    if c["profile"] == model and c["compressor"] == compressor}
            envs = [frozen_env(e) for e in BASELINE["envs"]]
            got = cm.sweep(cm.profile(model), envs, BASELINE["p"], schedule, compressor=compressor).iteration_time
            frozen = [[want[(e, q)] for q in BASELINE["p"]] for e in BASELINE["envs"]]
            np.testing.assert_allclose(got, frozen, rtol=1e-12, atol=0, err_msg=f"{model} {compressor}")


@pytest.mark.parametrize("schedule", cm.schedules())
def test_task_graphs_at_zero_are_the_schedules_own_recurrences(schedule: str) -> None:
    """Forcing the engine where every term is 0 gives the recurrences' times (to 1e-12)."""
    for model, env, p in (("resnet50", "10GbE", 8), ("bert-base", "8xV100-NVLink+IB-EDR", 16), ("vgg16", "IB-EDR", 2)):
        prof, e = cm.profile(model), cm.environment(env).with_(**TERMS_OFF)
        cfg = Configurations(prof, np.array([[p]]), cm.EnvironmentArray.of([e]).reshape(1, 1))
        want = cm.simulate(prof, e, p, schedule).iteration_time
        assert TERMS[schedule](cfg, None, True).time[0] == pytest.approx(want, rel=1e-12)
        assert TERMS[schedule](cfg, None, False).time[0] == pytest.approx(want, rel=1e-12)


# -------------------------------------------------------------- vectorized = scalar, bounds
def random_envs(rng: np.random.Generator, n: int) -> list[cm.Environment]:
    names = ("10GbE", "IB-EDR", "8xV100-NVLink+IB-EDR", "4xPCIe3+10GbE", "IB-HDR")
    return [cm.environment(names[i % len(names)]).with_(
        kappa_c=float(rng.uniform(0, 2)), kappa_m=float(rng.uniform(0, 2)), host_overhead=float(rng.uniform(0, 1e-4)))
        for i in range(n)]


@pytest.mark.parametrize("schedule", cm.schedules())
def test_sweep_equals_simulate_with_the_terms_on(schedule: str) -> None:
    rng = np.random.default_rng(17)
    prof = cm.profile("resnet50").with_optimizer(0.003)
    envs = [*random_envs(rng, 3), cm.environment("10GbE")]
    ps = [1, 2, 16]
    got = cm.sweep(prof, envs, ps, schedule).iteration_time
    want = [[cm.simulate(prof, e, q, schedule).iteration_time for q in ps] for e in envs]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    mixed = cm.sweep(cm.profile("bert-base"), envs, ps, schedule).iteration_time  # some chunks kernel, some engine
    np.testing.assert_allclose(mixed, [[cm.simulate(cm.profile("bert-base"), e, q, schedule).iteration_time
                                        for q in ps] for e in envs], rtol=1e-12)


@pytest.mark.parametrize("schedule", [s for s in cm.schedules() if s in COMPRESSIBLE])
def test_compressed_sweep_equals_simulate_with_the_terms_on(schedule: str) -> None:
    rng = np.random.default_rng(23)
    prof, envs, ps = cm.profile("resnet50"), random_envs(rng, 2), [2, 8]
    for spec in ("topk:0.01", "powersgd:2"):
        got = cm.sweep(prof, envs, ps, schedule, compressor=spec).iteration_time
        want = [[cm.simulate(prof, e, q, schedule, compressor=spec).iteration_time for q in ps] for e in envs]
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=spec)


def lossy_envs(rng: np.random.Generator, n: int) -> list[cm.Environment]:
    """gloo environments whose messages also take compute: up to 10 ms per latency step (compute_loss_step)."""
    return [cm.Environment(alpha=float(rng.uniform(1e-5, 2e-3)), beta=float(rng.uniform(1e-10, 4e-9)), library="gloo",
                           kappa_c=float(rng.uniform(0, 2)), kappa_m=float(rng.uniform(0, 2)),
                           host_overhead=float(rng.uniform(0, 1e-4)), compute_loss_step=float(rng.uniform(0, 1e-2)))
            for _ in range(n)]


@pytest.mark.parametrize("schedule", cm.schedules())
def test_simulated_time_between_the_extended_bounds(schedule: str) -> None:
    """With L, the compute the messages can take (``compute_loss_s``; 0 where no message takes any)."""
    rng = np.random.default_rng(29)
    envs = random_envs(rng, 6)
    for i, env in enumerate(envs + lossy_envs(np.random.default_rng(31), 6)):
        prof = cm.profile(("resnet50", "bert-base", "vgg16")[i % 3])
        if i % 2:
            prof = prof.with_optimizer(float(rng.uniform(0, 0.3)) * prof.compute_s)
        r = cm.simulate(prof, env, int(rng.choice([2, 4, 16])), schedule)
        d = r.details
        values = {F: prof.forward_s, B: prof.backward_s, C: d["communication_s"], U: d["optimizer_s"],
                  O: d["host_overhead_s"], L: d.get("compute_loss_s", 0.0), kappa_c: env.kappa_c,
                  kappa_m: env.kappa_m}
        lo, hi = cm.schedule(schedule).bounds(values)
        assert lo * (1 - 1e-9) <= r.iteration_time <= hi * (1 + 1e-9), (env.summary(), lo, r.iteration_time, hi)
        if i >= len(envs) and schedule in ("wfbp", "mgwfbp", "fusion", "bytescheduler", "dear", "zero", "fsdp", "ps"):
            assert d["compute_loss_s"] > 0


def test_strong_interference_can_make_overlap_slower_than_serial() -> None:
    """kappa_c = kappa_m = 10: overlapped work crawls, the serial sum is no longer an upper bound, the excess is."""
    env = ENV.with_(kappa_c=10.0, kappa_m=10.0)
    r = hand("wfbp", THREE, env)
    values = {F: THREE.forward_s, B: THREE.backward_s, C: r.details["communication_s"]}
    serial = sum(values.values())
    assert r.iteration_time > serial
    lo, hi = cm.schedule("wfbp").bounds({**values, kappa_c: 10.0, kappa_m: 10.0})
    assert lo <= r.iteration_time <= hi


@pytest.mark.parametrize("schedule", ["bsp", "wfbp", "fusion", "ps", "dear", "zero", "fsdp"])
def test_monotone_in_the_terms(schedule: str) -> None:
    """Fixed task graphs: slower tasks never end anything earlier."""
    prof, env = cm.profile("resnet50"), cm.environment("10GbE")
    env = env.with_(host_overhead=1e-5)
    times = [cm.simulate(prof, env.with_(kappa_c=k, kappa_m=k / 2), 8, schedule).iteration_time
             for k in (0.0, 0.1, 0.5, 2.0)]
    assert times == sorted(times)


def test_a_blocking_chain_costs_what_the_sweep_timed_whatever_o() -> None:
    """o moves from the link to the issuing thread (LinkComm): BSP, which overlaps nothing, does not move."""
    prof, env = cm.profile("resnet50"), cm.environment("10GbE")
    base = cm.simulate(prof, env, 8, "bsp").iteration_time
    cheapest = float(Comm("allreduce", 8, env)(0.0)[0])  # o up to the cheapest message's price
    for o in (1e-6, cheapest / 2, cheapest):
        assert cm.simulate(prof, env.with_(host_overhead=o), 8, "bsp").iteration_time == pytest.approx(base, rel=1e-12)


def test_mgwfbp_merges_more_when_each_message_costs_the_host_more() -> None:
    prof, env = cm.profile("resnet50"), cm.environment("IB-EDR")
    groups = [cm.simulate(prof, env.with_(host_overhead=o), 8, "mgwfbp").details["groups"] for o in (0.0, 1e-4, 1e-3)]
    assert groups[0] >= groups[1] >= groups[2] and groups[0] > groups[2]


# --------------------------------------------------------------------- environments, profiles
@pytest.mark.parametrize(("field", "value", "message"), [
    ("kappa_c", -0.1, r"kappa_c \(compute slowdown while a collective is in flight, dimensionless\) must be >= 0"),
    ("kappa_m", math.inf, r"kappa_m \(communication slowdown while compute runs, dimensionless\) must be finite"),
    ("host_overhead", "1us", r"host_overhead \(seconds of the issuing thread per message, LogP's o\) must be a number"),
])
def test_terms_are_validated(field: str, value, message: str) -> None:
    with pytest.raises(cm.CommscopeError, match=message):
        ENV.with_(**{field: value})
    with pytest.raises(cm.CommscopeError, match=f"{field} must be"):
        cm.EnvironmentArray.of([ENV]).__class__(**{**{f: getattr(cm.EnvironmentArray.of([ENV]), f) for f in
                                                     ("alpha", "beta", "gamma", "intra_alpha", "intra_beta",
                                                      "gpus_per_node", "nics_per_node")},
                                                  "names": ["x"], field: [-1.0]})


def test_terms_in_json_and_environment_arrays(tmp_path) -> None:
    env = cm.environment("IB-EDR").with_(kappa_c=0.3, kappa_m=0.1, host_overhead=2e-5)
    assert cm.Environment.load(env.save(tmp_path / "e.json")) == env
    old = env.to_dict()
    for key in TERMS_OFF:
        del old[key]
    assert not cm.Environment.from_dict(old).has_terms  # files written before issue 16 load with the terms at 0
    arr = cm.EnvironmentArray.of([env, ENV])
    assert arr.kappa_c.tolist() == [0.3, 0.0] and arr.has_terms.tolist() == [True, False]
    assert arr[0] == env.with_(description="", source="")
    grid = cm.EnvironmentArray.grid(env, beta=[1e-9, 2e-9])
    assert grid.host_overhead.tolist() == [[2e-5, 2e-5]] and grid[0, 1].kappa_m == 0.1
    assert "kappa_c=0.3" in env.summary() and "o=20 us" in env.summary()


def test_optimizer_time_in_profiles(tmp_path) -> None:
    prof = cm.profile("resnet50")
    assert prof.optimizer_s == 0 and "optimizer_s" not in prof.to_dict()["columns"]  # shipped profiles unchanged
    step = prof.with_optimizer(0.02)
    assert step.optimizer_s == pytest.approx(0.02)
    big = max(step.layers, key=lambda x: x.params)
    assert big.optimizer_s == pytest.approx(0.02 * big.params / prof.params)  # distributed by parameters
    assert cm.load_profile(step.save(tmp_path / "p.json")) == step
    data = prof.to_dict()
    data["optimizer_s"] = 0.02  # a profile total in the JSON
    assert cm.ModelProfile.from_dict(data).optimizer_s == pytest.approx(0.02)
    with pytest.raises(cm.CommscopeError, match="optimizer_s must be finite and >= 0"):
        prof.with_optimizer(-1.0)


def test_preset_defaults_cite_their_source_or_say_pending() -> None:
    for name in cm.environments():
        env = cm.environment(name)
        assert env.kappa_m == 0 and env.host_overhead == 0
        if env.compute_capability in (80, 90):
            assert env.kappa_c == 0.189 and "arXiv 2507.03114" in env.source, name
        else:
            assert env.kappa_c == 0 and "0 pending measurement" in env.source, name


# ------------------------------------------------------------------ ByteScheduler's kernel (item 6)
def test_bytescheduler_kernel_equals_its_event_simulation_on_random_models() -> None:
    """The kernel keeps the unsent ready partitions as a stack of intervals (overlap._send_batches): random
    models with empty tensors, ties of ready times and credits of one to four partitions exercise it."""
    rng = np.random.default_rng(2)
    for _ in range(12):
        layers = tuple(cm.Layer(f"l{i}", 1, float(rng.choice([0, rng.integers(1, 6_000_000)])),
                                float(rng.uniform(0, 2e-3)), float(rng.choice([0, rng.uniform(0, 4e-3)])))
                       for i in range(25))
        prof = cm.ModelProfile(name="random", layers=layers, device="x", dtype="float32", batch_size=1,
                               origin="estimated", source="random")
        part = float(rng.choice([2**20, 2**21, 3e6]))
        options = {"partition_bytes": part, "credit_bytes": part * float(rng.choice([1, 1.5, 2, 4]))}
        envs = [cm.Environment(alpha=float(a), beta=float(b))
                for a, b in zip(rng.uniform(1e-6, 1e-3, 2), rng.uniform(1e-10, 3e-9, 2), strict=True)]
        got = cm.sweep(prof, envs, [2, 8], "bytescheduler", **options).iteration_time
        want = [[cm.simulate(prof, e, q, "bytescheduler", **options).iteration_time for q in (2, 8)] for e in envs]
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pair_formula_of_one_segment_and_one_message() -> None:
    """engine's docstring: a compute segment W and a message M that start together end after pair(W, M)."""
    rng = np.random.default_rng(31)
    for _ in range(20):
        w, m, kc, km = (*rng.uniform(0.1, 5, 2), *rng.uniform(0, 3, 2))
        g = Graph(1)
        g.add("compute", COMPUTE, w, 0)
        g.add("comm", COMM, m, 0)
        pair = m + w * (1 + kc) * km / (1 + km) if w * (1 + kc) <= m * (1 + km) else w + m * (1 + km) * kc / (1 + kc)
        assert run_one(g.freeze(), kc, km)[0] == pytest.approx(pair, rel=1e-12)
