"""The simulated algorithms: one step function each, registered in :data:`SIMULATIONS`.

``sgd`` (exact averaging), ``local_sgd`` (H local steps, then averaging), ``async_sgd`` (one
uniformly chosen worker's gradient per update, on a model ``tau`` updates old), ``ssp`` (each clock
averages all workers' gradients on a model ``s`` clocks old, or, with ``view='partial'``, each on its own
view that misses part of the last s clocks' single-worker updates), ``dpsgd`` (local step, then gossip
with a topology's mixing matrix), ``qsgd`` (QSGD's stochastic rounding, unbiased), the biased
compressors ``topk``, ``randomk``, ``powersgd`` (a rank-r truncation of the workers' mean, as PowerSGD's
all-reduced factors give) and ``ef_signsgd`` with error feedback (or without, ``error_feedback=False``, which has
no bound), ``signsgd`` (majority vote with a batch that grows
with T) and the strongly convex runs ``sgd_sc`` / ``local_sgd_sc`` (the same steps, checked against
the distance bounds). ``ef_topk``, ``ef_randomk`` and ``ef_powersgd`` name the error-feedback
variants explicitly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import costmodels as cm

from .problems import Problem
from .simulate import SIMULATIONS, Run, SimulatedAlgorithm
from .topology import mixing_matrix, spectral_gap


def qsgd_omega(d: int, levels: int) -> float:
    """QSGD's variance factor ``min(d / s^2, sqrt(d) / s)`` (Alistarh et al. 2017, Lemma 3.1)."""
    return float(min(d / levels**2, np.sqrt(d) / levels))


def qsgd_quantize(v: np.ndarray, levels: int, rng: np.random.Generator) -> np.ndarray:
    """QSGD's unbiased stochastic rounding of each vector (last axis) to ``levels`` levels of its norm."""
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    safe = np.where(norm > 0, norm, 1.0)
    r = np.abs(v) / safe * levels
    low = np.floor(r)
    q = (low + (rng.random(v.shape) < r - low)) / levels
    return np.sign(v) * q * norm


def top_k(v: np.ndarray, k: int) -> np.ndarray:
    """Keep the k largest magnitudes of each vector (last axis): ||v - C(v)||^2 <= (1 - k/d) ||v||^2."""
    if k >= v.shape[-1]:
        return v.copy()
    idx = np.argpartition(np.abs(v), v.shape[-1] - k, axis=-1)[..., -k:]
    out = np.zeros_like(v)
    np.put_along_axis(out, idx, np.take_along_axis(v, idx, axis=-1), axis=-1)
    return out


