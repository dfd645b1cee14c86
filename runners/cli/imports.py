"""``commscope import nccl-tests``: read measurements other tools made into results-store records.

    commscope import nccl-tests LOG [--out results.jsonl] [--world-size N] [--op allreduce]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .common import check_writable, console


def import_nccl_tests(
    log: Annotated[Path, typer.Argument(help="the standard output of an nccl-tests binary, e.g. all_reduce_perf")],
    out: Annotated[Path | None, typer.Option("--out", help="append the records to this JSON lines file")] = None,
    world_size: Annotated[int | None, typer.Option(
        "--world-size", help="ranks of the run, where the log has no '#  Rank' lines")] = None,
    op: Annotated[str | None, typer.Option("--op", help="the op, where the log does not name the binary")] = None,
) -> None:
    """Read nccl-tests output into collective records (one per size; in-place times kept as extra fields)."""
    from rich.table import Table

    from runners.measure import nccl_tests as nti

    if out is not None:
        check_writable(out, "the results", append=True)
    imported = nti.import_log(log, out, op, world_size)
    for problem in imported.problems:
        print(f"commscope: warning: {problem}", file=sys.stderr)
    out_console = console()
    table = Table("op", "size (B)", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                  "#wrong", title=f"nccl-tests {', '.join(imported.ops)} on {imported.world_size} ranks from {log}")
    for row in nti.summary_rows(imported.records):
        table.add_row(*row)
    out_console.print(table)
    where = f" into {out}" if out is not None else " (not written: give --out FILE)"
    skipped = f", {len(imported.problems)} malformed row(s) skipped" if imported.problems else ""
    print(f"imported {len(imported.records)} record(s) from {log}{where}{skipped}")


def register(app: typer.Typer) -> None:
    """Add the ``import`` group and ``import nccl-tests``."""
    import_app = typer.Typer(help="Read measurements made by other tools into results files.", no_args_is_help=True)
    import_app.command("nccl-tests")(import_nccl_tests)
    app.add_typer(import_app, name="import")
