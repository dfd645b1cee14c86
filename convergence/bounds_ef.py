"""Error feedback with a delta-contracting compressor (topk, randomk, powersgd, ef_signsgd).

Derived here with the virtual-iterate technique of Stich & Karimireddy ('The error-feedback framework',
JMLR 2020) and Karimireddy et al. (ICML 2019, Thm II), without bounded gradients and for n workers. The
zero-mean noise is kept out of Young's inequality and both Young weights are minimised over
(:mod:`convergence.bounds_family`), so the step limit is of order delta/L (not delta^1.5) and the noise
costs (1 - delta)/delta sigma^2 times a factor between 1 and 4 (not 1/delta^2), the orders of the best
published EF rates (the papers' own constants could not be read here, so none is copied). One member, the
former choice of weights with the noise kept apart, makes the bound never looser than before. PowerSGD compresses
the mean of the workers' steps (one shared low-rank approximation), so its members follow the mean residual:
the noise enters as sigma^2/n and heterogeneity not at all (``MEAN_DERIVATION``).
"""

from __future__ import annotations

import sympy as sp

from .bounds_family import Family, family_bound, logit_grid
from .symbols import Delta, L, delta, n, sigma, zeta

theta = sp.Symbol("theta", positive=True)  # the descent's Young weight is r = theta min(1, 8 sqrt(1 - delta))
phi = sp.Symbol("phi", positive=True)  # the residual's Young weight makes it contract by 1 - phi delta

WEIGHTS = ((theta, logit_grid(-3, 9, 1)), (phi, logit_grid(-1, 11, 1)))

_s = sp.sqrt(1 - delta)  # s^2 = 1 - delta
_r = theta * sp.Min(1, 8 * _s)  # the descent's Young weight: theta, but 8 theta s where delta > 63/64 (0 at 1)
_s2_over_r = sp.Max(_s**2, _s / 8) / theta  # s^2 / r, written without 0/0 at delta = 1
_alpha_over_r = _s2_over_r * (1 - phi * delta) / (phi * (1 - phi) * delta**2)
_C = L**2 * _s2_over_r * ((1 - phi * delta) * zeta**2 / (phi * (1 - phi) * delta**2) + sigma**2 / (phi * delta))
_STEP = 2 * (1 - _r) / (L * (1 + sp.sqrt(1 + 4 * _alpha_over_r * (1 - _r))))

# the former weights (r = s, residual contraction 1 - delta/2), noise kept out of Young's inequality
_FORMER_C = L**2 * _s * (4 * (1 - delta / 2) * zeta**2 / delta**2 + 2 * sigma**2 / delta)
_FORMER_STEP = 2 * (delta / (1 + _s)) / (L * (1 + sp.sqrt(1 + 16 * _s * (1 - delta / 2) * delta / (1 + _s) / delta**2)))

DERIVATION = (
    "Each worker i keeps the residual e_i: p_i = e_i + gamma g_i, sends C(p_i), keeps e_i <- p_i - C(p_i); the "
    "model moves by the mean of C(p_i). The virtual iterate x~ = x - mean_i e_i follows exact SGD with gradients "
    "taken at x (x~+ = x~ - gamma gbar). Descent at x~ with a = grad f(x~), b = grad f(x), Young with weight r: "
    "-<a, b> <= -(1 - r/2)||b||^2 + ||a - b||^2/(2r), ||a - b||^2 <= L^2 E_t, E_t = mean_i ||e_i||^2 (Jensen): "
    "gamma (1 - r/2 - L gamma/2)||b||^2 <= f(x~) - E f(x~+) + gamma L^2 E_t/(2r) + L gamma^2 sigma^2/(2n). "
    "Residual: E||p_i - C(p_i)||^2 <= (1 - delta) E||p_i||^2, and the noise xi_i (mean 0, independent of e_i "
    "and x) adds without a Young factor: E||p_i||^2 = ||e_i + gamma grad f_i(x)||^2 + gamma^2 sigma^2 <= "
    "(1 + w)||e_i||^2 + (1 + 1/w) gamma^2 ||grad f_i(x)||^2 + gamma^2 sigma^2; with (1 - delta)(1 + w) = "
    "1 - phi delta and mean_i ||grad f_i(x)||^2 <= ||b||^2 + zeta^2, E_0 = 0 gives sum_t E_t <= gamma^2 "
    "(alpha sum_t (||b_t||^2 + zeta^2) + beta T sigma^2), alpha = (1 - delta)(1 - phi delta)/(phi (1 - phi) "
    "delta^2), beta = (1 - delta)/(phi delta). The ||b||^2 terms keep a coefficient >= gamma/2 when r + L gamma "
    "+ alpha L^2 gamma^2/r <= 1, i.e. gamma <= 2(1 - r)/(L (1 + sqrt(1 + 4 (alpha/r)(1 - r)))), leaving "
    "2 Delta/(gamma T) + L gamma sigma^2/n + (L^2 gamma^2/r)(alpha zeta^2 + beta sigma^2). B is the minimum "
    "over r = theta min(1, 8 s) (s = sqrt(1 - delta): r is theta unless delta > 63/64, and 0 at delta = 1) "
    "and phi, theta in 1/(1 + 2^-k), k = -3 .. 9, phi likewise with k = -1 .. 11, and the former weights "
    "(r = s, phi = 1/2). For small delta theta = phi = 1/2 gives the step limit delta/(4L) and beta/r = "
    "4 (1 - delta)/delta; theta, phi -> 1 give beta/r -> (1 - delta)/delta at smaller steps. At delta = 1 "
    "every member is SGD's bound. (Formerly r = sqrt(1 - delta) and the noise inside Young's inequality: step "
    "limit ~ delta^1.5/(2 sqrt 2 L) and 4 sqrt(1 - delta)(sigma^2 + zeta^2)/delta^2.)"
)