def random_k(v: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Keep k uniformly chosen coordinates of each vector, unscaled: E||v - C(v)||^2 = (1 - k/d) ||v||^2."""
    keys = rng.random(v.shape)
    idx = np.argpartition(keys, k - 1, axis=-1)[..., :k] if k < v.shape[-1] else None
    if idx is None:
        return v.copy()
    out = np.zeros_like(v)
    np.put_along_axis(out, idx, np.take_along_axis(v, idx, axis=-1), axis=-1)
    return out


def scaled_sign(v: np.ndarray) -> np.ndarray:
    """``(||v||_1 / d) sign(v)``: ||v - C(v)||^2 = (1 - ||v||_1^2/(d ||v||^2)) ||v||^2 (Karimireddy et al. 2019)."""
    return np.abs(v).mean(axis=-1, keepdims=True) * np.sign(v)


def matrix_shape(d: int) -> tuple[int, int]:
    """The most square m x q = d (as PowerSGD views a flat gradient here)."""
    m = math.isqrt(d)
    while m > 1 and d % m:
        m -= 1
    return m, d // m


def rank_r(v: np.ndarray, rank: int) -> np.ndarray:
    """The best rank-r approximation of each vector viewed as a matrix (truncated SVD): the limit of
    PowerSGD's power iteration; ||M - M_r||^2 <= (1 - r/min(m, q)) ||M||^2 (Eckart-Young)."""
    m, q = matrix_shape(v.shape[-1])
    r = min(rank, m, q)
    if r == min(m, q):
        return v.copy()
    mats = v.reshape(*v.shape[:-1], m, q)  # m <= q: project the columns on the top-r eigenvectors of M M^T
    _, vecs = np.linalg.eigh(mats @ np.swapaxes(mats, -1, -2))
    top = vecs[..., -r:]
    return (top @ (np.swapaxes(top, -1, -2) @ mats)).reshape(v.shape)


# ------------------------------------------------------------------ steps
def _sgd(run: Run) -> None:
    run.x = run.x - run.gamma * run.problem.grad(run.x, run.rng).mean(axis=2, keepdims=True)


def _local_sgd(run: Run) -> None:
    run.x = run.x - run.gamma * run.problem.grad(run.x, run.rng)
    if (run.t + 1) % int(run.params["H"]) == 0:
        run.x = np.broadcast_to(run.x.mean(axis=2, keepdims=True), run.x.shape).copy()


def _stale(run: Run, delay: int) -> np.ndarray:
    history = run.state.setdefault("history", [run.x.copy() for _ in range(delay + 1)])
    return history[0]


def _remember(run: Run) -> None:
    history = run.state["history"]
    run.state["history"] = [*history[1:], run.x.copy()]


def _async_sgd(run: Run) -> None:
    grads = run.problem.grad(_stale(run, int(run.params["tau"])), run.rng)
    k, r, nw = run.x.shape[:3]
    who = run.rng.integers(0, nw, size=(k, r))
    run.x = run.x - run.gamma * np.take_along_axis(grads, who[:, :, None, None], axis=2)
    _remember(run)


def _ssp(run: Run) -> None:
    s = int(run.params["s"])
    if run.params["view"] == "clock" or s == 0:
        grads = run.problem.grad(_stale(run, s), run.rng)
        run.x = run.x - run.gamma * grads.mean(axis=2, keepdims=True)
        _remember(run)
        return
    # partial views: worker i reads x_c plus the updates of the last s clocks it has not seen (each other
    # worker's with probability 1 - visible, independent of the noise), i.e. y_i = x_c + sum of missed updates
    sent = run.state.setdefault("sent", [np.zeros_like(run.x) for _ in range(s)])  # (k, r, n, d) per clock
    nw = run.problem.n
    k, r = run.x.shape[:2]
    missed = (run.rng.random((k, r, nw, s, nw)) >= float(run.params["visible"])) & ~np.eye(nw, dtype=bool)[:, None]
    # (reader, clock x writer) @ (clock x writer, d): one batched product over all missed updates
    back = missed.reshape(k, r, nw, s * nw).astype(run.x.dtype) @ np.stack(sent, axis=2).reshape(k, r, s * nw, -1)
    views = run.x + back
    upd = run.gamma * run.problem.grad(views, run.rng) / nw  # each worker's share of this clock's update
    run.x = run.x - upd.sum(axis=2, keepdims=True)
    run.state["sent"] = [*sent[1:], upd]


def _dpsgd(run: Run) -> None:
    w = run.state.get("w")
    if w is None:
        w = run.state["w"] = mixing_matrix(run.params["topology"], run.problem.n)
    run.x = np.einsum("ij,krjd->krid", w, run.x - run.gamma * run.problem.grad(run.x, run.rng))


def _qsgd(run: Run) -> None:
    grads = qsgd_quantize(run.problem.grad(run.x, run.rng), int(run.params["levels"]), run.rng)
    run.x = run.x - run.gamma * grads.mean(axis=2, keepdims=True)


def _compressed(compress: Callable[[np.ndarray, Run], np.ndarray]) -> Callable[[Run], None]:
    """A step that compresses each worker's (residual-corrected) step and averages the results."""

    def step(run: Run) -> None:
        update = run.gamma * run.problem.grad(run.x, run.rng)
        if run.params["error_feedback"]:
            residual = run.state.get("e")
            p = update if residual is None else residual + update
            sent = compress(p, run)
            run.state["e"] = p - sent
        else:
            sent = compress(update, run)
        run.x = run.x - sent.mean(axis=2, keepdims=True)

    return step


def _mean_rank_r(v: np.ndarray, run: Run) -> np.ndarray:
    """PowerSGD's message as every worker decodes it: the rank-r truncation of the workers' mean (axis 2)."""
    return np.broadcast_to(rank_r(v.mean(axis=2, keepdims=True), int(run.params["rank"])), v.shape)


def _k(run: Run) -> int:
    return max(1, math.ceil(run.problem.d * float(run.params["density"])))


def _signsgd(run: Run) -> None:
    batch = run.horizons[:, None, None, None].astype(float)  # mini-batch K = T per worker (Bernstein et al.)
    grads = run.problem.grad_batch(run.x, run.rng, batch)  # type: ignore[misc]
    vote = np.sign(np.sign(grads).sum(axis=2, keepdims=True))
    run.x = run.x - run.gamma * vote


# -------------------------------------------------------------- constants
def _delta(compressor: str, key: str | None) -> Callable[[Problem, Mapping[str, Any]], dict[str, float]]:
    def constants(prob: Problem, params: Mapping[str, Any]) -> dict[str, float]:
        value = None if key is None else float(params[key])
        return {"delta": float(cm.compressor(compressor).delta(prob.d, value))}

    return constants


def _without_error_feedback(params: Mapping[str, Any]) -> bool:
    return not params["error_feedback"]


def _density_ok(prob: Problem, params: Mapping[str, Any]) -> str | None:
    q = params.get("density")
    return None if q is None or 0 < float(q) <= 1 else f"density must be in (0, 1], got {q!r}"


def _signsgd_ok(prob: Problem, params: Mapping[str, Any]) -> str | None:
    if prob.grad_batch is None or "L1" not in prob.details:
        return f"problem {prob.name} lacks the per-coordinate constants and batch gradients signSGD's bound needs"
    if prob.zeta > 0:
        return (f"the majority-vote bound assumes every worker samples the same objective; the problem has "
                f"zeta = {prob.zeta:.3g} (use zeta=0)")
    return None


def _ssp_ok(prob: Problem, params: Mapping[str, Any]) -> str | None:
    if params["view"] not in ("clock", "partial"):
        return f"view must be 'clock' or 'partial', got {params['view']!r}"
    return None if 0 <= float(params["visible"]) <= 1 else f"visible must be in [0, 1], got {params['visible']!r}"


def _fixed(name: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda params: name


for _entry in (
    SimulatedAlgorithm("sgd", "synchronous mini-batch SGD, exact averaging", _sgd, _fixed("sgd")),
    SimulatedAlgorithm("local_sgd", "H local steps, then exact averaging", _local_sgd, _fixed("local_sgd"),
                       {"H": 8}, lambda prob, p: {"H": float(p["H"])}),
    SimulatedAlgorithm("async_sgd", "one uniformly chosen worker's gradient per update, tau updates stale (the "
                       "bound takes the problem's zeta: heterogeneity is noise of the worker drawn)",
                       _async_sgd, _fixed("async_sgd"), {"tau": 4}, lambda prob, p: {"tau": float(p["tau"])}),
    SimulatedAlgorithm("ssp", "every clock averages all gradients, each computed on a view s clocks stale: "
                       "view='clock' reads the model of s clocks ago, view='partial' also each other worker's "
                       "later updates with probability `visible` and its own always", _ssp, _fixed("ssp"),
                       {"s": 2, "view": "clock", "visible": 0.5}, lambda prob, p: {"s": float(p["s"])}, _ssp_ok),
    SimulatedAlgorithm("dpsgd", "local step, then one gossip step with the topology's mixing matrix", _dpsgd,
                       _fixed("dpsgd"), {"topology": "ring"},
                       lambda prob, p: {"gap": spectral_gap(p["topology"], prob.n)}),
    SimulatedAlgorithm("qsgd", "QSGD stochastic rounding to `levels` levels, averaged", _qsgd, _fixed("qsgd"),
                       {"levels": 2}, lambda prob, p: {"omega": qsgd_omega(prob.d, int(p["levels"]))}),
    SimulatedAlgorithm("topk", "Top-k of each worker's step (with error feedback unless error_feedback=False)",
                       _compressed(lambda v, run: top_k(v, _k(run))), _fixed("topk"),
                       {"density": 0.2, "error_feedback": True}, _delta("topk", "density"), _density_ok,
                       _without_error_feedback),
    SimulatedAlgorithm("randomk", "Random-k of each worker's step (error feedback unless error_feedback=False)",
                       _compressed(lambda v, run: random_k(v, _k(run), run.rng)), _fixed("randomk"),
                       {"density": 0.2, "error_feedback": True}, _delta("randomk", "density"), _density_ok,
                       _without_error_feedback),
    SimulatedAlgorithm("powersgd", "exact rank-r truncation of the mean of the workers' steps viewed as the most "
                       "square matrix (PowerSGD's limit: its all-reduced factors approximate the mean, and each "
                       "worker keeps its step minus that), error feedback unless error_feedback=False",
                       _compressed(_mean_rank_r), _fixed("powersgd"),
                       {"rank": 1, "error_feedback": True}, _delta("powersgd", "rank"),
                       unbounded=_without_error_feedback),
    SimulatedAlgorithm("ef_signsgd", "scaled sign of each worker's step, error feedback unless "
                       "error_feedback=False", _compressed(lambda v, run: scaled_sign(v)), _fixed("ef_signsgd"),
                       {"error_feedback": True}, _delta("ef_signsgd", None),
                       unbounded=_without_error_feedback),
    SimulatedAlgorithm("signsgd", "signSGD with majority vote, mini-batch T per worker", _signsgd,
                       _fixed("signsgd"), check=_signsgd_ok),
    SimulatedAlgorithm("sgd_sc", "mini-batch SGD checked against the strongly convex distance bound", _sgd,
                       _fixed("sgd_sc")),
    SimulatedAlgorithm("local_sgd_sc", "local SGD checked against the strongly convex distance bound",
                       _local_sgd, _fixed("local_sgd_sc"), {"H": 8}, lambda prob, p: {"H": float(p["H"])}),
):
    SIMULATIONS.register(_entry)



def _with_error_feedback(base: SimulatedAlgorithm) -> SimulatedAlgorithm:
    """``ef_<name>``: the compressor's run with error feedback always on."""

    def step(run: Run) -> None:
        run.params["error_feedback"] = True
        base.step(run)

    return SimulatedAlgorithm(f"ef_{base.name}", base.description.split(" (")[0].split(",")[0]
                              + " with error feedback", step, _fixed(base.name),
                              {k: v for k, v in base.params.items() if k != "error_feedback"},
                              base.constants, base.check)


for _name in ("topk", "randomk", "powersgd"):
    SIMULATIONS.register(_with_error_feedback(SIMULATIONS.get(_name)))
