"""Compute as a synchronous iteration sees it, for ``commscope validate``'s rank side: every rank's layer-wise
profile taken at once, scaled to the unhooked passes and averaged over ranks, and the slowest rank's forward and
backward with all ranks in step (what a synchronous iteration waits for on shared cores)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np


def _calibrated(prof: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer forward and backward times scaled to the median *unhooked* forward and backward.

    On cores shared by several ranks a layer's time is sometimes stretched by a preemption; the
    per-layer medians drop those stretches, so their sum falls short of a real iteration (by 30% with
    4 ranks on 2 cores). The profiler's unhooked forward and backward medians (metadata
    ``overhead``) are whole-pass times, stretches included: the layers keep their measured shares.
    """
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    o = prof.metadata.get("overhead", {})
    for col, key in ((fwd, "unhooked_forward_s"), (bwd, "unhooked_backward_s")):
        target = o.get(key)
        if target and col.sum() > 0:
            col *= float(target) / col.sum()
    return fwd, bwd


def mean_profile(profiles: Sequence[Any], ranks: int, threads: int) -> Any:
    """Per-layer mean over ranks of profiles of the same model taken at the same time, each
    calibrated to its unhooked passes (:func:`_calibrated`).

    The metadata keeps how they were taken and the spread: the relative standard deviation over
    ranks of the total compute time.
    """
    import costmodels as cm

    first = profiles[0]
    cal = [_calibrated(p) for p in profiles]
    fwd = np.mean([c[0] for c in cal], axis=0)
    bwd = np.mean([c[1] for c in cal], axis=0)
    totals = np.array([c[0].sum() + c[1].sum() for c in cal])
    layers = tuple(cm.Layer(x.name, x.params, x.grad_bytes, float(f), float(b), x.shape)
                   for x, f, b in zip(first.layers, fwd, bwd, strict=True))
    how = (f"profiled on all {ranks} ranks at once ({threads} thread(s) per rank), as they share the cores while "
           f"training; per-layer medians scaled to the unhooked forward and backward, then the mean over ranks")
    meta = {**dict(first.metadata), "concurrent_ranks": ranks, "threads": threads, "how": how,
            "rank_compute_s": totals.tolist(), "rank_spread": float(totals.std() / totals.mean())}
    return cm.ModelProfile(first.name, layers, first.device, first.dtype, first.batch_size, first.origin,
                           f"{first.source}; {how}", meta)


def synchronised_compute(ctx: Any, model_name: str, batch_size: int, iterations: int, warmup: int, seed: int = 0,
                         lr: float = 0.05, **model_options: Any) -> tuple[float, float, float, float]:
    """Median over iterations of the slowest rank's forward plus backward (split by :func:`split_total`),
    optimizer-step and averaging-pass seconds, all ranks in step.

    Every iteration starts on all ranks together (a barrier, outside the timed region), runs forward +
    loss, backward and the SGD update the techniques run (:func:`runners.training.exact_common.sgd_`) with
    no communication, and the per-iteration times are reduced as the max over ranks after the loop. This
    is the compute a synchronous iteration waits for: on shared cores the slowest of the ranks, not the
    average one. The update is the profile's optimizer step (issue 16: U, placed by each schedule). The averaging
    pass is the division of every gradient by the world size that the all-reduce techniques run before their
    update (``runners.training.exact_allreduce._average``): one memory pass over the gradient bytes, which
    measures the profile's ``pass_s_per_byte``.
    """
    from runners.training import zoo
    from runners.training.exact_common import sgd_

    torch = ctx.torch
    entry = zoo.model(model_name)
    model = entry.builder(seed=seed, **model_options).to(ctx.device)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 2000 + ctx.rank)
    x, y = entry.example_batch(batch_size, gen, **model_options)
    x, y = x.to(ctx.device), y.to(ctx.device)
    params = [q for q in model.parameters() if q.requires_grad]

    def now() -> float:  # a device-synchronised clock (CUDA kernels run asynchronously)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        return time.perf_counter()

    times = []
    for k in range(warmup + iterations):
        ctx.dist.barrier()
        t0 = now()
        loss = entry.loss_fn(model(x), y)
        t1 = now()
        loss.backward()
        t2 = now()
        with torch.no_grad():
            for q in params:
                if q.grad is not None:
                    q.grad.div_(ctx.world)
        t3 = now()
        sgd_(params, lr)
        t4 = now()
        model.zero_grad(set_to_none=True)
        if k >= warmup:
            times.append([t1 - t0, t2 - t1, t4 - t3, t3 - t2])
    t = torch.tensor([[f, b, f + b, u, a] for f, b, u, a in times], dtype=torch.float64)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
    forward_s, backward_s, total_s, update_s, pass_s = (float(v) for v in t.median(dim=0).values)
    return (*split_total(total_s, forward_s, backward_s), update_s, pass_s)


def split_total(total_s: float, forward_s: float, backward_s: float) -> tuple[float, float]:
    """``total_s`` split between forward and backward in the ratio ``forward_s : backward_s``.

    What a synchronous iteration waits for is the slowest rank's forward *plus backward*: the median over
    iterations of max over ranks of (f + b). The slowest rank's forward and the slowest rank's backward are often
    different ranks on shared cores, so the sum of the two per-phase medians over-counts: by 0-14 ms (5% on
    average) of 114-139 ms for resnet_small on 4 ranks sharing 2 cores, six probes of 10 iterations. The phases keep
    the shares of their own medians.
    """
    both = forward_s + backward_s
    if both <= 0:
        return 0.0, 0.0
    return total_s * forward_s / both, total_s * backward_s / both


def scaled_profile(prof: Any, forward_s: float, backward_s: float, how: str, optimizer_s: float | None = None,
                   pass_s: float | None = None, codecs: dict[str, Any] | None = None) -> Any:
    """``prof`` with its forward and backward columns scaled to sum to ``forward_s`` and ``backward_s``, and
    an optimizer step of ``optimizer_s`` seconds spread over the layers by parameters (none when None), and the
    measured cost of one memory pass over the gradients from ``pass_s`` seconds for all of them (metadata
    ``pass_s_per_byte``; derived from the step when None), and the compressors' measured encode and decode
    (metadata ``codecs``, :func:`runners.training.profiler.codecs.synchronised_codecs`; none when empty)."""
    import costmodels as cm

    kf = forward_s / prof.forward_s if prof.forward_s > 0 else 1.0
    kb = backward_s / prof.backward_s if prof.backward_s > 0 else 1.0
    layers = tuple(cm.Layer(x.name, x.params, x.grad_bytes, x.forward_s * kf, x.backward_s * kb, x.shape)
                   for x in prof.layers)
    meta = {"mean_rank_forward_s": prof.forward_s, "mean_rank_backward_s": prof.backward_s,  # unless rescaled again
            **dict(prof.metadata), "synchronised_forward_s": forward_s, "synchronised_backward_s": backward_s,
            "how": how}
    if optimizer_s is not None:
        meta["synchronised_optimizer_s"] = optimizer_s
        meta["optimizer"] = "sgd"  # the update timed is plain SGD (exact_common.sgd_)
    if pass_s is not None and prof.grad_bytes > 0:  # one averaging pass over every gradient, measured
        meta["pass_s_per_byte"] = pass_s / prof.grad_bytes
    if codecs:
        meta["codecs"] = dict(codecs)
    out = cm.ModelProfile(prof.name, layers, prof.device, prof.dtype, prof.batch_size, prof.origin,
                          f"{prof.source}; {how}", meta)
    return out.with_optimizer(optimizer_s) if optimizer_s is not None else out

