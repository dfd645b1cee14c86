"""The ``commscope`` command line.

Bad input ends with exit code 2 and one line ``commscope: error: ...``, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

import costmodels as cm
from runners import cli_bench, cli_emulate, cli_fit, cli_profile, cli_train, cli_validate

app = typer.Typer(
    name="commscope",
    help="Which communication technique wins in your environment, and why: cost models and measurements.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
predict_app = typer.Typer(help="Predict times from the cost models.", no_args_is_help=True)
app.add_typer(predict_app, name="predict")


class UsageError(cm.CommscopeError):
    """Bad command-line input."""


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)


# --------------------------------------------------------------------------------------- list
LISTABLE = ("collectives", "compressors", "environments", "primitives", "profiles", "schedules")


@app.command("list")
def list_(
    what: Annotated[str, typer.Argument(help=" | ".join(LISTABLE))],
    primitive: Annotated[str | None, typer.Option(help="only algorithms of this primitive")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """List collective algorithms, compressors, preset environments, primitives, model profiles or schedules."""
    from rich.table import Table

    if what not in LISTABLE:
        raise UsageError(f"cannot list {what!r}; choose one of: {', '.join(LISTABLE)}")
    if what == "collectives":
        rows = [cm.collective(x) for x in cm.collectives(primitive)]
        data = [{"name": c.name, "primitive": c.primitive, "domain": c.domain.describe(),
                 "lower_bound": c.is_lower_bound, "source": c.source} for c in rows]
        cols = ("name", "primitive", "domain", "source")
    elif what == "environments":
        data = [{"name": e.name, "description": e.description, "summary": e.summary(), "source": e.source}
                for e in (cm.environment(x) for x in cm.environments())]
        cols = ("name", "description", "summary")
    elif what == "profiles":
        data = [{"name": x.name, "layers": len(x), "params": x.params, "batch_size": x.batch_size,
                 "origin": x.origin, "device": x.device} for x in (cm.profile(n) for n in cm.profiles())]
        cols = ("name", "layers", "params", "batch_size", "origin")
    elif what == "compressors":
        data = [{"name": c.name, "primitive": c.primitive, "description": c.description, "source": c.source}
                for c in (cm.compressor(n) for n in cm.compressors())]
        cols = ("name", "primitive", "description")
    elif what == "schedules":
        data = [{"name": s.name, "description": s.description, "options": dict(s.options), "source": s.source}
                for s in (cm.schedule(n) for n in cm.schedules())]
        cols = ("name", "description", "options")
    else:
        data = [{"name": k, "n": v} for k, v in cm.PRIMITIVES.items()]
        cols = ("name", "n")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table(*cols, title=f"commscope {what}")
    for d in data:
        table.add_row(*(str(d[c]) for c in cols))
    _console().print(table)


# ------------------------------------------------------------------------------------ predict
def _resolve_env(env: str | None, alpha: float | None, beta: float | None, gamma: float | None) -> cm.Environment:
    if env is None and alpha is None and beta is None:
        raise UsageError("give --env NAME|FILE.json, or --alpha and --beta (seconds and seconds/byte)")
    if env is not None:
        base = cm.environment(env)
        changes = {k: v for k, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma)) if v is not None}
        return base.with_(**changes) if changes else base
    if alpha is None or beta is None:
        raise UsageError("a custom environment needs both --alpha and --beta")
    return cm.Environment(alpha=alpha, beta=beta, gamma=gamma or 0.0)


def _parse_params(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param must look like NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--param {key}: value must be a number, got {value!r}") from None
    return out


def _sizes(size: list[str], min_size: str | None, max_size: str | None, factor: float) -> list[int]:
    sizes = [cm.parse_size(s) for s in size]
    if (min_size is None) != (max_size is None):
        raise UsageError("a range needs both --min-size and --max-size")
    if min_size is not None and max_size is not None:
        sizes += cm.size_range(cm.parse_size(min_size), cm.parse_size(max_size), factor)
    if not sizes:
        raise UsageError("give at least one --size, or a range with --min-size/--max-size/--factor")
    return sizes


@predict_app.command("collective")
def predict_collective(
    algorithm: Annotated[list[str], typer.Option("--algorithm", "-a",
                         help="algorithm name(s), comma-separated or repeated; 'auto' = cheapest of --primitive")],
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
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Time, algbw and busbw of collective algorithms (nccl-tests conventions)."""
    environment = _resolve_env(env, alpha, beta, gamma)
    names = [x.strip() for a in algorithm for x in a.split(",") if x.strip()]
    if not names:
        raise UsageError("--algorithm is empty")
    sizes = _sizes(size, min_size, max_size, factor)
    params = _parse_params(param)
    known = {q.name for x in names for q in (
        [q for a in cm.collectives(primitive, include_bounds=False) for q in cm.collective(a).params]
        if x == "auto" else cm.collective(x).params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise UsageError(f"--param {', '.join(unknown)}: no chosen algorithm has such a parameter; "
                         f"theirs: {', '.join(sorted(known)) or 'none'}")
    rows: list[dict[str, Any]] = []
    for ranks in p:
        for name in names:
            if name == "auto":
                pick = cm.cheapest(primitive, sizes, ranks, environment, **params)
                algos, times = list(pick.algorithm), [float(x) for x in pick.time]
            else:
                c = cm.collective(name)
                mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
                t = c.time(sizes, ranks, environment, **mine)
                algos, times = [c.name] * len(sizes), [float(x) for x in t]
            for nbytes, algo, t in zip(sizes, algos, times, strict=False):
                prim = cm.collective(algo).primitive
                bw = nbytes / t if t > 0 else None  # nothing to move (p = 1 or n = 0): no bandwidth
                factor_ = cm.busbw_factor(prim, ranks) if prim in ("allreduce", "reduce_scatter", "allgather",
                                                                     "all_to_all", "broadcast", "reduce") else None
                rows.append({"algorithm": algo, "p": ranks, "bytes": nbytes, "size": cm.format_size(nbytes),
                             "time_s": t, "algbw_GBps": None if bw is None else bw / 1e9,
                             "busbw_GBps": None if factor_ is None or bw is None else bw * factor_ / 1e9})
    if as_json:
        print(json.dumps({"environment": environment.to_dict(), "results": rows}, indent=2, allow_nan=False))
        return
    from rich.table import Table

    table = Table("algorithm", "p", "size", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                  title=f"predicted on {environment.name}: {environment.summary()}")
    for r in rows:
        table.add_row(r["algorithm"], str(r["p"]), r["size"], str(r["bytes"]), f"{r['time_s'] * 1e6:.2f}",
                      "-" if r["algbw_GBps"] is None else f"{r['algbw_GBps']:.3f}",
                      "-" if r["busbw_GBps"] is None else f"{r['busbw_GBps']:.3f}")
    _console().print(table)


def _int_list(items: list[str], what: str) -> list[int]:
    out = []
    for item in items:
        for x in item.split(","):
            x = x.strip()
            if not x:
                continue
            try:
                v = int(x)
            except ValueError:
                raise UsageError(f"{what} must be positive integers (e.g. 4,8,16), got {x!r}") from None
            if v < 1:
                raise UsageError(f"{what} must be positive integers, got {v}")
            out.append(v)
    if not out:
        raise UsageError(f"give at least one value for {what}")
    return out


def _options(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option must look like NAME=VALUE, got {item!r}")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value  # sizes such as 25MiB are parsed by the schedule
    return out


@predict_app.command("iteration")
def predict_iteration(
    model: Annotated[str, typer.Option(help="shipped profile name (commscope list profiles) or a profile JSON file")],
    p: Annotated[list[str], typer.Option("--p", "-p", help="workers, comma-separated or repeated: 4,8,16")],
    schedule: Annotated[list[str], typer.Option("--schedule", help="schedule(s), comma-separated")] = ["wfbp"],  # noqa: B006
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    collective: Annotated[str | None, typer.Option(help="collective algorithm (default: cheapest per message)")] = None,
    compressor: Annotated[list[str], typer.Option(
        "--compressor", help="gradient compressor(s), e.g. topk:0.01, fp16, qsgd:8 (comma-separated)")] = [],  # noqa: B006
    option: Annotated[list[str], typer.Option(
        "--option", help="schedule option NAME=VALUE, e.g. bucket_bytes=25MiB")] = [],  # noqa: B006
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the timeline as a Chrome/Perfetto trace JSON")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Iteration time, throughput and scaling efficiency of training schedules."""
    environment = _resolve_env(env, alpha, beta, None)
    prof = cm.load_profile(model) if model.endswith(".json") or "/" in model else cm.profile(model)
    names = [x.strip() for s in schedule for x in s.split(",") if x.strip()]
    for name in names:
        cm.schedule(name)  # unknown names fail before any work
    ranks = _int_list(p, "--p")
    opts = _options(option)
    allowed = sorted({k for n in names for k in cm.schedule(n).options})
    unused = sorted(set(opts) - set(allowed))
    if unused:
        raise UsageError(f"--option {', '.join(unused)}: no chosen schedule has it; theirs: "
                         f"{', '.join(allowed) or 'none'}")
    specs: list[str | None] = [x.strip() for c in compressor for x in c.split(",") if x.strip()] or [None]
    rows, results = [], []
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
    if trace is not None:
        for r in results:
            spec = r.details.get("compressor")
            tag = r.schedule + (f".{spec.replace(':', '-')}" if spec else "")
            path = trace if len(results) == 1 else trace.with_name(f"{trace.stem}.{tag}.p{r.p}{trace.suffix}")
            r.timeline.save_chrome_trace(path, process=f"commscope {prof.name} {r.schedule} p={r.p}")
    if as_json:
        print(json.dumps({"environment": environment.to_dict(), "profile": prof.name, "results": rows}, indent=2,
                         allow_nan=False))
        return
    from rich.table import Table

    table = Table("schedule", "compressor", "p", "iteration (ms)", "samples/s", "speedup", "efficiency",
                  "exposed comm (ms)",
                  title=f"{prof.name} (batch {prof.batch_size}, {prof.origin} on {prof.device}) on {environment.name}")
    for r in rows:
        table.add_row(r["schedule"], r["compressor"] or "-", str(r["p"]), f"{r['iteration_s'] * 1e3:.2f}",
                      f"{r['throughput']:.1f}",
                      f"{r['speedup']:.2f}", f"{r['efficiency']:.3f}", f"{r['exposed_comm_s'] * 1e3:.2f}")
    _console().print(table)


# ------------------------------------------------------------------------------ convergence
def _finite_or_none(x: Any) -> float | None:
    """JSON has no inf: an unreachable target (inf iterations or seconds) is written as null."""
    return float(x) if x is not None and np.isfinite(x) else None


def _constants(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--constant must look like NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--constant {key.strip()}: value must be a number, got {value!r}") from None
    return out


CONSTANT_FLAGS = ("L", "sigma", "Delta", "n", "H", "tau", "s", "zeta", "gap", "delta", "omega", "mu")


def _flag(name: str) -> str:
    return f"--{name}" if name in CONSTANT_FLAGS else f"--constant {name}=VALUE"


def _count(x: float | None) -> str:
    return "never" if x is None or not np.isfinite(x) else f"{x:,.0f}"


@predict_app.command("convergence")
def predict_convergence(
    eps: Annotated[float, typer.Option(help="target of the bound's metric, e.g. 1e-3")],
    bound: Annotated[list[str], typer.Option("--bound", help="bound name(s), comma-separated (default: all)")] = [],  # noqa: B006
    L: Annotated[float | None, typer.Option("--L", help="smoothness (default 1)")] = None,
    sigma: Annotated[float | None, typer.Option("--sigma", help="gradient noise per worker (default 1)")] = None,
    Delta: Annotated[float | None, typer.Option("--Delta", help="f(x0) - f* (default 1)")] = None,
    n: Annotated[int | None, typer.Option("--n", help="workers (default 16)")] = None,
    H: Annotated[float | None, typer.Option("--H", help="local steps between averagings (default 8)")] = None,
    tau: Annotated[float | None, typer.Option("--tau", help="maximum delay in updates (default n - 1)")] = None,
    s: Annotated[float | None, typer.Option("--s", help="staleness in clocks (default 1)")] = None,
    zeta: Annotated[float | None, typer.Option("--zeta", help="heterogeneity (default 0)")] = None,
    gap: Annotated[float | None, typer.Option("--gap", help="spectral gap of the mixing matrix")] = None,
    topology: Annotated[str | None, typer.Option(
        "--topology", help="gossip topology giving the gap at n: ring (default), torus, exponential, complete")] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="contraction of a biased compressor")] = None,
    omega: Annotated[float | None, typer.Option("--omega", help="variance of an unbiased compressor")] = None,
    mu: Annotated[float | None, typer.Option("--mu", help="strong convexity")] = None,
    constant: Annotated[list[str], typer.Option(
        "--constant", help="any other constant NAME=VALUE, e.g. D0=1 (repeatable)")] = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Iterations, stochastic-gradient queries and step size at which convergence bounds reach eps."""
    import convergence as cv

    if not np.isfinite(eps) or eps <= 0:
        raise UsageError(f"--eps must be a finite number > 0, got {eps!r}")
    explicit = [x.strip() for b in bound for x in b.split(",") if x.strip()]
    chosen = [cv.bound(x) for x in explicit] if explicit else [cv.bound(x) for x in cv.bounds()]
    flags = {"L": L, "sigma": sigma, "Delta": Delta, "n": n, "H": H, "tau": tau, "s": s, "zeta": zeta, "gap": gap,
             "delta": delta, "omega": omega, "mu": mu}
    given = {k: float(v) for k, v in flags.items() if v is not None}
    for k, v in _constants(constant).items():
        if k in given:
            raise UsageError(f"{k} is given twice (--{k} and --constant {k}=...)")
        given[k] = v
    if "gap" in given and topology is not None:
        raise UsageError("give --gap or --topology, not both")
    takes = {x.name for b in chosen for x in b.assumptions}
    unused = sorted(set(given) - takes) + (["topology"] if topology is not None and "gap" not in takes else [])
    if unused:
        raise UsageError(f"{', '.join(_flag(k) for k in unused)}: no chosen bound takes it; they take "
                         f"{', '.join(sorted(takes))}")
    workers = int(given.get("n", 16))
    defaults: dict[str, float] = {"L": 1.0, "sigma": 1.0, "Delta": 1.0, "n": workers, "H": 8, "tau": workers - 1,
                                  "s": 1}
    if "gap" in takes and "gap" not in given:
        defaults["gap"] = cv.spectral_gap(topology or "ring", workers)
    rows = []
    for b in chosen:
        names = [x.name for x in b.assumptions]
        values = {k: given[k] if k in given else defaults[k] for k in names if k in given or k in defaults}
        missing = [k for k in names if k not in values and k not in b.defaults]
        row: dict[str, Any] = {"bound": b.name, "setting": b.setting, "kind": b.kind, "measure": b.measure,
                               "constants": values, "iterations": None, "queries": None, "step_size": None,
                               "source": b.source, "note": ""}
        rows.append(row)
        if missing:
            row["note"] = f"needs {', '.join(_flag(k) for k in missing)}"
            if explicit:
                raise UsageError(f"bound {b.name} {row['note']} (it takes {', '.join(names)})")
            continue
        try:
            t = float(b.iterations_to(eps, **values))
            queries = float(b.queries_to(eps, **values))
        except cm.CommscopeError as exc:
            if explicit:
                raise
            row["note"] = str(exc)
            continue
        row["iterations"], row["queries"] = t, queries
        if np.isfinite(t):
            try:
                row["step_size"] = float(b.step_size(t, **values))
            except NotImplementedError:  # a lower bound has no step of its own
                pass
    if as_json:
        out = [{**r, "iterations": _finite_or_none(r["iterations"]), "queries": _finite_or_none(r["queries"]),
                "step_size": _finite_or_none(r["step_size"])} for r in rows]
        print(json.dumps({"eps": eps, "results": out}, indent=2, allow_nan=False))
        return
    from rich.table import Table

    table = Table("bound", "setting", "iterations to eps", "SG queries", "step size", "source",
                  title=f"convergence bounds at eps = {eps:g}")
    for r in rows:
        if r["note"] and r["iterations"] is None:
            table.add_row(r["bound"], r["setting"], r["note"], "-", "-", r["source"])
            continue
        kind = " (lower bound)" if r["kind"] == "lower" else ""
        table.add_row(r["bound"] + kind, r["setting"], _count(r["iterations"]), _count(r["queries"]),
                      "-" if _finite_or_none(r["step_size"]) is None else f"{r['step_size']:.4g}", r["source"])
    _console().print(table)


@predict_app.command("tta")
def predict_tta(
    model: Annotated[str, typer.Option(help="shipped profile name (commscope list profiles) or a profile JSON file")],
    p: Annotated[list[str], typer.Option("--p", "-p", help="workers, comma-separated or repeated: 8,32")],
    eps: Annotated[float, typer.Option(help="target of the bounds' metric (average squared gradient norm)")],
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    algorithms: Annotated[list[str], typer.Option(
        "--algorithms", "-a", help="algorithms as name or name:value, comma-separated, e.g. sgd,local_sgd:16,"
                                   "topk:0.001,dpsgd:torus (default: every one with a registered bound)")] = [],  # noqa: B006
    L: Annotated[float | None, typer.Option("--L", help="smoothness (default 1)")] = None,
    sigma: Annotated[float | None, typer.Option("--sigma", help="gradient noise per worker (default 1)")] = None,
    Delta: Annotated[float | None, typer.Option("--Delta", help="f(x0) - f* (default 1)")] = None,
    zeta: Annotated[float | None, typer.Option("--zeta", help="heterogeneity (default 0)")] = None,
    mu: Annotated[float | None, typer.Option("--mu", help="strong convexity (strongly convex bounds)")] = None,
    constant: Annotated[list[str], typer.Option(
        "--constant", help="any other problem constant NAME=VALUE (repeatable)")] = [],  # noqa: B006
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Time to accuracy: iterations each algorithm's bound needs to reach eps, times its predicted iteration time."""
    from convergence.tta import format_duration, time_to_accuracy

    environment = _resolve_env(env, alpha, beta, None)
    prof = cm.load_profile(model) if model.endswith(".json") or "/" in model else cm.profile(model)
    ranks = _int_list(p, "--p")
    names = [x.strip() for a in algorithms for x in a.split(",") if x.strip()] or None
    constants = {k: v for k, v in (("L", L), ("sigma", sigma), ("Delta", Delta), ("zeta", zeta), ("mu", mu))
                 if v is not None}
    for k, v in _constants(constant).items():
        if k in constants:
            raise UsageError(f"{k} is given twice (--{k} and --constant {k}=...)")
        constants[k] = v
    r = time_to_accuracy(prof, environment, ranks, eps, names, **constants)
    rows = r.rows()
    summaries = [r.summary(j) for j in range(len(r.p))]
    if as_json:
        out = [{**x, "iterations": _finite_or_none(x["iterations"]), "seconds": _finite_or_none(x["seconds"]),
                "ratio_to_best": _finite_or_none(x["ratio_to_best"])} for x in rows]
        winners = [{"p": int(q), "winner": r.algorithms[w] if w >= 0 else None,
                    "margin": _finite_or_none(float(r.margin[j])), "summary": summaries[j]}
                   for j, (q, w) in enumerate(zip(r.p, r.winner, strict=True))]
        print(json.dumps({"environment": environment.to_dict(), "profile": prof.name, "eps": eps,
                          "constants": dict(r.constants), "results": out, "winners": winners}, indent=2,
                         allow_nan=False))
        return
    from rich.table import Table

    console = _console()
    for j, q in enumerate(r.p):
        table = Table("algorithm", "bound", "iterations", "s/iteration", "time to eps", "ratio to best",
                      title=f"time to eps = {eps:g}: {prof.name} on {environment.name}, p = {int(q)}")
        for x in rows[j * len(r.algorithms):(j + 1) * len(r.algorithms)]:
            ratio = x["ratio_to_best"]
            table.add_row(x["algorithm"] + (" *" if x["winner"] else ""), x["bound"], _count(x["iterations"]),
                          f"{x['seconds_per_iteration']:.4g}", format_duration(x["seconds"]),
                          "-" if not np.isfinite(ratio) else f"{ratio:.3g}x")
        console.print(table)
        console.print(summaries[j])
    for name, note in {x["algorithm"]: x["note"] for x in rows if x["note"]}.items():
        console.print(f"note: {name}: {note}")


# ---------------------------------------------------------------------------------------- show
@app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="a collective algorithm or an environment preset")],
) -> None:
    """Formula, domain, parameters and source of a collective, or the numbers of an environment."""
    if name in cm.PRESETS:
        print(cm.environment(name).to_json())
        return
    c = cm.collective(name)
    print(f"{c.name} ({c.primitive}): {c.description}")
    print(f"  T = {c.expr}")
    print(f"  domain: {c.domain.describe()}")
    for q in c.params:
        print(f"  parameter {q.name}: {q.description} (default {q.default_text})")
    print(f"  source: {c.source}")


# ----------------------------------------------------------------------------------------- app
@app.command("app", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def app_(ctx: typer.Context) -> None:
    """Serve the Streamlit app; Streamlit's own flags pass through (e.g. --server.port 8600)."""
    from runners._extras import require

    require("streamlit", "commscope app")
    require("plotly", "commscope app")
    import importlib.util

    spec = importlib.util.find_spec("app.main")
    if spec is None or spec.origin is None:
        raise UsageError("cannot find the app's entry point app/main.py; reinstall commscope")
    entry = Path(spec.origin)
    args = list(ctx.args)
    defaults = {"--server.headless": "true", "--browser.gatherUsageStats": "false"}
    for flag, value in defaults.items():
        if not any(a == flag or a.startswith(flag + "=") for a in args):
            args += [flag, value]
    os.execv(sys.executable, [sys.executable, "-m", "streamlit", "run", str(entry), *args])


# commands kept in modules of their own (each imports its heavy dependencies only when it runs)
for _module in (cli_fit, cli_emulate, cli_bench, cli_profile, cli_train, cli_validate):
    _module.register(app)


# ---------------------------------------------------------------------------------------- main
def _click_exceptions() -> tuple[type[BaseException], type[BaseException], type[BaseException]]:
    """(ClickException, Exit, Abort) of the click that typer uses (newer typers vendor their own)."""
    mod = sys.modules[typer.BadParameter.__module__]
    return mod.ClickException, typer.Exit, typer.Abort


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``commscope`` script: one-line errors with exit code 2."""
    from runners._extras import MissingExtraError

    click_error, click_exit, click_abort = _click_exceptions()
    command = typer.main.get_command(app)
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting with it
        result = command.main(args=argv, prog_name="commscope", standalone_mode=False)
    except click_exit as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except click_abort:
        print("commscope: aborted", file=sys.stderr)
        return 1
    except click_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # help was asked for by giving nothing
            print(exc.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
        print(f"commscope: error: {msg}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2) or 2)
    except (cm.CommscopeError, MissingExtraError) as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
