"""CHOCO-SGD: its bound (limit, monotonicity, iterations_to, a value by hand) and simulated runs below it.

Tightness (bound / simulated metric) recorded when this was written, horizons T = 1, 5, 30, 200, 1000 and 16
replicas, over the runs below (quadratics n = 8 and n = 9, logistic n = 4; ring, torus, complete; top-k at
densities 0.1 and 0.5, random-k at 0.2, scaled sign): at T = 1000 it is 2.1 - 50 (smallest with the complete
graph and density 0.5, largest on the ring with density 0.1; 10 - 26 on the logistic problem); at T = 1 it is
256 - 48,000, the price of the step limit 1/(L (1 + 2 sqrt(P1))) with P1 ~ 4096 / (rho^4 delta^2). Without
compression (density 1, measured outside these tests) it was 1.2 - 25 at every T.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import convergence as cv
from convergence.bounds_choco import DRIFT_FACTOR, NOISE_FACTOR, choco_consensus_step
from convergence.simulate import SIMULATIONS, Run
from convergence.symbols import delta, gap

BASE = {"L": 2.0, "sigma": 1.5, "Delta": 3.0, "n": 8.0, "gap": 0.3, "delta": 0.3, "zeta": 0.5}
HORIZONS = [1, 5, 30, 200, 1000]


def test_registered_with_its_simulation() -> None:
    b = cv.bound("choco_sgd")
    assert b.setting == "nonconvex" and b.training_algorithm == "choco_sgd" and b.limit_of == "sgd"
    assert [x.name for x in b.assumptions] == ["L", "sigma", "Delta", "n", "gap", "delta", "zeta"]
    assert "choco_sgd" in cv.simulations() and SIMULATIONS.get("choco_sgd").bound_for({}) == "choco_sgd"


def test_reduces_to_minibatch_sgd_without_compression_on_the_complete_graph() -> None:
    b = cv.bound("choco_sgd")
    limit = {delta: 1, gap: 1}
    assert dict(b.sgd_limit) == limit
    assert sp.simplify(b.expr.subs(limit) - cv.bound("sgd").expr.subs(limit)) == 0


def test_consensus_step_by_hand() -> None:
    # gap = 3/4: rho = 1 - sqrt(1/4) = 1/2; delta = 3/4: s = sqrt(1/4) = 1/2, 1 - s = 1/2;
    # gamma_c = (1/2 * 1/2) / (1/2 * 1/2 + 16 * 1/2) = (1/4) / (33/4) = 1/33
    assert choco_consensus_step(0.75, 0.75) == pytest.approx(1 / 33, rel=1e-14)
    assert choco_consensus_step(0.2, 1.0) == 1.0  # no compression: plain gossip, i.e. D-PSGD
    steps = choco_consensus_step(np.array([0.01, 0.3, 1.0]), np.array([[0.01], [0.5], [1.0]]))
    assert steps.shape == (3, 3) and (np.diff(steps, axis=0) >= 0).all() and (np.diff(steps, axis=1) >= 0).all()
    with pytest.raises(cv.CommscopeError, match=r"delta must be in \(0, 1\], got 0.0"):
        choco_consensus_step(0.5, 0.0)
    with pytest.raises(cv.CommscopeError, match=r"gap must be in \(0, 1\], got 1.5"):
        choco_consensus_step(1.5, 0.5)


def test_bound_by_hand() -> None:
    """gap = delta = 3/4 (rho = s = 1/2, c = 1/33, kappa = c rho = 1/66, q = 65/66, 2 - kappa = 131/66, beta = 2):
    1 - a11 = kappa/(2-kappa) = 1/131; a12 = 2c*4/(rho (2-kappa)) = (8/33)/(131/132) = 32/131;
    a21 = 2 (1/4) c^2 4/(1/2) = 4/1089; 1 - a22 = 1 - (1/2)(35/33)^2 = 953/2178;
    det = (1/131)(953/2178) - (32/131)(4/1089) = 697/285318; c beta^2/rho = 8/33;
    K_Y = ((65/66)(953/2178) + (8/33)(4/1089)) / det = 246411/1394;
    K_Z = ((65/66)(32/131) + (8/33)(1/131)) / det = 69168/697;
    P0 = K_Y + K_Z/4 = 280995/1394 (201.57); P1 = 132 K_Y + (1/4) K_Z 2/(1/2) = 16332294/697 (23432.3).
    L = sigma = Delta = 1, n = 8, zeta = 0, T = 1000: step_max = 1/(1 + 2 sqrt(P1)) = 0.0032557; there
    2 C g^3 + A g^2 = 2.9e-5 < 2 Delta/T = 0.002 (C = 2 P0, A = 1/8), so the step is step_max and
    B = 2/(1000 g) + g/8 + 2 P0 g^2 = 0.61430 + 0.00041 + 0.00427 = 0.61898."""
    point = {gap: sp.Rational(3, 4), delta: sp.Rational(3, 4)}
    assert sp.nsimplify(NOISE_FACTOR.subs(point)) == sp.Rational(280995, 1394)
    assert sp.nsimplify(DRIFT_FACTOR.subs(point)) == sp.Rational(16332294, 697)
    p0, p1 = Fraction(280995, 1394), Fraction(16332294, 697)
    b = cv.bound("choco_sgd")
    c = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": 8.0, "gap": 0.75, "delta": 0.75}
    g = 1 / (1 + 2 * math.sqrt(p1))
    assert b.step_size(1000, **c) == pytest.approx(g, rel=1e-12)
    assert b.value(1000, **c) == pytest.approx(2 / (1000 * g) + g / 8 + 2 * float(p0) * g * g, rel=1e-12)
    assert b.value(1000, **c) == pytest.approx(0.61898, abs=1e-5)


@pytest.mark.parametrize("constant", ["sigma", "zeta", "L", "Delta"])
def test_bound_grows_with_noise_heterogeneity_smoothness_and_distance(constant: str) -> None:
    b = cv.bound("choco_sgd")
    grid = [0.0, 0.1, 1.0, 1.5, 2.0, 4.0, 16.0] if constant == "zeta" else [0.01, 0.1, 1.0, 1.5, 2.0, 4.0, 16.0]
    for t, (g, dl) in itertools.product((1.0, 10.0, 1e3, 1e6, 1e9), ((0.3, 0.3), (1.0, 1.0), (0.05, 0.9))):
        vals = [float(b.value(t, **{**BASE, "gap": g, "delta": dl, constant: v})) for v in grid]
        assert all(y >= x * (1 - 1e-12) for x, y in itertools.pairwise(vals)), (t, g, dl, vals)


@pytest.mark.parametrize("constant", ["gap", "delta"])
def test_bound_shrinks_as_gap_and_contraction_grow(constant: str) -> None:
    b = cv.bound("choco_sgd")
    grid = [0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 0.99, 0.999, 1.0]
    for t, other, zeta in itertools.product((1.0, 30.0, 1e4, 1e7, 1e10), (0.01, 0.4, 1.0), (0.0, 0.5)):
        c = {**BASE, "gap": other, "delta": other, "zeta": zeta}
        vals = [float(b.value(t, **{**c, constant: v})) for v in grid]
        assert all(y <= x * (1 + 1e-12) for x, y in itertools.pairwise(vals)), (t, other, vals)


def test_iterations_to_is_the_first_T_below_eps() -> None:
    b = cv.bound("choco_sgd")
    for c in (BASE, {**BASE, "gap": 1.0, "delta": 1.0}, {**BASE, "gap": 0.9, "delta": 0.5}):  # T up to ~4e10
        for eps in (1.0, 1e-2, 3e-4):
            t = b.iterations_to(eps, **c)
            assert b.value(t, **c) <= eps
            if t > 1:
                assert b.value(t - 1, **c) > eps
    sgd = cv.bound("sgd").iterations_to(1e-2, L=2.0, sigma=1.5, Delta=3.0, n=8.0)
    assert b.iterations_to(1e-2, **{**BASE, "gap": 1.0, "delta": 1.0, "zeta": 0.0}) == sgd
    assert b.iterations_to(1e-2, **BASE) > sgd


def test_without_compression_the_step_is_dpsgd() -> None:
    """delta = 1 gives gamma_c = 1 and Xhat = X_half after the update, so one CHOCO step is one D-PSGD step."""
    prob = cv.problem("quadratic", n=8, d=10, zeta=2.0, sigma=0.5, seed=3)
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 10))
    gamma = np.full((2, 1, 1, 1), 0.1)
    a = Run(prob, {"topology": "ring", "compressor": "topk", "density": 1.0}, gamma, np.array([5, 5]),
            np.random.default_rng(1), x.copy())
    b = Run(prob, {"topology": "ring"}, gamma, np.array([5, 5]), np.random.default_rng(1), x.copy())
    for _ in range(5):
        SIMULATIONS.get("choco_sgd").step(a)
        SIMULATIONS.get("dpsgd").step(b)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-12, atol=1e-12)


def test_the_average_model_follows_sgd_and_the_step_contracts_as_derived() -> None:
    """1^T (W - I) = 0: xbar' = xbar - gamma mean_i g_i whatever the compressor; and the consensus recursion
    ||Y'||^2 <= q ||Y_h||^2 + (c beta^2 / rho) ||Z||^2 of the derivation holds on the run."""
    prob = cv.problem("quadratic", n=8, d=10, zeta=2.0, sigma=0.5, seed=3)
    params = {"topology": "ring", "compressor": "topk", "density": 0.2}
    run = Run(prob, params, np.full((1, 1, 1, 1), 0.05), np.array([50]), np.random.default_rng(2),
              np.broadcast_to(prob.x0, (1, 4, 8, 10)).copy())
    g, dl = cv.spectral_gap("ring", 8), 0.2
    c = choco_consensus_step(g, dl)
    rho = 1 - math.sqrt(1 - g)
    step = SIMULATIONS.get("choco_sgd").step
    for _ in range(50):
        xbar = run.x.mean(axis=2)
        state = run.rng.bit_generator.state
        grads = prob.grad(run.x, run.rng)
        run.rng.bit_generator.state = state  # the step draws the same gradients
        half = run.x - 0.05 * grads
        step(run)
        np.testing.assert_allclose(run.x.mean(axis=2), xbar - 0.05 * grads.mean(axis=2), atol=1e-12)
        y_h = half - half.mean(axis=2, keepdims=True)
        z = half - run.state["xhat"]
        y = run.x - run.x.mean(axis=2, keepdims=True)
        lhs = np.square(y).sum(axis=(2, 3))
        rhs = (1 - c * rho) * np.square(y_h).sum(axis=(2, 3)) + c * 4 / rho * np.square(z).sum(axis=(2, 3))
        assert (lhs <= rhs * (1 + 1e-12)).all()


