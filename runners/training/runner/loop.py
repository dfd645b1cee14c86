"""The training loop of one rank: join the process group torchrun describes, then warm-up and timed steps.

Every rank builds the model with the same seed, moves it to its device (CUDA with nccl, else CPU
with gloo) and builds the technique's trainer. Timing runs feed each rank a synthetic batch of
``--batch-size`` samples from the model's ``example_batch`` (seeded per rank); convergence runs
feed consecutive batches of the rank's shard of the generated data set (reshuffled every epoch).
``--warmup`` steps run untimed, then ``--iterations`` timed steps; each step's breakdown is the
trainer's :class:`~runners.training.base.StepResult`. After the loop one MAX all-reduce gives, per
iteration and per part, the maximum over ranks (nothing is communicated inside the timed region).

Rank 0 appends one ``iteration`` record: ``time_s`` is the median of the per-iteration maximum
totals, with p10/p90/min, the median of every part (``forward_s``, ``backward_s``,
``exposed_comm_s``, ``compression_s``, ``update_s``), ``exposed_comm_min_s`` (the median of the per-iteration
*minimum* over ranks: the rank that arrives last waits for no one, so this is communication on the critical
path, without the waiting of ranks that computed faster), ``throughput_samples_per_s`` (world size x
batch / time_s), every iteration's time (``times``), and ``wall_s``: the wall-clock time of the
whole timed loop (started on all ranks by a barrier, max over ranks), with ``mean_time_s`` = wall_s
/ iterations, the unbiased mean for techniques whose ranks run apart between synchronisations
(local SGD: the max over ranks of each iteration would overstate a period), and ``time_rank_mean_s``: the median
over iterations of the *mean* over ranks of each rank's step time, and ``counters``: what the technique did per
timed step, the mean over steps and ranks of its :class:`~runners.training.base.StepResult` ``extra`` (messages,
buckets; ByteScheduler's negotiated batches and the seconds its communication thread spent negotiating them), and
``minor_faults_per_step``: the training thread's minor page faults per timed step, the mean over ranks (Linux;
:mod:`runners.torchrun.allocator` says why they matter).
Where a step does not end at a synchronisation
(ByteScheduler's step returns while its partitions still travel) the ranks' step boundaries drift apart, and the
maximum over ranks of one iteration exceeds the period: the mean over iterations of that maximum is at least
wall_s / iterations, while each rank's steps add up to wall_s, so their mean over ranks does not drift.
With ``--convergence`` it also appends a ``convergence`` record at step 0 and every ``--eval-every`` steps
(warm-up steps count): ``loss`` is the training loss averaged over ranks (at step 0 the initial model's loss on
the first batch, later the mean over the steps since the previous record), ``time_s`` the wall-clock seconds since
training began, and for classifiers (one target per sample) ``test_loss`` and ``accuracy`` on the held-out
split. For a technique whose ranks' models differ between synchronisations (``Technique.replicas_differ``: local
SGD, D-PSGD) the held-out split is evaluated on the model averaged over the ranks, what their bounds describe;
the averaging (one all-reduce of the model) is left out of ``time_s``, since the technique itself never pays it.

A run **diverges** when its loss stops being finite. With ``--convergence`` every evaluation's all-reduced loss
tells all ranks at once: they stop there together, and rank 0 appends a last ``convergence`` record with
``diverged: true``, ``step`` (the first step whose training loss was not finite on some rank, or the evaluation's
step when only the test loss was), ``evaluated_at``, and ``loss`` / ``loss_step`` of the last finite evaluation.
Without it nothing is communicated inside the timed loop, so the ranks agree after it (one MIN all-reduce of each
rank's first non-finite step). The ``iteration`` record then says ``diverged``, ``diverged_step`` and
``iterations_timed`` (its statistics cover the timed steps run); a run that diverged during the warm-up has none.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners import results
from runners.torchrun.allocator import fault_warning, thread_minor_faults

from .options import PARTS, Options, TrainError

SOURCE = "torchrun"


@dataclass
class Context:
    torch: Any
    dist: Any
    rank: int
    world: int
    local_world: int
    backend: str
    device: Any
    devices: list[str]


def setup(opts: Options) -> Context:
    """Join the process group torchrun describes; one device per rank (CUDA with nccl)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise TrainError("run this under torchrun (torchrun --nproc_per_node=N -m runners.training.runner ...) "
                         "or use: commscope train --nproc N ...")
    torch.set_num_threads(opts.threads)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = opts.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available() or local_rank >= torch.cuda.device_count():
            raise TrainError(f"--backend nccl needs a GPU for local rank {local_rank}; use --backend gloo")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timedelta(seconds=opts.timeout), device_id=device)
        name = torch.cuda.get_device_name(device)
    elif backend == "gloo-cuda":  # several ranks may share a GPU (e.g. behind emulated links)
        from runners.torchrun.rank import gloo_cuda_device

        device = gloo_cuda_device(torch, local_rank, TrainError)
        dist.init_process_group("gloo", timeout=timedelta(seconds=opts.timeout))
        name, backend = torch.cuda.get_device_name(device), "gloo"
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(seconds=opts.timeout))
        name = results.cpu_name()
    world = dist.get_world_size()
    names: list[Any] = [None] * world
    dist.all_gather_object(names, name)
    return Context(torch=torch, dist=dist, rank=dist.get_rank(), world=world,
                   local_world=int(os.environ.get("LOCAL_WORLD_SIZE", str(world))), backend=backend,
                   device=device, devices=list(names))


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class _Batches:
    """Consecutive batches of one rank's shard, reshuffled (same seed scheme on every rank) each epoch."""

    def __init__(self, torch: Any, inputs: Any, targets: Any, batch: int, seed: int, rank: int, device: Any):
        if inputs.shape[0] < batch:
            raise TrainError(f"--batch-size {batch} is larger than a rank's shard ({inputs.shape[0]} samples)")
        self.torch, self.x, self.y, self.batch, self.device = torch, inputs, targets, batch, device
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
        self.order, self.pos = torch.randperm(len(inputs), generator=self.gen), 0

    def next(self) -> tuple[Any, Any]:
        if self.pos + self.batch > len(self.order):
            self.order, self.pos = self.torch.randperm(len(self.x), generator=self.gen), 0
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        return self.x[idx].to(self.device), self.y[idx].to(self.device)


