"""Flat gradients of a model's mean loss: over a data set (in chunks), per sample, and Hessian-vector products.

Every function works on the model's trainable parameters in ``named_parameters`` order, flattened into one
vector of d values (float64 for sums, so that many chunks add up without loss). The loss of a set of
samples is ``loss_fn``'s mean over them (the zoo's losses are batch means); a set is taken in chunks of
``chunk`` samples, each weighted by its size. Models with BatchNorm are evaluated in train mode, as they
train, in chunks of the training batch size: their loss depends on the batch, so "the gradient of the
shard" is the mean of the chunk gradients, and per-sample gradients do not exist for them.

Attention runs on PyTorch's math kernel here (:func:`math_attention`): the CPU flash kernel has no double
backward (Hessian-vector products) nor a batching rule (per-sample gradients) in torch 2.13.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

LossFn = Callable[[Any, Any], Any]


def trainable(model: Any) -> list[tuple[str, Any]]:
    """(name, parameter) of every parameter that requires a gradient."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def has_batch_norm(model: Any) -> bool:
    import torch

    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def chunk_size(model: Any, batch_size: int) -> int:
    """Samples per forward pass: the batch size with BatchNorm (its statistics are per batch), else >= 256."""
    return batch_size if has_batch_norm(model) else max(batch_size, 256)


def math_attention() -> Any:
    """A context in which scaled_dot_product_attention uses the math kernel (see the module docstring)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch: nothing to choose
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


@contextlib.contextmanager
def buffers_kept(model: Any) -> Iterator[None]:
    """Restore the model's buffers (BatchNorm's running statistics) afterwards: measuring must not train."""
    saved = [b.detach().clone() for b in model.buffers()]
    try:
        yield
    finally:
        import torch

        with torch.no_grad():
            for b, s in zip(model.buffers(), saved, strict=True):
                b.copy_(s)


def flatten(tensors: list[Any], params: list[tuple[str, Any]]) -> Any:
    """One float64 vector of per-parameter tensors (None: zeros, for a parameter the loss does not use)."""
    import torch

    return torch.cat([(torch.zeros_like(p) if t is None else t).reshape(-1).double()
                      for t, (_, p) in zip(tensors, params, strict=True)])


def unflatten(v: Any, params: list[tuple[str, Any]]) -> list[Any]:
    """A flat vector split back into tensors shaped (and typed) like the parameters."""
    out, start = [], 0
    for _, p in params:
        out.append(v[start:start + p.numel()].view_as(p).to(p.dtype))
        start += p.numel()
    return out


def _spans(n: int, chunk: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, chunk):
        yield start, min(n, start + chunk)


def loss_and_gradient(model: Any, loss_fn: LossFn, x: Any, y: Any, chunk: int) -> tuple[float, Any]:
    """(mean loss, flat mean gradient) over the samples ``x, y``, in chunks weighted by their sizes."""
    import torch

    params = trainable(model)
    total, grad = 0.0, torch.zeros(sum(p.numel() for _, p in params), dtype=torch.float64)
    for a, b in _spans(len(x), chunk):
        loss = loss_fn(model(x[a:b]), y[a:b])
        g = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
        total += float(loss.detach()) * (b - a)
        grad += flatten(list(g), params) * (b - a)
    return total / len(x), grad / len(x)


def per_sample_gradients(model: Any, loss_fn: LossFn, x: Any, y: Any, chunk: int) -> Iterator[Any]:
    """Flat per-sample gradients, a (chunk, d) block at a time in the parameters' dtype (``torch.func``: vmap of
    grad of the loss of one sample). Not for models with BatchNorm (see the module docstring)."""
    import torch
    from torch.func import functional_call, grad, vmap

    params = trainable(model)
    names = [n for n, _ in params]
    fixed = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
    buffers = dict(model.named_buffers())

    def one(theta: dict[str, Any], xi: Any, yi: Any) -> Any:
        return loss_fn(functional_call(model, ({**theta, **fixed}, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per = vmap(grad(one), in_dims=(None, 0, 0))
    theta = {n: p.detach() for n, p in params}
    for a, b in _spans(len(x), chunk):
        g = per(theta, x[a:b], y[a:b])
        yield torch.cat([g[n].reshape(b - a, -1) for n in names], dim=1)


def hvp(model: Any, loss_fn: LossFn, x: Any, y: Any, v: Any, chunk: int) -> Any:
    """Hessian of the mean loss over ``x, y`` times the flat vector ``v`` (double backward, per chunk)."""
    import torch

    params = trainable(model)
    ps = [p for _, p in params]
    vs = unflatten(v, params)
    out = torch.zeros_like(v, dtype=torch.float64)
    for a, b in _spans(len(x), chunk):
        loss = loss_fn(model(x[a:b]), y[a:b])
        g = torch.autograd.grad(loss, ps, create_graph=True, allow_unused=True)
        dot = sum((gi * vi).sum() for gi, vi in zip(g, vs, strict=True) if gi is not None)
        if not isinstance(dot, torch.Tensor) or not dot.requires_grad:
            continue  # the gradient does not depend on the parameters here (a linear piece): H v = 0
        hv = torch.autograd.grad(dot, ps, allow_unused=True)
        out += flatten(list(hv), params) * (b - a)
    return out / len(x)
