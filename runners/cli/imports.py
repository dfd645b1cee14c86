"""``commscope import``: read measurements other tools made into results-store records and profiles.

    commscope import nccl-tests LOG|RESULT.json [--out results.jsonl] [--world-size N] [--op allreduce]
    commscope import trace TRACE.json [--profile-out p.json] [--records-out r.jsonl] [--name N] [--batch-size B]
    commscope import nccl-inspector FILE|DIR... [--out results.jsonl]
    commscope import deepspeed LOG [--out results.jsonl] [--world-size N]

Imported records carry ``origin: imported`` and the file they came from (:mod:`runners.imports`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from costmodels.errors import CommscopeError

from .common import check_writable, console

MAX_WARNINGS = 10


def warn(problems: Sequence[str]) -> None:
    """Print what was skipped on stderr, at most :data:`MAX_WARNINGS` lines."""
    for problem in problems[:MAX_WARNINGS]:
        print(f"commscope: warning: {problem}", file=sys.stderr)
    if len(problems) > MAX_WARNINGS:
        print(f"commscope: warning: ... and {len(problems) - MAX_WARNINGS} more skipped", file=sys.stderr)


def _records_table(records: Sequence[dict[str, Any]], title: str) -> Any:
    from rich.table import Table

    table = Table("op", "bytes", "dtype", "ranks", "calls", "time (us)", "algbw (GB/s)", "busbw (GB/s)", title=title)
    for r in records:
        c, x = r["config"], r["result"]
        table.add_row(c["op"], str(c["bytes"]), c["dtype"], str(c["nranks"]), str(x.get("calls", c["iterations"])),
                      f"{x['time_s'] * 1e6:.2f}", f"{x['algbw_GBps']:.3f}", f"{x['busbw_GBps']:.3f}")
    return table


def _stragglers_table(rows: Sequence[dict[str, Any]], key: str, title: str) -> Any:
    from rich.table import Table

    table = Table("op", "bytes", key, "time (us)", "x median", "slowest", title=title)
    for s in rows:
        who = s.get("host") or "-"
        who = f"{who} (process {s['process']})" if s.get("process") is not None else (
            f"{who} (rank {s['rank']})" if s.get("rank") is not None else who)
        table.add_row(s["op"], str(s["bytes"]), str(s.get(key)), f"{s['time_us']:.2f}", f"{s['x_median']:.2f}", who)
    return table


def _where(out: Path | None, n: int) -> str:
    return f" into {out}" if out is not None else " (not written: give --out FILE)" if n else ""


def import_nccl_tests(
    log: Annotated[Path, typer.Argument(help="nccl-tests' standard output, or the JSON file its -J option writes")],
    out: Annotated[Path | None, typer.Option("--out", help="append the records to this JSON lines file")] = None,
    world_size: Annotated[int | None, typer.Option(
        "--world-size", help="ranks of the run, where the log has no '#  Rank' lines")] = None,
    op: Annotated[str | None, typer.Option("--op", help="the op, where the log does not name the binary")] = None,
) -> None:
    """Read nccl-tests output (text, or -J JSON with -I per-iteration times) into collective records."""
    from runners.imports import common as ic
    from runners.measure import nccl_tests as nti

    if out is not None:
        check_writable(out, "the results", append=True)
    text = ic.read_text(log, "nccl-tests output") if log.is_file() else None
    if text is not None and text.lstrip().startswith("{"):
        import json

        from runners.imports import nccl_tests_json as ntj

        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommscopeError(f"{log}: nccl-tests JSON output is not JSON ({exc.msg} at line {exc.lineno})"
                                 ) from None
        except RecursionError:
            raise CommscopeError(f"{log}: nccl-tests JSON output is nested too deeply to read") from None
        imported: Any = ntj.parse(data, str(log), op, world_size)
        ic.write_records(out, imported.records)
    else:
        imported = nti.import_log(log, out, op, world_size)
    warn(imported.problems)
    from rich.table import Table

    table = Table("op", "size (B)", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                  "#wrong", title=f"nccl-tests {', '.join(imported.ops)} on {imported.world_size} ranks from {log}")
    for row in nti.summary_rows(imported.records):
        table.add_row(*row)
    console().print(table)
    slow = getattr(imported, "stragglers", [])
    if slow:
        console().print(_stragglers_table(slow, "iteration", "stragglers: iterations over 1.5 x the median (-I)"))
    skipped = f", {len(imported.problems)} malformed row(s) skipped" if imported.problems else ""
    print(f"imported {len(imported.records)} record(s) from {log}{_where(out, len(imported.records))}{skipped}")


def import_trace(
    trace: Annotated[Path, typer.Argument(help="a torch.profiler (Kineto) Chrome trace, .json or .json.gz")],
    profile_out: Annotated[Path | None, typer.Option(
        "--profile-out", help="write the model profile (commscope's profile JSON) here")] = None,
    records_out: Annotated[Path | None, typer.Option(
        "--records-out", help="append the collective records to this JSON lines file")] = None,
    name: Annotated[str | None, typer.Option(help="the profile's model name (default: the trace's file name)")] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", min=1, help="per-worker batch size (default: the first layer's input's leading dimension)")
    ] = None,
    ranks_per_node: Annotated[int | None, typer.Option(
        "--ranks-per-node", min=1, help="ranks per node of the run (default: all ranks on one node)")] = None,
) -> None:
    """Read a PyTorch profiler trace into a model profile (per-module forward / backward time, gradient bytes,
    optimizer step) and collective records (NCCL kernels with their sizes, or gloo ops)."""
    from rich.table import Table

    from runners.imports import common as ic
    from runners.imports import kineto, trace_comms, trace_profile, trace_steps

    for path, what, append in ((profile_out, "the profile", False), (records_out, "the results", True)):
        if path is not None:
            check_writable(path, what, append=append)
    loaded = kineto.load(trace)
    analysis = trace_steps.analyse(loaded)
    prof = trace_profile.build(analysis, name, batch_size)
    calls, problems = trace_comms.calls(loaded)
    recs = trace_comms.records(loaded, calls, ranks_per_node)
    warn([f"{trace}: {s}" for s in analysis.skipped] + problems)
    print(f"{prof.name}: {len(prof)} layers ({prof.metadata['layers_are']}), batch {prof.batch_size}, {prof.device}, "
          f"medians of {len(analysis.steps)} step(s)")
    table = Table("layer", "params", "grad bytes", "forward (ms)", "backward (ms)")
    for x in prof.layers:
        table.add_row(x.name, str(x.params), f"{x.grad_bytes:.0f}", f"{x.forward_s * 1e3:.3f}",
                      f"{x.backward_s * 1e3:.3f}")
    console().print(table)
    ph = prof.metadata["phases"]
    print(f"forward {ph['forward_s'] * 1e3:.3f} ms, backward {ph['backward_s'] * 1e3:.3f} ms, optimizer "
          f"{ph['optimizer_s'] * 1e3:.3f} ms, iteration {ph['iteration_s'] * 1e3:.3f} ms (medians)")
    if recs:
        console().print(_records_table(recs, f"collectives in {trace} ({trace_comms.backend(loaded, calls)})"))
    if profile_out is not None:
        prof.save(profile_out)
        print(f"wrote the profile to {profile_out}")
    n = ic.write_records(records_out, recs)
    if not recs:
        print(f"no collectives in {trace}" + (f": nothing written to {records_out}" if records_out else ""))
    else:
        print(f"imported {len(recs)} collective record(s) from {trace}{_where(records_out, n or len(recs))}")


def import_inspector(
    files: Annotated[list[Path], typer.Argument(help="NCCL Inspector output files (JSON lines), or directories")],
    out: Annotated[Path | None, typer.Option("--out", help="append the records to this JSON lines file")] = None,
) -> None:
    """Read NCCL Inspector (profiler plugin) logs into collective records, with straggling calls."""
    from runners.imports import common as ic
    from runners.imports import nccl_inspector

    if out is not None:
        check_writable(out, "the results", append=True)
    imported = nccl_inspector.parse(list(files))
    warn(imported.problems)
    console().print(_records_table(imported.records, f"NCCL Inspector: {imported.operations} operation(s) on "
                                                     f"{', '.join(imported.communicators)}"))
    if imported.stragglers:
        console().print(_stragglers_table(imported.stragglers, "sn", "stragglers: calls over 1.5 x the median"))
    ic.write_records(out, imported.records)
    print(f"imported {len(imported.records)} record(s){_where(out, len(imported.records))}")


def import_deepspeed(
    log: Annotated[Path, typer.Argument(help="a log holding DeepSpeed's comms_logger summary (log_summary())")],
    out: Annotated[Path | None, typer.Option("--out", help="append the records to this JSON lines file")] = None,
    world_size: Annotated[int | None, typer.Option(
        "--world-size", help="ranks of the run (default: read from the table's busbw / tput)")] = None,
) -> None:
    """Read DeepSpeed's comms_logger summary into collective records."""
    from runners.imports import common as ic
    from runners.imports import deepspeed_comms

    if out is not None:
        check_writable(out, "the results", append=True)
    imported = deepspeed_comms.import_file(str(log), world_size)
    warn(imported.problems)
    console().print(_records_table(imported.records, f"DeepSpeed comms on {imported.world_size} ranks "
                                                     f"({imported.world_size_from})"))
    ic.write_records(out, imported.records)
    print(f"imported {len(imported.records)} record(s) from {log}{_where(out, len(imported.records))}")


def register(app: typer.Typer) -> None:
    """Add the ``import`` group: ``nccl-tests``, ``trace``, ``nccl-inspector``, ``deepspeed``."""
    import_app = typer.Typer(help="Read measurements made by other tools into results files.", no_args_is_help=True)
    import_app.command("nccl-tests")(import_nccl_tests)
    import_app.command("trace")(import_trace)
    import_app.command("nccl-inspector")(import_inspector)
    import_app.command("deepspeed")(import_deepspeed)
    app.add_typer(import_app, name="import")
