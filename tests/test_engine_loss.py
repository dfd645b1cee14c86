"""The compute a message's latency steps take (issue 16): S x compute_loss_step, spent by the engine while compute
runs beside the message, in every schedule that builds a task graph, and derived for CPU ranks from the sweep's
CPU per step. Every expected value is worked by hand in its comment."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import costmodels as cm
from costmodels.cpu_sharing import SharedHost, cpu_sharing_terms
from costmodels.errors import CommscopeError
from costmodels.schedules.engine import COMM, COMPUTE, HOST, PHI, Graph, run_many, run_one


def one_message(compute: float, work: float, loss: float, floor: float = 0.0, configs: int = 1) -> Graph:
    """A compute task and a message that start together (no dependency between them)."""
    g = Graph(configs)
    g.add("compute", COMPUTE, compute, 0)
    g.add("comm", COMM, work, 0, floor=floor, loss=loss)
    return g


def both_ends(g_of, kc: float = 0.0, km: float = 0.0) -> tuple[float, float]:
    one = run_one(g_of().freeze(), kc, km)[0]
    many = float(run_many(g_of().freeze(merge=True), np.array([kc]), np.array([km]))[0])
    return one, many


@pytest.mark.parametrize(("compute", "work", "loss", "floor", "kappa_c", "end"), [
    # theta = 0.6 / 2 = 0.3 <= PHI: the message is not slowed; for its 2 s the compute runs at 1 - 0.3 = 0.7 and
    # does 1.4 of its 10, the 8.6 left alone: 2 + 8.6 = 10.6 = compute + loss
    (10.0, 2.0, 0.6, 0.0, 0.0, 10.6),
    # theta = 1.6 / 2 = 0.8 > PHI: the message is held to 0.8 / 0.5 = 1.6, 3.2 s; the compute keeps 1 - 0.8/1.6 =
    # 0.5 of its rate, does 1.6 by 3.2, the 8.4 left alone: 11.6 = compute + loss again
    (10.0, 2.0, 1.6, 0.0, 0.0, 11.6),
    # a compute of 1 beside a message of 2 taking 0.6: the compute runs at 0.7 and ends at 1 / 0.7 = 1.428571,
    # having lost only 0.428571; the message (rate 1 all along) ends at 2
    (1.0, 2.0, 0.6, 0.0, 0.0, 2.0),
    # with kappa_c 0.25 too: the compute's slowdown is 1.25 / (1 - 0.3) = 1.785714 for 2 s: 1.12 done, 8.88 left
    # alone: 10.88
    (10.0, 2.0, 0.6, 0.0, 0.25, 2.0 + (10.0 - 2.0 * 0.7 / 1.25)),
    # a floor of 4 over the work 2 (held to 2) beats theta / PHI = 0.6: 4 s on the link, the compute loses
    # theta / s = 0.3 / 2 = 0.15 of its rate over them: 3.4 done, 6.6 alone: 10.6, the loss once more
    (10.0, 2.0, 0.6, 4.0, 0.0, 10.6),
])
def test_a_message_takes_its_loss_from_the_compute_beside_it(compute, work, loss, floor, kappa_c, end) -> None:
    one, many = both_ends(lambda: one_message(compute, work, loss, floor), kc=kappa_c)
    assert one == pytest.approx(end, rel=1e-12)
    assert many == pytest.approx(end, rel=1e-12)


def test_the_message_alone_takes_nothing_and_its_loss_moves_only_compute() -> None:
    """A message issued after the compute ends (it waits for it) meets an idle link but runs alone, at rate 1:
    10 + 2 = 12, loss or not.
    Beside the compute, the message's own end is unchanged where theta <= PHI (2, as test 1), later where not."""
    def after() -> Graph:
        g = Graph(1)
        c = g.add("compute", COMPUTE, 10.0, 0)
        g.add("comm", COMM, 2.0, 0, dep=c, loss=1.6)
        return g

    assert both_ends(after) == pytest.approx((12.0, 12.0), rel=1e-12)
    f = one_message(10.0, 2.0, 0.6).freeze()
    _, _, ends = run_one(f, 0.0, 0.0)
    assert ends[f.kind[:-1].tolist().index(COMM)] == pytest.approx(2.0, rel=1e-12)
    f = one_message(10.0, 2.0, 1.6).freeze()
    _, _, ends = run_one(f, 0.0, 0.0)
    assert ends[f.kind[:-1].tolist().index(COMM)] == pytest.approx(3.2, rel=1e-12)


