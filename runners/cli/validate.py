"""``commscope validate``: the scripted predicted-vs-measured suite (see :mod:`runners.validate`).

    commscope validate --suite quick|full --ranks N --out DIR [--emulate 100mbit,1gbit,2500mbit,1gbit:2]
                       [--ranks-per-node K] [--threads 1] [--timeout 300] [--backend auto|gloo|nccl|gloo-cuda]

Exits 0 when every environment's job and every technique ran; otherwise 1, naming each failure.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer


def validate_command(
    out: Annotated[Path, typer.Option("--out", help="directory for the records and the comparison tables")],
    suite: Annotated[str, typer.Option("--suite", help="quick (exact techniques + local SGD, one model) or full")
                     ] = "quick",
    ranks: Annotated[int, typer.Option("--ranks", help="ranks (processes) of every run")] = 4,
    emulate: Annotated[str | None, typer.Option(
        "--emulate", help="comma-separated link rates of emulated clusters (needs root), e.g. 100mbit,1gbit; "
        "RATE:K puts K ranks on each node (loopback inside, the shaped link between nodes), e.g. 1gbit:2; "
        "default: the host as it is")] = None,
    ranks_per_node: Annotated[int | None, typer.Option(
        "--ranks-per-node", help="ranks per emulated node (default 1: every rank behind its own link)")] = None,
    threads: Annotated[int, typer.Option("--threads", help="intra-op threads per rank")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds a collective may wait for peers")] = 300.0,
    backend: Annotated[str, typer.Option(
        "--backend", help="auto (nccl with CUDA, else gloo), gloo, nccl, or gloo-cuda (several ranks on one GPU, "
        "e.g. behind emulated links)")] = "auto",
) -> None:
    """Sweep, fit, profile and train every technique of a suite; write predicted vs measured per environment."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from runners import validate as v

    rates = [r.strip() for r in emulate.split(",") if r.strip()] if emulate else []
    if emulate is not None and not rates:
        raise v.ValidationError(f"--emulate needs link rates such as 100mbit,1gbit; got {emulate!r}")
    if not isinstance(threads, int) or threads < 1:
        raise v.ValidationError(f"--threads must be an integer >= 1, got {threads!r}")
    if not timeout > 0:
        raise v.ValidationError(f"--timeout must be > 0 seconds, got {timeout!r}")
    command = "commscope validate " + shlex.join(sys.argv[2:] if len(sys.argv) > 2 else [])
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        records, failures = v.validate(suite, ranks, out, rates, threads, timeout, ranks_per_node, command, progress,
                                       backend=backend)
    rows = v.table_rows(records)
    print(v.markdown(rows, command), end="")
    print(f"wrote {len(records)} validation record(s), validation.csv and validation.md to {out}")
    if failures:
        for f in failures:
            print(f"commscope: error: failed: {f}", file=sys.stderr)
        raise SystemExit(1)


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the ``commscope`` app."""
    app.command("validate")(validate_command)
