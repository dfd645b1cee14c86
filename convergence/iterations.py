"""The smallest integer T with B(T) <= eps, for a bound B non-increasing in T (:meth:`Bound.iterations_to`).

:func:`bisect_iterations` works for any such B: bisection on log T in [1, 1e18], then on the integers between
the bracket's ends (80 + a few evaluations of B). :func:`settle_iterations` is the fast path for the bounds
whose continuous root is known in closed form (:func:`shape_iterations`, the nonconvex shape
``B = D Delta/(gamma T) + A gamma + C gamma^2`` minimised over gamma <= gamma_max): it checks the integer next to
that root, and its neighbours, with B itself (about four evaluations of B), so it returns the same T as the
bisection wherever B is monotone as computed; where the check fails (B's rounding at T beyond 2^52, or a root
the closed form misses) it falls back to the bisection.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Evaluate = Callable[[np.ndarray, list[np.ndarray]], np.ndarray]
T_MAX = 1e18  # beyond it, eps counts as never reached
EXACT = 2.0**52  # integers (and their predecessors) are exact floats below it


def _ends(evaluate: Evaluate, e: np.ndarray, vals: list[np.ndarray], shape: tuple[int, ...]
          ) -> tuple[np.ndarray, np.ndarray]:
    """Where B(1) <= eps already (done) and where B(1e18) <= eps (reachable)."""
    return evaluate(np.ones(shape), vals) <= e, evaluate(np.full(shape, T_MAX), vals) <= e


def _answer(done: np.ndarray, reachable: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.where(done, 1.0, np.where(reachable, t, np.inf))


def bisect_iterations(evaluate: Evaluate, e: np.ndarray, vals: list[np.ndarray], shape: tuple[int, ...],
                      ends: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Smallest integer T in [1, 1e18] with ``evaluate(T, vals) <= e`` (inf where none), of ``shape``: bisection
    on log T (80 steps), then on the integers between the bracket's ends (exact while T < 2^53)."""
    done, reachable = _ends(evaluate, e, vals, shape) if ends is None else ends
    lo, hi = np.zeros(shape), np.full(shape, np.log(T_MAX))
    for _ in range(80):
        mid = (lo + hi) / 2
        ok = evaluate(np.exp(mid), vals) <= e
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    below = np.maximum(np.floor(np.exp(lo) * (1 - 1e-9)), 1.0)
    above = np.ceil(np.exp(hi) * (1 + 1e-9))
    below = np.where(done | ~reachable, 1.0, below)
    above = np.where(done | ~reachable, 2.0, above)
    for _ in range(64):
        open_ = above - below > 1
        if not open_.any():
            break
        mid = np.floor((below + above) / 2)
        ok = evaluate(mid, vals) <= e
        above, below = np.where(open_ & ok, mid, above), np.where(open_ & ~ok, mid, below)
    return _answer(done, reachable, above)


def settle_iterations(evaluate: Evaluate, e: np.ndarray, vals: list[np.ndarray], shape: tuple[int, ...],
                      guess: np.ndarray, steps: int = 3) -> np.ndarray:
    """:func:`bisect_iterations` from a continuous root ``guess`` of B(T) = eps: T = ceil(guess) is the answer
    where B(T) <= eps < B(T - 1); elsewhere T moves by one towards it, ``steps`` times, and what is still open
    is bisected."""
    done, reachable = _ends(evaluate, e, vals, shape)
    todo = ~done & reachable
    with np.errstate(invalid="ignore"):
        near = todo & (np.nan_to_num(guess, nan=np.inf) < EXACT)
        t = np.where(near, np.clip(np.ceil(np.where(near, guess, 2.0)), 2.0, EXACT), 2.0)
    for i in range(steps + 1):
        ok, ok_before = evaluate(t, vals) <= e, evaluate(t - 1, vals) <= e
        open_ = near & ~(ok & ~ok_before)
        if i == steps or not open_.any():
            break
        t = np.where(open_ & ~ok, t + 1, np.where(open_ & ok_before, np.maximum(t - 1, 2.0), t))
    rest = open_ | (todo & ~near)
    if rest.any():
        t = np.where(rest, bisect_iterations(evaluate, e, vals, shape, (done, reachable)), t)
    return _answer(done, reachable, t)


def shape_iterations(e: np.ndarray, a: np.ndarray, c: np.ndarray, cap: np.ndarray, numerator: np.ndarray,
                     valid: np.ndarray) -> np.ndarray:
    """The continuous root of ``min over members of B_m(T) = eps`` with ``B_m(T) = min over gamma <= cap_m of
    numerator / (gamma T) + a_m gamma + c_m gamma^2`` (members on axis 0; B_m = inf where not ``valid``).

    ``B_m(T) <= eps`` iff ``T >= numerator / phi(gamma)`` for some gamma <= cap with ``phi(gamma) = gamma (eps -
    a gamma - c gamma^2)``, concave, largest at the root of ``eps = 2 a gamma + 3 c gamma^2``:
    ``gamma_0 = 2 eps / (2 a + sqrt(4 a^2 + 12 c eps))`` (inf where a = c = 0). So
    ``T_m = numerator / phi(min(cap, gamma_0))`` and the root is ``min_m T_m``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        g = np.minimum(cap, 2 * e / (2 * a + np.sqrt(4 * a * a + 12 * c * e)))
        phi = g * (e - a * g - c * g * g)
        t = np.where(np.isfinite(g), numerator / phi, 0.0)  # no noise and no step limit: B = 0
        t = np.where(valid & ~np.isnan(t), t, np.inf)
    return t.min(axis=0)