def _evaluate(ctx: Context, model: Any, loss_fn: Any, test: tuple[Any, Any]) -> tuple[float, float]:
    """(test loss, accuracy) of ``model`` over every rank's test shard, summed over ranks."""
    torch = ctx.torch
    x, y = test
    was_training = model.training
    model.eval()
    loss_sum, correct = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(x), 1024):
            xb, yb = x[start:start + 1024].to(ctx.device), y[start:start + 1024].to(ctx.device)
            out = model(xb)
            logits = out.logits if hasattr(out, "logits") else out
            loss_sum += float(loss_fn(out, yb)) * len(xb)
            correct += float((logits.argmax(-1) == yb).sum())
    model.train(was_training)
    t = torch.tensor([loss_sum, correct, float(len(x))], dtype=torch.float64, device=ctx.device)
    ctx.dist.all_reduce(t)
    return float(t[0] / t[2]), float(t[1] / t[2])


def _averaged(ctx: Context, model: Any) -> Any:
    """A copy of ``model`` with every parameter and buffer averaged over the ranks (one all-reduce each): the
    average model x-bar that the bounds of local SGD and D-PSGD describe, whose replicas differ between
    synchronisations."""
    import copy

    twin = copy.deepcopy(model)
    with ctx.torch.no_grad():
        for t in [*twin.parameters(), *twin.buffers()]:
            if t.is_floating_point():
                ctx.dist.all_reduce(t)
                t.div_(ctx.world)
    return twin


