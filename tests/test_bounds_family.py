"""Bounds minimised over Young weights (issue 17, item 1): async_sgd and ssp with zeta, D-PSGD with the noise out
of Young's inequality, error feedback with a step limit of order delta/L, CHOCO-SGD at delta = 1, signSGD's batch.

Each tighter bound is compared with the former fixed-weight formula (rebuilt here from its old constants): never
looser, and by how much fewer iterations at representative points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

import convergence as cv
from convergence.bounds import GradientNormBound
from convergence.bounds_family import FamilyBound, weight_min
from convergence.symbols import Delta, L, delta, gap, n, s, sigma, tau, zeta

BASE = {"L": 2.0, "sigma": 1.5, "Delta": 3.0, "n": 8.0}
TS = np.array([1.0, 10.0, 300.0, 1e4, 1e6, 1e9])


def _old(name: str, variance: sp.Expr, disagreement: sp.Expr, step_max: sp.Expr,
         assumptions: tuple) -> GradientNormBound:
    return GradientNormBound(f"old_{name}", "nonconvex", "", "", "", assumptions, variance=variance,
                             disagreement=disagreement, step_max=step_max)


_ROOT = sp.sqrt(1 - delta)
OLD = {  # the former bounds (fixed Young weights, noise inside Young's inequality for dpsgd and error feedback)
    "async_sgd": _old("async_sgd", L * (sigma**2 + zeta**2), 2 * L**2 * tau * (sigma**2 + zeta**2),
                      2 / (L * (1 + sp.sqrt(1 + 8 * tau**2))), (L, sigma, Delta, tau, zeta)),
    "ssp": _old("ssp", L * sigma**2 / n, 2 * L**2 * s * sigma**2 / n, 2 / (L * (1 + sp.sqrt(1 + 8 * s**2))),
                (L, sigma, Delta, n, s)),
    "dpsgd": _old("dpsgd", L * sigma**2 / n, 8 * L**2 * (1 - gap) * (sigma**2 + 2 * zeta**2) / gap**2,
                  1 / (L * sp.Max(1, 4 * sp.sqrt(1 - gap) / gap)), (L, sigma, Delta, n, gap, zeta)),
    "topk": _old("topk", L * sigma**2 / n, 4 * L**2 * _ROOT * (sigma**2 + zeta**2) / delta**2,
                 2 * (1 - _ROOT) / (L * (1 + sp.sqrt(1 + 16 * _ROOT * (1 - _ROOT) / delta**2))),
                 (L, sigma, Delta, n, delta, zeta)),
}


def _given(b: cv.Bound, c: dict) -> dict:
    names = {x.name for x in b.assumptions}
    return {k: v for k, v in c.items() if k in names}


# ----------------------------------------------------------------------------------- the machinery
def test_weight_min_collapses_once_the_weights_are_gone() -> None:
    w = sp.Symbol("w", positive=True)
    assert weight_min(L * (1 + 1 / w), w) != L * (1 + 1 / w)
    assert weight_min(L * (1 + 1 / w), w).subs(L, 0) == 0 and weight_min(L + sigma, w) == L + sigma


@pytest.mark.parametrize("name", ["async_sgd", "ssp", "dpsgd", "topk", "choco_sgd"])
def test_value_is_the_least_member_and_the_step_is_its_step(name: str) -> None:
    b = cv.bound(name)
    assert isinstance(b, FamilyBound)
    c = _given(b, {**BASE, "tau": 3.0, "s": 2.0, "gap": 0.3, "delta": 0.3, "zeta": 0.5})
    vals = b._values(c)
    for t in TS:
        steps, members = b._members(np.asarray(t), vals)
        assert members.shape == (b.member_count(),)
        i = int(np.argmin(members))
        assert b.value(t, **c) == members[i] and b.step_size(t, **c) == steps[i]


# ------------------------------------------------------------------------------------ (a) async, ssp
def test_async_sgd_at_tau_0_is_sgd_with_one_noisy_gradient() -> None:
    """One uniformly drawn worker's gradient has variance sigma^2 + zeta^2 about grad f: at tau = 0 the bound is
    SGD's with n = 1 and sigma_eff = sqrt(sigma^2 + zeta^2), as the simulation has always run it."""
    b, sgd = cv.bound("async_sgd"), cv.bound("sgd")
    for z in (0.0, 0.5, 3.0):
        np.testing.assert_allclose(b.value(TS, L=2.0, sigma=1.5, Delta=3.0, tau=0.0, zeta=z),
                                   sgd.value(TS, L=2.0, sigma=float(np.hypot(1.5, z)), Delta=3.0, n=1.0), rtol=1e-13)


@pytest.mark.parametrize("name", ["async_sgd", "ssp"])
def test_stale_bounds_grow_with_zeta_and_are_never_looser_than_before(name: str) -> None:
    b = cv.bound(name)
    for stale, t in itertools.product((1.0, 4.0, 31.0), TS):
        c = _given(b, {**BASE, "tau": stale, "s": stale})
        vals = [float(b.value(t, **c, zeta=z)) for z in (0.0, 0.1, 0.5, 2.0)]
        assert all(y >= x for x, y in itertools.pairwise(vals)), vals
        old = float(OLD[name].value(t, **_given(OLD[name], {**c, "zeta": 0.0})))
        assert vals[0] <= old * (1 + 1e-12)  # zeta = 0: the former bound is one member (w = 1)


