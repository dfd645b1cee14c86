"""Convergence bounds: limits, monotonicity, iterations_to, topologies; by hand where possible."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

import convergence as cv
from convergence.symbols import ALL

BASE = {"L": 2.0, "sigma": 1.5, "Delta": 3.0, "n": 8.0, "H": 4.0, "zeta": 0.5, "tau": 3.0, "s": 2.0,
        "gap": 0.3, "omega": 2.0, "delta": 0.3, "mu": 0.1, "D0": 5.0, "L1": 10.0, "sigma1": 3.0}


def consts(b: cv.Bound, **over: float) -> dict[str, float]:
    names = {x.name for x in b.assumptions}
    return {k: v for k, v in {**BASE, **over}.items() if k in names}


@pytest.mark.parametrize("name", cv.bounds())
def test_every_bound_reduces_to_minibatch_sgd_in_its_limit(name: str) -> None:
    b = cv.bound(name)
    if b.limit_of is None:  # only signSGD (l1 metric, no limit) and the lower bound have none
        assert (name, b.sgd_limit) in (("signsgd", None), ("arjevani", None))
        return
    sgd = cv.bound(b.limit_of)
    assert sgd.limit_of == sgd.name and not sgd.sgd_limit and sgd.measure == b.measure
    limit = dict(b.sgd_limit)
    if name == "async_sgd":  # one gradient per update: SGD with n = 1
        limit[ALL["n"]] = 1
    assert sp.simplify(b.expr.subs(limit) - sgd.expr.subs(limit)) == 0


def test_sgd_bound_by_hand() -> None:
    """L = 2, sigma = 1.5, Delta = 3, n = 8, T = 100: the balancing step sqrt(2*3*8/(2*2.25*100)) =
    0.3266 < 1/L = 0.5, so B = 2 sqrt(2 * 3 * 2 * 2.25 / (8 * 100)) = 2 sqrt(0.03375) = 0.367423."""
    b = cv.bound("sgd")
    assert b.step_size(100, **consts(b)) == pytest.approx(np.sqrt(48 / 450))
    assert b.value(100, **consts(b)) == pytest.approx(2 * np.sqrt(0.03375))
    # T = 1: step 1/L = 0.5, B = 2*3/0.5 + 2 * 0.5 * 2.25 / 8 = 12.28125
    assert b.value(1, **consts(b)) == pytest.approx(12.28125)


GROWING = ("sigma", "H", "tau", "s", "omega", "zeta", "Delta", "L")


@pytest.mark.parametrize(("name", "constant"), [(b, c) for b in cv.bounds() for c in GROWING
                                                if c in {x.name for x in cv.bound(b).assumptions}])
def test_bounds_grow_with_noise_delay_locality_and_compression(name: str, constant: str) -> None:
    b = cv.bound(name)
    grid = np.array([1.0, 1.5, 2.0, 4.0, 8.0, 16.0])
    for t in (1.0, 10.0, 1e3, 1e6):
        vals = [float(b.value(t, **consts(b, **{constant: v}))) for v in grid]
        assert all(y >= x * (1 - 1e-12) for x, y in itertools.pairwise(vals)), (t, vals)


@pytest.mark.parametrize(("name", "constant"), [(b, c) for b in cv.bounds() for c in ("gap", "delta")
                                                if c in {x.name for x in cv.bound(b).assumptions}])
def test_bounds_shrink_as_the_spectral_gap_and_contraction_grow(name: str, constant: str) -> None:
    b = cv.bound(name)
    for t in (1.0, 30.0, 1e4, 1e7):
        vals = [float(b.value(t, **consts(b, **{constant: g}))) for g in (0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0)]
        assert all(y <= x * (1 + 1e-12) for x, y in itertools.pairwise(vals)), (t, vals)


@pytest.mark.parametrize("name", cv.bounds())
def test_iterations_to_is_the_first_T_below_eps(name: str) -> None:
    b = cv.bound(name)
    c = consts(b)
    for eps in (1.0, 1e-2, 3e-4):
        t = b.iterations_to(eps, **c)
        assert b.value(t, **c) <= eps
        if t > 1:
            assert b.value(t - 1, **c) > eps


def test_iterations_to_is_vectorized() -> None:
    b = cv.bound("local_sgd")
    hs = np.array([1.0, 2.0, 8.0, 32.0])
    ts = b.iterations_to(1e-2, **{**consts(b), "H": hs})
    assert ts.shape == (4,) and (np.diff(ts) >= 0).all()
    assert ts[2] == b.iterations_to(1e-2, **consts(b, H=8.0))


@pytest.mark.parametrize(("kw", "message"), [
    ({"L": -1.0}, "L must be finite and > 0, got -1.0"),
    ({"gap": 1.5}, "gap must be finite and in \\(0, 1\\], got 1.5"),
    ({"H": 0.5}, "H must be finite and >= 1, got 0.5"),
    ({"rho": 1.0}, "has no constant\\(s\\) rho"),
])
def test_bad_constants_are_named(kw: dict, message: str) -> None:
    b = cv.bound("dpsgd") if "gap" in kw else cv.bound("local_sgd")
    with pytest.raises(cv.CommscopeError, match=message):
        b.value(10, **{**consts(b), **kw})


def test_missing_constant_is_named() -> None:
    with pytest.raises(cv.CommscopeError, match="sgd needs sigma"):
        cv.bound("sgd").iterations_to(1e-2, L=1.0, Delta=1.0, n=4)


def test_spectral_gaps_by_hand() -> None:
    # ring of 4 with weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi k / 4) = 1, 1/3, -1/3, 1/3 -> gap 1 - 1/9
    assert cv.spectral_gap("ring", 4) == pytest.approx(8 / 9)
    # ring of 8: lambda = 1/3 + 2/3 cos(pi/4)
    assert cv.spectral_gap("ring", 8) == pytest.approx(1 - (1 / 3 + 2 / 3 * np.cos(np.pi / 4)) ** 2)
    assert cv.spectral_gap("complete", 16) == pytest.approx(1.0)
    # exponential graph of 8: hops +-1, +-2, +-4 -> five distinct neighbours, weight 1/6 each
    w = cv.mixing_matrix("exponential", 8)
    assert np.allclose(w.sum(axis=0), 1) and np.allclose(w, w.T) and np.isclose(w[0, 4], 1 / 6)
    gaps = [cv.spectral_gap(t, 16) for t in ("ring", "torus", "exponential", "complete")]
    assert gaps == sorted(gaps)  # better connected, larger gap


def test_package_docstring_example_is_right() -> None:
    import doctest

    assert doctest.testmod(cv, raise_on_error=False).failed == 0


def test_error_feedback_step_limit_by_hand() -> None:
    """The member theta = phi = 1/2 at delta = 3/4 (s = 1/2): r = theta min(1, 8 s) = 1/2, alpha = (1/4)(5/8) /
    ((1/4)(9/16)) = 10/9, beta = (1/4)/(3/8) = 2/3; with L = 2, sigma = 3/2, zeta = 1/2: C = 4 (10/36 + 3/2) / r =
    128/9, and the step limit 2 (1 - r) / (L (1 + sqrt(1 + 4 (alpha/r)(1 - r)))) = 1 / (2 (1 + sqrt(49/9))) = 3/20
    (formerly 0.129943). At T = 1 every member takes its step limit; B is the least of them, at most this member's
    6/g + 0.5625 g + C g^2."""
    from convergence.bounds_ef import phi, theta
    from convergence.symbols import L, delta, sigma, zeta

    b = cv.bound("topk")
    point = {theta: sp.Rational(1, 2), phi: sp.Rational(1, 2), delta: sp.Rational(3, 4), L: 2,
             sigma: sp.Rational(3, 2), zeta: sp.Rational(1, 2)}
    assert sp.simplify(b.disagreement.subs(point)) == sp.Rational(128, 9)
    assert sp.simplify(b.step_max.subs(point)) == sp.Rational(3, 20)
    g = 3 / 20
    c = consts(b, delta=0.75)
    assert b.value(1, **c) <= 6 / g + 0.5625 * g + 128 / 9 * g * g
    assert b.step_size(1, **consts(b, delta=1.0)) == pytest.approx(0.5)  # 1/L at delta = 1


def test_signsgd_bound_by_hand() -> None:
    """L1 = 10, sigma1 = 3, Delta = 3, n = 4: (sqrt(10) * 3.5 + 2 * 3 / 2)^2 / T = (11.0680 + 3)^2 / T = 197.91 / T;
    the first T below 1 is 198, and it draws n T per iteration: 4 * 198^2 queries."""
    b = cv.bound("signsgd")
    c = {"L1": 10.0, "sigma1": 3.0, "Delta": 3.0, "n": 4.0}
    assert b.value(10, **c) == pytest.approx((np.sqrt(10) * 3.5 + 3) ** 2 / 10)
    assert b.iterations_to(1.0, **c) == 198 and b.queries_to(1.0, **c) == 4 * 198**2
    assert b.step_size(100, **c) == pytest.approx(1 / np.sqrt(1000))


def test_strongly_convex_sgd_by_hand() -> None:
    """L = 2, mu = 0.1, sigma = 1.5, n = 8, D0 = 5: the step limit is 1/(4L) = 0.125. At T = 1000, the
    derivative -T mu (1 - mu g)^(T-1) D0 + sigma^2/(n mu) vanishes where (1 - 0.1 g)^999 = 0.28125/50, i.e.
    g = 0.051709 < 0.125; B = 5 (1 - 0.1 g)^1000 + g * 0.28125 / 0.1."""
    b = cv.bound("sgd_sc")
    c = consts(b)
    g = (1 - (0.28125 / 50) ** (1 / 999)) / 0.1
    assert b.step_size(1000, **c) == pytest.approx(g, rel=1e-9)
    assert b.value(1000, **c) == pytest.approx(5 * (1 - 0.1 * g) ** 1000 + g * 2.8125, rel=1e-9)
    assert b.step_size(1, **c) == 0.0  # one step cannot beat D0: the best step is none
    assert b.value(1, **c) == pytest.approx(5.0)


def test_lower_bound_by_hand_and_no_upper_bound_beats_it() -> None:
    """Arjevani et al. with our explicit constants: L = Delta = sigma = 1, eps = 1e-5 (squared norm):
    max(1 / (3648e-5), 1 / (123506688e-10)) = max(27.41, 80.97) = 80.97 queries."""
    low = cv.bound("arjevani")
    assert low.kind == "lower"
    assert low.queries_to(1e-5, L=1.0, sigma=1.0, Delta=1.0) == pytest.approx(1e10 / 123506688)
    assert low.valid_below(L=2.0, Delta=3.0, sigma=1.0) == pytest.approx(6 / 14592)
    with pytest.raises(cv.CommscopeError, match="lower bound holds for 0 < eps <= L Delta / 14592"):
        low.queries_to(1.0, L=1.0, sigma=1.0, Delta=1.0)
    eps = np.geomspace(1e-9, 2.0 * 3.0 / 14592, 12)
    for name in cv.bounds():
        b = cv.bound(name)
        if b.kind != "upper" or b.measure != "avg_grad_sq":
            continue
        limit = {k.name: float(v) for k, v in (b.sgd_limit or {}).items()}
        for sg in (1e-300, 0.1, 1.5, 40.0):
            c = {**consts(b, sigma=sg), **limit}
            up = np.asarray(b.queries_to(eps, **c))
            lo = low.queries_to(eps, L=2.0, sigma=sg, Delta=3.0)
            assert (up >= lo).all(), (name, sg, up, lo)


def test_signsgd_respects_the_lower_bound_on_a_problem() -> None:
    """||g||_1 >= ||g||_2, so signSGD's l1 guarantee is one in l2 too; on a problem with known L, sigma it
    must need at least the lower bound's queries."""
    prob = cv.problem("quadratic", n=3, d=12, zeta=0.0, sigma=2.0, seed=4)
    c = prob.constants()
    eps = np.geomspace(1e-8, c["L"] * c["Delta"] / 14592, 8)
    up = cv.bound("signsgd").queries_to(eps, **{k: c[k] for k in ("L1", "sigma1", "Delta", "n")})
    assert (up >= cv.bound("arjevani").queries_to(eps, L=c["L"], sigma=c["sigma"], Delta=c["Delta"])).all()
