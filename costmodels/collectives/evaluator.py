"""A collective's time with p, the environment(s) and parameters fixed (:meth:`Collective.evaluator`): a fast
function of the message size alone, used where thousands of messages are priced per configuration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._compile import CompiledExpr
from .token_bucket import token_bucket_time


@dataclass(frozen=True)
class Evaluator:
    """A collective's time with p, the environment(s) and parameters fixed (:meth:`Collective.evaluator`):
    ``evaluator(n)`` broadcasts n against ``shape``, the shape of everything else. An affine model keeps its
    intercept and slope over that shape (``intercept + slope * n``, the intercept NaN outside the domain),
    any other its compiled formula, the arguments after n, and where p is outside the domain (``invalid``).
    Over a link with a token bucket, ``shaped`` holds what :func:`.token_bucket_time` needs besides n: the
    compiled dT/d alpha and dT/d beta, the link's beta, its bucket (0 where unshaped) and the compiled serial
    bytes (:attr:`Collective.serial`); ``host``, the compiled time of the library's host buffers, is added after
    the bucket there (without a bucket ``compiled`` holds it already)."""

    shape: tuple[int, ...]
    compiled: CompiledExpr
    args: list[Any]
    invalid: np.ndarray | None = None
    intercept: np.ndarray | None = None
    slope: np.ndarray | None = None
    shaped: tuple[CompiledExpr, CompiledExpr, Any, Any, CompiledExpr] | None = None
    affine_shaped: tuple[Any, ...] | None = None
    host: CompiledExpr | None = None

    def __call__(self, n_: Any) -> np.ndarray:
        sizes = np.asarray(n_, dtype=np.float64)
        if self.intercept is not None:
            return self.intercept + self.slope * sizes
        if self.affine_shaped is not None:  # T, dT/d alpha and dT/d beta affine in n: their coefficients, kept
            a, b, s_a, s_b, w_a, w_b, q_a, q_b, link_beta, burst = self.affine_shaped
            t = token_bucket_time(a + b * sizes, s_a + s_b * sizes, w_a + w_b * sizes, link_beta, burst,
                                  q_a + q_b * sizes)
        else:
            t = np.asarray(self.compiled(sizes, self.args), dtype=np.float64)
            if self.shaped is not None:
                d_alpha, d_beta, link_beta, burst, serial = self.shaped
                t = token_bucket_time(t, d_alpha(sizes, self.args), d_beta(sizes, self.args), link_beta, burst,
                                      serial(sizes, self.args))
        if self.host is not None:
            t = t + self.host(sizes, self.args)
        return t if self.invalid is None else np.where(self.invalid, np.nan, t)

    def on_rows(self, rows: Callable[[Any], Any]) -> Evaluator:
        """The same evaluator on part of its shape: ``rows`` maps each array to that part."""
        shaped = None if self.shaped is None else (*self.shaped[:2], rows(self.shaped[2]), rows(self.shaped[3]),
                                                   self.shaped[4])
        affine = None if self.affine_shaped is None else tuple(rows(x) for x in self.affine_shaped)
        return replace(self, args=[rows(x) for x in self.args], invalid=rows(self.invalid), shaped=shaped,
                       affine_shaped=affine)
