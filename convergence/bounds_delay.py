"""Bounds of stale-gradient SGD: asynchronous SGD (delay tau) and stale synchronous parallel (staleness s).

Both are derived here (constants our own) with the technique of Lian et al. (NeurIPS 2015, Thm 1) and
Stich & Karimireddy (JMLR 2020, delayed SGD), each minimised over the Young weight w that splits the
gradients of a staleness window from its noise (:mod:`convergence.bounds_family`; w = 1 was the fixed
choice before), and both now carry the heterogeneity zeta of the workers' data.
"""

from __future__ import annotations

import sympy as sp

from .bounds_family import Family, family_bound, power_grid
from .symbols import Delta, L, n, s, sigma, tau, zeta

w_n = sp.Symbol("w_n", positive=True)  # Young weight between a window's gradients and its noise
w_h = sp.Symbol("w_h", positive=True)  # Young weight between a smoothness and a heterogeneity term
f_0 = sp.Symbol("F_0", positive=True)  # the share of the step limit the feedback of stale views may take

NOISE_WEIGHTS = power_grid(-3, 8, 1)  # w_n in 2^-3 .. 2^8

_NOISY = sigma**2 + zeta**2  # one uniformly chosen worker's gradient about grad f

ASYNC_DERIVATION = (
    "Model: update t applies g_t = grad f_i(y_t) + xi_t of a worker i drawn uniformly and independently of the "
    "past, computed at the stale model y_t = x_{t - tau_t}, tau_t <= tau (independent of the noise). Then "
    "E[g_t | past] = grad f(y_t) and the deviation nu_t = g_t - grad f(y_t) has E||nu_t||^2 <= sigma^2 + zeta^2: "
    "heterogeneity is noise (the simulation draws the worker the same way). Descent lemma at x_t with "
    "e_t = grad f(y_t): E f(x_{t+1}) <= f(x_t) + (gamma/2)(||grad f(x_t) - e_t||^2 - ||grad f(x_t)||^2 - "
    "||e_t||^2) + (L gamma^2/2)(||e_t||^2 + sigma^2 + zeta^2); ||grad f(x_t) - e_t||^2 <= L^2 gamma^2 "
    "||sum of <= tau updates||^2 <= L^2 gamma^2 ((1 + w) tau sum ||e_s||^2 + (1 + 1/w) tau (sigma^2 + zeta^2)) "
    "(Young with weight w; the nu_s are martingale differences). Each s lies in at most tau windows, so the "
    "||e||^2 terms cancel when L gamma + (1 + w) L^2 gamma^2 tau^2 <= 1, i.e. gamma <= 2 / (L (1 + sqrt(1 + "
    "4 (1 + w) tau^2))), leaving 2 Delta/(gamma T) + L gamma (sigma^2 + zeta^2) + (1 + 1/w) L^2 gamma^2 tau "
    "(sigma^2 + zeta^2), minimised over w in 2^-3 .. 2^8 (w = 1 was the former fixed choice). At tau = 0 and "
    "zeta = 0 it is SGD's bound with one gradient per update."
)

ASYNC_SGD = family_bound(
    "async_sgd", "asynchronous SGD: each update applies one worker's gradient (the worker drawn uniformly) "
    "computed on a model at most tau updates old",
    "Lian, Huang, Li & Liu, NeurIPS 2015, Thm 1 (AsySG-con); Stich & Karimireddy, JMLR 2020 (delayed SGD); "
    "Koloskova et al., NeurIPS 2022 and Mishchenko et al., NeurIPS 2022 (heterogeneity enters asynchronous "
    "SGD); constants, the zeta term and the minimum over the Young weight derived here",
    ASYNC_DERIVATION,
    [Family(L * _NOISY, (1 + 1 / w_n) * L**2 * tau * _NOISY, 2 / (L * (1 + sp.sqrt(1 + 4 * (1 + w_n) * tau**2))),
            ((w_n, NOISE_WEIGHTS),))],
    (L, sigma, Delta, tau, zeta), defaults={"zeta": 0.0}, sgd_limit={tau: 0, zeta: 0},
    queries_per_iteration=sp.Integer(1))

