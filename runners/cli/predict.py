"""``commscope predict collective|iteration|convergence|tta|llm``: times, bandwidths, iterations and time to
accuracy from the cost models and the convergence bounds (collective and iteration here; convergence and time
to accuracy in :mod:`runners.cli.predict_convergence`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import costmodels as cm

from . import llm, predict_convergence
from .common import (
    UsageError,
    check_writable,
    console,
    int_list,
    load_model_profile,
    parse_numbers,
    parse_options,
    parse_sizes,
    resolve_env,
)
from .tables import (
    add_vs_best,
    check_finite,
    check_format,
    overflow_checked,
    sort_help,
    sort_rows,
    vs_best_text,
    write_csv,
)

COLLECTIVE_SORT = {"time": ("time_s", False), "vs-best": ("vs_best", False), "busbw": ("busbw_GBps", True),
                   "algbw": ("algbw_GBps", True), "size": ("bytes", False), "p": ("p", False),
                   "algorithm": ("algorithm", False)}
ITERATION_SORT = {"time": ("iteration_s", False), "vs-best": ("vs_best", False), "throughput": ("throughput", True),
                  "efficiency": ("efficiency", True), "p": ("p", False), "schedule": ("schedule", False)}
OVERFLOW = "give smaller --alpha / --beta (seconds, seconds per byte) or sizes"


def warn_implausible(environment: cm.Environment, *, sizes: Any = None, p: Any = None) -> None:
    """The plausibility guards of a fitted environment (runners.measure.fit.plausibility: faster than its link,
    a poor fit, a CI through zero, used far outside its sizes or p), one ``commscope: warning:`` line each on
    stderr; an environment without a fit's metadata (a preset) has none."""
    from runners.measure.fit.plausibility import plausibility

    for line in plausibility(environment, sizes=sizes, p=p):
        print(f"commscope: warning: {line}", file=sys.stderr)


