"""Simulated runs never beat their bound: for every algorithm, problem and horizon, the replica mean of
(1/T) sum_t ||grad f(xbar_t)||^2 stays at or below B(T) (the run uses the bound's own step size).

The bounds minimised over Young weights (async_sgd and ssp with zeta, dpsgd, error feedback; issue 17) run with
the step of their best member at each horizon; the heterogeneous quadratic (zeta = 2) exercises their zeta terms,
and ssp runs with whole-clock views and with views that miss part of the last s clocks (view='partial')."""

from __future__ import annotations

import numpy as np
import pytest

import convergence as cv

SETTINGS = [
    ("sgd", {}), ("local_sgd", {"H": 2}), ("local_sgd", {"H": 16}), ("async_sgd", {"tau": 1}),
    ("async_sgd", {"tau": 12}), ("ssp", {"s": 1}), ("ssp", {"s": 6}), ("ssp", {"s": 3, "view": "partial"}),
    ("ssp", {"s": 6, "view": "partial", "visible": 0.0}), ("dpsgd", {"topology": "ring"}),
    ("dpsgd", {"topology": "torus"}), ("dpsgd", {"topology": "exponential"}), ("dpsgd", {"topology": "complete"}),
    ("qsgd", {"levels": 1}), ("qsgd", {"levels": 8}), ("topk", {"density": 0.1}), ("topk", {"density": 0.5}),
    ("randomk", {"density": 0.2}), ("powersgd", {"rank": 1}), ("ef_signsgd", {}), ("ef_topk", {"density": 0.3}),
    ("sgd_sc", {}), ("local_sgd_sc", {"H": 4}), ("local_sgd_sc", {"H": 16}),
]
ROUNDING = 1 + 1e-12  # distance bounds at a vanishing step equal D0 itself, as does the run


@pytest.fixture(scope="module")
def quadratics() -> list[cv.Problem]:
    return [cv.problem("quadratic", n=8, d=10, zeta=z, sigma=sg, seed=3) for z, sg in ((0.0, 1.0), (2.0, 0.5))]


@pytest.fixture(scope="module")
def logistic() -> cv.Problem:
    return cv.problem("logistic", n=4, d=6, samples=400, batch=4)


@pytest.mark.parametrize(("algorithm", "params"), SETTINGS, ids=[f"{a}-{p}" for a, p in SETTINGS])
def test_quadratics_stay_below_the_bound(quadratics: list[cv.Problem], algorithm: str, params: dict) -> None:
    for prob in quadratics:
        r = cv.simulate(algorithm, prob, [1, 5, 30, 200, 1000], replicas=24, seed=1, **params)
        assert (r.metric <= r.bound * ROUNDING).all(), (prob.constants(), r.metric, r.bound)
        assert (r.tightness < 1e3).all()  # and the bound says something


@pytest.mark.parametrize(("algorithm", "params"), SETTINGS[::2], ids=[f"{a}-{p}" for a, p in SETTINGS[::2]])
def test_logistic_regression_stays_below_the_bound(logistic: cv.Problem, algorithm: str, params: dict) -> None:
    r = cv.simulate(algorithm, logistic, [1, 10, 100], replicas=8, seed=2, **params)
    assert (r.metric <= r.bound * ROUNDING).all()


@pytest.mark.parametrize("n", [1, 3, 7])
def test_signsgd_majority_vote_stays_below_its_l1_bound(n: int) -> None:
    prob = cv.problem("quadratic", n=n, d=12, zeta=0.0, sigma=2.0, seed=4)
    r = cv.simulate("signsgd", prob, [1, 4, 30, 300, 1000], replicas=24, seed=3)
    assert r.bound_name == "signsgd" and (r.metric <= r.bound).all(), (r.metric, r.bound)
    c = prob.constants()  # sum of the eigenvalues; sd sigma/sqrt(d) per coordinate -> sigma1 = sqrt(d) sigma
    assert c["L1"] == pytest.approx(prob.details["eigenvalues"].sum()) and c["sigma1"] == pytest.approx(np.sqrt(12) * 2)


def test_signsgd_refuses_heterogeneous_workers(quadratics: list[cv.Problem]) -> None:
    with pytest.raises(cv.CommscopeError, match=r"every worker samples the same objective.*zeta = 2"):
        cv.simulate("signsgd", quadratics[1], 10)


@pytest.mark.parametrize(("algorithm", "params", "factor"), [
    ("topk", {"density": 0.1}, 0.75), ("randomk", {"density": 0.2}, 0.75), ("ef_signsgd", {}, 0.75),
    ("powersgd", {"rank": 1}, 1.0)])
def test_error_feedback_beats_the_same_compressor_without_it(quadratics: list[cv.Problem], algorithm: str,
                                                            params: dict, factor: float) -> None:
    """Same step, same noise: without error feedback the biased compressor loses what it drops; compressing each
    worker's step, it stalls higher on heterogeneous data (by a quarter at least). PowerSGD compresses the mean
    of the steps, which carries no heterogeneity, and its truncation keeps a descent direction: error feedback
    still wins, by less. Only the run with error feedback has a bound."""
    runs = {ef: cv.simulate(algorithm, quadratics[1], [1000, 5000], replicas=8, seed=1, error_feedback=ef, **params)
            for ef in (True, False)}
    assert np.array_equal(runs[True].step, runs[False].step)
    assert (runs[True].metric < factor * runs[False].metric).all(), (runs[True].metric, runs[False].metric)
    assert np.isnan(runs[False].bound).all() and runs[False].bound_name is None
    assert (runs[True].metric <= runs[True].bound).all()


