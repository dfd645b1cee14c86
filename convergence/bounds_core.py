"""The classes every convergence bound shares, and the registry (:mod:`convergence.bounds` registers the
nonconvex entries and describes their common shape).

``Bound`` holds what every family has (assumptions, limits, the quantity bounded, iterations to eps);
``GradientNormBound`` is the nonconvex shape ``B = D Delta/(gamma T) + A gamma + C gamma^2`` at its
best step; :mod:`convergence.bounds_family` extends it to a minimum over Young weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import sympy as sp

from costmodels.errors import CommscopeError
from costmodels.registry import Registry

from .iterations import bisect_iterations, settle_iterations, shape_iterations
from .symbols import Delta, T, n

gamma = sp.Symbol("gamma", positive=True)  # the step size inside B(gamma, T)
_TWO = sp.Integer(2)


class balanced_step(sp.Function):  # noqa: N801 (a sympy function, named like sympy's)
    """The positive root gamma of ``2 C gamma^3 + A gamma^2 = K`` (K = 2 Delta / T): where
    ``dB/dgamma = 0``. Arguments (A, C, K); with C = 0 it is ``sqrt(K / A)``."""

    @classmethod
    def eval(cls, a: sp.Expr, c: sp.Expr, k: sp.Expr) -> sp.Expr | None:
        if c.is_zero:
            return sp.sqrt(k / a)
        return None


def balanced_step_numeric(a: np.ndarray, c: np.ndarray, k: np.ndarray) -> np.ndarray:
    """:class:`balanced_step` by Newton's method, vectorized. It starts from ``min(sqrt(K/A),
    (K/(2C))^(1/3))``, which lies right of the root of the convex, increasing cubic, so the iterates
    decrease monotonically onto it; A = C = 0 (no noise) gives an unbounded step (inf)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.minimum(np.sqrt(k / a), np.cbrt(k / (2 * c)))
        finite = np.isfinite(g)
        g0 = np.where(finite, g, 1.0)
        for _ in range(60):
            h = 2 * c * g0**3 + a * g0 * g0 - k
            move = h / (6 * c * g0 * g0 + 2 * a * g0)
            g0 = g0 - move
            if not (np.abs(move) > 1e-15 * g0).any():  # converged everywhere (NaN inputs stop it too)
                break
    return np.where(finite, g0, np.inf)


def numbers(x: Any, name: str) -> np.ndarray:
    """``x`` as a float64 array: numbers or arrays of them only (text such as ``'1e-3'`` and booleans raise,
    naming the value, where numpy would convert them silently)."""
    if isinstance(x, (str, bytes, bool, np.bool_)):
        raise CommscopeError(f"{name} must be a number or an array of numbers, got {x!r}")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError):  # ragged nests
        raise CommscopeError(f"{name} must be a number or an array of numbers, got {x!r}") from None
    if arr.dtype.kind == "O" and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in arr.flat):
        arr = arr.astype(np.float64)  # Python integers beyond int64
    if arr.dtype.kind not in "iuf":
        raise CommscopeError(f"{name} must be a number or an array of numbers, got {x!r}")
    return arr.astype(np.float64)


def positive(x: Any, name: str) -> np.ndarray:
    """:func:`numbers`, each finite and > 0 (T, eps)."""
    arr = numbers(x, name)
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        raise CommscopeError(f"{name} must be finite and > 0, got {arr[bad].flat[0].item()!r}")
    return arr