SOURCE = ("Karimireddy, Rebjock, Stich & Jaggi, 'Error feedback fixes SignSGD and other gradient compression "
          "schemes', ICML 2019, Thm II (single worker, bounded gradients); Stich & Karimireddy, 'The error-feedback "
          "framework', JMLR 2020 (virtual iterate; step O(delta/L)); n-worker constants without bounded "
          "gradients, with the noise outside Young's inequality, minimised over the Young weights, derived here")

FAMILIES = [Family(L * sigma**2 / n, _C, _STEP, WEIGHTS), Family(L * sigma**2 / n, _FORMER_C, _FORMER_STEP)]

# PowerSGD compresses the mean: the same derivation on e = mean_i e_i, whose step carries the averaged noise
# (sigma^2/n) and the full gradient (no zeta); every member is the per-worker member's with zeta = 0, sigma^2/n
_MEAN = {zeta: 0, sigma: sigma / sp.sqrt(n)}
MEAN_FAMILIES = [Family(L * sigma**2 / n, _C.subs(_MEAN), _STEP, WEIGHTS),
                 Family(L * sigma**2 / n, _FORMER_C.subs(_MEAN), _FORMER_STEP)]

MEAN_DERIVATION = (
    "PowerSGD (Vogels et al., NeurIPS 2019, Alg. 1 and 2; PyTorch's powerSGD_hook) compresses the mean: worker i "
    "forms M_i = e_i + gamma g_i, the all-reduces of P = M_i Q and Q = M_i^T P^ give every worker the same "
    "Pi Mbar (Pi = P^ P^T, P^ orthonormalised from Mbar Q; tensors sent uncompressed: Pi = I there), and worker i "
    "keeps e_i <- M_i - Pi Mbar. So ebar = mean_i e_i follows ebar' = (I - Pi)(ebar + gamma gbar) with gbar = "
    "mean_i g_i: its noise has variance sigma^2/n and mean_i grad f_i(x) = grad f(x) exactly. The virtual iterate "
    "x~ = x - ebar follows exact SGD (x~' = x~ - gamma gbar), and ||x~ - x||^2 = ||ebar||^2. With the contraction "
    "||(I - Pi) M||^2 <= (1 - delta) ||M||^2 of the mean (delta measured on it, or r/min(m, n) for the exact "
    "truncation), the derivation above goes through with E_t = ||ebar_t||^2, sigma^2/n for sigma^2 and zeta = 0: "
    "C = L^2 (s^2/r) sigma^2/(n phi delta) and the same step limit. The per-worker derivation (a contraction of "
    "each M_i) does not describe this algorithm: e_i' = M_i - Pi Mbar is no contraction of M_i. " + DERIVATION
)

ERROR_FEEDBACK = [family_bound(
    name, f"{what}: a biased compressor with contraction delta ({dl}) on "
    + ("the mean of the workers' residual-corrected steps (zeta does not enter)" if name == "powersgd" else
       "each worker's residual-corrected step, averaged exactly"), SOURCE + f"; {dl}",
    MEAN_DERIVATION if name == "powersgd" else DERIVATION, MEAN_FAMILIES if name == "powersgd" else FAMILIES,
    (L, sigma, Delta, n, delta, zeta), defaults={"zeta": 0.0}, sgd_limit={delta: 1}) for name, what, dl in (
    ("topk", "Top-k sparsification (the k largest magnitudes) with error feedback", "delta = k/d"),
    ("randomk", "Random-k sparsification (k uniformly chosen coordinates, unscaled) with error feedback",
     "delta = k/d in expectation"),
    ("powersgd", "PowerSGD: rank-r approximation of each gradient matrix with error feedback",
     "delta = r/min(m, n) for the exact rank-r truncation (Eckart-Young); PowerSGD's warm-started power iteration "
     "approaches it (Vogels et al., NeurIPS 2019, Sec. 3)"),
    ("ef_signsgd", "scaled sign (||p||_1/d) sign(p) with error feedback",
     "delta = ||p||_1^2/(d ||p||^2) >= 1/d (Karimireddy et al. 2019, Lemma 8)"),
)]