SSP_DERIVATION = (
    "Model (Ho et al.'s SSP): at clock c every worker j sends g_j = grad f_j(y_j) + xi_j computed at its view "
    "y_j, which holds every update of clocks <= c - s - 1 and any subset of the n s later single-worker "
    "updates (independent of the noise); x_{c+1} = x_c - gamma mean_j g_j. Let m_c = mean_j grad f_j(y_j), "
    "a_c = grad f(x_c), D_c = mean_j ||x_c - y_j||^2; x_c - y_j is gamma/n times the sum of at most n s missed "
    "updates. (P, any zeta) Descent: E f(x_{c+1}) <= f(x_c) - (gamma/2)||a_c||^2 - (gamma/2)(1 - L gamma)"
    "||m_c||^2 + (gamma L^2/2) D_c + L gamma^2 sigma^2/(2n), using ||a_c - m_c||^2 <= L^2 D_c (each f_j "
    "L-smooth). Young with weight w between gradients and noise and |missed| <= n s: D_c <= (1 + w) gamma^2 s "
    "sum_{r in window} mean_i ||grad f_i(y_i^r)||^2 + (1 + 1/w) gamma^2 s sigma^2/n, and mean_i ||grad "
    "f_i(y_i^r)||^2 <= ||m_r||^2 + mean_i ||grad f_i(y_i^r) - a_r||^2 <= ||m_r||^2 + (1 + v) L^2 D_r + "
    "(1 + 1/v) zeta^2 (Young with weight v). Each clock lies in at most s windows, so with F = (1 + w)(1 + v) "
    "L^2 gamma^2 s^2 <= F0: sum D <= ((1 + w) gamma^2 s^2 sum ||m||^2 + T gamma^2 ((1 + w)(1 + 1/v) s^2 "
    "zeta^2 + (1 + 1/w) s sigma^2/n)) / (1 - F0); the ||m||^2 terms cancel when (1 + w) L^2 gamma^2 s^2 <= "
    "(1 - L gamma)(1 - F0), leaving 2 Delta/(gamma T) + L gamma sigma^2/n + L^2 gamma^2 ((1 + w)(1 + 1/v) s^2 "
    "zeta^2 + (1 + 1/w) s sigma^2/n)/(1 - F0). (A, zeta = 0: the former derivation) every f_j = f, split per "
    "worker: -<a, mean_j e_j> = mean_j (||a - e_j||^2 - ||a||^2 - ||e_j||^2)/2 with e_j = grad f(y_j), and "
    "||mean_j e_j||^2 <= mean_j ||e_j||^2, so the individual ||e_j||^2 of the windows cancel without D feeding "
    "back when L gamma + (1 + w) L^2 gamma^2 s^2 <= 1: 2 Delta/(gamma T) + L gamma sigma^2/n + (1 + 1/w) L^2 "
    "gamma^2 s sigma^2/n. B is the minimum over the members of both (A only where zeta = 0; it is the smaller "
    "there), over w in 2^-6 .. 2^4, v in 1 .. 2^10 and F0 in {1/32, 1/8, 1/2} for (P), w in 2^-3 .. 2^8 for "
    "(A). When all workers read whole clocks (as the parameter server the time to accuracy prices does, and the "
    "default simulation) zeta cancels in m_c and (A) holds for any zeta; the zeta term covers views that hold "
    "part of a clock."
)

_F = 1 - f_0
_SSP_C = L**2 * ((1 + w_n) * (1 + 1 / w_h) * s**2 * zeta**2 + (1 + 1 / w_n) * s * sigma**2 / n) / _F
SSP = family_bound(
    "ssp", "stale synchronous parallel: each clock averages n gradients, each computed on a view that misses "
    "at most the last s clocks' updates (all, or any part of them)",
    "Ho et al., 'More effective distributed ML via a stale synchronous parallel parameter server', NeurIPS "
    "2013, Thm 1 (convex regret; the bounded-staleness views); nonconvex constants, the zeta term and the "
    "minimum over Young weights derived here as for async_sgd",
    SSP_DERIVATION,
    [Family(L * sigma**2 / n, _SSP_C,
            1 / (L * sp.Max((1 + sp.sqrt(1 + 4 * (1 + w_n) * s**2 / _F)) / 2,
                            s * sp.sqrt((1 + w_n) * (1 + w_h) / f_0))),
            ((w_n, power_grid(-6, 4, 2)), (w_h, power_grid(0, 10, 2)), (f_0, (1 / 32, 1 / 8, 1 / 2)))),
     Family(L * sigma**2 / n, (1 + 1 / w_n) * L**2 * s * sigma**2 / n,
            2 / (L * (1 + sp.sqrt(1 + 4 * (1 + w_n) * s**2))), ((w_n, NOISE_WEIGHTS),), valid=sp.Eq(zeta, 0))],
    (L, sigma, Delta, n, s, zeta), defaults={"zeta": 0.0}, sgd_limit={s: 0})
