"""One checkpoint of a constants measurement: every quantity at the current parameters, on every rank.

At the model's current parameters x, each rank takes its evaluation samples (its shard, or the first
``samples`` of it) and measures: f_i and grad f_i over them, f and grad f as their means over the ranks,
sigma^2 per sample and per batch (:mod:`.noise`), zeta^2 (:func:`.noise.heterogeneity`), L by power
iteration on the global Hessian and the local secant (:mod:`.smoothness`), and every compressor's ratios
on ``draws`` mini-batch gradients (:mod:`.compressors`), the gradients a worker compresses. The model's
parameters and buffers are left as they were.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from . import compressors as comp
from .comm import Group
from .gradients import (
    LossFn,
    buffers_kept,
    chunk_size,
    has_batch_norm,
    hvp,
    loss_and_gradient,
    math_attention,
    trainable,
)
from .noise import batch_noise, heterogeneity, per_batch, per_sample_from_batch, sample_noise, sigma1
from .smoothness import parameters_flat, power_iteration, secant, set_parameters


@dataclass
class Setting:
    """What a checkpoint measures on: this rank's evaluation samples and the measurement's sizes."""

    loss_fn: LossFn
    x: Any
    y: Any
    shard_size: int  # samples in this rank's whole shard (the training batches are drawn from it)
    batch_size: int
    lr: float
    noise_samples: int = 1024
    hvp_samples: int = 256
    power_iterations: int = 20
    draws: int = 8
    compressors: list[str] = field(default_factory=list)
    seed: int = 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def measure(model: Any, s: Setting, group: Group, step: int) -> tuple[dict[str, Any], Any, Any]:
    """(this rank's measurements at ``step``, the global gradient grad f, the flat parameters)."""
    import torch

    started = time.perf_counter()
    params = trainable(model)
    tensors = [(n, p.numel(), tuple(p.shape)) for n, p in params]
    chunk = chunk_size(model, s.batch_size)
    mine = torch.Generator().manual_seed(s.seed * 1_000_003 + 7919 * step + group.rank + 1)
    shared = torch.Generator().manual_seed(s.seed * 1_000_003 + 7919 * step)  # the same on every rank
    m, b = len(s.x), s.batch_size
    notes: list[str] = []
    out: dict[str, Any] = {"step": step, "rank": group.rank, "eval_samples": m}
    with buffers_kept(model), math_attention():
        f_i, g_i = loss_and_gradient(model, s.loss_fn, s.x, s.y, chunk)
        g = group.mean(g_i)
        out.update(loss_shard=f_i, loss=float(group.mean(torch.tensor([f_i], dtype=torch.float64))[0]),
                   grad_norm=float(torch.linalg.vector_norm(g)))
        n_noise = min(s.noise_samples, m)
        if has_batch_norm(model):
            notes.append("BatchNorm: no per-sample gradients; sigma^2 measured per batch")
        elif n_noise > 0:
            try:
                s2, var = sample_noise(model, s.loss_fn, s.x[:n_noise], s.y[:n_noise], g_i, chunk)
                out.update(sigma2_sample=s2, noise_samples=n_noise,
                           sigma1_batch=sigma1(var * per_batch(1.0, b, s.shard_size)))
            except RuntimeError as exc:
                notes.append(f"per-sample gradients failed ({_first_line(exc)}); sigma^2 measured per batch")
        batch_grads = []
        for _ in range(s.draws):
            idx = torch.randperm(m, generator=mine)[:b]
            batch_grads.append(loss_and_gradient(model, s.loss_fn, s.x[idx], s.y[idx], b)[1])
        s2b, varb = batch_noise(batch_grads, g_i)
        out["sigma2_batch_measured"] = s2b
        out.setdefault("sigma1_batch", sigma1(varb))
        s2 = out.get("sigma2_sample", per_sample_from_batch(s2b, b, m))
        out["zeta"] = heterogeneity(g_i, group, per_batch(s2 or 0.0, m, s.shard_size))
        xs, ys = s.x[:s.hvp_samples], s.y[:s.hvp_samples]
        v0 = torch.randn(g.numel(), generator=shared, dtype=torch.float64)
        try:
            out["power"] = power_iteration(lambda v: group.mean(hvp(model, s.loss_fn, xs, ys, v, chunk)), v0,
                                           s.power_iterations)
        except RuntimeError as exc:
            notes.append(f"Hessian-vector products failed ({_first_line(exc)}); L from secants only")
        theta = parameters_flat(params)
        out["secant_local"] = None
        if out["grad_norm"] > 0:
            moved = theta - s.lr * g
            set_parameters(params, moved)
            try:
                g2 = group.mean(loss_and_gradient(model, s.loss_fn, s.x, s.y, chunk)[1])
            finally:
                set_parameters(params, theta)
            out["secant_local"] = secant(g2, g, moved, theta)
        out["compressors"] = {label: comp.measure(label, batch_grads, tensors, s.draws, mine)
                              for label in s.compressors}
    out["notes"] = notes
    out["seconds"] = time.perf_counter() - started
    return out, g, theta