def test_ssp_partial_view_member_by_hand() -> None:
    """w = v = 1, F0 = 1/2, s = 2, n = 8, L = 2, sigma = 3/2, zeta = 1/2: C = L^2 ((1+w)(1+1/v) s^2 zeta^2 + (1+1/w) s
    sigma^2/n) / (1 - F0) = 4 (4 + 1.125) / 0.5 = 41; gamma_max = 1 / (L max((1 + sqrt(1 + 4 (1+w) s^2/(1-F0)))/2,
    s sqrt((1+w)(1+v)/F0))) = 1 / (2 max(4.531, 5.657)) = 0.0883883. With zeta > 0 only this family holds."""
    from convergence.bounds_delay import f_0, w_h, w_n

    b = cv.bound("ssp")
    point = {w_n: 1, w_h: 1, f_0: sp.Rational(1, 2), s: 2, n: 8, L: 2, sigma: sp.Rational(3, 2),
             zeta: sp.Rational(1, 2)}
    assert sp.nsimplify(b.disagreement.subs(point)) == 41
    assert float(b.step_max.subs(point)) == pytest.approx(1 / (4 * np.sqrt(8)), rel=1e-12)
    assert b.value(1.0, **BASE, s=2.0, zeta=0.5) <= 6 / 0.0883883 + 0.5625 * 0.0883883 + 41 * 0.0883883**2


def test_ssp_at_s_0_is_sgd_whatever_zeta() -> None:
    b, sgd = cv.bound("ssp"), cv.bound("sgd")
    for z in (0.0, 2.0):
        np.testing.assert_allclose(b.value(TS, **BASE, s=0.0, zeta=z), sgd.value(TS, **BASE), rtol=1e-13)


# ------------------------------------------------------------------------------------------ (c) dpsgd
def test_dpsgd_member_by_hand_and_noise_over_gap() -> None:
    """theta = phi = 1/2, gap = 1/2, L = 2, sigma = 3/2, zeta = 1/2: C = L^2 (1-gap)/(theta phi gap) (sigma^2 + 2 (1 -
    phi gap) zeta^2/((1-phi) gap)) = 16 (2.25 + 1.5) = 60 (formerly 8 L^2 (1-gap)(sigma^2 + 2 zeta^2)/gap^2 = 176);
    gamma_max = 1/(L max(1, sqrt(2 (1-gap)(1 - phi gap)/((1-theta) phi (1-phi)))/gap)) = 1/(2 * 2 sqrt 6) = 0.102062
    (formerly 1/(2 * 4 sqrt(1/2) * 2) = 0.0883883). Its noise term is 4 (1-gap)/gap sigma^2, the former
    8 (1-gap)/gap^2."""
    from convergence.bounds_gossip import phi, theta

    b = cv.bound("dpsgd")
    point = {theta: sp.Rational(1, 2), phi: sp.Rational(1, 2), gap: sp.Rational(1, 2), L: 2, sigma: sp.Rational(3, 2),
             zeta: sp.Rational(1, 2)}
    assert sp.nsimplify(b.disagreement.subs(point)) == 60
    assert float(b.step_max.subs(point)) == pytest.approx(1 / (4 * np.sqrt(6)), rel=1e-12)
    half = {theta: sp.Rational(1, 2), phi: sp.Rational(1, 2), zeta: 0}
    assert sp.simplify(b.disagreement.subs(half) / (L**2 * sigma**2) - 4 * (1 - gap) / gap) == 0


@pytest.mark.parametrize(("p", "fewer_half", "fewer"), [(32, 8.3, 13.2), (128, 35.1, 38.9)])
def test_dpsgd_ring_needs_fewer_iterations(p: int, fewer_half: float, fewer: float) -> None:
    """Ring of p workers, L = sigma = Delta = 1, eps = 1e-3: the member theta = phi = 1/2 alone (the noise kept out of
    Young's inequality) needs 8.3x (p = 32) and 35x (p = 128) fewer iterations than the former bound; the minimum
    over the weights 13x and 39x."""
    from convergence.bounds_gossip import FAMILY, phi, theta

    g = cv.spectral_gap("ring", p)
    c = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": float(p), "gap": g, "zeta": 0.0}
    member = _old("half", FAMILY.variance, FAMILY.disagreement.subs({theta: 0.5, phi: 0.5}),
                  FAMILY.step_max.subs({theta: 0.5, phi: 0.5}), (L, sigma, Delta, n, gap, zeta))
    old = OLD["dpsgd"].iterations_to(1e-3, **c)
    assert old / member.iterations_to(1e-3, **c) == pytest.approx(fewer_half, rel=0.02)
    assert old / cv.bound("dpsgd").iterations_to(1e-3, **c) == pytest.approx(fewer, rel=0.02)


