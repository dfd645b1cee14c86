"""Local SGD's bound: the former fixed-step-limit derivation, and a family that follows the consensus error
step by step (its growth per local step made exact for |curvature| <= L), minimised over its step limit and Young
weight.

The former derivation sums a period's gradient differences with one Young factor between the noise and the rest,
bounds every step of a period by its last (t - t0 <= H - 1), and needs 8 gamma^2 L^2 H (H - 1) <= 1: a step limit
of about 1/(2.8 L H) and a consensus error of 4 gamma^2 (H - 1) sigma^2 per step. Following the consensus recursions
of Stich ('Local SGD converges fast and communicates little', ICLR 2019: the deviation from the average, step by
step) and Koloskova et al. (ICML 2020: the noise of one step is independent of the deviation so far, so it adds
without a Young factor), the recursion is kept exact: the deviation grows by at most (1 + gamma L) per step, the
fresh noise adds (1 - 1/n) sigma^2 gamma^2, and the period's average is taken over its H steps. The family holds
for every step limit u/L (u <= 1) and every Young weight w; near gamma -> 0 its consensus error per step is
(H - 1)/2 (1 - 1/n) sigma^2 gamma^2, at most an eighth of the former 4 (H - 1) sigma^2 gamma^2.
"""

from __future__ import annotations

import sympy as sp

from .bounds_family import Family, power_grid
from .symbols import H, L, n, sigma, zeta

u = sp.Symbol("u", positive=True)  # the step limit gamma <= u / L (u <= 1, so the descent lemma's gamma <= 1/L holds)
w = sp.Symbol("w", positive=True)  # Young's weight between the deviation and the heterogeneity

WEIGHTS = ((u, power_grid(-12, 0, 0.25)), (w, power_grid(-8, 3, 1)))

FORMER_DERIVATION = (
    "As SGD at the average model xbar, plus L^2 Xi_t with Xi_t = (1/n) sum_i ||x_i - xbar||^2 (gradients "
    "taken at x_i). Within a period of H steps, Xi_t <= 2 gamma^2 (H-1) sigma^2 + 4 gamma^2 (H-1)^2 zeta^2 "
    "+ 4 gamma^2 L^2 (H-1) sum_s Xi_s; with 8 gamma^2 L^2 H (H-1) <= 1 the per-step average is at most "
    "4 gamma^2 (H-1) sigma^2 + 8 gamma^2 (H-1)^2 zeta^2."
)

DERIVATION = FORMER_DERIVATION + (
    " Second family (step by step): with d_i = x_i - xbar, y_i = d_i - gamma (grad f_i(x_i) - grad f_i(xbar)) - "
    "gamma h_i, h_i = grad f_i(xbar) - grad f(xbar), one local step gives d_i' = (y_i - mean_j y_j) - gamma "
    "(xi_i - mean_j xi_j) (mean_i d_i = 0, mean_i h_i = 0). The noise is fresh, has mean 0 and is independent of "
    "y, so it adds: E (1/n) sum_i ||xi_i - xibar||^2 = (1 - 1/n) sigma^2. Centring does not increase the sum of "
    "squares, ||grad f_i(x_i) - grad f_i(xbar)|| <= L ||d_i|| (|curvature| <= L, no convexity needed) and Young "
    "with weight w: Xi' <= q Xi + gamma^2 K, q = (1 + w)(1 + L gamma)^2, K = (1 - 1/n) sigma^2 + (1 + 1/w) "
    "zeta^2. Each period starts at Xi = 0, so its k-th step (k = 0 .. H-1) has Xi <= gamma^2 K (q^k - 1)/(q - 1) "
    "and the period's average is gamma^2 K S, S = ((q^H - 1)/(q - 1) - H)/(H (q - 1)); Xi grows within a period, "
    "so a last, partial period averages no more. For gamma <= u/L, q <= (1 + w)(1 + u)^2, so B = 2 Delta/(gamma "
    "T) + L gamma sigma^2/n + L^2 K S gamma^2 with S at that q holds for every u <= 1 and w > 0; B is the minimum "
    "over u = 2^k, k = -12, -11.75, .. 0, w = 2^k, k = -8, -7, .. 3, and the former family. At H = 1, S = 0 "
    "and the step limit is 1/L: SGD's bound."
)

SOURCE = ("Yu, Yang & Zhu, AAAI 2019 (parallel restarted SGD, Thm 1); Koloskova et al., ICML 2020, Thm 2 "
          "(zeta^2 heterogeneity instead of G^2; its consensus recursion adds the step's noise without a Young "
          "factor); Stich, ICLR 2019 (the deviation from the average followed step by step); constants derived here")

_FORMER = Family(L * sigma**2 / n, 4 * L**2 * (H - 1) * (sigma**2 + 2 * (H - 1) * zeta**2),
                 1 / (L * sp.Max(1, sp.sqrt(8 * H * (H - 1)))))

_q = (1 + w) * (1 + u) ** 2
_S = ((_q**H - 1) / (_q - 1) - H) / (H * (_q - 1))  # 0 at H = 1
_K = (1 - 1 / n) * sigma**2 + (1 + 1 / w) * zeta**2
# the step limit u/L for H > 1; at H = 1 (S = 0) every member is SGD's, with its step limit 1/L
_STEP = sp.Piecewise((1 / L, sp.Eq(H, 1)), (u / L, True))

FAMILIES = [_FORMER, Family(L * sigma**2 / n, L**2 * _K * _S, _STEP, WEIGHTS)]
