"""Questions asked of the collective cost models: where two algorithms cross, which is cheapest.

Sensitivities (d time / d alpha, beta, gamma) live on :meth:`Collective.sensitivity`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy as sp

from ._inputs import as_scalar_or_array
from .collectives import PRIMITIVES, Collective, collective, collectives
from .environment import Environment
from .errors import CommscopeError, UnknownNameError
from .symbols import n


def _split_params(a: Collective, b: Collective, params: Mapping[str, Any]) -> tuple[dict, dict]:
    pa = {k: v for k, v in params.items() if k in {q.name for q in a.params}}
    pb = {k: v for k, v in params.items() if k in {q.name for q in b.params}}
    unused = sorted(set(params) - set(pa) - set(pb))
    if unused:
        raise CommscopeError(f"neither {a.name} nor {b.name} has parameter(s) {', '.join(unused)}")
    return pa, pb


def _affine_parts(expr: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    slope = sp.diff(expr, n)
    if slope.has(n):
        return None
    return expr.subs(n, 0), slope


@dataclass(frozen=True)
class Crossover:
    """Message sizes (bytes) where two algorithms take the same time, for one p and environment.

    ``expr`` is the crossover size as a formula in (p, alpha, beta, gamma, ...) when both models
    are affine in n (then there is at most one crossover); ``method`` says how ``sizes`` were found.
    ``cheaper_below`` names the algorithm that is faster below the first crossover (or everywhere).
    """

    a: str
    b: str
    sizes: list[float]
    method: str
    cheaper_below: str | None
    expr: sp.Expr | None = field(default=None, compare=False)


def crossover_expr(a: str, b: str) -> sp.Expr | None:
    """General crossover size ``n*`` of two algorithms affine in n, solved by sympy (else None).

    For ``T_a = A_a + B_a n`` and ``T_b = A_b + B_b n``: ``n* = (A_b - A_a) / (B_a - B_b)``.
    """
    ca, cb = collective(a), collective(b)
    pa, pb = _affine_parts(ca.expr + ca.host), _affine_parts(cb.expr + cb.host)  # host buffers too, as at()
    if pa is None or pb is None:
        return None
    denom = sp.simplify(pa[1] - pb[1])
    if denom == 0:
        return None
    return sp.simplify((pb[0] - pa[0]) / denom)


def crossover(a: str, b: str, *, p: int, env: Environment, n_min: float = 1.0,
              n_max: float = 2.0**40, **params: Any) -> Crossover:
    """Sizes in [n_min, n_max] where algorithms ``a`` and ``b`` cost the same on p ranks in env.

    Affine models are solved symbolically; others numerically (sign changes of T_a - T_b on a
    log grid of 4096 sizes, each refined with Brent's method to 1e-9 relative).
    """
    ca, cb = collective(a), collective(b)
    if ca.primitive != cb.primitive:
        raise CommscopeError(f"{ca.name} is {ca.primitive} and {cb.name} is {cb.primitive}: a crossover compares two "
                             "algorithms of one primitive")
    if not (0 <= n_min < n_max) or not np.isfinite(n_max):
        raise CommscopeError(f"need 0 <= n_min < n_max < inf, got n_min={n_min!r}, n_max={n_max!r}")
    qa, qb = _split_params(ca, cb, params)
    ea, eb = ca.at(p, env, **qa), cb.at(p, env, **qb)
    gen = crossover_expr(a, b)
    parts_a, parts_b = _affine_parts(ea), _affine_parts(eb)

    def diff(x: Any) -> Any:
        return np.asarray(ca.time(x, p, env, **qa)) - np.asarray(cb.time(x, p, env, **qb))

    if parts_a is not None and parts_b is not None:
        slope = float(parts_a[1] - parts_b[1])
        icpt = float(parts_a[0] - parts_b[0])
        sizes = []
        if slope != 0:
            x = -icpt / slope
            if n_min <= x <= n_max:
                sizes = [x]
        method = "symbolic"
    else:
        from scipy.optimize import brentq  # imported here: it costs 0.3 s, and only this path needs it

        grid = np.geomspace(max(n_min, 1e-3), n_max, 4096)
        if n_min == 0:
            grid = np.concatenate([[0.0], grid])
        d = diff(grid)
        sizes = []
        for i in np.nonzero(np.sign(d[:-1]) * np.sign(d[1:]) < 0)[0]:
            sizes.append(float(brentq(lambda x: float(diff(x)), grid[i], grid[i + 1], rtol=1e-9)))
        sizes += [float(x) for x in grid[d == 0]]
        sizes.sort()
        method = "numeric"
    probe = n_min if not sizes else max(n_min, sizes[0] / 2)
    dv = float(diff(probe))
    cheaper = None if dv == 0 else (a if dv < 0 else b)
    return Crossover(ca.name, cb.name, sizes, method, cheaper, gen)


@dataclass(frozen=True)
class Cheapest:
    """The cheapest algorithm at each point: ``algorithm`` (name, or array of names), its ``time``,
    and ``times`` of every candidate (NaN where outside its domain)."""

    algorithm: Any
    time: Any
    times: dict[str, Any]


def default_candidates(primitive: str) -> list[str]:
    """Algorithms of ``primitive`` that run on the p ranks alone (no lower bounds, no extra nodes)."""
    if primitive not in PRIMITIVES:
        raise UnknownNameError("primitive", primitive, PRIMITIVES)
    return [x for x in collectives(primitive, include_bounds=False) if not collective(x).extra_resources]


def cheapest(primitive: str, n: Any, p: Any, env: Environment, *,
             candidates: Iterable[str] | None = None, **params: Any) -> Cheapest:
    """The cheapest registered algorithm of ``primitive`` at each (n, p); arrays broadcast.

    Candidates default to every algorithm of the primitive that runs on the p ranks alone (lower
    bounds and algorithms needing extra nodes, like ``parameter_server``, are left out unless
    named); algorithms whose domain excludes a point (e.g. power-of-two only) are skipped there.
    """
    if primitive not in PRIMITIVES:
        raise UnknownNameError("primitive", primitive, PRIMITIVES)
    if candidates is None:
        names = default_candidates(primitive)
    else:
        names = list(candidates)
    if not names:
        raise CommscopeError(f"no candidate algorithms for {primitive}")
    entries = [collective(x) for x in names]
    for c in entries:
        if c.primitive != primitive or c.is_lower_bound:
            raise CommscopeError(f"{c.name} is not an algorithm of {primitive}")
    times = {}
    for c in entries:
        mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
        times[c.name] = np.asarray(c.time(n, p, env, out_of_domain="nan", **mine), dtype=np.float64)
    used = {k for c in entries for k in (q.name for q in c.params)}
    unused = sorted(set(params) - used)
    if unused:
        raise CommscopeError(f"no candidate of {primitive} has parameter(s) {', '.join(unused)}")
    stack = np.stack(np.broadcast_arrays(*times.values()))
    if np.isnan(stack).all(axis=0).any():
        raise CommscopeError(f"no candidate algorithm of {primitive} is defined at some of these p")
    idx = np.nanargmin(np.where(np.isnan(stack), np.inf, stack), axis=0)
    best = np.take_along_axis(stack, idx[None], axis=0)[0]
    label = np.asarray([e.name for e in entries], dtype=object)[idx]
    algo = label if isinstance(label, str) else (label.item() if np.ndim(label) == 0 else label)
    return Cheapest(algo, as_scalar_or_array(best), {k: as_scalar_or_array(v) for k, v in times.items()})
