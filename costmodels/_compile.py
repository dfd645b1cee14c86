"""Turning a sympy cost expression into a fast vectorized numpy function.

Most alpha-beta-gamma models are affine in the message size: ``T = A(p, env) + B(p, env) n``.
For those we lambdify ``A`` and ``B`` separately (with common-subexpression elimination) and
evaluate ``B * n + A`` with one multiplication and one in-place addition over the broadcast
shape: the work over the large (n, p) grid is two passes, whatever the formula. Other
expressions (pipelined trees, piecewise models) are lambdified whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from .symbols import lg

_MODULES: list[Any] = [{"lg": np.log2}, "numpy"]


@dataclass(frozen=True)
class CompiledExpr:
    """``expr`` as a numpy function of ``args`` (the message size symbol is ``size``)."""

    expr: sp.Expr
    args: tuple[sp.Symbol, ...]
    size: sp.Symbol
    affine: bool
    _f: Callable[..., Any]

    def coefficients(self, values: Sequence[Any]) -> tuple[Any, Any]:
        """``(A, B)`` with ``expr = A + B n`` (affine expressions only)."""
        if not self.affine:
            raise TypeError(f"{self.expr} is not affine in {self.size}")
        return self._f(*values)

    def __call__(self, n: Any, values: Sequence[Any]) -> Any:
        if not self.affine:  # piecewise branches are all evaluated; silence the unused ones
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                return self._f(n, *values)
        a, b = self._f(*values)
        out = np.multiply(b, n)
        if np.ndim(out) and np.shape(out) == np.broadcast_shapes(np.shape(out), np.shape(a)):
            out += a
            return out
        return out + a


def _fewest_array_ops(expr: sp.Expr) -> sp.Expr:
    """Factor a coefficient so that scalars (alpha, beta, ...) combine before touching arrays of p.

    ``2 beta (p-1)/p + gamma (p-1)/p`` costs five passes over a p array; its factored form
    ``(p-1)(2 beta + gamma)/p`` costs three. Keep whichever has fewer operations.
    """
    try:
        factored = sp.factor(expr)
    except (sp.PolynomialError, NotImplementedError, TypeError):  # pragma: no cover - exotic functions
        return expr
    return factored if sp.count_ops(factored) <= sp.count_ops(expr) else expr


def compile_expr(expr: sp.Expr, size: sp.Symbol, args: Sequence[sp.Symbol]) -> CompiledExpr:
    """Compile ``expr(size, *args)``; affine-in-``size`` expressions get the two-pass evaluator."""
    args = tuple(args)
    if not isinstance(expr, sp.Expr):
        raise TypeError(f"expected a sympy expression, got {type(expr).__name__}")
    slope = sp.diff(expr, size)
    # a Piecewise whose conditions test size (a step in size) has slope 0 on every piece but is not affine
    steps = any(any(cond.has(size) for _, cond in pw.args) for pw in expr.atoms(sp.Piecewise))
    affine = not slope.has(size) and not expr.has(sp.Derivative) and not steps
    if affine:  # d expr / d size is free of size, so expr = intercept + slope * size exactly
        intercept = _fewest_array_ops(expr.subs(size, 0))
        slope = _fewest_array_ops(slope)
        # one function for both, so that common subexpressions such as p - 1 are computed once
        f = sp.lambdify(args, (intercept, slope), modules=_MODULES, cse=True)
        return CompiledExpr(expr, args, size, True, f)
    f = sp.lambdify((size, *args), expr, modules=_MODULES, cse=True)
    return CompiledExpr(expr, args, size, False, f)


__all__ = ["CompiledExpr", "compile_expr", "lg"]