@pytest.mark.parametrize(("second_issue", "compute_end", "end"), [
    # the second message's issue ends at 1, while the first (issued at 0) is on the link until 2: it is queued
    # behind it and takes nothing; the compute (10) loses only the first message's 0.6: 10.6
    (1.0, 10.6, 10.6),
    # its issue ends at 3, after the link fell free at 2: it meets an idle link and takes its 0.6 too: 11.2
    (3.0, 11.2, 11.2),
])
def test_only_a_message_that_meets_an_idle_link_takes_compute(second_issue, compute_end, end) -> None:
    def g_of() -> Graph:
        g = Graph(1)
        g.add("compute", COMPUTE, 10.0, 0)
        issues = g.add("thread", HOST, [0.0, second_issue], [0, 1])
        g.add("comm", COMM, [2.0, 2.0], [0, 1], dep=issues, loss=0.6)
        return g

    assert both_ends(g_of) == pytest.approx((end, end), rel=1e-12)
    f = g_of().freeze()
    _, _, ends = run_one(f, 0.0, 0.0)
    assert ends[f.kind[:-1].tolist().index(COMPUTE)] == pytest.approx(compute_end, rel=1e-12)


def test_a_message_queued_without_an_issue_takes_nothing_and_the_first_on_its_link_does() -> None:
    """Two messages of 2 s each (loss 0.6 each) that wait for nothing, beside a compute of 2.5: the first, first on
    its link, takes its loss: the compute runs at 0.7 over [0, 2] (1.4 done); the second is queued behind it and
    takes none, so the compute's 1.1 left runs at rate 1: 3.1; the second message ends at 4, the end."""
    def g_of() -> Graph:
        g = Graph(1)
        g.add("compute", COMPUTE, 2.5, 0)
        g.add("comm", COMM, [2.0, 2.0], [0, 1], loss=0.6)
        return g

    assert both_ends(g_of) == pytest.approx((4.0, 4.0), rel=1e-12)
    f = g_of().freeze()
    _, _, ends = run_one(f, 0.0, 0.0)
    assert ends[f.kind[:-1].tolist().index(COMPUTE)] == pytest.approx(3.1, rel=1e-12)


def test_loss_only_on_messages() -> None:
    g = Graph(1)
    with pytest.raises(CommscopeError, match="only a message"):
        g.add("compute", COMPUTE, 1.0, 0, loss=0.1)
    with pytest.raises(CommscopeError, match="only a message"):
        g.add("thread", HOST, 1.0, 0, loss=0.1)


