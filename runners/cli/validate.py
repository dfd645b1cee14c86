"""``commscope validate``: the scripted predicted-vs-measured suite (see :mod:`runners.validate`).

    commscope validate --suite quick|full --ranks N --out DIR [--emulate 100mbit,1gbit,2500mbit,1gbit:2]
                       [--ranks-per-node K] [--threads 1] [--timeout 300] [--backend auto|gloo|nccl|gloo-cuda]
    commscope validate --convergence [--suite quick|smoke] [--emulate RATE] [--ranks 4] [--seeds 3] --out DIR

Exits 0 when every environment's job and every technique ran; otherwise 1, naming each failure.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterator
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
    convergence: Annotated[bool, typer.Option(
        "--convergence", help="train every algorithm to a target loss and accuracy behind one link (--emulate RATE), "
        "with --seeds repetitions, and compare measured with predicted time to accuracy (ratio to SGD)")] = False,
    seeds: Annotated[int | None, typer.Option(
        "--seeds", help="with --convergence: seeds per algorithm (default: the suite's, 3 for quick)")] = None,
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
    if convergence:
        _convergence(suite, ranks, out, rates, seeds, threads, timeout, ranks_per_node, backend, command, console)
        return
    if seeds is not None:
        raise v.ValidationError("--seeds is for convergence runs; add --convergence")
    from runners.validate.driver import check_out

    check_out(Path(out))  # before any progress output
    with _stopped_cleanly(out), Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                         TimeElapsedColumn(), console=console) as progress:
        records, failures = v.validate(suite, ranks, out, rates, threads, timeout, ranks_per_node, command, progress,
                                       backend=backend)
    rows = v.table_rows(records)
    print(v.markdown(rows, command), end="")
    print(f"wrote {len(records)} validation record(s), validation.csv and validation.md to {out}")
    if failures:
        for f in failures:
            print(f"commscope: error: failed: {f}", file=sys.stderr)
        raise SystemExit(1)


def _convergence(suite: str, ranks: int, out: Path, rates: list[str], seeds: int | None, threads: int,
                 timeout: float, ranks_per_node: int | None, backend: str, command: str, console: object) -> None:
    """``--convergence``: :func:`runners.validate.convergence_driver.validate_convergence`, its report printed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from runners.validate import ValidationError
    from runners.validate.convergence_driver import check_inputs, validate_convergence

    if backend not in ("auto", "gloo"):
        raise ValidationError(f"--convergence trains on CPU gloo ranks: --backend must be auto or gloo, "
                              f"got {backend!r}")
    check_inputs(suite, ranks, out, rates, seeds, threads, timeout, ranks_per_node)  # before any progress output
    with _stopped_cleanly(out), Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                         TimeElapsedColumn(), console=console) as progress:  # type: ignore[arg-type]
        _, failures = validate_convergence(suite, ranks, out, rates, seeds, threads, timeout, ranks_per_node,
                                           command, progress)
    print((out / "convergence.md").read_text(), end="")
    print(f"wrote convergence.md, convergence.csv and convergence.jsonl to {out}")
    if failures:
        for f in failures:
            print(f"commscope: error: failed: {f}", file=sys.stderr)
        raise SystemExit(1)


@contextlib.contextmanager
def _stopped_cleanly(out: Path) -> Iterator[None]:
    """Ctrl-C, SIGTERM or SIGHUP during a job: the job (its emulated network, torchrun and ranks) is already down
    (:func:`runners.validate.driver.run_job`); say so in one line and exit with 128 + the signal."""
    import signal

    try:
        yield
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        print(f"commscope: {signal.Signals(signum).name}: stopped the validation job (its emulated network and "
              f"ranks); {out} keeps what was written so far", file=sys.stderr)
        raise typer.Exit(128 + signum) from None


def register(app: typer.Typer) -> None:
    """Add ``validate`` to the ``commscope`` app."""
    app.command("validate")(validate_command)
