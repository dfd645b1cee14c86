"""The contended step (issue 16): a message's least time beside compute, S x contended_step, in the engine, in
the schedules that build task graphs, and in how S is counted. Every expected value is worked by hand in its
comment."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.errors import CommscopeError
from costmodels.schedules.core import Configurations
from costmodels.schedules.engine import COMM, COMPUTE, HOST, Graph, run_many, run_one


def one_message(compute: float, work: float, floor: float, configs: int = 1) -> Graph:
    """A compute task and a message that start together (no dependency between them)."""
    g = Graph(configs)
    g.add("compute", COMPUTE, compute, 0)
    g.add("comm", COMM, work, 0, floor=floor)
    return g


@pytest.mark.parametrize(("compute", "work", "floor", "kappa_m", "end"), [
    # floor 8 over work 2: held to slowdown 4 beside compute; 2 x 4 = 8 < 10, so the message ends inside the
    # compute, which ends at 10
    (10.0, 2.0, 8.0, 0.0, 10.0),
    # compute of 4: the message does 4 / 4 = 1 of its 2 by then, the other 1 alone at rate 1: 4 + 1 = 5
    (4.0, 2.0, 8.0, 0.0, 5.0),
    # kappa_m 0.5 beats a ratio of 1.2 (floor 2.4 over 2): slowdown 1.5; the compute ends at 2, by when the
    # message has done 2 / 1.5 = 1.333, and the 0.667 left runs alone: 2 + 0.667 = 2.667
    (2.0, 2.0, 2.4, 0.5, 2.0 + (2.0 - 2.0 / 1.5)),
    # the same with a floor of 6 (ratio 3 > 1.5): by 2, 2 / 3 done, 4 / 3 left alone: 2 + 4/3 = 3.333
    (2.0, 2.0, 6.0, 0.5, 2.0 + 4.0 / 3.0),
    # a floor below the work changes nothing: max(1, 0.5) = 1, both end at max(3, 2) = 3
    (3.0, 2.0, 1.0, 0.0, 3.0),
])
def test_a_message_beside_compute_is_held_to_its_floor(compute, work, floor, kappa_m, end) -> None:
    f = one_message(compute, work, floor).freeze()
    assert run_one(f, 0.0, kappa_m)[0] == pytest.approx(end, rel=1e-12)
    assert run_many(one_message(compute, work, floor).freeze(merge=True), np.array([0.0]),
                    np.array([kappa_m]))[0] == pytest.approx(end, rel=1e-12)


def test_the_floor_holds_only_while_compute_runs() -> None:
    """Message 1 (work 1, floor 10) beside a compute of 10: slowdown 10, it ends at 10 with the compute. Message 2
    (work 1, floor 10) follows alone: 1 more, end 11. Message 2 then waits for a HOST task of 0.5 at 10 on another
    stream: 10.5 + 1 = 11.5; a third compute stream task of 3 after 10 puts message 2 beside compute again: from 10
    it runs at 1/10 until 13 (0.3 done), then 0.7 alone: 13.7."""
    def build(extra: str) -> Graph:
        g = Graph(1)
        g.add("compute", COMPUTE, 10.0, 0)
        first = g.add("comm", COMM, 1.0, 0, floor=10.0)
        dep = first
        if extra == "host":
            dep = g.add("thread", HOST, 0.5, 0, dep=first)
        if extra == "compute":
            g.add("compute", COMPUTE, 3.0, 1)
        g.add("comm", COMM, 1.0, 1, dep=dep, floor=10.0)
        return g

    for extra, end in (("", 11.0), ("host", 11.5), ("compute", 13.7)):
        assert run_one(build(extra).freeze(), 0.0, 0.0)[0] == pytest.approx(end, rel=1e-12), extra
        assert run_many(build(extra).freeze(merge=True), np.zeros(1), np.zeros(1))[0] == pytest.approx(end, rel=1e-12)


def test_floored_messages_are_not_joined_and_run_many_equals_run_one() -> None:
    """Random graphs with floors on some messages: the merged lock-step run equals the per-configuration one."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        c = 4
        g = Graph(c)
        n = int(rng.integers(2, 7))
        comp = g.add("compute", COMPUTE, rng.uniform(0, 3, (c, n)), np.arange(n))
        issue = g.add("compute", HOST, rng.uniform(0, 0.2, (c, n)), np.arange(n) + 0.5)
        g.add("comm", COMM, rng.uniform(0, 2, (c, n)), np.arange(n), dep=issue,
              floor=rng.choice([0.0, 3.0], (c, n)) * rng.uniform(0, 2, (c, n)))
        assert len(comp) == n
        kc, km = rng.uniform(0, 1, c), rng.uniform(0, 1, c)
        merged = g.freeze(merge=True)
        assert merged.tasks <= g.freeze().tasks
        many = run_many(merged, kc, km)
        one = [run_one(g.freeze(), kc[k], km[k], k)[0] for k in range(c)]
        np.testing.assert_allclose(many, one, rtol=1e-12)


