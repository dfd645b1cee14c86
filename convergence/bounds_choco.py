"""CHOCO-SGD: decentralized SGD whose gossip exchanges only compressed model differences.

Algorithm (Koloskova, Stich & Jaggi, 'Decentralized stochastic optimization and gossip algorithms with
compressed communication', ICML 2019, Algorithm 2), in matrix form with one row per worker::

    X_half = X - gamma G(X)                     (local stochastic gradient step)
    Xhat  += C(X_half - Xhat)                   (row-wise compressed update of the public copies)
    X      = X_half + gamma_c (W - I) Xhat       (gossip on the public copies, consensus step gamma_c)

``C`` is a delta-contraction, ``E||v - C(v)||^2 <= (1 - delta)||v||^2`` (top-k, random-k unscaled, the
scaled sign). ``1^T (W - I) = 0``, so the average model follows SGD with gradients taken at the x_i. The
public copies start at the (common) initial model, ``Xhat_0 = X_0``, so the compression error starts at 0.

What was confirmed in the papers (in a stored copy of the ICLR 2020 text, Koloskova, Lin, Stich & Jaggi,
'Decentralized deep learning with arbitrary communication compression'): its Algorithm 1 (the same three
operations, ordered differently: gossip on the copies before their compressed update, gradient step last,
as in the authors' code; the ICML paper's Algorithm 2 ordering above could not be re-read here);
Definition 3.1 (the delta-contraction above); Assumption 1 (W symmetric, doubly stochastic, spectral gap
rho := 1 - |lambda_2(W)|, i.e. 1 - sqrt(1 - gap) with this project's ``gap = 1 - lambda^2``); Theorem 4.1
(non-convex): with bounded second moments E||g_i||^2 <= G^2, step sqrt(n / (T + 1)), T >= 64 n L^2 and the
consensus step of the ICML paper, gamma_c = rho^2 delta / (16 rho + rho^2 + 4 beta^2 + 2 rho beta^2 -
8 rho delta) with beta = ||I - W||_2 in [0, 2], the average squared gradient norm at the mean model is at most
(4 (f(xbar_0) - f*) + 4 sigma^2 L) / sqrt(n (T + 1)) + 24 G^2 n L / (c^2 (T + 1)), c = rho^2 delta / 82 the
rate of the consensus scheme. Not confirmed (the ICML text was not available): that paper's own theorems
(its strongly convex rate, the proof of the consensus rate rho^2 delta / 82).

The bound here is derived independently (``derivation`` of the entry) without G^2, which the quadratic
test problems violate, with the papers' technique (a joint recursion of the consensus error and the
compression error), beta = ||I - W||_2 <= 2 and its own consensus step :func:`choco_consensus_step`,
``gamma_c = rho (1-s) / (rho (1-s) + 16 s)`` with ``s = sqrt(1 - delta)``, ``rho = 1 - sqrt(1 - gap)``,
which the simulation uses too::

    B = 2 Delta / (gamma T) + L gamma sigma^2 / n + 2 L^2 gamma^2 (P0 sigma^2 + 2 P1 zeta^2),
    gamma <= 1 / (L (1 + 2 sqrt(P1))),

with P0 (``NOISE_FACTOR``) and P1 (``DRIFT_FACTOR``) functions of gap and delta only, of order
64 / (rho^2 delta) and 4096 / (rho^4 delta^2) for small delta (the papers' O(1/(rho^4 delta^2)) term).
gamma_c = 1 at delta = 1, where CHOCO-SGD is exactly D-PSGD (tested), and P0 = P1 = 0 at delta = 1,
gap = 1: the bound is then mini-batch SGD's exactly. Being D-PSGD there, at delta = 1 it takes the smaller of
this bound and D-PSGD's (:mod:`convergence.bounds_gossip`), which is D-PSGD's wherever compared: one algorithm,
one bound (before, the two differed by up to 23x).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import sympy as sp

import costmodels as cm
from costmodels.errors import CommscopeError

from .bounds_core import BOUNDS
from .bounds_family import Family, family_bound
from .bounds_gossip import FAMILY as DPSGD_FAMILY
from .problems import Problem
from .sim_algorithms import random_k, scaled_sign, top_k
from .simulate import SIMULATIONS, Run, SimulatedAlgorithm
from .symbols import Delta, L, delta, gap, n, sigma, zeta
from .topology import mixing_matrix, spectral_gap

BETA = 2  # ||I - W||_2 <= 2 for every symmetric doubly stochastic W (eigenvalues in [-1, 1])
_CONSENSUS_SCALE = 16  # from the two step conditions of the derivation (with beta = 2)

# ------------------------------------------------------------------------------- the constants
_s = sp.sqrt(1 - delta)  # s^2 = 1 - delta: the compressor keeps at most this share of ||v||^2
_d = delta / (1 + _s)  # 1 - s, written so that it stays accurate for small delta
_rho = gap / (1 + sp.sqrt(1 - gap))  # 1 - lambda = 1 - sqrt(1 - gap), the paper's spectral gap
_c = _rho * _d / (_rho * _d + _CONSENSUS_SCALE * _s)  # the consensus step gamma_c
_kappa = _c * _rho  # exact gossip with step gamma_c contracts disagreement by q = 1 - kappa
_q = 1 - _kappa
# the 2x2 recursion of S_Y = sum E||Y_half||^2 and S_Z = sum E||Z||^2 (derivation)
_a12 = 2 * _c * BETA**2 / (_rho * (2 - _kappa))
_a21 = 2 * (1 - delta) * _c**2 * BETA**2 / _d
_one_a11 = _kappa / (2 - _kappa)
_one_a22 = 1 - _s * (1 + _c * BETA) ** 2
_det = _one_a11 * _one_a22 - _a12 * _a21
_gossip_z = _c * BETA**2 / _rho  # weight of ||Z||^2 in ||Y'||^2
_KY = (_q * _one_a22 + _gossip_z * _a21) / _det  # sum ||Y||^2 per unit injected into Y_half
_KZ = (_q * _a12 + _gossip_z * _one_a11) / _det  # ... per unit injected into Z
NOISE_FACTOR = _KY + (1 - delta) * _KZ  # P0: multiplies sigma^2 (noise is injected without a Young factor)
DRIFT_FACTOR = _KY * 2 / _kappa + (1 - delta) * _KZ * 2 / _d  # P1: multiplies zeta^2, L^2 Xi and ||b||^2

_DERIVATION = (
    "Notation: J = 11^T/n; consensus error Y = (I-J)X (Xi = ||Y||^2/n) and Y_h = (I-J)X_half; compression "
    "error Z = X_half - Xhat after the compressed update (the part of X - Xhat that C has not sent; it carries "
    "the factor 1-delta); c = gamma_c; ||((1-c)I + cW)(I-J)|| <= q := 1 - kappa, kappa = c rho; ||I-W|| <= "
    "beta = 2; s = sqrt(1-delta). Exactly, Y' = ((1-c)I + cW) Y_h + c(I-W) Z, and the next vector compressed is "
    "V' = (I + c(I-W)) Z - c(I-W) Y_h - gamma G'. Young with weights (1/q, 1/kappa): ||Y'||^2 <= q ||Y_h||^2 + "
    "(c beta^2/rho) ||Z||^2. Young with weights (1/s, 2/(1-s), 2/(1-s)), the fresh noise N' kept apart "
    "(independent, mean 0): E||Z'||^2 <= (1-delta) E||V'||^2 <= s(1 + c beta)^2 ||Z||^2 + (2(1-delta)/(1-s)) "
    "(c^2 beta^2 ||Y_h||^2 + gamma^2 ||grad F'||^2) + (1-delta) gamma^2 n sigma^2. Young with weights "
    "(2/(2-kappa), 2/kappa): E||Y_h'||^2 <= (2/(2-kappa)) ||Y'||^2 + (2/kappa) gamma^2 ||(I-J) grad F'||^2 + gamma^2 "
    "n sigma^2. Summed over t < T (all workers start at x_0 and Xhat_0 = X_0, so the recursion starts from 0), "
    "S_Y = sum E||Y_h||^2 and S_Z = sum E||Z||^2 satisfy S <= A S + g with a11 = 2q/(2-kappa), a12 = 2c beta^2/"
    "(rho (2-kappa)), a21 = 2(1-delta) c^2 beta^2/(1-s), a22 = s(1 + c beta)^2. The consensus step gamma_c = "
    "rho(1-s)/(rho(1-s) + 16 s) gives a22 <= (1+s)/2 and a12 a21 <= (1-a11)(1-a22)/2, so I - A is an M-matrix "
    "(the Lyapunov function ||Y_h||^2 + w ||Z||^2 contracts, per step like 1 - kappa/2 in Y and (1+s)/2 in Z; the "
    "system is solved exactly instead of fixing w): sum_t ||Y_t||^2 <= q S_Y + (c beta^2/rho) S_Z = K_Y g_Y + "
    "K_Z g_Z, K_Y = (q(1-a22) + (c beta^2/rho) a21)/det, K_Z = (q a12 + (c beta^2/rho)(1-a11))/det. With "
    "||(I-J) grad F||^2 <= 2L^2 ||Y||^2 + 2n zeta^2 and ||grad F||^2 <= n||b||^2 + 2L^2 ||Y||^2 + 2n zeta^2 "
    "(b = mean_i grad f_i(x_i)): sum Xi <= gamma^2 (2L^2 P1 sum Xi + T(P0 sigma^2 + 2 P1 zeta^2) + P2 sum ||b||^2), "
    "P0 = K_Y + (1-delta) K_Z, P1 = 2K_Y/kappa + 2(1-delta) K_Z/(1-s) >= P2 = 2(1-delta) K_Z/(1-s). Descent at "
    "xbar (SGD with gradients at the x_i; ||grad f(xbar) - b||^2 <= L^2 Xi): E f(xbar') <= f(xbar) - (gamma/2)"
    "||grad f(xbar)||^2 - (gamma/2)(1 - L gamma)||b||^2 + (gamma L^2/2) Xi + L gamma^2 sigma^2/(2n). The step limit "
    "L gamma <= 1/(1 + 2 sqrt(P1)) gives 4 L^2 gamma^2 P1 <= 1 (the Xi feedback at most doubles: sum Xi <= "
    "2 gamma^2 (T(P0 sigma^2 + 2 P1 zeta^2) + P2 sum ||b||^2)) and L gamma + 2 L^2 gamma^2 P2 <= 1, so the "
    "gradient-norm terms ||b||^2 (compression acts on whole models, mean included) are absorbed by "
    "-(gamma/2)(1 - L gamma)||b||^2, leaving 2 Delta/(gamma T) + L gamma sigma^2/n + 2 L^2 gamma^2 (P0 sigma^2 + "
    "2 P1 zeta^2). For small delta kappa ~ rho^2 delta/32, so P0 ~ 64/(rho^2 delta) and P1 ~ 4096/(rho^4 delta^2) "
    "(the papers' O(1/(rho^4 delta^2)) term). At delta = 1: s = 0, c = 1 (D-PSGD) and every Z term vanishes; "
    "at gap = 1 also q = 0, so P0 = P1 = 0: mini-batch SGD's bound."
)

_DELTA_ONE = (
    " At delta = 1 CHOCO-SGD is D-PSGD step for step (gamma_c = 1 and Xhat = X_half after the update; tested), so "
    "D-PSGD's bound holds for it there and B takes the smaller of the two (D-PSGD's, which was never larger where "
    "compared: gap 0.0016 .. 0.999, T 1 .. 1e9). Below delta = 1 only this derivation applies."
)

BOUNDS.register(family_bound(
    "choco_sgd",
    "CHOCO-SGD: local SGD step, then gossip on public model copies that are updated only by "
    "delta-contracting compressed differences (consensus step choco_consensus_step(gap, delta))",
    "Koloskova, Stich & Jaggi, ICML 2019, Algorithm 2 (CHOCO-SGD) and its consensus step; Koloskova, Lin, "
    "Stich & Jaggi, ICLR 2020, Thm 4.1 (non-convex, bounded gradients G^2, c = rho^2 delta/82); constants "
    "without G^2 and a consensus step equal to 1 at delta = 1 derived here; at delta = 1 D-PSGD's bound",
    _DERIVATION + _DELTA_ONE,
    [Family(L * sigma**2 / n, 2 * L**2 * (NOISE_FACTOR * sigma**2 + 2 * DRIFT_FACTOR * zeta**2),
            1 / (L * (1 + 2 * sp.sqrt(DRIFT_FACTOR)))),
     replace(DPSGD_FAMILY, valid=sp.Eq(delta, 1))],
    (L, sigma, Delta, n, gap, delta, zeta), defaults={"zeta": 0.0}, sgd_limit={delta: 1, gap: 1},
    algorithm="choco_sgd"))


def _unit_interval(name: str, v: Any) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    bad = ~np.isfinite(a) | (a <= 0) | (a > 1)
    if bad.any():
        raise CommscopeError(f"{name} must be in (0, 1], got {a[bad].flat[0].item()!r}")
    return a


def choco_consensus_step(gap_value: Any, delta_value: Any) -> Any:
    """The consensus step gamma_c the bound assumes: ``rho (1-s) / (rho (1-s) + 16 s)`` with
    ``s = sqrt(1 - delta)`` and ``rho = 1 - sqrt(1 - gap)``; 1 at delta = 1 (CHOCO-SGD is then D-PSGD).
    Arrays broadcast."""
    g, dl = _unit_interval("gap", gap_value), _unit_interval("delta", delta_value)
    s = np.sqrt(1 - dl)
    rho = g / (1 + np.sqrt(1 - g))
    d = dl / (1 + s)
    out = rho * d / (rho * d + _CONSENSUS_SCALE * s)
    return float(out) if np.ndim(out) == 0 else out


# ---------------------------------------------------------------------------------- simulation
_COMPRESSORS: dict[str, tuple[str, bool]] = {  # our name -> (costmodels compressor, takes a density)
    "topk": ("topk", True), "randomk": ("randomk", True), "scaled_sign": ("ef_signsgd", False)}


def _k(run: Run) -> int:
    return max(1, math.ceil(run.problem.d * float(run.params["density"])))


_COMPRESS: dict[str, Callable[[np.ndarray, Run], np.ndarray]] = {
    "topk": lambda v, run: top_k(v, _k(run)),
    "randomk": lambda v, run: random_k(v, _k(run), run.rng),
    "scaled_sign": lambda v, run: scaled_sign(v),
}


def _choco_constants(prob: Problem, params: Mapping[str, Any]) -> dict[str, float]:
    name, dense = _COMPRESSORS[params["compressor"]]
    value = float(params["density"]) if dense else None
    return {"gap": spectral_gap(params["topology"], prob.n),
            "delta": float(cm.compressor(name).delta(prob.d, value))}


def _choco_check(prob: Problem, params: Mapping[str, Any]) -> str | None:
    if params["compressor"] not in _COMPRESSORS:
        return f"compressor must be one of {', '.join(_COMPRESSORS)}, got {params['compressor']!r}"
    q = params.get("density")
    if _COMPRESSORS[params["compressor"]][1] and not (q is not None and 0 < float(q) <= 1):
        return f"density must be in (0, 1], got {q!r}"
    return None


def _choco_sgd(run: Run) -> None:
    st = run.state
    if "w" not in st:
        st["w"] = mixing_matrix(run.params["topology"], run.problem.n)
        c = _choco_constants(run.problem, run.params)
        st["consensus"] = choco_consensus_step(c["gap"], c["delta"])
        st["xhat"] = run.x.copy()  # public copies start at the common initial model
    half = run.x - run.gamma * run.problem.grad(run.x, run.rng)
    st["xhat"] = st["xhat"] + _COMPRESS[run.params["compressor"]](half - st["xhat"], run)
    mixed = st["w"] @ st["xhat"]  # (n, n) @ (..., n, d): gossip over the worker axis
    run.x = half + st["consensus"] * (mixed - st["xhat"])


SIMULATIONS.register(SimulatedAlgorithm(
    "choco_sgd", "CHOCO-SGD: local step, compressed update of public copies (topk / randomk at a density, or "
    "scaled_sign), gossip on them with consensus step choco_consensus_step(gap, delta)", _choco_sgd,
    lambda params: "choco_sgd", {"topology": "ring", "compressor": "topk", "density": 0.2}, _choco_constants,
    _choco_check))