def test_compressors_keep_their_contraction() -> None:
    from convergence.sim_algorithms import random_k, rank_r, scaled_sign, top_k

    rng = np.random.default_rng(0)
    v = rng.standard_normal((2000, 12))
    norm2 = np.square(v).sum(axis=1)
    assert (np.square(v - top_k(v, 3)).sum(axis=1) <= (1 - 3 / 12) * norm2 + 1e-12).all()
    assert np.square(v - random_k(v, 3, rng)).sum(axis=1).mean() == pytest.approx(0.75 * norm2.mean(), rel=0.03)
    assert (np.square(v - rank_r(v, 1)).sum(axis=1) <= (1 - 1 / 3) * norm2 + 1e-12).all()  # 3 x 4 matrices
    assert (np.square(v - scaled_sign(v)).sum(axis=1) <= (1 - 1 / 12) * norm2 + 1e-12).all()
    assert np.array_equal(top_k(v, 12), v) and (np.count_nonzero(top_k(v, 3), axis=1) == 3).all()


def test_quadratic_constants_are_exact() -> None:
    prob = cv.problem("quadratic", n=6, d=4, L=3.0, mu=0.5, sigma=0.7, zeta=1.3, seed=5)
    c = prob.constants()
    assert c["L"] == 3.0 and c["mu"] == 0.5 and c["sigma"] == 0.7 and c["zeta"] == pytest.approx(1.3)
    x = np.random.default_rng(0).standard_normal(4)
    local = prob.local_grad(np.broadcast_to(x, (6, 4)))
    assert np.mean(np.square(local - prob.full_grad(x)).sum(axis=1)) == pytest.approx(1.3**2)  # zeta^2 everywhere
    noise = prob.grad(np.zeros((20000, 6, 4)), np.random.default_rng(1)) - prob.local_grad(np.zeros((6, 4)))
    assert np.square(noise).sum(axis=-1).mean() == pytest.approx(0.49, rel=0.02)  # E||xi||^2 = sigma^2


def test_qsgd_quantizer_is_unbiased_with_omega_variance() -> None:
    from convergence.sim_algorithms import qsgd_omega, qsgd_quantize

    v = np.array([3.0, -1.0, 0.5, 0.0, 2.0])
    q = qsgd_quantize(np.broadcast_to(v, (200000, 5)), 2, np.random.default_rng(0))
    assert np.allclose(q.mean(axis=0), v, atol=0.02)
    var = np.square(q - v).sum(axis=1).mean()
    assert var <= qsgd_omega(5, 2) * np.square(v).sum()  # Lemma 3.1: min(d/s^2, sqrt(d)/s) ||v||^2


def test_simulation_is_seeded_and_errors_are_named(quadratics: list[cv.Problem]) -> None:
    a = cv.simulate("local_sgd", quadratics[1], [50], seed=4, H=4)
    b = cv.simulate("local_sgd", quadratics[1], [50], seed=4, H=4)
    assert a.metric[0] == b.metric[0]
    with pytest.raises(cv.CommscopeError, match="local_sgd takes H, got tau"):
        cv.simulate("local_sgd", quadratics[1], 10, tau=3)
    with pytest.raises(cv.CommscopeError, match="unknown simulated algorithm 'adam'; valid names: async_sgd"):
        cv.simulate("adam", quadratics[1], 10)
    with pytest.raises(cv.CommscopeError, match="the problem has n = 8 workers, got n = 16"):
        cv.simulate("sgd", quadratics[1], 10, n=16)
    with pytest.raises(cv.CommscopeError, match="ssp: view must be 'clock' or 'partial', got 'some'"):
        cv.simulate("ssp", quadratics[1], 10, view="some")


def test_async_bound_takes_the_problems_zeta(quadratics: list[cv.Problem]) -> None:
    """The run draws one worker per update, so heterogeneity is noise: the bound takes zeta (as time to accuracy
    passes it), no longer a sigma_eff = sqrt(sigma^2 + zeta^2) made up by the simulation."""
    r = cv.simulate("async_sgd", quadratics[1], [10], replicas=2, tau=3)
    assert r.constants["zeta"] == pytest.approx(2.0) and r.constants["sigma"] == 0.5
    assert r.bound[0] == cv.bound("async_sgd").value(10, L=1.0, sigma=0.5, Delta=r.constants["Delta"], tau=3.0,
                                                     zeta=r.constants["zeta"])


def test_partial_views_miss_other_workers_updates() -> None:
    """view='partial', visible = 0: each worker's view is x_c plus every other worker's update of the last s clocks
    added back, i.e. x_{c-s} minus its own updates since; with one worker it is the current model (s = 0 alike)."""
    from convergence.simulate import SIMULATIONS, Run

    prob = cv.problem("quadratic", n=1, d=4, zeta=0.0, sigma=1e-300, seed=1)
    runs = [Run(prob, {"s": 2, "view": v, "visible": 0.0}, np.full((1, 1, 1, 1), 0.1), np.array([5]),
                np.random.default_rng(0), np.broadcast_to(prob.x0, (1, 1, 1, 4)).copy()) for v in ("partial", "clock")]
    for _ in range(5):
        for run in runs:
            SIMULATIONS.get("ssp").step(run)
    exact = prob.x0.copy()
    for _ in range(5):
        exact = exact - 0.1 * prob.local_grad(exact[None])[0]
    np.testing.assert_allclose(runs[0].x[0, 0, 0], exact, rtol=1e-12)  # one worker sees all its own updates
    assert not np.allclose(runs[1].x[0, 0, 0], exact)  # a whole-clock view is s clocks old
