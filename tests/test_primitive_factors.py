"""Each primitive's code path on the link: ``Environment.primitive_factors`` and the per-path fit
(:mod:`runners.measure.fit.per_primitive`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_fit import ENV, synth

import costmodels as cm
from runners.measure import fit as fitting
from runners.measure.fit.per_primitive import code_paths

ROOT = Path(__file__).resolve().parents[1]
GLOO = cm.Environment(alpha=1e-3, beta=1e-8, library="gloo")
FACTORED = GLOO.with_(primitive_factors={"allgather": {"alpha": 1.25, "beta": 1.05}})


# ----------------------------------------------------------------------------------- the field
def test_factors_are_canonical_round_trip_and_stay_out_of_files_without_them() -> None:
    assert FACTORED.primitive_factors == (("allgather", 1.25, 1.05),)
    assert FACTORED.factors("allgather") == (1.25, 1.05) and FACTORED.factors("allreduce") == (1.0, 1.0)
    assert cm.Environment.from_json(FACTORED.to_json()) == FACTORED
    assert json.loads(FACTORED.to_json())["primitive_factors"] == {"allgather": {"alpha": 1.25, "beta": 1.05}}
    # a factor left out is 1; entries of 1 and 1 are dropped; order does not matter
    assert GLOO.with_(primitive_factors={"allgather": {"beta": 2}}).primitive_factors == (("allgather", 1.0, 2.0),)
    assert GLOO.with_(primitive_factors={"allgather": {"alpha": 1, "beta": 1}}) == GLOO
    two = GLOO.with_(primitive_factors=[("reduce", 2, 1), ("allgather", 3, 1)])
    assert [q for q, _, _ in two.primitive_factors] == ["allgather", "reduce"]
    # an environment without factors writes exactly the fields it wrote before the field existed
    assert "primitive_factors" not in GLOO.to_dict()
    assert "allgather: alpha x1.25, beta x1.05" in FACTORED.summary()


@pytest.mark.parametrize(("factors", "message"), [
    ({"allgathr": {"alpha": 2}}, "unknown primitive 'allgathr'; allowed: allreduce"),
    ({"allgather": {"alpha": 0}}, "alpha factor must be > 0, got 0.0"),
    ({"allgather": {"beta": float("inf")}}, "beta factor must be finite"),
    ({"allgather": {"gamma": 2}}, "keys alpha and/or beta"),
    ([("allgather", 2, 1), ("allgather", 3, 1)], "names allgather twice"),
    (5, "must be a mapping"),
])
def test_bad_factors_get_one_clear_line(factors: object, message: str) -> None:
    with pytest.raises(cm.CommscopeError, match=message.replace("(", r"\(")):
        GLOO.with_(primitive_factors=factors)


def test_nccl_takes_no_factors() -> None:
    with pytest.raises(cm.CommscopeError, match="NCCL's model has its own per-collective constants"):
        FACTORED.with_(library="nccl")


# ------------------------------------------------------------------------------------- pricing
def test_a_factored_primitive_is_priced_on_its_own_link_and_the_others_are_not() -> None:
    n = 2.0**20
    # gloo_ring_allgather at p = 4: (p-1) alpha + (p-1)/p n beta, here with alpha x1.25 and beta x1.05:
    # 3 x 1.25e-3 + 0.75 x 1048576 x 1.05e-8 = 3.75e-3 + 8.25754e-3 = 12.00754e-3 s
    ag = cm.collective("gloo_ring_allgather")
    assert ag.time(n=n, p=4, env=FACTORED) == pytest.approx(12.00754e-3, rel=1e-6)
    assert ag.time(n=n, p=4, env=GLOO) == pytest.approx(3e-3 + 0.75 * n * 1e-8, rel=1e-12)
    for name in ("gloo_ring_allreduce", "allreduce_reduce_scatter", "binomial_broadcast"):
        c = cm.collective(name)
        assert c.time(n=n, p=4, env=FACTORED) == c.time(n=n, p=4, env=GLOO)
    # d time / d alpha of the environment: 3 steps x 1.25; elasticities still add up to 1
    s = ag.sensitivity(n, 4, FACTORED)
    assert s["alpha"] == pytest.approx(3.75) and s["beta"] == pytest.approx(0.75 * n * 1.05)
    r = ag.sensitivity(n, 4, FACTORED, relative=True)
    assert r["alpha"] + r["beta"] + r["gamma"] == pytest.approx(1.0)
    # two levels: the factor applies to both links (the code path runs on each)
    two = cm.Environment(alpha=1e-3, beta=1e-8, intra_alpha=1e-4, intra_beta=1e-9, gpus_per_node=2,
                         library="gloo")
    f2 = two.with_(primitive_factors={"allgather": {"alpha": 2.0}})
    ring = cm.collective("ring_allgather")  # (p-1) alpha + (p-1)/p n beta on the slowest link the ring crosses
    assert ring.time(n=n, p=2, env=f2) == pytest.approx(1 * 2e-4 + 0.5 * n * 1e-9)  # inside one node
    assert ring.time(n=n, p=4, env=f2) == pytest.approx(3 * 2e-3 + 0.75 * n * 1e-8)


def test_arrays_schedules_and_sweeps_carry_the_factors() -> None:
    envs = cm.EnvironmentArray.of([GLOO, FACTORED])
    ag = cm.collective("gloo_ring_allgather")
    assert np.allclose(ag.time(n=2**20, p=4, env=envs), [ag.time(n=2**20, p=4, env=e) for e in (GLOO, FACTORED)])
    assert envs[1] == FACTORED and envs[0] == GLOO
    grid = cm.EnvironmentArray.grid(FACTORED, alpha=[1e-3, 2e-3])
    assert grid[1, 0].primitive_factors == FACTORED.primitive_factors
    prof = cm.profile("resnet50")
    for schedule, moves in (("bsp", False), ("wfbp", False), ("zero", True), ("dear", True)):
        plain = cm.simulate(prof, GLOO, p=4, schedule=schedule).iteration_time
        factored = cm.simulate(prof, FACTORED, p=4, schedule=schedule).iteration_time
        assert (factored > plain) == moves and (factored == plain) == (not moves)
        swept = cm.sweep(prof, [GLOO, FACTORED], p=[4], schedule=schedule).iteration_time.ravel()
        assert swept == pytest.approx([plain, factored], rel=1e-9)


# -------------------------------------------------------------------------------------- fitting
def test_code_paths_follow_the_formula() -> None:
    gloo = {"allreduce": "gloo_ring_allreduce", "allgather": "gloo_ring_allgather",
            "reduce_scatter": "allreduce_reduce_scatter"}
    assert code_paths(gloo) == [["allreduce", "reduce_scatter"], ["allgather"]]
    assert code_paths({"allreduce": "ring_allreduce", "reduce_scatter": "ring_reduce_scatter"}) == [
        ["allreduce"], ["reduce_scatter"]]


def test_a_path_slower_per_step_is_found_and_a_shared_link_is_kept() -> None:
    slow = ENV.with_(alpha=ENV.alpha * 1.3, beta=ENV.beta * 1.1)
    recs = synth("ring_allreduce", ENV, reps=3, seed=1) + synth("ring_allgather", slow, reps=3, seed=2)
    res = fitting.fit(recs, "allreduce,allgather")
    a, b = res.environment.factors("allgather")
    assert a == pytest.approx(1.3, rel=0.05) and b == pytest.approx(1.1, rel=0.02)
    assert res.environment.alpha == pytest.approx(ENV.alpha, rel=0.02)
    assert res.environment.beta == pytest.approx(ENV.beta, rel=0.01)
    assert res.code_paths and res.environment.metadata["code_paths"][0]["primitives"] == ["allgather"]
    assert any("each code path fitted on its own" in n for n in res.notes)
    assert res.rms_rel_error < 0.025  # the 2% noise: both paths explained
    one = fitting.fit(recs, "allreduce,allgather", per_primitive=False)
    assert one.rms_rel_error > 2 * res.rms_rel_error and not one.environment.primitive_factors
    # the same link for both (2% noise): the factors do not earn their two parameters
    same = fitting.fit(synth("ring_allreduce", reps=3, seed=1) + synth("ring_allgather", reps=3, seed=2),
                       "allreduce,allgather")
    assert not same.environment.primitive_factors
    assert any(n.startswith("one link for every primitive: fitting each code path alone") for n in same.notes)


def test_the_shipped_sweeps_show_the_allgather_path() -> None:
    # validation-run4, 4 gloo ranks at 1 Gbit/s (2 x 2): gloo's all-gather takes 1.25x the all-reduce's alpha
    env = cm.Environment.load(ROOT / "runners/reference/validation-run4/1gbit-2x2/environment.json")
    a, b = env.factors("allgather")
    assert 1.1 < a < 1.4 and 0.95 < b < 1.15
    assert env.factors("reduce_scatter") == (1.0, 1.0)  # gloo's reduce-scatter is its all-reduce


def test_validation_fits_per_path_unless_told_one_link() -> None:
    # what `tools/repredict_validation.py DIR --one-link` fits: the held-out run's 1 Gbit/s link, both ways
    from runners.validate.driver import same_fit
    from runners.validate.rank import fit_link

    d = ROOT / "bench/results/validation_4ranks_perpath/1gbit-2x2"
    plan = json.loads((d / "plan.json").read_text())
    per_path = fit_link(d / "records.jsonl", plan).environment
    one = fit_link(d / "records.jsonl", plan, per_primitive=False).environment
    assert per_path.primitive_factors and not one.primitive_factors
    # the run kept what validation fits (its path aside: provenance, not fit)
    assert same_fit(cm.Environment.load(d / "environment.json"), per_path)
    assert per_path.alpha < one.alpha  # the all-gather's slower steps no longer price the all-reduces


def test_validation_fits_each_links_chain_time() -> None:
    # the held-out run made with the chain time kept (bench/results/validation_4ranks_chain): its kept fits are
    # what validation fits, and the chain statistic prices each link's latency below the mean of the
    # per-iteration maxima on the same records (alpha 0.93 / 1.12 / 0.96 ms against 1.02 / 1.24 / 1.06 ms)
    from runners.validate.driver import same_fit
    from runners.validate.rank import fit_link

    for link in ("200mbit", "1gbit-2x2", "2500mbit"):
        d = ROOT / "bench/results/validation_4ranks_chain" / link
        plan = json.loads((d / "plan.json").read_text())
        assert plan["fit_statistic"] == "chain"
        chain = fit_link(d / "records.jsonl", plan).environment
        assert same_fit(cm.Environment.load(d / "environment.json"), chain)
        mean = fit_link(d / "records.jsonl", {**plan, "fit_statistic": "mean"}).environment
        assert 0.85 < chain.alpha / mean.alpha < 0.95, link
        assert chain.beta < mean.beta, link
