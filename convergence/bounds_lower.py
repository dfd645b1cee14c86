"""The lower bound of Arjevani et al. for stochastic first-order methods, in our metric's units.

Arjevani, Carmon, Duchi, Foster, Srebro & Woodworth, 'Lower bounds for non-convex stochastic
optimization', Math. Programming 2023 (arXiv 1912.02365), Thm 1 (zero-respecting algorithms) and
Thm 3: finding x with E||grad f(x)|| <= e needs Omega(Delta L sigma^2 e^-4) stochastic gradient
queries; with exact gradients Carmon et al. ('Lower bounds for finding stationary points I',
Math. Programming 2020) give Omega(Delta L e^-2). The papers leave the constant unspecified; we
made it explicit for zero-respecting algorithms from the hard instance's constants (ell_1 = 152,
Delta_0 = 12, ||grad||_inf <= 23; scaling lambda = 2 ell_1 e / L, Bernoulli(p) oracle with
1/p = 1 + sigma^2/(2116 e^2), progress < T with probability 1/2 for (T - ln 2)/(2p) queries):

    queries >= max(Delta L / (3648 e^2), Delta L sigma^2 / (123506688 e^4)),  e <= sqrt(L Delta / 14592).

This derivation is ours (the source text was not available to check it), so the constant is
labelled as such. Units: an upper bound on ``(1/T) sum_t E||grad f(x_t)||^2 <= eps`` yields an
output (a uniformly drawn iterate) with ``E||grad f|| <= sqrt(eps)``, so ``e = sqrt(eps)`` and

    queries_to(eps) = max(Delta L / (3648 eps), Delta L sigma^2 / (123506688 eps^2)),  eps <= L Delta / 14592.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from costmodels.errors import CommscopeError

from .bounds import BOUNDS, Bound
from .bounds_core import positive
from .symbols import Delta, L, T, sigma

DETERMINISTIC = 3648
STOCHASTIC = 123_506_688
VALID = 14592


@dataclass(frozen=True)
class LowerBound(Bound):
    """``value(Q)``: the smallest metric any algorithm can guarantee after Q queries (T counts queries)."""

    @property
    def in_step(self) -> sp.Expr:
        return sp.Max(Delta * L / (DETERMINISTIC * T), sp.sqrt(Delta * L * sigma**2 / (STOCHASTIC * T)))

    @property
    def step(self) -> sp.Expr:
        return sp.nan

    @property
    def expr(self) -> sp.Expr:
        return self.in_step

    def latex(self) -> str:
        return sp.latex(self.in_step)

    def _step(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        return np.full(np.shape(t), np.nan)

    def _evaluate(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        dl, lip, sg = (vals[self._index(k)] for k in ("Delta", "L", "sigma"))
        return np.maximum(dl * lip / (DETERMINISTIC * t), np.sqrt(dl * lip * sg**2 / (STOCHASTIC * t)))

    def valid_below(self, **constants: Any) -> Any:
        """The largest eps (squared-norm units) the lower bound holds for: L Delta / 14592."""
        vals = self._values(constants)
        return vals[self._index("L")] * vals[self._index("Delta")] / VALID

    def queries_to(self, eps: Any, **constants: Any) -> Any:
        """Queries no algorithm can do without (module docstring), for eps <= :meth:`valid_below`."""
        e = positive(eps, "eps")
        vals = self._values(constants)
        dl, lip, sg = (vals[self._index(k)] for k in ("Delta", "L", "sigma"))
        if (e <= 0).any() or (e > lip * dl / VALID).any():
            raise CommscopeError(f"the lower bound holds for 0 < eps <= L Delta / {VALID}, got eps = {e.max()!r}")
        out = np.maximum(dl * lip / (DETERMINISTIC * e), dl * lip * sg**2 / (STOCHASTIC * e**2))
        return float(out) if out.ndim == 0 else out


BOUNDS.register(LowerBound(
    "arjevani", "nonconvex", "lower bound: stochastic gradient queries any (zero-respecting) algorithm needs",
    "Arjevani et al., Math. Programming 2023, Thm 1/3; Carmon et al., Math. Programming 2020 (deterministic "
    "term); explicit constants derived here from the hard instance (module docstring)",
    "See the module docstring: scaled chain function with ell_1 = 152, Delta_0 = 12, sup-norm 23, "
    "Bernoulli oracle; the progress of any zero-respecting algorithm is at most one coordinate per 1/p "
    "queries in expectation.", (L, sigma, Delta), sgd_limit=None, limit_of=None,
    queries_per_iteration=sp.Integer(1), kind="lower", metric="(1/T) sum_t E||grad f(x_t)||^2 after T queries"))
