"""Smoothness L: power iteration on Hessian-vector products, and secant estimates along the trajectory.

The bounds assume ``||grad f(x) - grad f(y)|| <= L ||x - y||`` everywhere; for a twice differentiable f
that is ``sup_x ||H(x)||_2``, the largest |eigenvalue| of the Hessian. Power iteration on ``v -> H v``
(products by double backward, Pearlmutter 1994; averaged over the ranks' samples, so H is the Hessian of
the global f) converges to that eigenvalue at the point where it runs, and every iterate gives a lower
bound on it (``||H v|| <= ||H||_2`` for a unit v). Secants ``||grad f(x') - grad f(x)|| / ||x' - x||``
(Barzilai-Borwein-style) cost one gradient each but only see the curvature along one direction, averaged
over the segment: lower bounds on L too, recorded beside it (:func:`secant`) along the full-gradient step
``x' = x - lr grad f(x)`` at every checkpoint and between consecutive checkpoints. Power iteration is the
estimate used, being the one that finds the steepest direction, as the maximum over the checkpoints; a
larger secant (the iteration stopped early, or the curvature is steeper between points) replaces it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def power_iteration(apply: Callable[[Any], Any], v0: Any, iterations: int, tol: float = 1e-3) -> dict[str, Any]:
    """The largest |eigenvalue| of the symmetric operator ``apply`` from start ``v0``: ``abs`` = ||A v|| at the
    last unit iterate v (a lower bound that converges to it), ``rayleigh`` = v.Av (its sign says whether that
    curvature is positive), ``iterations`` run, ``converged`` when ||A v|| changed by < ``tol`` (relative)."""
    import torch

    v = v0 / torch.linalg.vector_norm(v0)
    norm, rayleigh, converged, k = 0.0, 0.0, False, 0
    for k in range(1, iterations + 1):
        w = apply(v)
        previous, norm = norm, float(torch.linalg.vector_norm(w))
        rayleigh = float(torch.dot(v, w))
        if norm == 0.0:
            converged = True
            break
        v = w / norm
        if k > 1 and abs(norm - previous) <= tol * norm:
            converged = True
            break
    return {"abs": norm, "rayleigh": rayleigh, "iterations": k, "converged": converged}


def secant(grad_a: Any, grad_b: Any, x_a: Any, x_b: Any) -> float | None:
    """``||grad_a - grad_b|| / ||x_a - x_b||`` (None where the points coincide)."""
    import torch

    dx = float(torch.linalg.vector_norm(x_a - x_b))
    if dx == 0.0 or not math.isfinite(dx):
        return None
    return float(torch.linalg.vector_norm(grad_a - grad_b)) / dx


def parameters_flat(params: list[tuple[str, Any]]) -> Any:
    """The parameters as one float64 vector (detached copy)."""
    import torch

    return torch.cat([p.detach().reshape(-1).double() for _, p in params])


def set_parameters(params: list[tuple[str, Any]], flat: Any) -> None:
    """Overwrite the parameters with the values of a flat vector."""
    import torch

    start = 0
    with torch.no_grad():
        for _, p in params:
            p.copy_(flat[start:start + p.numel()].view_as(p))
            start += p.numel()
