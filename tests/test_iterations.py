"""Iterations to eps (issue 19, item 6): the closed-form start (:func:`convergence.iterations.settle_iterations`) gives
exactly the T of the plain bisection (:func:`convergence.iterations.bisect_iterations`, the reference) on a grid of
constants, with T = 1, unreachable eps, eps at B(T) itself and T beyond 2^52 among them, in a few evaluations."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import convergence as cv
from convergence.bounds_core import GradientNormBound, positive
from convergence.iterations import bisect_iterations, shape_iterations

SHAPED = [name for name in cv.bounds() if isinstance(cv.bound(name), GradientNormBound)]
VALUES = {"L": [0.05, 1.0, 7.0], "sigma": [1e-4, 1.0, 30.0], "Delta": [1e-6, 1.0, 3e4], "zeta": [0.0, 0.2, 5.0],
          "n": [1.0, 8.0, 1024.0], "tau": [0.0, 3.0, 255.0], "H": [1.0, 8.0, 256.0], "s": [0.0, 2.0, 32.0],
          "gap": [1e-4, 0.05, 1.0], "delta": [1e-5, 0.3, 1.0], "omega": [0.0, 0.5, 40.0]}
EPS = np.array([1e3, 10.0, 1.0, 1e-2, 3e-4, 1e-6, 1e-9, 1e-12])  # from T = 1 to beyond 1e18 (never)


def _grid(b: GradientNormBound, count: int) -> list[dict[str, float]]:
    """``count`` combinations of the constants' values, picked evenly from their product."""
    names = [x.name for x in b.assumptions]
    product = list(itertools.product(*(VALUES[k] for k in names)))
    picked = [product[i] for i in np.linspace(0, len(product) - 1, min(count, len(product))).astype(int)]
    return [dict(zip(names, c, strict=True)) for c in picked]


def _reference(b: GradientNormBound, eps: object, **c: float) -> np.ndarray:
    e = positive(eps, "eps")
    vals = b._values(c)
    return bisect_iterations(b._evaluate, e, vals, np.broadcast_shapes(e.shape, *(v.shape for v in vals)))


@pytest.mark.parametrize("name", SHAPED)
def test_fast_iterations_equal_the_bisection(name: str) -> None:
    b = cv.bound(name)
    assert b._time_free  # every registered shape is free of T, so all of them take the fast path
    seen = set()
    for c in _grid(b, 24):
        fast = b.iterations_to(EPS, **c)
        assert np.array_equal(fast, _reference(b, EPS, **c)), c  # arrays of eps
        for e in EPS[[0, 3, 5, 7]]:
            assert b.iterations_to(float(e), **c) == float(_reference(b, float(e), **c)), (c, e)  # one eps
        seen |= {"1" if t == 1 else "never" if np.isinf(t) else "beyond 2^52" if t > 2**52 else "T" for t in fast}
    assert seen >= {"1", "never", "T", "beyond 2^52"}, seen
    arrays = {k: np.array(VALUES[k]) for k in ("n", "gap", "delta") if k in {x.name for x in b.assumptions}}
    if arrays:  # constants as arrays, broadcast with eps
        c = {**_grid(b, 1)[0], **{k: v[:, None] for k, v in arrays.items()}}
        assert np.array_equal(b.iterations_to(EPS[None, 2:6], **c), _reference(b, EPS[None, 2:6], **c))


@pytest.mark.parametrize("name", ["sgd", "local_sgd", "ssp", "dpsgd", "topk", "choco_sgd"])
def test_eps_at_the_bound_itself(name: str) -> None:
    """eps = B(T0) is first reached at T0 (or before, where B is flat), eps a float below it one T later."""
    b = cv.bound(name)
    c = _grid(b, 7)[3]
    for t0 in (2.0, 17.0, 1234.0, 98765.0, 3.3e7, 1e11, 1e16):
        v = float(b.value(t0, **c))
        for e in (v, np.nextafter(v, np.inf), np.nextafter(v, 0.0)):
            assert b.iterations_to(e, **c) == float(_reference(b, e, **c)), (t0, e)


def test_few_evaluations_where_T_is_exact() -> None:
    """Below 2^52 the fast path evaluates B about four times (the bisection about 85)."""
    b = cv.bound("ssp")
    calls = []
    evaluate = b._evaluate
    object.__setattr__(b, "_evaluate", lambda t, vals: calls.append(1) or evaluate(t, vals))
    try:
        t = b.iterations_to(1e-3, L=1.0, sigma=1.0, Delta=1.0, n=32.0, s=4.0, zeta=0.0)
    finally:
        object.__delattr__(b, "_evaluate")
    assert 1 < t < 2**52 and len(calls) <= 6


def test_closed_form_root_by_hand() -> None:
    """sgd's shape with A = 2, C = 0, gamma_max = 1/L = 0.5, D Delta = 2: B(T) = 2/(gamma T) + 2 gamma at gamma =
    min(0.5, 1/sqrt(T)), so B(T) = 4/sqrt(T) past T = 4 and eps = 0.1 needs T = 1600; a member that does not hold
    is ignored; no noise and no step limit gives T = 0 (B = 0)."""
    one = np.ones(1)
    root = shape_iterations(np.array(0.1), 2 * one, 0 * one, 0.5 * one, 2 * one, one > 0)
    assert root == pytest.approx(1600.0, rel=1e-12)
    two = np.array([2.0, 1e-3])
    held = shape_iterations(np.array(0.1), two, 0 * two, 0.5 + 0 * two, 2 + 0 * two, np.array([True, False]))
    assert held == root
    assert shape_iterations(np.array(0.1), 0 * one, 0 * one, np.inf * one, one, one > 0) == 0.0
