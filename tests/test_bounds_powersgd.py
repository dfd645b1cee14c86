"""PowerSGD's bound follows the mean residual (convergence/bounds_ef.py, MEAN_FAMILIES): a member by hand, no
zeta, never looser than the per-worker error-feedback bound, and its gain on the shipped convergence run."""

from __future__ import annotations

import itertools

import numpy as np
import sympy as sp

import convergence as cv
from convergence.bounds_ef import FAMILIES, MEAN_FAMILIES, phi, theta
from convergence.symbols import L, delta, n, sigma, zeta

SHIPPED = {"L": 5.757205218622606, "sigma": 1.4739156457362712, "Delta": 2.304730214178562,
           "zeta": 0.16701072829432048, "n": 4.0}


def test_member_by_hand() -> None:
    """theta = phi = 1/2, delta = 1/2 (s^2 = 1/2, r = theta = 1/2 as 8 s > 1, s^2/r = 1), L = 2, sigma = 3/2,
    zeta = 1/2, n = 4: the mean residual's C = L^2 (s^2/r) sigma^2/(n phi delta) = 4 * (9/4)/(4/4) = 9; the
    per-worker C = L^2 (s^2/r)((1 - phi delta) zeta^2/(phi (1-phi) delta^2) + sigma^2/(phi delta)) = 4 (3 + 9) = 48.
    Both have alpha/r = (1 - phi delta)/(phi (1-phi) delta^2) = 12 and the step limit 2 (1 - r)/(L (1 + sqrt(1 + 4 *
    12 * (1 - r)))) = 1/12."""
    point = {theta: sp.Rational(1, 2), phi: sp.Rational(1, 2), delta: sp.Rational(1, 2), L: 2, sigma: sp.Rational(3, 2),
             zeta: sp.Rational(1, 2), n: 4}
    assert sp.nsimplify(MEAN_FAMILIES[0].disagreement.subs(point)) == 9
    assert sp.nsimplify(FAMILIES[0].disagreement.subs(point)) == 48
    assert sp.nsimplify(MEAN_FAMILIES[0].step_max.subs(point)) == sp.Rational(1, 12)
    assert sp.nsimplify(FAMILIES[0].step_max.subs(point)) == sp.Rational(1, 12)
    # B at T = 10^4, Delta = 3 is at most this member's: its balancing step solves 2 C g^3 + A g^2 = 2 Delta/T
    a, c, k = 2 * 2.25 / 4, 9.0, 6e-4
    g = float(sp.nsolve(2 * c * sp.Symbol("g") ** 3 + a * sp.Symbol("g") ** 2 - k, 0.03))
    assert g < 1 / 12
    member = k / g + a * g + c * g * g
    b = cv.bound("powersgd")
    assert b.value(1e4, L=2.0, sigma=1.5, Delta=3.0, n=4.0, delta=0.5, zeta=0.5) <= member * (1 + 1e-12)


def test_zeta_does_not_enter_and_never_looser_than_per_worker() -> None:
    b, ts = cv.bound("powersgd"), np.array([1.0, 10.0, 300.0, 1e4, 1e6, 1e9])
    per_worker = cv.bound("topk")  # the per-worker error-feedback bound, the same constants
    for d, sg, nn in itertools.product((1e-3, 0.02, 0.3, 0.7, 1.0), (0.01, 1.5), (1.0, 8.0)):
        c = {"L": 2.0, "sigma": sg, "Delta": 3.0, "n": nn, "delta": d}
        v = b.value(ts, **c, zeta=0.0)
        assert np.array_equal(v, b.value(ts, **c, zeta=3.0))
        assert (v <= per_worker.value(ts, **c, zeta=0.0) * (1 + 1e-12)).all(), (d, sg, nn)


def test_shipped_convergence_run() -> None:
    """delta = 0.435 measured on the shipped run's gradients, eps = B_sgd(190): the per-worker bound needed 567
    steps, the mean residual's 442 (both at their step limit, about 0.12/L and 0.14/L)."""
    eps = float(cv.bound("sgd").value(190.0, **{k: v for k, v in SHIPPED.items() if k != "zeta"}))
    assert cv.bound("topk").iterations_to(eps, **SHIPPED, delta=0.435) == 567
    assert cv.bound("powersgd").iterations_to(eps, **SHIPPED, delta=0.435) == 442
