"""Data-parallel training runs with one registered technique, timed per iteration.

    torchrun --nproc_per_node=N -m runners.train --algorithm dear --model resnet_small --iterations 100
             [--batch-size 32] [--lr 0.05] [--option key=value ...] [--warmup 5] [--threads 1] [--seed 0]
             [--convergence [--dataset NAME] [--eval-every K]] [--backend auto|gloo|nccl] [--out results.jsonl]
    commscope train --nproc N [same options]                 # launches torchrun for you

Every rank builds the model with the same seed, moves it to its device (CUDA with nccl, else CPU
with gloo) and builds the technique's trainer. Timing runs feed each rank a synthetic batch of
``--batch-size`` samples from the model's ``example_batch`` (seeded per rank); convergence runs
feed consecutive batches of the rank's shard of the generated data set (reshuffled every epoch).
``--warmup`` steps run untimed, then ``--iterations`` timed steps; each step's breakdown is the
trainer's :class:`~runners.training.base.StepResult`. After the loop one MAX all-reduce gives, per
iteration and per part, the maximum over ranks (nothing is communicated inside the timed region).

Rank 0 appends one ``iteration`` record: ``time_s`` is the median of the per-iteration maximum
totals, with p10/p90/min, the median of every part (``forward_s``, ``backward_s``,
``exposed_comm_s``, ``compression_s``, ``update_s``), ``throughput_samples_per_s`` (world size x
batch / time_s), every iteration's time (``times``), and ``wall_s``: the wall-clock time of the
whole timed loop (started on all ranks by a barrier, max over ranks), with ``mean_time_s`` = wall_s
/ iterations, the unbiased mean for techniques whose ranks run apart between synchronisations
(local SGD: the max over ranks of each iteration would overstate a period). With ``--convergence`` it also appends a
``convergence`` record at step 0 and every ``--eval-every`` steps (warm-up steps count): ``loss`` is
the training loss averaged over ranks (at step 0 the initial model's loss on the first batch, later
the mean over the steps since the previous record), ``time_s`` the wall-clock seconds since training
began, and for classifiers (one target per sample) ``test_loss`` and ``accuracy`` on the held-out
split.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from runners import results
from runners.bench import rank_main

SOURCE = "torchrun"
PARTS = ("total", "forward", "backward", "exposed_comm", "compression", "update")
BACKENDS = ("auto", "gloo", "nccl", "gloo-cuda")


class TrainError(CommscopeError):
    """Bad options of a training run, or a run that cannot go on (the message says why)."""


def _coerce_option(technique: str, key: str, default: Any, text: str) -> Any:
    """``text`` (from ``--option key=text``) as the type of the technique's default for ``key``."""
    low = text.strip().lower()
    try:
        if isinstance(default, bool):
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            return value
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else f"a{'n' if isinstance(default, int) else ''} " \
            f"{type(default).__name__}"
        raise TrainError(f"--option {key} of {technique} must be {kind}, got {text!r}") from None
    if default is None and low in ("none", "null", ""):
        return None
    return text


@dataclass
class Options:
    algorithm: str
    model: str
    iterations: int
    batch_size: int = 32
    lr: float = 0.05
    options: dict[str, Any] = field(default_factory=dict)  # the technique's options given, typed
    given: list[str] = field(default_factory=list)  # as given: key=value
    warmup: int = 5
    convergence: bool = False
    dataset: str | None = None
    eval_every: int = 10
    threads: int = 1
    seed: int = 0
    backend: str = "auto"
    out: Path | None = None
    timeout: float = 600.0

    def argv(self) -> list[str]:
        """The command line of ``python -m runners.train`` for these options."""
        args = ["--algorithm", self.algorithm, "--model", self.model, "--iterations", str(self.iterations),
                "--batch-size", str(self.batch_size), "--lr", repr(self.lr), "--warmup", str(self.warmup),
                "--threads", str(self.threads), "--seed", str(self.seed), "--backend", self.backend,
                "--timeout", repr(self.timeout)]
        for item in self.given:
            args += ["--option", item]
        if self.convergence:
            args += ["--convergence", "--eval-every", str(self.eval_every)]
            if self.dataset:
                args += ["--dataset", self.dataset]
        if self.out is not None:
            args += ["--out", str(self.out)]
        return args


