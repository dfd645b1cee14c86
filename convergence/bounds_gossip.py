"""D-PSGD's bound: the gradient noise kept out of Young's inequality, minimised over the Young weights.

Derived here with the technique of Lian et al. (NeurIPS 2017, Thm 1) and Koloskova et al. (ICML 2020,
Thm 2). The noise enters the consensus error as sigma^2/gap (Koloskova et al. 2020's order), not
sigma^2/gap^2 as when it shared Young's inequality with the gradients. Every member of the family is
at least as tight as the former bound's fixed weights (theta = phi = 1/2 is one of them).
"""

from __future__ import annotations

import sympy as sp

from .bounds_family import Family, family_bound, logit_grid
from .symbols import Delta, L, gap, n, sigma, zeta

theta = sp.Symbol("theta", positive=True)  # share of the contraction phi gap kept after the gradient feedback
phi = sp.Symbol("phi", positive=True)  # contraction phi gap bought by the Young weight w = (1-phi) gap/(1-gap)

WEIGHTS = ((theta, logit_grid(-2, 10, 2)), (phi, logit_grid(-2, 10, 2)))

DERIVATION = (
    "Adapt-then-combine: X' = W (X - gamma G), G = grad F(X) + Xi (rows: workers). xbar follows SGD with "
    "gradients at the x_i, so with Xi_t = (1/n)||(I-J)X_t||^2 (J = 11^T/n) the bound is SGD's plus the average "
    "of L^2 Xi_t (descent at xbar: ||grad f(xbar) - mean_i grad f_i(x_i)||^2 <= L^2 Xi). Consensus: (I-J)X' = "
    "W (I-J)(X - gamma grad F) - gamma W (I-J) Xi; the noise is independent with mean 0, so it adds without a "
    "Young factor: E||(I-J)X'||^2 <= lambda^2 ||(I-J)(X - gamma grad F)||^2 + lambda^2 gamma^2 n sigma^2 "
    "(||W v|| <= lambda ||v|| on 1-perp, lambda^2 = 1 - gap). Young with weight w = (1 - phi) gap/(1 - gap): "
    "lambda^2 (1 + w) = 1 - phi gap and lambda^2 (1 + 1/w) = (1 - gap)(1 - phi gap)/((1 - phi) gap); with "
    "||(I-J) grad F||^2 <= 2 L^2 ||(I-J)X||^2 + 2 n zeta^2: Xi' <= (1 - phi gap + 2 L^2 gamma^2 K) Xi + "
    "2 gamma^2 K zeta^2 + (1 - gap) gamma^2 sigma^2, K = (1 - gap)(1 - phi gap)/((1 - phi) gap). The step "
    "limit 2 L^2 gamma^2 K <= (1 - theta) phi gap keeps the contraction 1 - theta phi gap, and Xi_0 = 0 gives "
    "mean_t Xi_t <= gamma^2 (1 - gap)(sigma^2 + 2 (1 - phi gap) zeta^2/((1 - phi) gap))/(theta phi gap). So "
    "B = 2 Delta/(gamma T) + L gamma sigma^2/n + L^2 gamma^2 (1 - gap)(sigma^2 + 2 (1 - phi gap) zeta^2/"
    "((1 - phi) gap))/(theta phi gap) with gamma <= min(1/L, gap sqrt((1 - theta) phi (1 - phi)/(2 (1 - gap)"
    "(1 - phi gap)))/L), minimised over theta, phi in 1/(1 + 2^-k), k = -2, 0, ..., 10. theta = phi = 1/2 gives "
    "4 (1 - gap) sigma^2/gap (formerly 8 (1 - gap) sigma^2/gap^2) and the former step limit or a larger one. "
    "At gap = 1 every member is SGD's bound."
)

_C = L**2 * (1 - gap) * (sigma**2 + 2 * (1 - phi * gap) * zeta**2 / ((1 - phi) * gap)) / (theta * phi * gap)
_STEP = 1 / (L * sp.Max(1, sp.sqrt(2 * (1 - gap) * (1 - phi * gap) / ((1 - theta) * phi * (1 - phi))) / gap))

FAMILY = Family(L * sigma**2 / n, _C, _STEP, WEIGHTS)

DPSGD = family_bound(
    "dpsgd", "decentralized parallel SGD: local step, then gossip with a mixing matrix W (adapt-then-combine)",
    "Lian et al., 'Can decentralized algorithms outperform centralized algorithms?', NeurIPS 2017, Thm 1; "
    "Koloskova et al., ICML 2020, Thm 2 (noise of order sigma^2/gap); constants and the minimum over Young "
    "weights derived here",
    DERIVATION, [FAMILY], (L, sigma, Delta, n, gap, zeta), defaults={"zeta": 0.0}, sgd_limit={gap: 1})
