"""A constants measurement on one rank: short real training with checkpoints, then the record on rank 0.

Every rank builds the zoo model with the same seed and the technique's trainer (default ``fusion``,
PyTorch DDP: plain data-parallel SGD), takes its shard of the generated data set with
:func:`runners.training.zoo.shard` and trains on consecutive batches of it as the training runner feeds
them (:class:`runners.training.runner.loop._Batches`, same seeds), for ``steps`` steps. At each checkpoint
step (``checkpoints`` evenly spaced over 0..steps, before that step's update) :func:`.checkpoint.measure`
runs on all ranks; rank 0 gathers the ranks' measurements and builds the record (:mod:`.summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from runners import results

from . import summary
from .checkpoint import Setting, measure
from .comm import Group
from .gradients import trainable
from .options import Options
from .smoothness import secant

SOURCE = "torchrun"


def measure_run(opts: Options, say: Callable[[str], None] = lambda text: None,
                arm: Callable[[str], None] = lambda what: None) -> dict[str, Any]:
    """The record's result (the same on every rank). ``arm(what)`` is called
    before each checkpoint and training step (the rank's hang watchdog)."""
    import torch

    from runners.training import technique, zoo
    from runners.training.runner.loop import _Batches

    group = Group()
    entry = zoo.model(opts.model)
    model = entry.builder(seed=opts.seed)
    trainer = technique(opts.technique).build(model, opts.lr, None)
    data = zoo.dataset(opts.dataset, opts.seed, "train")
    shard = zoo.shard(data, group.rank, group.world)
    feed = _Batches(torch, shard.inputs, shard.targets, opts.batch_size, opts.seed, group.rank, torch.device("cpu"))
    n_eval = len(shard) if opts.samples == 0 else min(opts.samples, len(shard))
    setting = Setting(entry.loss_fn, shard.inputs[:n_eval], shard.targets[:n_eval], len(shard), opts.batch_size,
                      opts.lr, opts.noise_samples, opts.hvp_samples, opts.power_iterations, opts.draws,
                      opts.compressors, opts.seed)
    started = time.perf_counter()
    points: list[list[dict[str, Any]]] = []
    between: list[float | None] = []
    previous = None
    wanted = opts.checkpoint_steps
    for step in range(opts.steps + 1):
        if step in wanted:
            arm(f"measuring at step {step}")
            mine, grad, theta = measure(trainer.model, setting, group, step)
            ranks = group.gather(mine)
            points.append(ranks)
            if previous is not None:
                between.append(secant(grad, previous[0], theta, previous[1]))
            previous = (grad, theta)
            first = ranks[0]
            power = first.get("power")
            say(f"# step {step}: loss {first['loss']:.4f}, L {power['abs'] if power else float('nan'):.4g}, "
                f"sigma^2/sample {summary.mean_of([r.get('sigma2_sample') for r in ranks]) or float('nan'):.4g}, "
                f"zeta^2 {first['zeta']['zeta2']:.4g} ({first['seconds']:.1f} s)")
        if step < opts.steps:
            arm(f"training step {step + 1}")
            x, y = feed.next()
            trainer.step(x, y, entry.loss_fn)
    tensors = [(n, p.numel(), tuple(p.shape)) for n, p in trainable(trainer.model)]
    notes = sorted({n for ranks in points for r in ranks for n in r["notes"]})
    result = {
        "checkpoints": [ranks[0]["step"] for ranks in points], "loss": [ranks[0]["loss"] for ranks in points],
        "L": summary.smoothness(points, between), "sigma": summary.noise(points, opts.batch_size, len(shard)),
        "sigma1": _sigma1(points), "zeta": summary.heterogeneity(points, group.world),
        "Delta": summary.gap(points, data.info.get("optimal_loss")),
        "compressors": {label: summary.compressor(points, label, tensors) for label in opts.compressors},
        "parameters": sum(d for _, d, _ in tensors), "shard_size": len(shard), "eval_samples": n_eval,
        "seconds": time.perf_counter() - started,
        "checkpoint_seconds": [max(r["seconds"] for r in ranks) for ranks in points], "notes": notes}
    return result


def _sigma1(points: list[list[dict[str, Any]]]) -> dict[str, Any]:
    per = [summary.mean_of([r["sigma1_batch"] for r in ranks]) for ranks in points]
    return {"value": summary.mean_of(per), "per_checkpoint": per,
            "method": "sum over coordinates of the per-worker-batch gradient's standard deviation (signSGD's "
                      "sigma1 = ||sigma_vec||_1), mean over ranks", "used": "mean over checkpoints"}


def record(opts: Options, result: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The validated "constants" record of a run."""
    return results.record("constants", opts.config(int(run["world_size"])), result, run, SOURCE)
