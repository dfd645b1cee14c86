"""Tables of the Convergence page, from :mod:`convergence` (pure functions, no Streamlit).

Each bound's curve B(T) over a range of T (:func:`bound_curves`), the iterations each needs to reach
eps (:func:`iterations_table`), and simulated runs on a heterogeneous quadratic whose constants are set
to the chosen ones (:func:`simulation_setup`, :func:`simulated_points`). The Time-to-accuracy page's
tables are in :mod:`app.data_tta`. Constants arrive as plain numbers; nothing typed by a user is ever
parsed as an expression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import sympy as sp

import convergence as cv
from convergence.bounds import GradientNormBound
from convergence.bounds_choco import DRIFT_FACTOR, NOISE_FACTOR
from convergence.bounds_convex import DistanceBound
from convergence.sim_algorithms import matrix_shape, qsgd_omega
from convergence.symbols import Delta, T, gap
from convergence.topology import TOPOLOGIES

# --------------------------------------------------------------------------------------- constants


@dataclass(frozen=True)
class ConstantSpec:
    """How the page asks for one constant of the bounds: label, help text, range and default."""

    label: str
    help: str
    low: float
    high: float
    default: float
    integer: bool = False
    step: float = 0.1


CONSTANTS: dict[str, ConstantSpec] = {  # in the order the page shows them
    "L": ConstantSpec("L (smoothness)", "f is L-smooth: ||grad f(x) - grad f(y)|| <= L ||x - y||", 1e-6, 1e6, 1.0),
    "sigma": ConstantSpec("sigma (gradient noise)", "E||g_i - grad f_i||^2 <= sigma^2 for one worker's stochastic "
                          "gradient", 1e-9, 1e6, 1.0),
    "Delta": ConstantSpec("Delta = f(x0) - f*", "initial suboptimality", 1e-9, 1e9, 1.0),
    "zeta": ConstantSpec("zeta (heterogeneity)", "(1/n) sum_i ||grad f_i - grad f||^2 <= zeta^2 (0: i.i.d. data)",
                         0.0, 1e6, 0.0),
    "mu": ConstantSpec("mu (strong convexity)", "each f_i is mu-strongly convex (strongly convex bounds)", 1e-9, 1e6,
                       0.1, step=0.01),
    "D0": ConstantSpec("D0 = ||x0 - x*||^2", "initial squared distance (strongly convex bounds)", 1e-9, 1e9, 1.0),
    "n": ConstantSpec("n (workers)", "workers averaged per iteration", 1, 65536, 16, integer=True),
    "H": ConstantSpec("H (local steps)", "local steps between averagings", 1, 100000, 8, integer=True),
    "tau": ConstantSpec("tau (max delay)", "largest staleness of an asynchronous update, in updates", 0, 100000, 15,
                        integer=True),
    "s": ConstantSpec("s (staleness)", "stale synchronous parallel: clocks a model may lag", 0, 100000, 2,
                      integer=True),
    "gap": ConstantSpec("gap (spectral gap)", "1 - lambda^2 of the gossip mixing matrix, in (0, 1]", 1e-6, 1.0, 0.1,
                        step=0.01),
    "delta": ConstantSpec("delta (contraction)", "biased compressor: ||C(v) - v||^2 <= (1 - delta) ||v||^2, "
                          "in (0, 1]", 1e-9, 1.0, 0.25, step=0.01),
    "omega": ConstantSpec("omega (compressor variance)", "unbiased compressor: E||C(v) - v||^2 <= omega ||v||^2",
                          0.0, 1e9, 2.0, step=0.5),
    "L1": ConstantSpec("L1 = ||L_vec||_1", "signSGD: l1 norm of the per-coordinate smoothness", 1e-9, 1e9, 4.0),
    "sigma1": ConstantSpec("sigma1 = ||sigma_vec||_1", "signSGD: l1 norm of the per-coordinate noise", 1e-9, 1e9, 4.0),
}

LOWER_BOUND_NOTE = "lower bound: drawn at n T stochastic gradients (T synchronous iterations of n workers)"


def constants_needed(names: Sequence[str]) -> list[str]:
    """The constants the chosen bounds take, in :data:`CONSTANTS` order (the lower bound also needs n: its
    curve is drawn per synchronous iteration of n queries)."""
    need: set[str] = set()
    for name in names:
        b = cv.bound(name)
        need |= {x.name for x in b.assumptions}
        if b.kind == "lower":
            need.add("n")
    return [k for k in CONSTANTS if k in need]


def constants_for(name: str, constants: Mapping[str, float]) -> dict[str, float]:
    """The given constants that bound ``name`` takes."""
    names = {x.name for x in cv.bound(name).assumptions}
    return {k: float(v) for k, v in constants.items() if k in names}


def check_constants(names: Sequence[str], constants: Mapping[str, float]) -> list[str]:
    """Problems with a combination of constants, as sentences (empty when fine)."""
    out = []
    need = set(constants_needed(names))
    if {"mu", "L"} <= need and constants["mu"] > constants["L"]:
        out.append(f"mu = {constants['mu']:g} exceeds L = {constants['L']:g}: no function is more strongly convex "
                   "than it is smooth.")
    return out


# ------------------------------------------------------------------------------------ bound curves
def _bound_values(name: str, t: np.ndarray, constants: Mapping[str, float]) -> np.ndarray:
    b = cv.bound(name)
    given = constants_for(name, constants)
    if b.kind == "lower":
        v = np.asarray(b.value(t * constants["n"], **given), dtype=float)
        return np.where(v <= b.valid_below(**given), v, np.nan)  # type: ignore[attr-defined]
    return np.asarray(b.value(t, **given), dtype=float) * np.ones_like(t)


def bound_curves(names: Sequence[str], constants: Mapping[str, float], t: np.ndarray) -> pd.DataFrame:
    """Long table (bound, T, value, kind, metric): each bound B(T) at the iterations ``t``.

    The lower bound (kind ``lower``) is evaluated at n T queries and left out where it does not hold
    (above L Delta / 14592).
    """
    t = np.asarray(t, dtype=float)
    frames = []
    for name in dict.fromkeys(names):
        b = cv.bound(name)
        v = _bound_values(name, t, constants)
        ok = np.isfinite(v) & (v > 0)
        frames.append(pd.DataFrame({"bound": name, "T": t[ok], "value": v[ok], "kind": b.kind, "metric": b.metric}))
    cols = ["bound", "T", "value", "kind", "metric"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def iterations_table(names: Sequence[str], constants: Mapping[str, float], eps: float) -> pd.DataFrame:
    """Per bound: iterations to reach eps (``Bound.iterations_to``), stochastic gradients drawn, the
    step size used at that T, and a note (other metric, lower bound, never reached)."""
    rows = []
    for name in dict.fromkeys(names):
        b = cv.bound(name)
        given = constants_for(name, constants)
        note = ""
        if b.kind == "lower":
            lb = b.valid_below(**given)  # type: ignore[attr-defined]
            if eps > lb:
                it, queries = math.nan, math.nan
                note = f"the lower bound holds for eps <= L Delta / 14592 = {lb:.3g}"
            else:
                queries = float(b.queries_to(eps, **given))
                it = math.ceil(queries / constants["n"])
                note = "no algorithm needs fewer stochastic gradients; iterations of n of them"
            step = math.nan
        else:
            it = float(b.iterations_to(eps, **given))
            queries = float(b.queries_to(eps, **given)) if math.isfinite(it) else math.inf
            step = float(b.step_size(it, **given)) if math.isfinite(it) else math.nan
            if not math.isfinite(it):
                note = "never (beyond 10^18 iterations)"
            elif b.measure != "avg_grad_sq":
                note = f"bounds {b.metric}"
        rows.append({"bound": name, "kind": b.kind, "iterations": it, "stochastic gradients": queries,
                     "step at that T": step, "metric": b.metric, "note": note})
    cols = ["bound", "kind", "iterations", "stochastic gradients", "step at that T", "metric", "note"]
    return pd.DataFrame(rows, columns=cols)


_P0, _P1 = sp.symbols("P_0 P_1", positive=True)
_ABBREVIATIONS = {NOISE_FACTOR: _P0, DRIFT_FACTOR: _P1, 2 * DRIFT_FACTOR: 2 * _P1}  # CHOCO-SGD's long factors
_ABBREVIATED = (r"P_0 &= K_Y + (1 - \delta) K_Z,\quad P_1 = \frac{2 K_Y}{\kappa} + \frac{2 (1 - \delta) K_Z}"
                r"{1 - \sqrt{1 - \delta}}\quad \text{(of gap and } \delta \text{ only)}")


def _tex(expr: sp.Expr) -> str:
    return sp.latex(expr.xreplace(_ABBREVIATIONS), symbol_names={gap: r"\mathrm{gap}"})  # registry expressions only


def bound_latex(name: str) -> str:
    """The bound as KaTeX lines (``aligned``): B(gamma, T), then the step. For the nonconvex family the
    balancing step gamma* is written as the root it is (``2 C gamma^3 + A gamma^2 = D Delta / T``), with A
    and C spelled out; the strongly convex step as the minimiser over (0, gamma_max]. Rendered by sympy
    from the registered expressions."""
    b = cv.bound(name)
    if isinstance(b, GradientNormBound):
        lines = [r"B(\gamma, T) &= " + _tex(b.in_step)]
        if b.disagreement == 0:
            lines.append(r"\gamma &= \min\left(\gamma_{\max}, " + _tex(b.step_opt) + r"\right)")
        else:
            lines.append(r"\gamma &= \min\left(\gamma_{\max}, \gamma^\star\right),\quad 2 C \gamma^{\star 3} + "
                         r"A \gamma^{\star 2} = " + _tex(b.descent * Delta / T))
            lines.append(r"A &= " + _tex(b.variance) + r",\quad C = " + _tex(b.disagreement))
        lines.append(r"\gamma_{\max} &= " + _tex(b.step_max))
    elif isinstance(b, DistanceBound):
        lines = [r"B(\gamma, T) &= " + _tex(b.in_step),
                 r"\gamma &= \operatorname{arg\,min}_{0 < \gamma \le \gamma_{\max}} B(\gamma, T),\quad "
                 r"\gamma_{\max} = " + _tex(b.step_max)]
        if b.variance != 0 or b.disagreement != 0:
            lines.append(r"A &= " + _tex(b.variance) + r",\quad C = " + _tex(b.disagreement))
    elif b.kind == "lower":
        lines = [r"B(T) &= " + b.latex()]
    else:
        lines = [r"B(T) &= " + _tex(b.in_step), r"\gamma &= " + _tex(b.step)]
    if any("P_{1}" in line for line in lines):
        lines.append(_ABBREVIATED)
    return r"\begin{aligned}" + r" \\ ".join(lines) + r"\end{aligned}"


def bound_info(name: str) -> dict[str, Any]:
    """What the page shows about a bound: description, setting, metric, assumptions (constants with their
    meaning and defaults), source, derivation and LaTeX (sympy's rendering of the registered expression)."""
    b = cv.bound(name)
    assumptions = []
    for x in b.assumptions:
        spec = CONSTANTS.get(x.name)
        text = f"{spec.label}: {spec.help}" if spec else x.name
        if x.name in b.defaults:
            text += f" (default {b.defaults[x.name]:g})"
        assumptions.append(text)
    return {"name": b.name, "description": b.description, "setting": b.setting, "kind": b.kind, "metric": b.metric,
            "assumptions": assumptions, "source": b.source, "derivation": b.derivation, "latex": bound_latex(name)}


# ------------------------------------------------------------------------------------- simulations
SIM_D = 16  # coordinates of the simulated quadratic: 4 x 4 for PowerSGD, k/16 densities exact
SIM_REPLICAS = 8
SIM_HORIZONS = (3, 10, 30, 100, 300, 1000)
SIM_MAX_WORKERS = 64
SIM_MU_RATIO = 0.05  # mu / L of the quadratic where no bound fixes mu


@dataclass(frozen=True)
class SimulationSetup:
    """How one bound is simulated: the registered simulation, its problem and parameters (or why not)."""

    bound: str
    algorithm: str | None
    problem: cv.Problem | None
    params: dict[str, Any]
    reason: str = ""


def _closest(target: float, options: Mapping[Any, float]) -> Any:
    """The key whose value is nearest ``target`` on a log scale (exact zero targets: the smallest value)."""
    def dist(v: float) -> float:
        if target <= 0 or v <= 0:
            return abs(v - target)
        return abs(math.log(v / target))

    return min(options, key=lambda k: dist(options[k]))


def _rescaled(prob: cv.Problem, key: str, target: float) -> cv.Problem:
    """The problem with x0 moved along the line to x* so that Delta (or D0) equals ``target`` exactly
    (both scale with the square of the distance on a quadratic)."""
    now = prob.constants()[key]
    c = math.sqrt(target / now)
    return replace(prob, x0=prob.x_star + c * (prob.x0 - prob.x_star))


def simulation_setup(name: str, constants: Mapping[str, float], d: int = SIM_D, seed: int = 0) -> SimulationSetup:
    """A quadratic (``cv.problem("quadratic")``, exact constants) and parameters that reproduce ``constants``
    for bound ``name``: L, sigma, zeta, mu, n and Delta (or D0) exactly; H, tau and s as given; gap,
    delta and omega as close as a d-coordinate problem allows (topology, k of d, QSGD levels, rank)."""
    if name not in cv.simulations():
        return SimulationSetup(name, None, None, {}, "no simulation (a lower bound holds for every algorithm)")
    b = cv.bound(name)
    take = {x.name for x in b.assumptions}
    n = int(constants.get("n", 8))
    if n > SIM_MAX_WORKERS:
        return SimulationSetup(name, None, None, {}, f"not simulated: n = {n} > {SIM_MAX_WORKERS} workers")
    zeta = float(constants.get("zeta", 0.0)) if "zeta" in take else 0.0
    sigma = float(constants.get("sigma", 1.0))
    lip = float(constants.get("L", 1.0))
    mu = float(constants["mu"]) if "mu" in take else SIM_MU_RATIO * lip
    if name == "signsgd":  # L1 = sum of the eigenvalues, sigma1 = sqrt(d) sigma
        lip = float(constants["L1"]) / float(np.geomspace(SIM_MU_RATIO, 1.0, d).sum())
        mu, sigma = SIM_MU_RATIO * lip, float(constants["sigma1"]) / math.sqrt(d)
    if mu > lip:
        return SimulationSetup(name, None, None, {}, f"not simulated: mu = {mu:g} exceeds L = {lip:g}")
    prob = cv.problem("quadratic", n=n, d=d, L=lip, mu=mu, sigma=sigma, zeta=zeta, seed=seed)
    prob = _rescaled(prob, "D0", constants["D0"]) if "D0" in take else _rescaled(prob, "Delta", constants["Delta"])
    params: dict[str, Any] = {}
    if name in ("local_sgd", "local_sgd_sc"):
        params["H"] = int(constants["H"])
    elif name == "async_sgd":
        params["tau"] = int(constants["tau"])
    elif name == "ssp":
        params["s"] = int(constants["s"])
    if name in ("dpsgd", "choco_sgd"):
        params["topology"] = _closest(constants["gap"], {t: cv.spectral_gap(t, n) for t in TOPOLOGIES.names()})
    if name in ("topk", "randomk", "choco_sgd"):
        k = min(d, max(1, round(constants["delta"] * d)))
        params["density"] = k / d
    if name == "powersgd":
        side = min(matrix_shape(d))
        params["rank"] = _closest(constants["delta"], {r: r / side for r in range(1, side + 1)})
    if name == "qsgd":
        params["levels"] = _closest(constants["omega"], {q: qsgd_omega(d, q) for q in range(1, 1025)})
    return SimulationSetup(name, name, prob, params)


def _differences(wanted: Mapping[str, float], used: Mapping[str, float]) -> str:
    out = []
    for k, v in used.items():
        w = wanted.get(k)
        if w is not None and not math.isclose(v, w, rel_tol=1e-6, abs_tol=1e-12):
            out.append(f"{k} = {v:.4g}")
    return ", ".join(out)


def simulated_points(names: Sequence[str], constants: Mapping[str, float], horizons: Sequence[int] = SIM_HORIZONS,
                     replicas: int = SIM_REPLICAS, seed: int = 0, d: int = SIM_D) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate every chosen bound that has a registered simulation (``cv.simulate``).

    Returns the points (bound, T, metric, spread, bound_at_simulated, tightness) and one summary row
    per bound (bound, simulated as, parameters, constants that differ from the chosen ones, worst
    tightness, or why it was not simulated).
    """
    points, summary = [], []
    for name in dict.fromkeys(names):
        setup = simulation_setup(name, constants, d=d, seed=seed)
        if setup.problem is None:
            summary.append({"bound": name, "simulated": False, "parameters": "", "differs": "",
                            "min tightness": math.nan, "note": setup.reason})
            continue
        try:
            r = cv.simulate(setup.algorithm, setup.problem, T=list(horizons), replicas=replicas, seed=seed,
                            **setup.params)
        except cv.CommscopeError as e:
            summary.append({"bound": name, "simulated": False, "parameters": "", "differs": "",
                            "min tightness": math.nan, "note": f"not simulated: {e}"})
            continue
        differs = _differences(constants_for(name, constants), r.constants)
        points.append(pd.DataFrame({"bound": name, "T": r.horizons.astype(float), "metric": r.metric,
                                    "spread": r.spread, "bound_at_simulated": r.bound, "tightness": r.tightness,
                                    "differs": differs}))
        summary.append({"bound": name, "simulated": True,
                        "parameters": ", ".join(f"{k}={v}" for k, v in setup.params.items()),
                        "differs": differs, "min tightness": float(np.nanmin(r.tightness)),
                        "note": f"quadratic, d = {d}, n = {setup.problem.n}, {replicas} replicas"})
    pcols = ["bound", "T", "metric", "spread", "bound_at_simulated", "tightness", "differs"]
    scols = ["bound", "simulated", "parameters", "differs", "min tightness", "note"]
    return (pd.concat(points, ignore_index=True) if points else pd.DataFrame(columns=pcols),
            pd.DataFrame(summary, columns=scols))
