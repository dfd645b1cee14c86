"""Gradient noise sigma^2 and heterogeneity zeta^2 on one rank's shard (the convergence bounds' definitions,
:mod:`convergence.symbols`: E||g_i - grad f_i||^2 <= sigma^2 for worker i's stochastic gradient g_i, and
zeta^2 = (1/n) sum_i ||grad f_i - grad f||^2 with f_i the loss on worker i's shard and f their mean).

* Per sample: ``sigma_1^2 = (1/S) sum_s ||grad l_s - grad f_i||^2`` over S samples of the shard, from
  per-sample gradients (``torch.func``), and its per-coordinate variances, whose square roots summed give
  signSGD's ``sigma1 = ||sigma_vec||_1`` (Bernstein et al. 2018).
* Per batch: the bounds' sigma is the noise of one worker's mini-batch gradient. A batch of B drawn without
  replacement from a shard of m samples (as the training runner draws them) has
  ``E||g_B - grad f_i||^2 = (sigma_1^2 / B) (m - B) / (m - 1)`` (the variance of a sample mean without
  replacement, e.g. Cochran, Sampling Techniques, Thm 2.2, summed over coordinates): :func:`per_batch`.
  :func:`batch_noise` also measures it directly, as the mean of ``||g_B - grad f_i||^2`` over drawn batches:
  the only way for BatchNorm models, whose loss has no per-sample gradient.
* zeta^2 over the ranks' shards: :func:`heterogeneity`. A shard gradient estimated on S < m samples carries
  noise of variance ``v_i = (sigma_1^2 / S) (m - S) / (m - 1)``, which inflates the mean of
  ||g_i - mean_j g_j||^2 by ``(1 - 1/n) mean_i v_i``; that bias is subtracted (0 with the whole shard).
"""

from __future__ import annotations

from typing import Any

from .comm import Group
from .gradients import LossFn, per_sample_gradients


def per_batch(sigma2_sample: float, batch: int, shard: int) -> float:
    """Noise of a batch of ``batch`` drawn without replacement from ``shard`` samples of per-sample variance
    ``sigma2_sample``: ``sigma2_sample / batch * (shard - batch) / (shard - 1)`` (0 for the whole shard)."""
    if shard <= 1:
        return 0.0
    return sigma2_sample / batch * max(0, shard - batch) / (shard - 1)


def per_sample_from_batch(sigma2_batch: float, batch: int, shard: int) -> float | None:
    """The per-sample variance a measured per-batch one implies (:func:`per_batch` inverted; None when a batch
    is the whole shard, which has no noise to invert)."""
    if shard <= batch:
        return None
    return sigma2_batch * batch * (shard - 1) / (shard - batch)


def sample_noise(model: Any, loss_fn: LossFn, x: Any, y: Any, shard_grad: Any, chunk: int) -> tuple[float, Any]:
    """(sigma_1^2, per-coordinate variances): mean over the samples ``x, y`` of ``||grad l_s - shard_grad||^2``,
    and of its coordinates' squares."""
    import torch

    per_coordinate = torch.zeros_like(shard_grad, dtype=torch.float64)
    for block in per_sample_gradients(model, loss_fn, x, y, chunk):
        sq = (block - shard_grad.to(block.dtype)).square_()  # in the gradients' dtype; the total in float64
        per_coordinate += sq.sum(dim=0)
    return float(per_coordinate.sum()) / len(x), per_coordinate / len(x)


def batch_noise(batch_grads: list[Any], shard_grad: Any) -> tuple[float, Any]:
    """(mean over the drawn batches of ``||g_B - grad f_i||^2``, its per-coordinate means)."""
    diffs = [(g - shard_grad) ** 2 for g in batch_grads]
    per_coordinate = sum(diffs) / len(diffs)
    return float(per_coordinate.sum()), per_coordinate


def sigma1(per_coordinate_variance: Any) -> float:
    """signSGD's ``sigma1 = sum_k sigma_k`` from per-coordinate variances (of the gradient it uses)."""
    return float(per_coordinate_variance.clamp(min=0).sqrt().sum())


def heterogeneity(shard_grad: Any, group: Group, estimate_variance: float = 0.0) -> dict[str, float]:
    """zeta^2 = (1/n) sum_i ||g_i - g||^2 over the ranks, with g the mean of the shard gradients g_i:
    ``raw``, the ``bias`` from estimated shard gradients (``estimate_variance`` = this rank's v_i, see the
    module docstring) and ``zeta2`` = max(0, raw - bias). Every rank gets the same numbers."""
    import torch

    mean = group.mean(shard_grad)
    local = torch.tensor([float(((shard_grad - mean) ** 2).sum()), float(estimate_variance)], dtype=torch.float64)
    raw, v = (float(t) for t in group.mean(local))
    bias = (1 - 1 / group.world) * v
    return {"raw": raw, "bias": bias, "zeta2": max(0.0, raw - bias)}
