"""``commscope constants``: the convergence bounds' problem constants measured on real training.

    commscope constants --model mlp --ranks 2 --out constants.jsonl [--dataset NAME] [--batch-size 32]
                        [--steps 50] [--checkpoints 3] [--lr 0.05] [--technique fusion]
                        [--compressors all|none|topk,randomk:0.1,qsgd:4,...] [--samples 0] [--noise-samples 1024]
                        [--hvp-samples 256] [--power-iterations 20] [--draws 8] [--threads 1] [--seed 0]
                        [--timeout 600] [--dry-run]

Launches torchrun with ``-m runners.constants`` on ``--ranks`` CPU ranks (gloo), each training on its shard
of the data set (see :mod:`runners.constants`). Options are checked before anything is launched; the one
"constants" record is appended to ``--out`` only when the whole measurement succeeded.
:func:`convergence.measured_constants.constants_from_records` turns it into ``time_to_accuracy``'s constants.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from .common import UsageError, check_writable


def constants_command(
    model: Annotated[str, typer.Option("--model", "-m", help="zoo model: mlp, resnet_small, gpt_small, ...")],
    out: Annotated[Path, typer.Option(help="append the 'constants' record to this JSON lines file")],
    ranks: Annotated[int, typer.Option("--ranks", help="CPU ranks, each training on its own shard (zeta needs >= 2)")
                     ] = 2,
    dataset: Annotated[str | None, typer.Option(help="generated data set [default: the model's pairing]")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="samples per rank per step")] = 32,
    steps: Annotated[int, typer.Option(help="training steps of the trajectory")] = 50,
    checkpoints: Annotated[int, typer.Option(help="measurements, evenly spaced over steps 0..--steps")] = 3,
    lr: Annotated[float, typer.Option(help="SGD learning rate of the trajectory")] = 0.05,
    technique: Annotated[str, typer.Option(help="training technique of the trajectory")] = "fusion",
    compressors: Annotated[str, typer.Option(
        help="compressors to measure: all, none, or name[:parameter],... (e.g. topk:0.01,qsgd:4)")] = "all",
    samples: Annotated[int, typer.Option(help="samples per shard for f_i and grad f_i (0: the whole shard)")] = 0,
    noise_samples: Annotated[int, typer.Option(help="samples per shard with per-sample gradients (sigma^2)")] = 1024,
    hvp_samples: Annotated[int, typer.Option(help="samples per shard in the Hessian (L)")] = 256,
    power_iterations: Annotated[int, typer.Option(help="most power iterations for L")] = 20,
    draws: Annotated[int, typer.Option(help="mini-batch gradients per rank and checkpoint, and draws of random "
                                            "compressors")] = 8,
    threads: Annotated[int, typer.Option(help="intra-op threads per rank")] = 1,
    seed: Annotated[int, typer.Option(help="seed of the model, the data set and the batches")] = 0,
    timeout: Annotated[float, typer.Option(
        help="seconds one checkpoint or training step may take (a hung peer ends the run)")] = 600.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the torchrun command and stop")] = False,
) -> None:
    """Measure L, sigma, zeta, Delta and each compressor's delta / omega on real training."""
    from runners.constants import make_options
    from runners.torchrun.launcher import launch_args, run_torchrun

    if ranks < 1:
        raise UsageError(f"--ranks must be an integer >= 1, got {ranks}")
    check_writable(out, "the results", append=True)
    opts = make_options(model, dataset, batch_size, steps, checkpoints, lr, technique, compressors, samples,
                        noise_samples, hvp_samples, power_iterations, draws, threads, seed, timeout, out)
    where, world = launch_args(ranks)
    from runners.training import zoo

    shard = zoo.DATASETS.get(opts.dataset).sizes["train"] // world
    if opts.batch_size > shard:
        raise UsageError(f"--batch-size {opts.batch_size} is larger than a rank's shard ({shard} samples of "
                         f"{opts.dataset} over {world} ranks)")
    cmd = [sys.executable, "-m", "torch.distributed.run", *where, "-m", "runners.constants", *opts.argv()]
    if dry_run:
        print(shlex.join(cmd))
        return
    run_torchrun(cmd, "commscope constants", "the constants measurement", threads)


def register(app: typer.Typer) -> None:
    """Add ``commscope constants`` to the command line."""
    app.command("constants")(constants_command)