def predict_collective(
    algorithm: Annotated[list[str], typer.Option("--algorithm", "-a",
                         help="algorithm name(s), comma-separated or repeated; 'auto' = what the collective "
                              "library runs for --primitive (see --library)")],
    p: Annotated[list[int], typer.Option("--p", "-p", help="number of ranks (repeatable)")],
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    size: Annotated[list[str], typer.Option("--size", "-s", help="message size, e.g. 100MiB (repeatable)")] = [],  # noqa: B006
    min_size: Annotated[str | None, typer.Option("--min-size", "-b", help="smallest size of a range")] = None,
    max_size: Annotated[str | None, typer.Option("--max-size", "-e", help="largest size of a range")] = None,
    factor: Annotated[float, typer.Option("--factor", "-f", help="growth factor of a range")] = 2.0,
    primitive: Annotated[str, typer.Option(help="primitive for --algorithm auto")] = "allreduce",
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    gamma: Annotated[float | None, typer.Option(help="reduction cost, s/byte (overrides --env)")] = None,
    param: Annotated[list[str], typer.Option("--param", help="algorithm parameter NAME=VALUE, e.g. k=4")] = [],  # noqa: B006
    library: Annotated[str | None, typer.Option(
        "--library", help="collective library choosing 'auto': nccl, gloo, mpich or ideal (the cheapest registered "
                          "algorithm) [default: the environment's]")] = None,
    timing: Annotated[str, typer.Option(
        "--timing", help="how the times are measured: back_to_back (calls queued, as nccl-tests does: device time) "
                         "or one_call_idle_device (one call on an idle device: PyTorch's host overhead added)")
    ] = "back_to_back",
    sort: Annotated[str | None, typer.Option("--sort", help=sort_help(COLLECTIVE_SORT))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the table as CSV on stdout")] = False,
) -> None:
    """Time, algbw and busbw of collective algorithms (nccl-tests conventions), and how much slower each is than
    the best at the same p and size ("vs best"); 'auto' shows the library's choice (algorithm, protocol and
    channels) at each size. --timing says what a benchmark would print (costmodels/harness.py)."""
    check_format(as_json, as_csv)
    if timing not in cm.HARNESSES:
        raise UsageError(f"--timing must be one of {', '.join(cm.HARNESSES.names())}, got {timing!r}")
    harness = cm.harness(timing)
    sort_rows([], sort, COLLECTIVE_SORT)  # a bad --sort fails before any work
    environment = resolve_env(env, alpha, beta, gamma)
    if library is not None:
        if library not in cm.libraries():
            raise UsageError(f"--library must be one of {', '.join(cm.libraries())}, got {library!r}")
        environment = environment.with_(library=library)
    names = [x.strip() for a in algorithm for x in a.split(",") if x.strip()]
    if not names:
        raise UsageError("--algorithm is empty")
    sizes = parse_sizes(size, min_size, max_size, factor)
    params = parse_numbers(param, "--param")
    known = {q.name for x in names for q in (
        [q for a in cm.collectives(primitive, include_bounds=False) for q in cm.collective(a).params]
        if x == "auto" else cm.collective(x).params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise UsageError(f"--param {', '.join(unknown)}: no chosen algorithm has such a parameter; "
                         f"theirs: {', '.join(sorted(known)) or 'none'}")
    if library is not None and "auto" not in names:
        raise UsageError("--library chooses the algorithm of 'auto': add -a auto")
    rows: list[dict[str, Any]] = []
    with overflow_checked():  # an overflow is one error below (check_finite), not warnings
        for ranks in p:
            for name in names:
                if name == "auto":
                    pick = cm.choose(primitive, sizes, ranks, environment, **params)
                    algos, times = list(pick.algorithm), [float(x) for x in pick.time]
                    chosen = {"library": pick.library, "protocol": list(pick.protocol),
                              "channels": [int(c) for c in pick.channels]}
                    prim = primitive
                else:
                    c = cm.collective(name)
                    mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
                    t = c.time(sizes, ranks, environment, **mine)
                    algos, times = [c.name] * len(sizes), [float(x) for x in t]
                    chosen, prim = None, c.primitive
                factor_ = cm.busbw_factor(prim, ranks) if prim in ("allreduce", "reduce_scatter", "allgather",
                                                                     "all_to_all", "broadcast", "reduce") else None
                if harness.exposed_host_s and ranks > 1:  # p = 1 calls nothing: no host overhead to add
                    times = [float(harness.measured_time(t)) for t in times]
                for i, (nbytes, algo, t) in enumerate(zip(sizes, algos, times, strict=False)):
                    bw = nbytes / t if t > 0 else None  # nothing to move (p = 1 or n = 0): no bandwidth
                    row = {"algorithm": algo, "p": ranks, "bytes": nbytes, "size": cm.format_size(nbytes),
                           "time_s": t, "algbw_GBps": None if bw is None else bw / 1e9,
                           "busbw_GBps": None if factor_ is None or bw is None else bw * factor_ / 1e9}
                    if chosen is not None:
                        row.update(library=chosen["library"], protocol=chosen["protocol"][i],
                                   channels=chosen["channels"][i])
                    rows.append(row)
    check_finite(rows, ("time_s",), lambda r: f"{r['algorithm']} at p = {r['p']}, {r['size']}", OVERFLOW)
    warn_implausible(environment, sizes=sizes, p=p)
    add_vs_best(rows, "time_s", ("p", "bytes"))
    rows = sort_rows(rows, sort, COLLECTIVE_SORT)
    checks = _published_checks(rows, sizes)
    if as_csv:
        write_csv(rows)
        return
    if as_json:
        print(json.dumps({"environment": environment.to_dict(), "timing": timing, "results": rows,
                          "published_check": checks}, indent=2, allow_nan=False))
        return
    from rich.table import Table

    chosen_rows = any("library" in r for r in rows)
    extra = ("library", "protocol", "channels") if chosen_rows else ()
    table = Table("algorithm", *extra, "p", "size", "bytes", "time (us)", "vs best", "algbw (GB/s)", "busbw (GB/s)",
                  title=f"predicted on {environment.name}: {environment.summary()}")
    for r in rows:
        cells = [r.get("library", "-"), r.get("protocol", "-"), str(r.get("channels", "-"))] if chosen_rows else []
        table.add_row(r["algorithm"], *cells, str(r["p"]), r["size"], str(r["bytes"]), f"{r['time_s'] * 1e6:.2f}",
                      vs_best_text(r["vs_best"]), "-" if r["algbw_GBps"] is None else f"{r['algbw_GBps']:.3f}",
                      "-" if r["busbw_GBps"] is None else f"{r['busbw_GBps']:.3f}")
    console().print(table)
    console().print("vs best: how much longer than the fastest algorithm shown at the same p and size")
    if harness.exposed_host_s:
        console().print(f"timing {timing}: each time holds {harness.exposed_host_s * 1e6:.0f} us of host overhead "
                        f"per call ({harness.source})")
    from rich.markup import escape

    for line in checks:
        console().print(escape(f"published: {line}"))


def _published_checks(rows: list[dict[str, Any]], sizes: Any) -> list[str]:
    """How each library in the rows compares with the shipped published measurements at these sizes."""
    from runners import reference

    libraries = dict.fromkeys(r["library"] for r in rows if "library" in r)
    return [line for lib in libraries if (line := reference.published_check(lib, sizes)) is not None]


def predict_iteration(
    model: Annotated[str, typer.Option(help="shipped profile name (commscope list profiles) or a profile JSON file")],
    p: Annotated[list[str], typer.Option("--p", "-p", help="workers, comma-separated or repeated: 4,8,16")],
    schedule: Annotated[list[str], typer.Option("--schedule", help="schedule(s), comma-separated")] = ["wfbp"],  # noqa: B006
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    collective: Annotated[str | None, typer.Option(
        help="collective algorithm (default: what the environment's library runs for each message)")] = None,
    compressor: Annotated[list[str], typer.Option(
        "--compressor", help="gradient compressor(s), e.g. topk:0.01, fp16, qsgd:8 (comma-separated)")] = [],  # noqa: B006
    option: Annotated[list[str], typer.Option(
        "--option", help="schedule option NAME=VALUE, e.g. bucket_bytes=25MiB")] = [],  # noqa: B006
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the timeline as a Chrome/Perfetto trace JSON")] = None,
    sort: Annotated[str | None, typer.Option("--sort", help=sort_help(ITERATION_SORT))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the table as CSV on stdout")] = False,
) -> None:
    """Iteration time, throughput and scaling efficiency of training schedules, and how much slower each is than
    the best at the same p ("vs best")."""
    check_format(as_json, as_csv)
    sort_rows([], sort, ITERATION_SORT)  # a bad --sort fails before any work
    if trace is not None:
        check_writable(trace, "the trace")
    environment = resolve_env(env, alpha, beta, None)
    prof = load_model_profile(model)
    names = [x.strip() for s in schedule for x in s.split(",") if x.strip()]
    for name in names:
        cm.schedule(name)  # unknown names fail before any work
    ranks = int_list(p, "--p")
    opts = parse_options(option)
    allowed = sorted({k for n in names for k in cm.schedule(n).options})
    unused = sorted(set(opts) - set(allowed))
    if unused:
        raise UsageError(f"--option {', '.join(unused)}: no chosen schedule has it; theirs: "
                         f"{', '.join(allowed) or 'none'}")
    specs: list[str | None] = [x.strip() for c in compressor for x in c.split(",") if x.strip()] or [None]
    rows, results = [], []
    with overflow_checked():  # an overflow is one error below (check_finite), not warnings
        for name in names:
            entry = cm.schedule(name)
            mine = {k: v for k, v in opts.items() if k in entry.options}
            for spec in specs:
                for q in ranks:
                    r = cm.simulate(prof, environment, q, name, collective=collective, compressor=spec, **mine)
                    results.append(r)
                    rows.append({"model": prof.name, "schedule": name, "compressor": spec, "p": q,
                                 "iteration_s": r.iteration_time, "throughput": r.throughput, "speedup": r.speedup,
                                 "efficiency": r.scaling_efficiency, "exposed_comm_s": r.exposed_communication})
    check_finite(rows, ("iteration_s", "throughput", "speedup", "efficiency", "exposed_comm_s"),
                 lambda r: f"{r['schedule']}{' + ' + r['compressor'] if r['compressor'] else ''} at p = {r['p']}",
                 OVERFLOW)
    warn_implausible(environment, sizes=[float(x.grad_bytes) for x in prof.layers if x.grad_bytes] or None,
                     p=ranks)
    add_vs_best(rows, "iteration_s", ("p",))
    rows = sort_rows(rows, sort, ITERATION_SORT)
    if trace is not None:
        for r in results:
            spec = r.details.get("compressor")
            tag = r.schedule + (f".{spec.replace(':', '-')}" if spec else "")
            path = trace if len(results) == 1 else trace.with_name(f"{trace.stem}.{tag}.p{r.p}{trace.suffix}")
            r.timeline.save_chrome_trace(path, process=f"commscope {prof.name} {r.schedule} p={r.p}")
    if as_csv:
        write_csv(rows)
        return
    if as_json:
        print(json.dumps({"environment": environment.to_dict(), "profile": prof.name, "results": rows}, indent=2,
                         allow_nan=False))
        return
    from rich.table import Table

    table = Table("schedule", "compressor", "p", "iteration (ms)", "vs best", "samples/s", "speedup", "efficiency",
                  "exposed comm (ms)",
                  title=f"{prof.name} (batch {prof.batch_size}, {prof.origin} on {prof.device}) on {environment.name}")
    for r in rows:
        table.add_row(r["schedule"], r["compressor"] or "-", str(r["p"]), f"{r['iteration_s'] * 1e3:.2f}",
                      vs_best_text(r["vs_best"]), f"{r['throughput']:.1f}",
                      f"{r['speedup']:.2f}", f"{r['efficiency']:.3f}", f"{r['exposed_comm_s'] * 1e3:.2f}")
    console().print(table)
    console().print("vs best: how much longer than the fastest schedule and compressor shown at the same p")


def register(app: typer.Typer) -> None:
    """Add the ``predict`` group and its commands (``llm`` from :mod:`runners.cli.llm`)."""
    predict_app = typer.Typer(help="Predict times from the cost models.", no_args_is_help=True)
    predict_app.command("collective")(predict_collective)
    predict_app.command("iteration")(predict_iteration)
    predict_app.command("convergence")(predict_convergence.predict_convergence)
    predict_app.command("tta")(predict_convergence.predict_tta)
    llm.register_predict(predict_app)
    app.add_typer(predict_app, name="predict")