def _first_over_ranks(ctx: Context, step: float) -> float:
    """The smallest ``step`` over the ranks (inf where no rank has one)."""
    t = ctx.torch.tensor([step], dtype=ctx.torch.float64, device=ctx.device)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MIN)
    return float(t[0])


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _mean_over_ranks(ctx: Context, value: float) -> float:
    t = ctx.torch.tensor([value], dtype=ctx.torch.float64, device=ctx.device)
    ctx.dist.all_reduce(t)
    return float(t[0]) / ctx.world


def _counters_over_ranks(ctx: Context, steps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """What the technique did per timed step (``StepResult.extra``: its messages, buckets, ByteScheduler's batches
    and negotiation seconds): the mean over the timed steps, then over ranks. Every rank runs the same technique,
    so every rank has the same keys (none: nothing is communicated)."""
    keys = sorted({k for step in steps for k in step})
    if not keys:
        return {}
    local = [sum(float(step.get(k, 0.0)) for step in steps) / len(steps) for k in keys]
    x = ctx.torch.tensor(local, dtype=ctx.torch.float64, device=ctx.device)
    ctx.dist.all_reduce(x, op=ctx.dist.ReduceOp.SUM)
    return {k: v / ctx.world for k, v in zip(keys, x.cpu().tolist(), strict=True)}


def train(ctx: Context, opts: Options, stdout: Any = None) -> list[dict[str, Any]]:
    """Run the warm-up and timed steps; rank 0 prints progress and appends the records (returned on rank 0)."""
    from runners.training import technique as get_technique
    from runners.training import zoo

    out = stdout or sys.stdout
    torch, lead = ctx.torch, ctx.rank == 0

    def say(text: str) -> None:
        if lead:
            print(text, file=out, flush=True)

    entry = zoo.model(opts.model)
    tech = get_technique(opts.algorithm)
    if ctx.backend not in tech.backends:
        raise TrainError(f"technique {tech.name} runs on {', '.join(tech.backends)}, not {ctx.backend}")
    model = entry.builder(seed=opts.seed).to(ctx.device)
    trainer = tech.build(model, opts.lr, None, **opts.options)
    loss_fn = entry.loss_fn
    run = results.run_info(ctx.backend, ctx.world, ctx.local_world, ctx.devices, local_world_size=ctx.local_world,
                           timing="StepResult.total per iteration (device-synchronised), max over ranks")
    merged = {**tech.options, **opts.options}
    test = None
    if opts.convergence:
        assert opts.dataset is not None
        train_set = zoo.shard(zoo.dataset(opts.dataset, opts.seed, "train"), ctx.rank, ctx.world)
        feed = _Batches(torch, train_set.inputs, train_set.targets, opts.batch_size, opts.seed, ctx.rank, ctx.device)
        test_set = zoo.shard(zoo.dataset(opts.dataset, opts.seed, "test"), ctx.rank, ctx.world)
        if test_set.targets.dim() == 1:  # a classifier: one label per sample
            test = (test_set.inputs, test_set.targets)
        next_batch = feed.next
    else:
        gen = torch.Generator().manual_seed(opts.seed * 1_000_003 + 1000 + ctx.rank)
        xs, ys = entry.example_batch(opts.batch_size, gen)
        fixed = (xs.to(ctx.device), ys.to(ctx.device))

        def next_batch() -> tuple[Any, Any]:
            return fixed

    say(f"# commscope train: {tech.name} on {entry.name}, {ctx.world} rank(s) x batch {opts.batch_size}, "
        f"backend {ctx.backend}, lr {opts.lr:g}, warmup {opts.warmup}, iterations {opts.iterations}"
        + (f", options {', '.join(f'{k}={v}' for k, v in opts.options.items())}" if opts.options else "")
        + (f", convergence on {opts.dataset} every {opts.eval_every} step(s)" if opts.convergence else ""))
    conv_cfg = {"algorithm": tech.name, "model": entry.name, "dataset": opts.dataset, "batch_size": opts.batch_size,
                "world_size": ctx.world, "lr": opts.lr, "options": merged, "eval_every": opts.eval_every,
                "seed": opts.seed, "threads": opts.threads}
    written: list[dict[str, Any]] = []
    started = time.perf_counter()
    excluded = 0.0  # seconds spent averaging replicas for an evaluation, left out of the run's clock
    window: list[float] = []
    first_bad = math.inf  # the first step whose loss was not finite on this rank
    last_good = (0, math.nan)  # (step, loss) of the last evaluation with a finite loss
    diverged: int | None = None  # the step the run diverged at, once every rank knows it

    def emit(kind: str, cfg: dict[str, Any], res: dict[str, Any]) -> None:
        rec = results.record(kind, cfg, res, run, SOURCE)
        if opts.out:
            results.append(opts.out, [rec])
        written.append(rec)

    def checkpoint(step: int, loss: float) -> None:
        nonlocal last_good, diverged
        nonlocal excluded
        res: dict[str, Any] = {"step": step, "loss": _mean_over_ranks(ctx, loss),
                               "time_s": time.perf_counter() - started - excluded}
        if test is not None:
            if tech.replicas_differ:  # the average model, its averaging off the clock (the technique never pays it)
                t0 = time.perf_counter()
                model = _averaged(ctx, trainer.model)
                excluded += time.perf_counter() - t0
                res["evaluated"] = "the model averaged over the ranks"
            else:
                model = trainer.model
            res["test_loss"], res["accuracy"] = _evaluate(ctx, model, loss_fn, test)
        # every rank sees the same all-reduced values, so every rank takes the same branch
        if math.isfinite(res["loss"]) and math.isfinite(res.get("test_loss", 0.0)):
            last_good = (step, res["loss"])
            if lead:
                emit("convergence", conv_cfg, res)
                acc = f", test loss {res['test_loss']:.4f}, accuracy {res['accuracy']:.3f}" if "accuracy" in res else ""
                say(f"# step {step}: loss {res['loss']:.4f}{acc} ({res['time_s']:.1f} s)")
            return
        if step == 0:
            raise TrainError(f"the initial model's loss is {res['loss']} on the first batch of {opts.dataset}: "
                             "check the model and the data set")
        bad = _first_over_ranks(ctx, first_bad)
        diverged = int(bad) if math.isfinite(bad) else step  # else: the update of this step made the model non-finite
        if lead:
            emit("convergence", conv_cfg, {
                "step": diverged, "diverged": True, "time_s": res["time_s"], "evaluated_at": step,
                "loss": last_good[1], "loss_step": last_good[0],
                "nonfinite": "training loss" if not math.isfinite(res["loss"]) else "test loss"})
            say(f"# step {step}: DIVERGED (the loss is not finite since step {diverged}); the run stops here")

    if opts.convergence:
        x0, y0 = next_batch()
        feed.pos = 0  # the first batch is still the first one trained on
        with torch.no_grad():
            checkpoint(0, float(loss_fn(trainer.model(x0), y0)))
    step = 0

    def one_step() -> Any:
        nonlocal step, first_bad
        x, y = next_batch()
        r = trainer.step(x, y, loss_fn)
        step += 1
        if not math.isfinite(float(r.loss)) and step < first_bad:
            first_bad = step
        if opts.convergence:
            window.append(float(r.loss))
            if step % opts.eval_every == 0:
                checkpoint(step, sum(window) / len(window))
                window.clear()
        return r

    for _ in range(opts.warmup):
        one_step()
        if diverged is not None:
            break
    local = []
    losses = []
    counted: list[dict[str, float]] = []  # each timed step's counters (messages, batches, ...; StepResult.extra)
    every = max(1, opts.iterations // 10)
    ctx.dist.barrier()  # the timed loop starts on all ranks together
    loop_started = time.perf_counter()
    faults = 0.0  # the training thread's minor page faults over the timed steps (allocator.py)
    for k in range(1, opts.iterations + 1 if diverged is None else 1):
        before = thread_minor_faults()
        r = one_step()
        after = thread_minor_faults()
        faults += float(after - before) if before is not None and after is not None else math.nan
        local.append([float(getattr(r, part)) for part in PARTS])
        counted.append(dict(getattr(r, "extra", None) or {}))
        losses.append(float(r.loss))
        if k % every == 0 or k == opts.iterations:
            say(f"[{k}/{opts.iterations}] {r.total * 1e3:.2f} ms (rank 0), loss {r.loss:.4f}")
        if diverged is not None:
            break
    trainer.sync()
    wall = torch.tensor([time.perf_counter() - loop_started], dtype=torch.float64, device=ctx.device)
    if opts.convergence and window and diverged is None:
        checkpoint(step, sum(window) / len(window))
    bad = _first_over_ranks(ctx, first_bad)  # after the timed loop: nothing is communicated inside it
    if diverged is None and math.isfinite(bad):
        diverged = int(bad)
        say(f"# DIVERGED: the loss is not finite since step {diverged}")
    cfg = {"algorithm": tech.name, "model": entry.name, "batch_size": opts.batch_size, "world_size": ctx.world,
           "options": merged, "iterations": opts.iterations, "warmup": opts.warmup, "threads": opts.threads,
           "lr": opts.lr, "seed": opts.seed, "data": opts.dataset if opts.convergence else "synthetic"}
    if not local:  # the run diverged during the warm-up: no timed iteration
        say(f"# {tech.name} {entry.name}: diverged at step {diverged} during the warm-up; no iteration timed")
        if opts.out and lead:
            say(f"# wrote {len(written)} record(s) to {opts.out}")
        return written
    ctx.dist.all_reduce(wall, op=ctx.dist.ReduceOp.MAX)
    t = torch.tensor(local, dtype=torch.float64, device=ctx.device)
    least = t[:, PARTS.index("exposed_comm")].clone()
    total = t[:, 0].clone()  # each rank's own step times, summed over ranks below
    ctx.dist.all_reduce(total, op=ctx.dist.ReduceOp.SUM)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
    ctx.dist.all_reduce(least, op=ctx.dist.ReduceOp.MIN)
    per_iter = t.cpu().tolist()
    counters = _counters_over_ranks(ctx, counted)
    times = [row[0] for row in per_iter]
    time_s = _quantile(times, 0.5)
    res = {"time_s": time_s, "time_p10_s": _quantile(times, 0.1), "time_p90_s": _quantile(times, 0.9),
           "time_min_s": min(times), "throughput_samples_per_s": ctx.world * opts.batch_size / time_s,
           "times": times, "wall_s": float(wall[0]), "mean_time_s": float(wall[0]) / len(local),
           "time_rank_mean_s": _quantile([x / ctx.world for x in total.cpu().tolist()], 0.5),
           "loss_first": _finite_or_none(losses[0]), "loss_last": _finite_or_none(losses[-1]),
           "diverged": diverged is not None}
    if diverged is not None:
        res.update(diverged_step=diverged, iterations_timed=len(local))
    if counters:
        res["counters"] = counters
    faults = _mean_over_ranks(ctx, faults / len(local))
    if math.isfinite(faults):
        res["minor_faults_per_step"] = faults
    for i, part in enumerate(PARTS[1:], start=1):
        res[f"{part}_s"] = _quantile([row[i] for row in per_iter], 0.5)
    # the rank that arrives last waits for no one: its exposed communication is the iteration's own
    res["exposed_comm_min_s"] = _quantile(least.cpu().tolist(), 0.5)
    if lead:
        emit("iteration", cfg, res)
    ms = {k: res[f"{k}_s"] * 1e3 for k in PARTS[1:]}
    say(f"# {tech.name} {entry.name}: {time_s * 1e3:.2f} ms/iteration (p10 {res['time_p10_s'] * 1e3:.2f}, "
        f"p90 {res['time_p90_s'] * 1e3:.2f}, max over {ctx.world} ranks), "
        f"{res['throughput_samples_per_s']:.1f} samples/s")
    say("# medians (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))
    if warned := fault_warning(res.get("minor_faults_per_step"), time_s):
        say(warned)
    if opts.out and lead:
        say(f"# wrote {len(written)} record(s) to {opts.out}")
    return written