@pytest.fixture(scope="module")
def problems() -> list[cv.Problem]:
    return [cv.problem("quadratic", n=8, d=10, zeta=z, sigma=s, seed=3) for z, s in ((0.0, 1.0), (2.0, 0.5))]


COMPRESSORS = [("topk", 0.1), ("topk", 0.5), ("randomk", 0.2)]


@pytest.mark.parametrize("topology", ["ring", "torus", "complete"])
def test_quadratic_runs_stay_below_the_bound(problems: list[cv.Problem], topology: str) -> None:
    runs = [(problems[0], COMPRESSORS[0]), (problems[0], COMPRESSORS[1]), (problems[1], COMPRESSORS[2])]
    for prob, (comp, density) in runs:
        r = cv.simulate("choco_sgd", prob, HORIZONS, replicas=16, seed=1, topology=topology, compressor=comp,
                        density=density)
        assert (r.metric <= r.bound).all(), (topology, comp, density, r.metric, r.bound)
        assert (r.tightness[-1] < 100).all()


def test_torus_of_nine_and_scaled_sign_stay_below_the_bound() -> None:
    prob = cv.problem("quadratic", n=9, d=10, zeta=1.0, sigma=1.0, seed=3)  # a proper 3 x 3 torus
    for comp in ("topk", "scaled_sign"):
        r = cv.simulate("choco_sgd", prob, HORIZONS, replicas=16, seed=1, topology="torus", compressor=comp)
        assert r.constants["gap"] == pytest.approx(cv.spectral_gap("torus", 9))
        assert (r.metric <= r.bound).all(), (comp, r.metric, r.bound)


