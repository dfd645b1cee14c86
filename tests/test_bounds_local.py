"""Local SGD's step-by-step family (convergence/bounds_local.py): a member by hand, the period's average S by
its recursion, never looser than the former bound, the limit H = 1, and how much it gains on the shipped
convergence run's constants."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

import convergence as cv
from convergence.bounds_core import GradientNormBound, balanced_step_numeric
from convergence.bounds_local import FAMILIES, u, w
from convergence.symbols import Delta, H, L, n, sigma, zeta

FORMER = GradientNormBound("old_local_sgd", "nonconvex", "", "", "", (L, sigma, Delta, n, H, zeta),
                           variance=L * sigma**2 / n,
                           disagreement=4 * L**2 * (H - 1) * (sigma**2 + 2 * (H - 1) * zeta**2),
                           step_max=1 / (L * sp.Max(1, sp.sqrt(8 * H * (H - 1)))))


def test_member_by_hand() -> None:
    """u = 1/2, w = 1, H = 3, n = 2, L = 2, sigma = 3/2, zeta = 1/2: q = (1 + w)(1 + u)^2 = 9/2; a period's Xi is
    0, gamma^2 K, (1 + q) gamma^2 K, so S = (q + 2)/3 = 13/6; K = (1 - 1/2) 9/4 + 2 * 1/4 = 13/8; C = L^2 K S =
    4 * 13/8 * 13/6 = 169/12 and gamma_max = u/L = 1/4 (the former: C = 4 L^2 (H-1)(sigma^2 + 2 (H-1) zeta^2) =
    104, gamma_max = 1/(L sqrt(8 H (H-1))) = 1/(2 sqrt 48))."""
    fam = FAMILIES[1]
    point = {u: sp.Rational(1, 2), w: 1, H: 3, n: 2, L: 2, sigma: sp.Rational(3, 2), zeta: sp.Rational(1, 2)}
    assert sp.nsimplify(fam.disagreement.subs(point)) == sp.Rational(169, 12)
    assert fam.step_max.subs(point) == sp.Rational(1, 4)
    assert FAMILIES[0].disagreement.subs(point) == 104
    # B of this member at T = 100, Delta = 3: gamma* (about 0.107 < 1/4) solves 2 C g^3 + A g^2 = 2 Delta / T
    # (A = L sigma^2/n = 9/4)
    a, c, k = 9 / 4, 169 / 12, 2 * 3 / 100
    g = min(0.25, float(balanced_step_numeric(np.array(a), np.array(c), np.array(k))))
    assert 2 * c * g**3 + a * g**2 == pytest.approx(k)
    b = cv.bound("local_sgd")
    assert b.value(100, L=2.0, sigma=1.5, Delta=3.0, n=2.0, H=3.0, zeta=0.5) <= k / g + a * g + c * g * g + 1e-12


@pytest.mark.parametrize("h", [2, 3, 8, 17])
def test_period_average_is_the_recursion_average(h: int) -> None:
    """S = ((q^H - 1)/(q - 1) - H)/(H (q - 1)) is the average over k = 0 .. H-1 of (q^k - 1)/(q - 1)."""
    fam = FAMILIES[1]
    for uu, ww in itertools.product((1.0, 0.3, 2.0**-8), (2.0**-8, 0.5, 4.0)):
        q = (1 + ww) * (1 + uu) ** 2
        s = np.mean([(q**k - 1) / (q - 1) for k in range(h)])
        c = float(fam.disagreement.subs({u: uu, w: ww, H: h, n: 4, L: 1, sigma: 1, zeta: 0}))
        assert c == pytest.approx(0.75 * s, rel=1e-9)


def test_never_looser_than_the_former_bound_and_sgd_at_h_1() -> None:
    b = cv.bound("local_sgd")
    ts = np.array([1.0, 10.0, 300.0, 1e4, 1e6, 1e9])
    for h, z, sg, nn in itertools.product((1.0, 2.0, 8.0, 64.0), (0.0, 0.5, 3.0), (0.01, 1.5), (1.0, 8.0)):
        c = {"L": 2.0, "sigma": sg, "Delta": 3.0, "n": nn, "H": h, "zeta": z}
        assert (b.value(ts, **c) <= FORMER.value(ts, **c) * (1 + 1e-12)).all(), (h, z, sg, nn)
        if h == 1:
            sgd = cv.bound("sgd").value(ts, **{k: c[k] for k in ("L", "sigma", "Delta", "n")})
            assert b.value(ts, **c) == pytest.approx(sgd, rel=1e-12)


def test_shipped_convergence_run_needs_half_the_iterations() -> None:
    """The constants measured on the shipped run (runners/reference/convergence: L = 5.757, sigma = 1.474,
    Delta = 2.305, zeta = 0.167, n = 4, H = 8) at its eps = B_sgd(190) = 0.5508: the former bound needed 1,539
    steps (its step limit 1/(21.2 L) binds), the step-by-step family 740 (u = 2^-3.25, w = 2^-4)."""
    c = {"L": 5.757205218622606, "sigma": 1.4739156457362712, "Delta": 2.304730214178562,
         "zeta": 0.16701072829432048, "n": 4.0}
    eps = float(cv.bound("sgd").value(190.0, **{k: v for k, v in c.items() if k != "zeta"}))
    assert eps == pytest.approx(0.55084, rel=1e-4)
    assert FORMER.iterations_to(eps, **c, H=8.0) == 1539
    assert cv.bound("local_sgd").iterations_to(eps, **c, H=8.0) == 740


def test_a_large_h_overflows_no_member_into_nan() -> None:
    """q^H overflows beyond H ~ 200 for the largest members: they bound nothing (B = inf), the rest still do."""
    b = cv.bound("local_sgd")
    for nn, z in ((1.0, 0.0), (4.0, 0.0), (4.0, 0.5)):
        c = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": nn, "H": 1e4, "zeta": z}
        v = b.value(np.array([1.0, 100.0, 1e6]), **c)
        assert np.isfinite(v).all() and (v <= FORMER.value(np.array([1.0, 100.0, 1e6]), **c) * (1 + 1e-12)).all()
