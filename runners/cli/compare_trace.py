"""``commscope compare-trace``: a measured torch.profiler trace beside a schedule's predicted timeline.

    commscope compare-trace TRACE.json --schedule wfbp (--env NAME|FILE | --alpha A --beta B) [-p N]
                            [--model PROFILE] [--collective ALG] [--option K=V] --out merged.json [--json]

Writes one Chrome-trace JSON (Perfetto loads it) with the measured trace and the predicted timeline as separate
processes, and prints measured against predicted seconds per phase (:mod:`runners.imports.trace_compare`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

import costmodels as cm

from .common import UsageError, check_writable, console, load_model_profile, parse_options, resolve_env


def compare_trace(
    trace: Annotated[Path, typer.Argument(help="a torch.profiler (Kineto) Chrome trace of training steps")],
    schedule: Annotated[str, typer.Option(help="the schedule to predict (commscope list schedules)")],
    out: Annotated[Path, typer.Option("--out", help="write the merged Chrome trace (Perfetto) here")],
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    p: Annotated[int | None, typer.Option("--p", "-p", min=1, help="workers (default: the trace's world size)")] = None,
    model: Annotated[str | None, typer.Option(
        help="profile to predict with: shipped name or JSON file (default: the one imported from the trace)")] = None,
    collective: Annotated[str | None, typer.Option(
        help="collective algorithm (default: what the environment's library runs for each message)")] = None,
    option: Annotated[list[str], typer.Option("--option", help="schedule option NAME=VALUE")] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Measured phases of a trace against a schedule's prediction; writes both timelines into one trace file."""
    from runners.imports import kineto, trace_comms, trace_compare, trace_profile, trace_steps

    environment = resolve_env(env, alpha, beta, None)
    entry = cm.schedule(schedule)
    opts = parse_options(option)
    unused = sorted(set(opts) - set(entry.options))
    if unused:
        raise UsageError(f"--option {', '.join(unused)}: the {entry.name} schedule has none; its options: "
                         f"{', '.join(entry.options) or 'none'}")
    check_writable(out, "the merged trace")
    loaded = kineto.load(trace)
    analysis = trace_steps.analyse(loaded)
    prof = load_model_profile(model) if model else trace_profile.build(analysis)
    ranks = p or loaded.distributed.get("world_size")
    if not isinstance(ranks, int) or ranks < 1:
        raise UsageError(f"{trace} does not say how many ranks ran (no distributedInfo.world_size); give -p N")
    calls, _ = trace_comms.calls(loaded)
    comparison = trace_compare.compare(analysis, calls, prof, environment, ranks, entry.name, collective, opts)
    trace_compare.save(comparison, out)
    if as_json:
        print(json.dumps({**comparison.to_dict(), "out": str(out), "profile": prof.name,
                          "environment": environment.to_dict()}, indent=2, allow_nan=False))
        return
    from rich.table import Table

    print(f"{trace}: {len(analysis.steps)} step(s) against {entry.name} p={ranks} on {environment.name} "
          f"({prof.name}; medians over the steps)")
    table = Table("phase", "measured (ms)", "predicted (ms)", "error")
    for r in comparison.rows:
        table.add_row(r.phase, "-" if r.measured_s is None else f"{r.measured_s * 1e3:.3f}",
                      "-" if r.predicted_s is None else f"{r.predicted_s * 1e3:.3f}",
                      "-" if r.error is None else f"{r.error * 100:+.1f}%")
    console().print(table)
    print(f"wrote the measured trace and the prediction to {out} (open it in https://ui.perfetto.dev)")


def register(app: typer.Typer) -> None:
    """Add ``compare-trace``."""
    app.command("compare-trace")(compare_trace)