def make_options(algorithm: str, model: str, iterations: int, batch_size: int = 32, lr: float = 0.05,
                 option: Sequence[str] = (), warmup: int = 5, convergence: bool = False, dataset: str | None = None,
                 eval_every: int = 10, threads: int = 1, seed: int = 0, backend: str = "auto",
                 out: str | os.PathLike[str] | None = None, timeout: float = 600.0) -> Options:
    """Checked options (raises :class:`CommscopeError` with a one-line message)."""
    from runners import models
    from runners.training import technique as get_technique

    tech = get_technique(algorithm)
    entry = models.model(model)
    if not entry.available():
        raise TrainError(f"model {entry.name} needs {', '.join(entry.requires)}, which is not installed")
    for name, value, low in (("--iterations", iterations, 1), ("--batch-size", batch_size, 1),
                             ("--warmup", warmup, 0), ("--eval-every", eval_every, 1), ("--threads", threads, 1),
                             ("--seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TrainError(f"{name} must be an integer >= {low}, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise TrainError(f"--lr must be a number > 0, got {lr!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise TrainError(f"--timeout must be a number > 0, got {timeout!r}")
    if backend not in BACKENDS:
        raise TrainError(f"unknown --backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    typed: dict[str, Any] = {}
    for item in option:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TrainError(f"--option must look like KEY=VALUE, got {item!r}")
        if key not in tech.options:
            takes = ", ".join(f"{k}={v}" for k, v in tech.options.items()) or "no options"
            raise TrainError(f"technique {tech.name} has no option {key!r}; it takes: {takes}")
        typed[key] = _coerce_option(tech.name, key, tech.options[key], value)
    data = None
    if convergence:
        data = dataset or entry.dataset
        if data is None:
            raise TrainError(f"model {entry.name} has no paired data set; give --dataset "
                             f"({', '.join(models.datasets())})")
        data = models.DATASETS.get(data).name
    elif dataset is not None:
        raise TrainError("--dataset is for convergence runs; add --convergence")
    target = Path(out) if out is not None else None
    if target is not None and not target.parent.is_dir():
        raise TrainError(f"cannot write results to {target}: directory {target.parent} does not exist")
    return Options(algorithm=tech.name, model=entry.name, iterations=iterations, batch_size=batch_size,
                   lr=float(lr), options=typed, given=[f"{k.strip()}={v}" for k, _, v in
                                                       (s.partition("=") for s in option)],
                   warmup=warmup, convergence=convergence, dataset=data, eval_every=eval_every, threads=threads,
                   seed=seed, backend=backend, out=target, timeout=float(timeout))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage block
        raise TrainError(message)


def parse_args(argv: Sequence[str]) -> Options:
    p = _Parser(prog="python -m runners.train", add_help=True)
    p.add_argument("--algorithm", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--option", action="append", default=[])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--convergence", action="store_true")
    p.add_argument("--dataset", default=None)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default=None)
    a = p.parse_args(list(argv))
    return make_options(a.algorithm, a.model, a.iterations, a.batch_size, a.lr, a.option, a.warmup, a.convergence,
                        a.dataset, a.eval_every, a.threads, a.seed, a.backend, a.out, a.timeout)


# --------------------------------------------------------------------------------------- ranks
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
        raise TrainError("run this under torchrun (torchrun --nproc_per_node=N -m runners.train ...) "
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
        from runners.bench import gloo_cuda_device

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


def _mean_over_ranks(ctx: Context, value: float) -> float:
    t = ctx.torch.tensor([value], dtype=ctx.torch.float64, device=ctx.device)
    ctx.dist.all_reduce(t)
    return float(t[0]) / ctx.world


def train(ctx: Context, opts: Options, stdout: Any = None) -> list[dict[str, Any]]:
    """Run the warm-up and timed steps; rank 0 prints progress and appends the records (returned on rank 0)."""
    from runners import models
    from runners.training import technique as get_technique

    out = stdout or sys.stdout
    torch, lead = ctx.torch, ctx.rank == 0

    def say(text: str) -> None:
        if lead:
            print(text, file=out, flush=True)

    entry = models.model(opts.model)
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
        train_set = models.shard(models.dataset(opts.dataset, opts.seed, "train"), ctx.rank, ctx.world)
        feed = _Batches(torch, train_set.inputs, train_set.targets, opts.batch_size, opts.seed, ctx.rank, ctx.device)
        test_set = models.shard(models.dataset(opts.dataset, opts.seed, "test"), ctx.rank, ctx.world)
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
    window: list[float] = []

    def checkpoint(step: int, loss: float) -> None:
        res: dict[str, Any] = {"step": step, "loss": _mean_over_ranks(ctx, loss),
                               "time_s": time.perf_counter() - started}
        if test is not None:
            res["test_loss"], res["accuracy"] = _evaluate(ctx, trainer.model, loss_fn, test)
        if lead:
            rec = results.record("convergence", conv_cfg, res, run, SOURCE)
            if opts.out:
                results.append(opts.out, [rec])
            written.append(rec)
            acc = f", test loss {res['test_loss']:.4f}, accuracy {res['accuracy']:.3f}" if "accuracy" in res else ""
            say(f"# step {step}: loss {res['loss']:.4f}{acc} ({res['time_s']:.1f} s)")

    if opts.convergence:
        x0, y0 = next_batch()
        feed.pos = 0  # the first batch is still the first one trained on
        with torch.no_grad():
            checkpoint(0, float(loss_fn(trainer.model(x0), y0)))
    step = 0

    def one_step() -> Any:
        nonlocal step
        x, y = next_batch()
        r = trainer.step(x, y, loss_fn)
        step += 1
        if opts.convergence:
            window.append(float(r.loss))
            if step % opts.eval_every == 0:
                checkpoint(step, sum(window) / len(window))
                window.clear()
        return r

    for _ in range(opts.warmup):
        one_step()
    local = []
    losses = []
    every = max(1, opts.iterations // 10)
    ctx.dist.barrier()  # the timed loop starts on all ranks together
    loop_started = time.perf_counter()
    for k in range(1, opts.iterations + 1):
        r = one_step()
        local.append([float(getattr(r, part)) for part in PARTS])
        losses.append(float(r.loss))
        if k % every == 0 or k == opts.iterations:
            say(f"[{k}/{opts.iterations}] {r.total * 1e3:.2f} ms (rank 0), loss {r.loss:.4f}")
    trainer.sync()
    wall = torch.tensor([time.perf_counter() - loop_started], dtype=torch.float64, device=ctx.device)
    if opts.convergence and window:
        checkpoint(step, sum(window) / len(window))
    ctx.dist.all_reduce(wall, op=ctx.dist.ReduceOp.MAX)
    t = torch.tensor(local, dtype=torch.float64, device=ctx.device)
    ctx.dist.all_reduce(t, op=ctx.dist.ReduceOp.MAX)
    per_iter = t.cpu().tolist()
    times = [row[0] for row in per_iter]
    time_s = _quantile(times, 0.5)
    res = {"time_s": time_s, "time_p10_s": _quantile(times, 0.1), "time_p90_s": _quantile(times, 0.9),
           "time_min_s": min(times), "throughput_samples_per_s": ctx.world * opts.batch_size / time_s,
           "times": times, "wall_s": float(wall[0]), "mean_time_s": float(wall[0]) / opts.iterations,
           "loss_first": losses[0], "loss_last": losses[-1]}
    for i, part in enumerate(PARTS[1:], start=1):
        res[f"{part}_s"] = _quantile([row[i] for row in per_iter], 0.5)
    cfg = {"algorithm": tech.name, "model": entry.name, "batch_size": opts.batch_size, "world_size": ctx.world,
           "options": merged, "iterations": opts.iterations, "warmup": opts.warmup, "threads": opts.threads,
           "lr": opts.lr, "seed": opts.seed, "data": opts.dataset if opts.convergence else "synthetic"}
    if lead:
        rec = results.record("iteration", cfg, res, run, SOURCE)
        if opts.out:
            results.append(opts.out, [rec])
        written.append(rec)
    ms = {k: res[f"{k}_s"] * 1e3 for k in PARTS[1:]}
    say(f"# {tech.name} {entry.name}: {time_s * 1e3:.2f} ms/iteration (p10 {res['time_p10_s'] * 1e3:.2f}, "
        f"p90 {res['time_p90_s'] * 1e3:.2f}, max over {ctx.world} ranks), "
        f"{res['throughput_samples_per_s']:.1f} samples/s")
    say("# medians (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))
    if opts.out and lead:
        say(f"# wrote {len(written)} record(s) to {opts.out}")
    return written


def _train_and_finish(ctx: Any, opts: Any) -> int:
    train(ctx, opts)
    ctx.dist.barrier()
    ctx.dist.destroy_process_group()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.train [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, setup, _train_and_finish, "training")


if __name__ == "__main__":
    sys.exit(main())
