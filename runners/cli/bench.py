"""``commscope bench collectives``: launch a collective sweep on torchrun ranks (:mod:`runners.measure.sweep`);
``commscope bench host-buffers``: what a library's own host buffers cost here (:mod:`runners.measure.host_buffers`).

    commscope bench collectives --nproc N [--op allreduce,allgather] [-b 1MiB -e 64MiB -f 2] [--check]
                                [--out results.jsonl] [--resume] [--timeout 60] [--backend auto|gloo|nccl]

It runs ``python -m torch.distributed.run ... -m runners.measure.sweep collectives`` with the same options, on
one node or across the nodes of ``commscope emulate`` (:mod:`runners.torchrun.launcher`). Options are checked
before anything is launched.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from costmodels.errors import CommscopeError
from runners.torchrun.launcher import launch_args, run_torchrun


def bench_collectives(
    nproc: Annotated[int | None, typer.Option(
        "--nproc", help="ranks on this node (default: COMMSCOPE_NPROC_PER_NODE, else one per GPU, else 2)")] = None,
    op: Annotated[list[str], typer.Option("--op", "-o", help="ops, comma-separated (default all): allreduce, "
                                          "reduce_scatter, allgather, broadcast, reduce, all_to_all, sendrecv")] = [],  # noqa: B006
    min_size: Annotated[str, typer.Option("--min-size", "-b", help="smallest size, e.g. 1MiB")] = "1MiB",
    max_size: Annotated[str, typer.Option("--max-size", "-e", help="largest size, e.g. 64MiB")] = "64MiB",
    factor: Annotated[float, typer.Option("--factor", "-f", help="growth factor between sizes (> 1)")] = 2.0,
    dtype: Annotated[str, typer.Option("--dtype", "-d", help="float32, float16, bfloat16, float64 or int32")
                     ] = "float32",
    warmup: Annotated[int, typer.Option("--warmup", "-w", help="untimed iterations per size")] = 5,
    iters: Annotated[int, typer.Option("--iters", "-n", help="timed iterations per size")] = 20,
    check: Annotated[bool, typer.Option("--check", "-c", help="count wrong elements of the output")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="append one record per size to this JSON lines file")
                   ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="skip what --out holds for the same configuration")
                      ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds one collective may take")] = 60.0,
    backend: Annotated[str, typer.Option("--backend", help="auto (nccl with CUDA, else gloo), gloo or nccl")
                       ] = "auto",
    root: Annotated[int, typer.Option("--root", "-r", help="root rank of broadcast and reduce")] = 0,
    use_equivalent: Annotated[list[str], typer.Option(
        "--use-equivalent", help="ops to measure as their documented equivalent even where the backend has them")
    ] = [],  # noqa: B006
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the torchrun command and stop")] = False,
) -> None:
    """Sweep collectives over sizes with torchrun and torch.distributed; nccl-tests' table and conventions."""
    from runners.measure import sweep

    opts = sweep.make_options(op=op or None, min_size=min_size, max_size=max_size, factor=factor, dtype=dtype,
                              warmup=warmup, iters=iters, check=check, out=out, resume=resume, timeout=timeout,
                              backend=backend, root=root, use_equivalent=use_equivalent or None)
    where, world = launch_args(nproc)
    if opts.root >= world:
        raise CommscopeError(f"--root {opts.root} is not a rank of this {world}-rank job")
    cmd = [sys.executable, "-m", "torch.distributed.run", *where, "-m", "runners.measure.sweep", "collectives",
           *opts.argv()]
    if dry_run:
        print(shlex.join(cmd))
        return
    run_torchrun(cmd, "commscope bench collectives", "the sweep")


def bench_host_buffers(
    ranks: Annotated[int, typer.Option("--ranks", help="processes copying at once, as many as the ranks on this host")
                     ] = 2,
    size: Annotated[str, typer.Option("--size", help="bytes copied, at least 32MiB (mapped afresh by glibc)")
                    ] = "64MiB",
    repeats: Annotated[int, typer.Option("--repeats", help="timed copies per process")] = 5,
    out: Annotated[Path | None, typer.Option("--out", help="write the result JSON here (atomically), for "
                                             "'commscope fit --host-buffers'")] = None,
) -> None:
    """Measure host_copy and host_fault: what gloo's own buffers cost per byte on this host."""
    import costmodels as cm
    from runners.measure import host_buffers

    from .common import check_writable

    if out is not None:
        check_writable(out, "the result")
    res = host_buffers.measure(ranks, cm.parse_size(size), repeats)
    if out is not None:
        host_buffers.save(res, out)
    print(f"host_copy  {res['host_copy'] * 1e9:.3g} ns/B (a copy into resident memory, {ranks} at once)")
    print(f"host_fault {res['host_fault'] * 1e9:.3g} ns/B more where the buffer is mapped afresh ({res['note']})")
    if out is not None:
        print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add the ``bench`` group: ``bench collectives`` and ``bench host-buffers``."""
    bench_app = typer.Typer(help="Measure with torch.distributed (launched with torchrun).", no_args_is_help=True)
    bench_app.command("collectives")(bench_collectives)
    bench_app.command("host-buffers")(bench_host_buffers)
    app.add_typer(bench_app, name="bench")
