"""``commscope predict convergence`` and ``commscope predict tta``: iterations each convergence bound needs to
reach eps, and time to accuracy (those iterations times the cost model's iteration time)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
import typer

import costmodels as cm

from .common import UsageError, console, finite_or_none, int_list, load_model_profile, parse_numbers, resolve_env
from .tables import check_finite, check_format, overflow_checked, write_csv

CONSTANT_FLAGS = ("L", "sigma", "Delta", "n", "H", "tau", "s", "zeta", "gap", "delta", "omega", "mu")


def _flag(name: str) -> str:
    return f"--{name}" if name in CONSTANT_FLAGS else f"--constant {name}=VALUE"


def _count(x: float | None) -> str:
    return "never" if x is None or not np.isfinite(x) else f"{x:,.0f}"


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
    as_csv: Annotated[bool, typer.Option("--csv", help="the table as CSV on stdout")] = False,
) -> None:
    """Iterations, stochastic-gradient queries and step size at which convergence bounds reach eps."""
    import convergence as cv

    check_format(as_json, as_csv)
    if not np.isfinite(eps) or eps <= 0:
        raise UsageError(f"--eps must be a finite number > 0, got {eps!r}")
    explicit = [x.strip() for b in bound for x in b.split(",") if x.strip()]
    chosen = [cv.bound(x) for x in explicit] if explicit else [cv.bound(x) for x in cv.bounds()]
    flags = {"L": L, "sigma": sigma, "Delta": Delta, "n": n, "H": H, "tau": tau, "s": s, "zeta": zeta, "gap": gap,
             "delta": delta, "omega": omega, "mu": mu}
    given = {k: float(v) for k, v in flags.items() if v is not None}
    for k, v in parse_numbers(constant, "--constant").items():
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
    for k, v in given.items():  # refused here, before any row: a value no bound can take is the user's mistake
        owner = next(b for b in chosen if k in {x.name for x in b.assumptions})
        try:
            owner.check_constant(k, v)
        except cm.CommscopeError as exc:
            raise UsageError(f"{_flag(k)}: {str(exc).split(': ', 1)[1]}") from None
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
    if as_json or as_csv:
        out = [{**r, "iterations": finite_or_none(r["iterations"]), "queries": finite_or_none(r["queries"]),
                "step_size": finite_or_none(r["step_size"])} for r in rows]
        if as_csv:
            write_csv([{**r, "constants": json.dumps(r["constants"], sort_keys=True)} for r in out])
            return
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
                      "-" if finite_or_none(r["step_size"]) is None else f"{r['step_size']:.4g}", r["source"])
    console().print(table)


MARKS = {  # mark -> what it means, printed under a table for every mark the table shows
    "*": "its bound reaches eps first among the ranked algorithms (the winner)",
    "!": "its bound measures another metric than the others: shown, not ranked",
    "^": "priced at the growing per-worker batch its bound needs (see its note)",
    "m": "its compressor's delta / omega was measured (--constants), not the worst case",
    "never": "its bound stays above eps at every number of iterations",
    "-": "no ratio: the reference (sgd, or the winner) is not chosen or never reaches eps, or bounds another metric",
}


def _marks(x: dict[str, Any], comparable: bool) -> str:
    marks = ("*" if x["winner"] else "") + ("" if comparable else "!") + ("^" if x["batch"] != 1 else "")
    return marks + ("m" if " measured on " in x["note"] else "")


def _ratio(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.3g}x"


def _records(path: str) -> list[dict[str, Any]]:
    """The records of a --constants JSON lines file (bad lines are an error naming the first)."""
    from runners import results

    try:
        loaded = results.load(path)
    except cm.CommscopeError as exc:
        raise UsageError(f"--constants {path}: {exc}") from None
    if loaded.bad:
        b = loaded.bad[0]
        raise UsageError(f"--constants {path}: line {b.line}: {b.reason} ({len(loaded.bad)} bad line(s))")
    return loaded.records


def predict_tta(
    model: Annotated[str, typer.Option(help="shipped profile name (commscope list profiles) or a profile JSON file")],
    p: Annotated[list[str], typer.Option("--p", "-p", help="workers, comma-separated or repeated: 8,32")],
    eps: Annotated[float, typer.Option(help="target of the bounds' metric (average squared gradient norm)")],
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    algorithms: Annotated[list[str], typer.Option(
        "--algorithms", "-a", help="algorithms as name or name:value, comma-separated, e.g. sgd,local_sgd:16,"
                                   "topk:0.001,dpsgd:torus (default: every one with a registered bound)")] = [],  # noqa: B006
    constants_file: Annotated[str | None, typer.Option(
        "--constants", help="JSON lines file of 'constants' records (commscope constants): measured L, sigma, "
                            "Delta, zeta and compressors' delta / omega; --L etc. override them")] = None,
    L: Annotated[float | None, typer.Option("--L", help="smoothness (default 1)")] = None,
    sigma: Annotated[float | None, typer.Option("--sigma", help="gradient noise per worker (default 1)")] = None,
    Delta: Annotated[float | None, typer.Option("--Delta", help="f(x0) - f* (default 1)")] = None,
    zeta: Annotated[float | None, typer.Option("--zeta", help="heterogeneity (default 0)")] = None,
    mu: Annotated[float | None, typer.Option("--mu", help="strong convexity (strongly convex bounds)")] = None,
    constant: Annotated[list[str], typer.Option(
        "--constant", help="any other problem constant NAME=VALUE (repeatable)")] = [],  # noqa: B006
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output (each row's marks, and a "
                                                         "legend of those shown)")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the table as CSV on stdout, with each row's marks")] = False,
) -> None:
    """Time to accuracy: iterations each algorithm's bound needs to reach eps, times its predicted iteration time,
    and each algorithm's time over SGD's (bounds are worst-case: compare ratios, not seconds). Marks after a name
    (* ! ^ m) and in a cell (never, -) are explained under each table."""
    from convergence.tta import format_duration, time_to_accuracy

    check_format(as_json, as_csv)
    environment = resolve_env(env, alpha, beta, None)
    prof = load_model_profile(model)
    ranks = int_list(p, "--p")
    names = [x.strip() for a in algorithms for x in a.split(",") if x.strip()] or None
    constants = {k: v for k, v in (("L", L), ("sigma", sigma), ("Delta", Delta), ("zeta", zeta), ("mu", mu))
                 if v is not None}
    for k, v in parse_numbers(constant, "--constant").items():
        if k in constants:
            raise UsageError(f"{k} is given twice (--{k} and --constant {k}=...)")
        constants[k] = v
    records = None if constants_file is None else _records(constants_file)
    try:
        with overflow_checked():  # an overflow is one error below (check_finite), not warnings
            r = time_to_accuracy(prof, environment, ranks, eps, names, records, **constants)
    except cm.CommscopeError as exc:
        text = str(exc)
        if records is not None and text.startswith("constants= "):
            raise UsageError(f"--constants {constants_file}: {text[len('constants= '):]}") from None
        raise
    rows = r.rows()
    check_finite(rows, ("seconds_per_iteration",), lambda x: f"{x['algorithm']} at p = {x['p']}",
                 "give smaller --alpha / --beta (seconds, seconds per byte)")
    summaries = [r.summary(j) for j in range(len(r.p))]
    n_alg = len(r.algorithms)
    marks = [_marks(x, bool(r.comparable[i % n_alg])) for i, x in enumerate(rows)]
    if as_json or as_csv:
        out = [{**x, "marks": m, "iterations": finite_or_none(x["iterations"]), "seconds": finite_or_none(x["seconds"]),
                "ratio_to_best": finite_or_none(x["ratio_to_best"]), "ratio_to_sgd": finite_or_none(x["ratio_to_sgd"])}
               for x, m in zip(rows, marks, strict=True)]
        if as_csv:
            write_csv(out)
            return
        shown = {c for m in marks for c in m} | {"never" for x in out if x["iterations"] is None}
        legend = {k: v for k, v in MARKS.items() if k in shown and k != "-"}
        winners = [{"p": int(q), "winner": r.algorithms[w] if w >= 0 else None,
                    "margin": finite_or_none(float(r.margin[j])), "summary": summaries[j]}
                   for j, (q, w) in enumerate(zip(r.p, r.winner, strict=True))]
        print(json.dumps({"environment": environment.to_dict(), "profile": prof.name, "eps": eps,
                          "constants": dict(r.constants), "constants_source": r.constants_source, "results": out,
                          "winners": winners, "legend": legend}, indent=2, allow_nan=False))
        return
    from rich.table import Table

    out = console()
    shown = {k: f"{v:.4g}" for k, v in r.constants.items()}
    out.print(f"constants: {', '.join(f'{k} = {v}' for k, v in shown.items())}; {r.constants_source}")
    for j, q in enumerate(r.p):
        table = Table("algorithm", "schedule priced", "iterations to eps", "s / iteration", "time to eps",
                      "time / SGD's", "time / best's",
                      title=f"time to eps = {eps:g}: {prof.name} on {environment.name}, p = {int(q)}")
        used: set[str] = set()
        for i, x in enumerate(rows[j * len(r.algorithms):(j + 1) * len(r.algorithms)]):
            marks = _marks(x, bool(r.comparable[i]))
            used.update(marks)
            cells = [_count(x["iterations"]), f"{x['seconds_per_iteration']:.4g}", format_duration(x["seconds"]),
                     _ratio(x["ratio_to_sgd"]), _ratio(x["ratio_to_best"])]
            used.update(c for c in cells if c in ("never", "-"))
            table.add_row(x["algorithm"] + (f" {marks}" if marks else ""), x["schedule"], *cells)
        out.print(table)
        for mark, meaning in MARKS.items():
            if mark in used:
                out.print(f"  {mark}: {meaning}")
        out.print(summaries[j])
    for name, note in {x["algorithm"]: x["note"] for x in rows if x["note"]}.items():
        out.print(f"note: {name}: {note}")
