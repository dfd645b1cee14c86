"""Convergence-rate bounds of distributed SGD variants, as sympy expressions with their step sizes.

Nonconvex upper bounds share one shape. The metric is the average squared gradient norm
``(1/T) sum_{t<T} E||grad f(xbar_t)||^2`` at the (average) model, for an L-smooth f with
``Delta = f(x_0) - f*``, and every bound here reads

    B(T) = 2 Delta / (gamma T) + A gamma + C gamma^2,   0 < gamma <= gamma_max,

where ``A`` is the variance the step pays for (``L sigma^2 / n`` for mini-batch SGD), ``C`` the
price of disagreement (stale, local or gossiped models), and ``gamma_max`` the largest step the
derivation allows. Each entry uses the step that minimises B: ``gamma = min(gamma_max, gamma*)``
with ``gamma*`` the positive root of ``2 C gamma^3 + A gamma^2 = 2 Delta / T`` (``sqrt(2 Delta /
(A T))`` when C = 0). Minimising over a feasible set that only shrinks as H, tau, omega or 1/gap
grow makes every bound monotone in them, as B is for each fixed step. The constants were derived
here and are tested. Each derivation is summarised in the entry's ``derivation`` text and follows
the cited paper's proof technique.
Those papers state their rates with O(.) or with other assumptions (e.g. bounded gradients
G^2, which quadratics violate), so constants we could not confirm in them were not copied.
Every bound reduces exactly to mini-batch SGD's in its limit (H = 1, tau = 0, omega = 0,
delta = 1, complete graph); see ``sgd_limit``.

The entries of asynchronous SGD and SSP (:mod:`convergence.bounds_delay`), D-PSGD
(:mod:`convergence.bounds_gossip`) and error feedback (:mod:`convergence.bounds_ef`) are
:class:`~convergence.bounds_family.FamilyBound` s: the same shape, minimised over the free Young
weights of their derivations. They are registered here, in this order, after sgd and local_sgd.
"""

from __future__ import annotations

import sympy as sp

from .bounds_core import (  # noqa: F401 (re-exported: the classes live in bounds_core, this module registers)
    BOUNDS,
    Bound,
    GradientNormBound,
    balanced_step,
    balanced_step_numeric,
    gamma,
    nonconvex,
)
from .bounds_delay import ASYNC_SGD, SSP
from .bounds_ef import ERROR_FEEDBACK
from .bounds_family import family_bound
from .bounds_gossip import DPSGD
from .bounds_local import DERIVATION as LOCAL_DERIVATION
from .bounds_local import FAMILIES as LOCAL_FAMILIES
from .bounds_local import SOURCE as LOCAL_SOURCE
from .symbols import ALL, Delta, H, L, n, omega, sigma, zeta

_SGD_DERIVATION = (
    "Descent lemma with E[g] = grad f and E||g - grad f||^2 <= sigma^2/n (n workers averaged): "
    "E f(x+) <= f(x) - gamma (1 - L gamma / 2) ||grad f||^2 + L gamma^2 sigma^2 / (2 n); with "
    "gamma <= 1/L the bracket is >= 1/2; summing over T steps and dividing by gamma T / 2 gives "
    "2 Delta / (gamma T) + L gamma sigma^2 / n. The balancing step makes it at most "
    "2 L Delta / T + 2 sigma sqrt(2 L Delta / (n T))."
)

_SGD, _LOCAL_SGD, _QSGD = (
    nonconvex("sgd", "synchronous mini-batch SGD over n workers (exact averaging)",
          "Ghadimi & Lan, SIAM J. Optim. 23(4), 2013, Thm 2.1 / Cor 2.2 (derived here with explicit constants)",
          _SGD_DERIVATION, L * sigma**2 / n, sp.Integer(0), 1 / L, (L, sigma, Delta, n)),
    family_bound("local_sgd", "local SGD: H local steps between exact averagings (heterogeneous data)",
                 LOCAL_SOURCE, LOCAL_DERIVATION, LOCAL_FAMILIES, (L, sigma, Delta, n, H, zeta), defaults={"zeta": 0.0},
                 sgd_limit={H: 1}),
    nonconvex("qsgd", "SGD with an unbiased compressor of variance omega on each worker's gradient "
          "(QSGD with s levels: omega = min(d/s^2, sqrt(d)/s))",
          "Alistarh et al., QSGD, NeurIPS 2017, Lemma 3.1 (omega) and Thm 3.2; constants derived here",
          "E||mean_i C(g_i) - grad f||^2 <= (omega/n) ||grad f||^2 + ((1 + omega) sigma^2 + omega zeta^2)/n "
          "(independent compressions, (1/n) sum ||grad f_i||^2 = ||grad f||^2 + zeta^2); the descent lemma "
          "then needs gamma <= 1 / (L (1 + omega/n)).",
          L * ((1 + omega) * sigma**2 + omega * zeta**2) / n, sp.Integer(0), 1 / (L * (1 + omega / n)),
          (L, sigma, Delta, n, omega, zeta), defaults={"zeta": 0.0}, sgd_limit={omega: 0}),
)

for _b in (_SGD, _LOCAL_SGD, ASYNC_SGD, SSP, DPSGD, _QSGD, *ERROR_FEEDBACK):
    BOUNDS.register(_b)


def bounds() -> list[str]:
    """Names of the registered bounds."""
    return BOUNDS.names()


def bound(name: str) -> Bound:
    return BOUNDS.get(name)


def constant_symbols() -> dict[str, sp.Symbol]:
    """Every constant a bound may take, by name."""
    return dict(ALL)