# ------------------------------------------------------------------------------------- (b) error feedback
@pytest.mark.parametrize("name", ["dpsgd", "topk"])
def test_never_looser_than_the_former_bound(name: str) -> None:
    b, old = cv.bound(name), OLD[name]
    key = "gap" if name == "dpsgd" else "delta"
    for x, z, sg in itertools.product((1e-6, 1e-3, 0.02, 0.1, 0.3, 0.7, 0.99, 1.0), (0.0, 0.5, 3.0), (0.01, 1.5)):
        c = {**BASE, key: x, "zeta": z, "sigma": sg}
        assert (b.value(TS, **c) <= old.value(TS, **c) * (1 + 1e-12)).all(), (x, z, sg)


def test_error_feedback_step_is_of_order_delta_and_noise_of_order_one_over_delta() -> None:
    """Small delta: the member theta = phi = 1/2 allows L gamma = delta/4 (the former limit was delta^1.5/(2 sqrt 2));
    the members theta, phi -> 1 pay (1 - delta)/delta sigma^2 L^2 (times 1.003), not 4/delta^2."""
    from convergence.bounds_ef import WEIGHTS, phi, theta

    b = cv.bound("topk")
    for d in (1e-6, 1e-4):
        cap = float(b.step_max.subs({theta: 0.5, phi: 0.5, delta: d, L: 1}))
        assert cap == pytest.approx(d / 4, rel=1e-3)
        old = float(OLD["topk"].step_max.subs({delta: d, L: 1}))
        assert old == pytest.approx(d**1.5 / (2 * np.sqrt(2)), rel=0.01)
    top = {theta: max(WEIGHTS[0][1]), phi: max(WEIGHTS[1][1]), L: 1, sigma: 1, zeta: 0}
    for d in (1e-4, 0.01, 0.1):
        assert float(b.disagreement.subs({**top, delta: d})) == pytest.approx((1 - d) / d, rel=0.004)


def test_error_feedback_needs_fewer_iterations() -> None:
    """L = sigma = Delta = 1, n = 32, eps = 1e-3 (values computed when this was written): delta = 0.1 needs 676,505
    iterations instead of 3,343,577 (4.9x); delta = 0.01 2,143,196 instead of 32,921,712 (15x)."""
    c = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": 32.0}
    for d, new, old in ((0.1, 676_505, 3_343_577), (0.01, 2_143_196, 32_921_712)):
        assert cv.bound("topk").iterations_to(1e-3, **c, delta=d) == new
        assert OLD["topk"].iterations_to(1e-3, **c, delta=d, zeta=0.0) == old


def test_ef_signsgd_on_resnet50_needs_a_thousand_times_fewer_iterations() -> None:
    """delta = 1/d_max of ResNet-50's largest tensor: the step limit binds, so T ~ 2 L Delta/(gamma_max eps) and the
    step limit grew from delta^1.5/(2 sqrt 2) to about delta/4: 0.71/sqrt(delta) ~ 1,100x fewer iterations."""
    import costmodels as cm
    from convergence.algorithms import algorithm

    d = float(algorithm("ef_signsgd").bound_constants([32], cm.profile("resnet50"))["delta"][0])
    c = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": 32.0, "delta": d}
    ratio = OLD["topk"].iterations_to(1e-3, **c, zeta=0.0) / cv.bound("ef_signsgd").iterations_to(1e-3, **c)
    assert ratio == pytest.approx(1 / (np.sqrt(2) * np.sqrt(d)), rel=0.05) and ratio > 1000


# ------------------------------------------------------------------------------------------ (c) CHOCO
def test_choco_at_delta_1_is_dpsgd_and_below_it_its_own() -> None:
    ch, dp = cv.bound("choco_sgd"), cv.bound("dpsgd")
    for g, z in itertools.product((0.0016, 0.0255, 0.35, 0.9), (0.0, 0.5)):
        c = {**BASE, "gap": g, "zeta": z}
        np.testing.assert_array_equal(ch.value(TS, **c, delta=1.0), dp.value(TS, **c))
        np.testing.assert_array_equal(ch.step_size(TS, **c, delta=1.0), dp.step_size(TS, **c))
        own = _old("choco_own", ch.variance, ch.disagreement, ch.step_max, ch.assumptions)
        np.testing.assert_allclose(ch.value(TS, **c, delta=0.999), own.value(TS, **c, delta=0.999), rtol=1e-12)
        assert (dp.value(TS, **c) <= own.value(TS, **c, delta=1.0)).all()  # D-PSGD's is the better of the two


# ------------------------------------------------------------------------------------------ (d) signSGD
def test_signsgd_needs_a_batch_of_T_per_worker() -> None:
    b = cv.bound("signsgd")
    c = {"L1": 10.0, "sigma1": 3.0, "Delta": 3.0, "n": 4.0}
    assert b.batch == sp.Symbol("T", positive=True) and b.batch_size(198, **c) == 198
    np.testing.assert_array_equal(b.batch_size(TS, **c), TS)
    assert cv.bound("sgd").batch_size(TS, L=1.0, sigma=1.0, Delta=1.0, n=4.0).tolist() == [1.0] * len(TS)
