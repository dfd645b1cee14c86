"""``commscope train``: launches torchrun with ``-m runners.training.runner`` (see :mod:`runners.training.runner`).

    commscope train --nproc N --algorithm dear --model resnet_small --iterations 100 [--batch-size 32]
                    [--lr 0.05] [--option key=value ...] [--warmup 5] [--convergence [--dataset NAME]
                    [--eval-every K]] [--threads 1] [--seed 0] [--backend auto|gloo|nccl|gloo-cuda]
                    [--out results.jsonl] [--dry-run]

Where it runs is decided as for ``commscope bench collectives``: one node (``--standalone``), or the
nodes ``commscope emulate`` describes in COMMSCOPE_NNODES etc. Options are checked before anything
is launched. Exit codes: 0 done; 1 a rank failed; 2 bad options; 3 the training diverged (its loss stopped
being finite: the ranks stopped together, and the records say ``diverged: true`` and the step); 128 + S when
signal S stopped it (torchrun and the ranks are stopped too).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from runners.torchrun.launcher import launch_args, run_torchrun

from .common import check_writable


def train(
    algorithm: Annotated[str, typer.Option("--algorithm", "-a", help="training technique (e.g. wfbp, dear, topk)")],
    model: Annotated[str, typer.Option("--model", "-m", help="model of the zoo (e.g. mlp, resnet_small)")],
    iterations: Annotated[int, typer.Option("--iterations", "-n", help="timed iterations")] = 100,
    nproc: Annotated[int | None, typer.Option(
        "--nproc", help="ranks on this node (default: COMMSCOPE_NPROC_PER_NODE, else one per GPU, else 2)")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="samples per rank per iteration")] = 32,
    lr: Annotated[float, typer.Option("--lr", help="SGD learning rate")] = 0.05,
    option: Annotated[list[str], typer.Option("--option", "-O", help="technique option KEY=VALUE (repeatable)")
                      ] = [],  # noqa: B006
    warmup: Annotated[int, typer.Option("--warmup", "-w", help="untimed iterations first")] = 5,
    convergence: Annotated[bool, typer.Option("--convergence", help="train on a generated data set and record "
                                              "the loss every --eval-every steps")] = False,
    dataset: Annotated[str | None, typer.Option("--dataset", help="data set of a convergence run "
                                                "(default: the model's pairing)")] = None,
    eval_every: Annotated[int, typer.Option("--eval-every", help="steps between convergence records")] = 10,
    threads: Annotated[int, typer.Option("--threads", help="intra-op threads per rank")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="seed of the model, the batches and the data set")] = 0,
    backend: Annotated[str, typer.Option(
        "--backend", help="auto (nccl with CUDA, else gloo), gloo, nccl, or gloo-cuda (gloo with CUDA tensors; "
        "ranks may share a GPU)")] = "auto",
    timeout: Annotated[float, typer.Option("--timeout", help="seconds a collective may wait for peers")] = 600.0,
    out: Annotated[Path | None, typer.Option("--out", help="append the records to this JSON lines file")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the torchrun command and stop")] = False,
) -> None:
    """Train with one technique on torchrun ranks: per-iteration time breakdown, optionally convergence."""
    from runners.training import runner as rt

    if out is not None:  # before training: a directory or a read-only file would lose every record
        check_writable(out, "the results", append=True)
    opts = rt.make_options(algorithm, model, iterations, batch_size, lr, option, warmup, convergence, dataset,
                           eval_every, threads, seed, backend, out, timeout)
    where, _world = launch_args(nproc)
    cmd = [sys.executable, "-m", "torch.distributed.run", *where, "-m", "runners.training.runner", *opts.argv()]
    if dry_run:
        print(shlex.join(cmd))
        return
    run_torchrun(cmd, "commscope train", "training", threads)


def register(app: typer.Typer) -> None:
    """Add ``train`` to the ``commscope`` app."""
    app.command("train")(train)