@dataclass(frozen=True)
class Bound:
    """A registered convergence bound: what every family shares (see the subclasses for shapes).

    ``assumptions`` are the constants it needs (T excluded); ``defaults`` values of optional ones
    (e.g. ``zeta = 0`` for i.i.d. data); ``limit`` the parameter values (``limit_values``) at which it
    must equal the bound named ``limit_of`` (mini-batch SGD's in its setting; None where no such limit
    exists); ``queries_per_iteration`` how many stochastic gradients one iteration draws (n for
    synchronous schedules, 1 per asynchronous update), used to compare with the lower bound; ``batch``
    the mini-batch each worker averages per iteration, in units of the stochastic gradient whose noise is
    sigma (1, except signSGD's K = T: time to accuracy prices that many mini-batches per iteration);
    ``measure`` names the quantity bounded, which simulations measure the same way:
    ``avg_grad_sq`` = (1/T) sum_t E||grad f(xbar_t)||^2, ``l1_avg_squared`` = (E (1/T) sum_t
    ||grad f(x_t)||_1)^2, ``last_dist_sq`` = E||xbar_T - x*||^2. ``algorithm`` is the training
    algorithm (schedule / compressor name) the bound describes.
    """

    name: str
    setting: str
    description: str
    source: str
    derivation: str
    assumptions: tuple[sp.Symbol, ...]
    defaults: Mapping[str, float] = field(default_factory=dict)
    sgd_limit: Mapping[sp.Symbol, Any] | None = field(default_factory=dict)
    limit_of: str | None = "sgd"
    queries_per_iteration: sp.Expr = n
    batch: sp.Expr = sp.S.One
    kind: str = "upper"
    metric: str = "(1/T) sum_t E||grad f(xbar_t)||^2"
    measure: str = "avg_grad_sq"
    algorithm: str = ""

    # ------------------------------------------------------------ per family
    @property
    def in_step(self) -> sp.Expr:
        """B as a function of the step ``gamma`` and T."""
        raise NotImplementedError

    @property
    def step(self) -> sp.Expr:
        """The step size the bound uses, as a function of T and the constants."""
        raise NotImplementedError

    def _step(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def _evaluate(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    # --------------------------------------------------------------- shared
    @property
    def training_algorithm(self) -> str:
        return self.algorithm or self.name

    @property
    def expr(self) -> sp.Expr:
        """B(T): the bound with its step substituted."""
        return self.in_step.subs(gamma, self.step)

    def latex(self) -> str:
        return sp.latex(self.in_step) + r",\quad \gamma = " + sp.latex(self.step)

    def _index(self, name: str) -> int:
        return [x.name for x in self.assumptions].index(name)

    def _values(self, constants: Mapping[str, Any]) -> list[np.ndarray]:
        given = {**self.defaults, **constants}
        names = [x.name for x in self.assumptions]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise CommscopeError(f"{self.name} has no constant(s) {', '.join(unknown)}; it takes {', '.join(names)}")
        missing = [x for x in names if x not in given]
        if missing:
            raise CommscopeError(f"{self.name} needs {', '.join(missing)} (it takes {', '.join(names)})")
        return [self.check_constant(x.name, given[x.name]) for x in self.assumptions]

    def check_constant(self, name: str, value: Any) -> np.ndarray:
        """``value`` of the constant ``name`` as an array, or a CommscopeError naming it and what is allowed:
        finite, > 0 (>= 0 for a non-negative one), H and n >= 1, delta and the gap in (0, 1]."""
        x = self.assumptions[self._index(name)]
        v = numbers(value, f"{self.name}: {name}")
        low = 0.0 if x.is_nonnegative and not x.is_positive else None
        bad = ~np.isfinite(v) | ((v < 0) if low is not None else (v <= 0))
        if name in ("H", "n"):
            bad |= v < 1
        if name in ("delta", "gap"):
            bad |= v > 1
        if bad.any():
            allowed = {"H": ">= 1", "n": ">= 1", "delta": "in (0, 1]", "gap": "in (0, 1]"}.get(
                name, ">= 0" if low is not None else "> 0")
            raise CommscopeError(f"{self.name}: {name} must be finite and {allowed}, got {v[bad].flat[0].item()!r}")
        return v

    def value(self, iterations: Any, **constants: Any) -> np.ndarray:
        """B(T) for T = ``iterations`` (arrays broadcast with the constants)."""
        return self._evaluate(positive(iterations, "T"), self._values(constants))

    def step_size(self, iterations: Any, **constants: Any) -> np.ndarray:
        """The step the bound uses for a run of T = ``iterations`` steps."""
        return self._step(positive(iterations, "T"), self._values(constants))

    def iterations_to(self, eps: Any, **constants: Any) -> Any:
        """Smallest integer T with B(T) <= eps (arrays broadcast; inf when beyond 10^18).

        Every registered B is non-increasing in T (a minimum over steps of functions decreasing in
        T; tested), so the root is bracketed in [1, 1e18] and found by bisection on log T,
        vectorized over all inputs, then by bisection on integers between its ends (exact below 2^53);
        a family whose continuous root is known in closed form checks the integers next to it instead
        (:mod:`convergence.iterations`: the same T, in a few evaluations of B instead of about 85).
        """
        e = positive(eps, "eps")
        vals = self._values(constants)
        shape = np.broadcast_shapes(e.shape, *(v.shape for v in vals))
        out = self._iterations(e, vals, shape)
        return float(out) if out.ndim == 0 else out

    def _iterations(self, e: np.ndarray, vals: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        return bisect_iterations(self._evaluate, e, vals, shape)

    @cached_property
    def _count_fns(self) -> tuple[Any, Any]:
        """The batch and the queries per iteration as numpy functions of (T, *assumptions), compiled once."""
        args = [T, *self.assumptions]
        return sp.lambdify(args, self.batch, "numpy"), sp.lambdify(args, self.queries_per_iteration, "numpy")

    def batch_size(self, iterations: Any, **constants: Any) -> Any:
        """The per-worker mini-batch (in sigma's units) a run of T = ``iterations`` steps needs each step."""
        t = positive(iterations, "T")
        out = self._count_fns[0](t, *self._values(constants))
        out = np.broadcast_to(np.asarray(out, dtype=np.float64), np.broadcast_shapes(t.shape, np.shape(out)))
        return float(out) if out.ndim == 0 else out

    def queries_to(self, eps: Any, **constants: Any) -> Any:
        """Stochastic gradients drawn before B(T) <= eps: sum over the T iterations of the queries each
        draws (n per synchronous iteration; the batch grows with T for signSGD)."""
        t = np.asarray(self.iterations_to(eps, **constants), dtype=np.float64)
        per = self._count_fns[1](t, *self._values(constants))
        out = t * per
        return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class GradientNormBound(Bound):
    """Nonconvex bounds of one shape (module docstring): ``B = D Delta/(gamma T) + A gamma + C gamma^2``
    with ``gamma = min(gamma_max, gamma*)`` and ``gamma*`` the positive root of
    ``2 C gamma^3 + A gamma^2 = D Delta / T``. ``descent`` is D (2 unless the derivation keeps only
    a quarter of the descent)."""

    variance: sp.Expr = sp.S.Zero  # A
    disagreement: sp.Expr = sp.S.Zero  # C
    step_max: sp.Expr = sp.S.One
    descent: sp.Expr = _TWO

    @property
    def step_opt(self) -> sp.Expr:
        return balanced_step(self.variance, self.disagreement, self.descent * Delta / T)

    @property
    def step(self) -> sp.Expr:
        """``min(gamma_max, gamma*)`` (module docstring)."""
        return sp.Min(self.step_max, self.step_opt)

    @property
    def in_step(self) -> sp.Expr:
        return self.descent * Delta / (gamma * T) + self.variance * gamma + self.disagreement * gamma**2

    @cached_property
    def _fns(self) -> tuple[Any, Any, Any, Any]:
        args = [T, *self.assumptions]
        mods = ["numpy"]
        return tuple(sp.lambdify(args, e, mods) for e in (self.variance, self.disagreement, self.step_max,
                                                           self.descent))  # type: ignore[return-value]

    def _parts(self, t: np.ndarray, vals: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        var_f, dis_f, max_f, des_f = self._fns
        a, c, dk = var_f(t, *vals), dis_f(t, *vals), des_f(t, *vals) * vals[self._index("Delta")] / t
        return np.minimum(max_f(t, *vals), balanced_step_numeric(a, c, dk)), a, c, dk

    def _step(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        return self._parts(t, vals)[0]

    def _evaluate(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        g, a, c, dk = self._parts(t, vals)
        return dk / g + a * g + c * g * g

    @cached_property
    def _time_free(self) -> bool:
        """Whether A, C, gamma_max and D are free of T (then :func:`shape_iterations` gives the root)."""
        return not any(T in sp.sympify(e).free_symbols for e in self._shape_exprs())

    def _shape_exprs(self) -> tuple[sp.Expr, ...]:
        return self.variance, self.disagreement, self.step_max, self.descent

    def _coefficients(self, vals: list[np.ndarray], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """A, C, gamma_max, D Delta and where each member holds, stacked on a leading axis of members (one here),
        broadcast to ``shape``; only where they are free of T."""
        t, full = np.ones(shape), (1, *shape)
        var_f, dis_f, max_f, des_f = self._fns
        parts = (var_f(t, *vals), dis_f(t, *vals), max_f(t, *vals), des_f(t, *vals) * vals[self._index("Delta")])
        return (*(np.broadcast_to(np.asarray(x, dtype=np.float64), full) for x in parts), np.ones(full, dtype=bool))

    def _iterations(self, e: np.ndarray, vals: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        if not self._time_free:
            return super()._iterations(e, vals, shape)
        guess = shape_iterations(e, *self._coefficients(vals, shape))
        return settle_iterations(self._evaluate, e, vals, shape, guess)


BOUNDS: Registry[Bound] = Registry("bound")


def nonconvex(name: str, description: str, source: str, derivation: str, variance: sp.Expr, disagreement: sp.Expr,
               step_max: sp.Expr, assumptions: tuple[sp.Symbol, ...], **kw: Any) -> GradientNormBound:
    return GradientNormBound(name, "nonconvex", description, source, derivation, assumptions, variance=variance,
                             disagreement=disagreement, step_max=step_max, **kw)
