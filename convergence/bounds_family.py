"""Nonconvex bounds minimised over the free weights of their derivation (Young's-inequality weights).

A derivation that splits ``||a + b||^2 <= (1 + w)||a||^2 + (1 + 1/w)||b||^2`` may pick any ``w > 0``,
and each choice gives a valid bound ``B_w(T) = 2 Delta/(gamma T) + A gamma + C_w gamma^2`` for
``gamma <= gamma_max,w`` (the shape of :class:`~convergence.bounds_core.GradientNormBound`). Fixing the
weights once (as ``rho = sqrt(1 - delta)`` did for error feedback) trades the step limit against the
constant C the same way at every T; the best trade depends on T. A :class:`FamilyBound` therefore takes

    B(T) = min over the members m of B_m(T),

where a member is one point of a fixed grid of weights in one :class:`Family` (a derivation) that is
valid for the given constants. Every member is a bound for the run with its own step, so the minimum is
one for the run with the step of the best member (``step_size`` returns that step). Each member is
non-increasing in T and monotone in the constants, so the minimum is too, and where a limit removes the
weights from a member (e.g. delta = 1) every member becomes the same expression (``weight_min``
collapses), so the limit of B is the limit of one member. The grids are fixed numbers (not functions of
the constants), which keeps the monotonicity exact; they were chosen so that the minimum over them is
within a few per cent of the minimum over all weights: iterations to eps at most 1.4% (async_sgd), 0.8%
(ssp, zeta = 0), 5% (ssp, zeta > 0), 4.4% (dpsgd) and 2.8% (error feedback) above those of a fine grid, over
eps 1e-2 .. 1e-4, n 8 and 32 and the delays, gaps and deltas of practice (checked when they were written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import sympy as sp

from .bounds_core import GradientNormBound, balanced_step, balanced_step_numeric, gamma
from .symbols import Delta, T

Weights = tuple[tuple[sp.Symbol, tuple[float, ...]], ...]


class weight_min(sp.Function):  # noqa: N801 (a sympy function, named like sympy's)
    """``weight_min(B, w1, w2, ...)``: the minimum of B over the grids of its weights w1, w2, ...
    (evaluated numerically); B itself once it no longer depends on them."""

    @classmethod
    def eval(cls, expr: sp.Expr, *weights: sp.Symbol) -> sp.Expr | None:
        if not expr.free_symbols & set(weights):
            return expr
        return None


def logit_grid(lo: float, hi: float, step: float) -> tuple[float, ...]:
    """``1 / (1 + 2^-k)`` for k = lo, lo + step, ..., hi: weights in (0, 1), denser towards 0 and 1."""
    return tuple(float(1 / (1 + 2.0 ** -k)) for k in np.arange(lo, hi + step / 2, step))


def power_grid(lo: float, hi: float, step: float) -> tuple[float, ...]:
    """``2^k`` for k = lo, lo + step, ..., hi: Young weights w in (0, inf)."""
    return tuple(float(2.0**k) for k in np.arange(lo, hi + step / 2, step))


@dataclass(frozen=True)
class Family:
    """One derivation: A, C and gamma_max as expressions of the constants and of its ``weights`` (each a
    symbol with the grid of values tried); it holds where ``valid`` holds (a sympy condition on the
    constants, e.g. ``Eq(zeta, 0)``)."""

    variance: sp.Expr
    disagreement: sp.Expr
    step_max: sp.Expr
    weights: Weights = ()
    valid: Any = sp.true

    @property
    def symbols(self) -> tuple[sp.Symbol, ...]:
        return tuple(w for w, _ in self.weights)

    @property
    def expr(self) -> sp.Expr:
        """B(T) of one member (weights free), wrapped in :class:`weight_min`."""
        k = 2 * Delta / T
        g = sp.Min(self.step_max, balanced_step(self.variance, self.disagreement, k))
        return weight_min(k / g + self.variance * g + self.disagreement * g**2, *self.symbols)

    def grid(self) -> list[np.ndarray]:
        """The members: one flat array per weight, all combinations of the grids."""
        if not self.weights:
            return []
        mesh = np.meshgrid(*(np.asarray(v, dtype=np.float64) for _, v in self.weights), indexing="ij")
        return [m.reshape(-1) for m in mesh]


@dataclass(frozen=True)
class FamilyBound(GradientNormBound):
    """A :class:`GradientNormBound` minimised over derivations and their weights (module docstring).

    ``variance``, ``disagreement`` and ``step_max`` with ``weights`` are the primary family (always
    valid; what ``in_step`` and ``latex`` show, weights as symbols); ``alternatives`` are further families,
    each used where its ``valid`` condition holds. ``descent`` must be 2 (every family's)."""

    weights: Weights = ()
    alternatives: tuple[Family, ...] = ()

    @property
    def families(self) -> tuple[Family, ...]:
        return (Family(self.variance, self.disagreement, self.step_max, self.weights), *self.alternatives)

    @property
    def expr(self) -> sp.Expr:
        """B(T): the minimum over the families that hold (a Piecewise on their conditions)."""
        out = self.families[0].expr
        for fam in self.alternatives:
            both = sp.Min(out, fam.expr)
            out = both if fam.valid is sp.true else sp.Piecewise((both, fam.valid), (out, True))
        return out

    def latex(self) -> str:
        names = ", ".join(sp.latex(w) for f in self.families for w in f.symbols)
        tail = rf",\quad \min \text{{ over }} {names}" if names else ""
        return super().latex() + tail

    @cached_property
    def _family_fns(self) -> list[tuple[Any, ...]]:
        out = []
        for fam in self.families:
            args = [T, *self.assumptions, *fam.symbols]
            fns = tuple(sp.lambdify(args, e, "numpy") for e in (fam.variance, fam.disagreement, fam.step_max))
            valid = sp.lambdify(list(self.assumptions), fam.valid, "numpy")
            out.append((fns, valid, fam.grid()))
        return out

    def _members(self, t: np.ndarray, vals: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Step and B of every member, stacked on a leading axis (B = inf where a family does not hold,
        and for a member whose C is not a finite number: one that overflows, as local SGD's q^H at a large H)."""
        shape = np.broadcast_shapes(np.shape(t), *(np.shape(v) for v in vals))
        dk = 2 * vals[self._index("Delta")] / t
        steps, values = [], []
        for (var_f, dis_f, max_f), valid_f, grid in self._family_fns:
            m = len(grid[0]) if grid else 1
            ws = [w.reshape((m,) + (1,) * len(shape)) for w in grid]
            full = (m, *shape)
            with np.errstate(over="ignore", invalid="ignore"):  # a member's C may overflow: it holds nothing then
                a = np.broadcast_to(np.asarray(var_f(t, *vals, *ws), dtype=np.float64), full)
                c = np.broadcast_to(np.asarray(dis_f(t, *vals, *ws), dtype=np.float64), full)
                cap = np.broadcast_to(np.asarray(max_f(t, *vals, *ws), dtype=np.float64), full)
            ok = np.broadcast_to(np.asarray(valid_f(*vals), dtype=bool), shape) & np.isfinite(c)
            c = np.where(ok, c, 0.0)
            k = np.broadcast_to(dk, full)
            g = np.minimum(cap, balanced_step_numeric(a, c, k))
            with np.errstate(invalid="ignore"):
                b = k / g + a * g + c * g * g
            values.append(np.where(ok, b, np.inf))
            steps.append(g)
        return np.concatenate(steps), np.concatenate(values)

    def _shape_exprs(self) -> tuple[sp.Expr, ...]:
        return tuple(e for f in self.families for e in (f.variance, f.disagreement, f.step_max))

    def _coefficients(self, vals: list[np.ndarray], shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """A, C, gamma_max, 2 Delta and validity of every member, stacked as in :meth:`_members`."""
        t, out = np.ones(shape), []
        for (var_f, dis_f, max_f), valid_f, grid in self._family_fns:
            m = len(grid[0]) if grid else 1
            ws = [w.reshape((m,) + (1,) * len(shape)) for w in grid]
            full = (m, *shape)
            with np.errstate(over="ignore", invalid="ignore"):
                parts = [np.broadcast_to(np.asarray(f(t, *vals, *ws), dtype=np.float64), full)
                         for f in (var_f, dis_f, max_f)]
            parts.append(np.broadcast_to(2 * vals[self._index("Delta")], full))
            parts.append(np.broadcast_to(np.asarray(valid_f(*vals), dtype=bool), full) & np.isfinite(parts[1]))
            parts[1] = np.where(parts[-1], parts[1], 0.0)
            out.append(parts)
        return tuple(np.concatenate(x) for x in zip(*out, strict=True))

    def _best(self, t: np.ndarray, vals: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        g, b = self._members(t, vals)
        i = np.argmin(b, axis=0)[None]
        return np.take_along_axis(g, i, axis=0)[0], np.take_along_axis(b, i, axis=0)[0]

    def _step(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        return self._best(t, vals)[0]

    def _evaluate(self, t: np.ndarray, vals: list[np.ndarray]) -> np.ndarray:
        return self._best(t, vals)[1]

    def member_count(self) -> int:
        """How many (family, weights) members the minimum runs over."""
        return sum(len(g[0]) if g else 1 for *_, g in self._family_fns)


def family_bound(name: str, description: str, source: str, derivation: str, families: Sequence[Family],
                 assumptions: tuple[sp.Symbol, ...], **kw: Any) -> FamilyBound:
    """A nonconvex :class:`FamilyBound` whose first family is the primary one."""
    first, *rest = families
    if first.valid is not sp.true:
        raise ValueError(f"{name}: the primary family must always hold")
    return FamilyBound(name, "nonconvex", description, source, derivation, assumptions, variance=first.variance,
                       disagreement=first.disagreement, step_max=first.step_max, weights=first.weights,
                       alternatives=tuple(rest), **kw)


__all__ = ["Family", "FamilyBound", "family_bound", "gamma", "logit_grid", "power_grid", "weight_min"]