def test_only_messages_carry_a_floor() -> None:
    with pytest.raises(CommscopeError, match="only a message"):
        Graph(1).add("compute", COMPUTE, 1.0, 0, floor=1.0)


def steps_of(env: cm.Environment, p: int, sizes: list[float]) -> np.ndarray:
    prof = cm.profile("resnet50")
    cfg = Configurations(prof, np.array([[p]]), cm.EnvironmentArray.of([env]).reshape(1, 1))
    comm = cfg.comm("allreduce", None, {})
    return np.asarray(cfg.contended_floor(comm, np.array([sizes]))) / env.contended_step


def test_steps_are_the_alpha_terms_of_what_the_library_runs() -> None:
    """gloo's ring all-reduce on 4 ranks: 2 (p - 1) = 6 steps from 8p = 32 bytes up, half of them (3) below
    (GLOO_RING_SEGMENTS); p = 1 sends nothing (0). On 8 ranks: 14 steps."""
    env = cm.Environment(alpha=1e-4, beta=1e-9, library="gloo", contended_step=0.01)
    np.testing.assert_allclose(steps_of(env, 4, [16.0, 1e3, 4e6]), [[3.0, 6.0, 6.0]], rtol=1e-9)
    np.testing.assert_allclose(steps_of(env, 8, [1e6]), [[14.0]], rtol=1e-9)
    np.testing.assert_allclose(steps_of(env, 1, [1e6]), [[0.0]], atol=0)
    # no contended step anywhere: the floor is 0, and no second pricing is made
    cfg = Configurations(cm.profile("resnet50"), np.array([[4]]), cm.EnvironmentArray.of([env.with_(
        contended_step=0.0)]).reshape(1, 1))
    assert cfg.contended_floor(cfg.comm("allreduce", None, {}), np.array([[1e6]])) == 0.0


def test_wfbp_with_a_contended_step_sends_little_during_backward() -> None:
    """A two-layer profile, gloo on 4 ranks, alpha 1 ms, no bandwidth term to speak of: each all-reduce is 6 steps,
    6 ms alone. Layer 1's gradient is ready at F + B1 = 2 + 10 = 12 ms and layer 0's at 12 + 10 = 22 ms.
    Without the floor, message 1 runs 12..18 inside layer 0's backward and message 0 runs 22..28: 28 ms.
    With a contended step of 5 ms its floor is 6 x 5 = 30 ms, slowdown 5: by 22 it has done 10 / 5 = 2 ms of its
    6, the other 4 alone (22..26), then message 0 (26..32): 32 ms."""
    layers = (cm.Layer("l0", 1, 1000.0, 1e-3, 10e-3), cm.Layer("l1", 1, 1000.0, 1e-3, 10e-3))
    prof = cm.ModelProfile(name="two", layers=layers, device="x", dtype="float32", batch_size=1, origin="estimated",
                           source="hand")
    env = cm.Environment(alpha=1e-3, beta=1e-15, library="gloo")
    free = cm.simulate(prof, env.with_(kappa_m=1e-12), 4, "wfbp").iteration_time
    held = cm.simulate(prof, env.with_(contended_step=5e-3), 4, "wfbp").iteration_time
    assert free == pytest.approx(28e-3, rel=1e-6)
    assert held == pytest.approx(32e-3, rel=1e-6)
    swept = cm.sweep(prof, [env.with_(contended_step=5e-3)], [4], "wfbp").iteration_time
    assert float(np.asarray(swept).reshape(-1)[0]) == pytest.approx(held, rel=1e-12)
    # bsp sends after backward: no message is ever beside compute, the floor changes nothing
    assert cm.simulate(prof, env.with_(contended_step=5e-3), 4, "bsp").iteration_time == pytest.approx(
        cm.simulate(prof, env, 4, "bsp").iteration_time, rel=1e-12)