@pytest.mark.parametrize(("topology", "compressor"), list(zip(["ring", "torus", "complete"], COMPRESSORS, strict=True)))
def test_logistic_runs_stay_below_the_bound(topology: str, compressor: tuple[str, float]) -> None:
    prob = cv.problem("logistic", n=4, d=6, samples=400, batch=4)
    r = cv.simulate("choco_sgd", prob, HORIZONS, replicas=16, seed=1, topology=topology, compressor=compressor[0],
                    density=compressor[1])
    assert (r.metric <= r.bound).all(), (topology, compressor, r.metric, r.bound)


def test_bad_parameters_are_named(problems: list[cv.Problem]) -> None:
    with pytest.raises(cv.CommscopeError, match="choco_sgd: compressor must be one of topk, randomk, scaled_sign"):
        cv.simulate("choco_sgd", problems[0], 5, compressor="qsgd")
    with pytest.raises(cv.CommscopeError, match="choco_sgd: density must be in \\(0, 1\\], got 0"):
        cv.simulate("choco_sgd", problems[0], 5, density=0)


@pytest.mark.parametrize("topology", ["ring", "torus"])
def test_without_compression_runs_stay_below_dpsgds_bound(problems: list[cv.Problem], topology: str) -> None:
    """delta = 1 is D-PSGD step for step, so the bound is D-PSGD's there (the smaller of the two), run with its step."""
    for prob in problems:
        r = cv.simulate("choco_sgd", prob, HORIZONS, replicas=16, seed=1, topology=topology, density=1.0)
        c = {k: v for k, v in r.constants.items() if k != "delta"}
        assert r.constants["delta"] == 1.0
        np.testing.assert_array_equal(r.bound, cv.bound("dpsgd").value(np.array(HORIZONS, dtype=float), **c))
        assert (r.metric <= r.bound).all(), (topology, r.metric, r.bound)