def test_messages_that_take_compute_are_not_joined_and_run_many_equals_run_one() -> None:
    """Random graphs with losses (and floors) on some messages: the merged lock-step run equals the one per
    configuration, and a loss never shortens an iteration."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        c = 4
        n = int(rng.integers(2, 7))
        work = rng.uniform(0, 2, (c, n))
        loss = rng.choice([0.0, 1.0], (c, n)) * rng.uniform(0, 3, (c, n))
        floor = rng.choice([0.0, 3.0], (c, n)) * rng.uniform(0, 2, (c, n))
        comp, host = rng.uniform(0, 3, (c, n)), rng.uniform(0, 0.2, (c, n))

        def build(with_loss: bool) -> Graph:
            g = Graph(c)
            g.add("compute", COMPUTE, comp, np.arange(n))
            issue = g.add("compute", HOST, host, np.arange(n) + 0.5)
            g.add("comm", COMM, work, np.arange(n), dep=issue, floor=floor, loss=loss if with_loss else 0.0)
            return g

        kc, km = rng.uniform(0, 1, c), rng.uniform(0, 1, c)
        many = run_many(build(True).freeze(merge=True), kc, km)
        for i in range(c):
            assert many[i] == pytest.approx(run_one(build(True).freeze(), kc[i], km[i], row=i)[0], rel=1e-9)
        assert np.all(many >= run_many(build(False).freeze(merge=True), kc, km) - 1e-12)


def test_phi_is_the_fair_share_of_one_communicating_thread_against_one_computing() -> None:
    assert PHI == 0.5


# ----------------------------------------------------------------------------------------- the schedules
def profile(layers: int, grad_bytes: float, forward_s: float, backward_s: float) -> cm.ModelProfile:
    return cm.ModelProfile(name=f"{layers} layers", layers=tuple(cm.Layer(f"l{i}", int(grad_bytes // 4), grad_bytes,
                                                                          forward_s, backward_s)
                                                                 for i in range(layers)),
                           device="x", dtype="float32", batch_size=1, origin="estimated", source="test")


PROFILE = profile(4, 1e6, 0.01, 0.02)
BASE = cm.Environment(alpha=1e-3, beta=1e-9, library="gloo", name="test")


@pytest.mark.parametrize("schedule", ["wfbp", "mgwfbp", "fusion", "bytescheduler", "dear", "zero", "fsdp", "ps",
                                      "bsp", "local_sgd"])
def test_every_schedule_prices_the_loss_and_zero_gives_todays_times(schedule: str) -> None:
    """compute_loss_step 0 is today's result to the bit; a loss makes no iteration shorter. bsp and local SGD never
    run a message beside compute: unchanged by any loss."""
    kappa = dataclasses.replace(BASE, kappa_c=0.1)  # the engine path in both
    plain = cm.simulate(PROFILE, kappa, 4, schedule).iteration_time
    zero = cm.simulate(PROFILE, dataclasses.replace(kappa, compute_loss_step=0.0), 4, schedule).iteration_time
    lossy = cm.simulate(PROFILE, dataclasses.replace(kappa, compute_loss_step=5e-4), 4, schedule).iteration_time
    assert zero == plain
    if schedule in ("bsp", "local_sgd"):
        assert lossy == pytest.approx(plain, rel=1e-12)
    else:
        assert lossy >= plain - 1e-12


def test_wfbp_one_message_beside_the_last_backward_hand_worked() -> None:
    """Two layers, one message of layer 1's gradient issued after its backward (0.02 s), beside layer 0's
    backward (0.02 s). 4 ranks, ring all-reduce of 1 MB under gloo: 6 steps of alpha 1 ms + 2 x 3/4 x 1e6 x 1 ns =
    6 ms + 1.5 ms = 7.5 ms; then layer 0's message, 7.5 ms, alone after the backward. compute_loss_step 0.5 ms:
    the first message takes 6 x 0.5 = 3 ms over its 7.5 ms (theta 0.4 <= PHI, not slowed): layer 0's backward
    does 7.5 x 0.6 = 4.5 ms of its 20 by then, 15.5 left alone: it ends at 0.02 + 0.0075 + 0.0155 = 0.043 instead
    of 0.040 (the loss, 3 ms); its message then runs alone: 0.043 + 0.0075 = 0.0505. Without the loss 0.0475."""
    prof = profile(2, 1e6, 0.0, 0.02)
    env = cm.Environment(alpha=1e-3, beta=1e-9, library="gloo", name="test")
    t = cm.simulate(prof, dataclasses.replace(env, compute_loss_step=5e-4), 4, "wfbp", collective="ring_allreduce")
    t0 = cm.simulate(prof, dataclasses.replace(env, kappa_c=1e-300), 4, "wfbp", collective="ring_allreduce")
    assert t0.iteration_time == pytest.approx(0.0475, rel=1e-9)
    assert t.iteration_time == pytest.approx(0.0505, rel=1e-9)


def test_sweep_and_simulate_agree_with_a_loss() -> None:
    env = dataclasses.replace(BASE, compute_loss_step=4e-4, kappa_c=0.2)
    for schedule in ("wfbp", "mgwfbp", "fusion", "bytescheduler", "dear"):
        one = cm.simulate(PROFILE, env, 4, schedule).iteration_time
        many = cm.sweep(PROFILE, env, [4], schedule)
        assert float(many.iteration_time.ravel()[0]) == pytest.approx(one, rel=1e-9), schedule


# ----------------------------------------------------------------------------------------- the derived default
def test_compute_loss_step_is_the_sweeps_cpu_per_step_times_ranks_per_core() -> None:
    # 4 ranks on 2 cores, 0.28 ms of CPU per step per rank: 0.28 x 4 / 2 = 0.56 ms of each rank's compute a step
    host = SharedHost(cores=2.0, ranks=4, cpu_s_per_byte=0.65e-9, cpu_s_per_step=0.28e-3)
    env = cm.Environment(alpha=8e-4, beta=3.3e-9, library="gloo")
    assert cpu_sharing_terms(env, host)["compute_loss_step"] == pytest.approx(0.56e-3, rel=1e-12)
    assert cm.default_terms(env, host)["compute_loss_step"] == pytest.approx(0.56e-3, rel=1e-12)
    # no CPU per step known, no host, or NCCL: 0
    assert cm.default_terms(env, dataclasses.replace(host, cpu_s_per_step=0.0))["compute_loss_step"] == 0.0
    assert cm.default_terms(env)["compute_loss_step"] == 0.0
    assert cm.default_terms(dataclasses.replace(env, library="nccl", compute_capability=90))[
        "compute_loss_step"] == 0.0
    with pytest.raises(CommscopeError, match="cpu_s_per_step"):
        SharedHost(cores=2.0, ranks=4, cpu_s_per_byte=0.65e-9, cpu_s_per_step=-1.0)


def test_environment_checks_and_keeps_compute_loss_step(tmp_path) -> None:
    env = dataclasses.replace(BASE, compute_loss_step=5e-4)
    assert env.has_terms and "compute lost 0.5 ms per step" in env.summary()
    env.save(tmp_path / "e.json")
    assert cm.Environment.load(tmp_path / "e.json").compute_loss_step == 5e-4
    with pytest.raises(CommscopeError, match="compute_loss_step"):
        dataclasses.replace(BASE, compute_loss_step=-1.0)
    with pytest.raises(CommscopeError, match="compute_loss_step"):
        dataclasses.replace(BASE, compute_loss_step=float("nan"))
    arr = cm.EnvironmentArray.of([BASE, env])
    assert arr.has_terms.tolist() == [False, True]


def test_the_bound_with_l_zero_is_todays() -> None:
    import sympy as sp

    from costmodels.schedules.core import NO_OVERLAP, B, C, F, L, O, U, kappa_c, kappa_m

    before = F + B + U + C + O + sp.Max(0, kappa_c / (1 + kappa_c) - 1 / (1 + kappa_m)) * sp.Min(
        (F + B + U) * (1 + kappa_c), C * (1 + kappa_m))
    assert sp.simplify(NO_OVERLAP.subs(L, 0) - before) == 0
    # hand: F + B + U = 1, C = 1, O = 0, kappa_c = kappa_m = 1: bracket max(0, 1/2 - 1/2) = 0; L = 0.1 adds
    # 0.1 / 2 + 0.1 / (0.5 x 2) = 0.15 to 2
    _, hi = cm.schedule("wfbp").bounds({"F": 0.5, "B": 0.5, "C": 1.0, "kappa_c": 1.0, "kappa_m": 1.0, "L": 0.1})
    assert hi == pytest.approx(2.15, rel=1e-12)
    assert cm.schedule("wfbp").bounds({"F": 0.5, "B": 0.5, "C": 1.0, "kappa_c": 1.0, "kappa_m": 1.0})[1] == 2.0
