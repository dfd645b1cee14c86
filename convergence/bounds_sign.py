"""signSGD with majority vote: a bound in the l1 norm, with its own step and a growing batch.

Bernstein, Wang, Azizzadenesheli & Anandkumar, 'signSGD: compressed optimisation for non-convex
problems', ICML 2018, Thm 2 (majority vote over M workers); Bernstein, Zhao, Azizzadenesheli &
Anandkumar, ICLR 2019, Thm 1. Assumptions: f bounded below, coordinate-wise smoothness vector
``L_vec`` (``L1 = ||L_vec||_1``), per-coordinate noise standard deviations ``sigma_vec``
(``sigma1 = ||sigma_vec||_1``) with unimodal, symmetric noise, and every worker sampling the same
objective (no heterogeneity). With step ``1/sqrt(L1 K)`` and mini-batch ``K`` per worker for K
iterations (N = K^2 gradient calls per worker):

    (E (1/K) sum_k ||grad f(x_k)||_1)^2 <= (sqrt(L1) (Delta + 1/2) + 2 sigma1 / sqrt(n))^2 / K.

There is no mini-batch-SGD limit (a sign is never the gradient), hence ``limit_of = None``. The batch K = T
is part of the bound (``batch = T``): time to accuracy prices each iteration at T mini-batches per worker.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from .bounds import BOUNDS, Bound
from .symbols import L1, Delta, T, n, sigma1


@dataclass(frozen=True)
class SignBound(Bound):
    """The majority-vote bound above (closed form in T)."""

    @property
    def in_step(self) -> sp.Expr:
        return (sp.sqrt(L1) * (Delta + sp.Rational(1, 2)) + 2 * sigma1 / sp.sqrt(n)) ** 2 / T

    @property
    def step(self) -> sp.Expr:
        return 1 / sp.sqrt(L1 * T)

    def _step(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        return 1 / np.sqrt(vals[self._index("L1")] * t)

    def _evaluate(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        l1, dl, s1, nw = (vals[self._index(k)] for k in ("L1", "Delta", "sigma1", "n"))
        return (np.sqrt(l1) * (dl + 0.5) + 2 * s1 / np.sqrt(nw)) ** 2 / t


BOUNDS.register(SignBound(
    "signsgd", "nonconvex", "signSGD with majority vote: each worker sends the signs of its mini-batch "
    "gradient (batch K = T), the server returns the sign of their sum",
    "Bernstein et al., ICML 2018, Thm 2; Bernstein et al., ICLR 2019, Thm 1 (confirmed from the papers' text)",
    "Coordinate-wise descent lemma with step eta: f(x+) <= f(x) - eta ||g||_1 + eta^2 L1/2 + 2 eta sum_i |g_i| "
    "P[vote_i wrong]; for unimodal symmetric noise P[wrong] <= sigma_i / (sqrt(n K) |g_i|) (Gauss's inequality "
    "with the majority of n workers); summing K steps with eta = 1/sqrt(L1 K) gives the bound.",
    (L1, sigma1, Delta, n), sgd_limit=None, limit_of=None, queries_per_iteration=n * T, batch=T,
    metric="(E (1/T) sum_t ||grad f(x_t)||_1)^2", measure="l1_avg_squared"))
