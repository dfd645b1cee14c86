"""``commscope crossover A B --env ENV -p P``: the message sizes at which two algorithms of one primitive take the
same time (:func:`costmodels.crossover`), and which is faster on each side.

    commscope crossover ring_allreduce recursive_doubling_allreduce --env 10GbE -p 8,64 [--param k=4]
                        [--min-size 1 --max-size 1TiB] [--alpha S --beta S_PER_BYTE --gamma S_PER_BYTE] [--json|--csv]
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Annotated, Any

import typer

import costmodels as cm

from .common import UsageError, console, int_list, parse_numbers, resolve_env
from .predict import OVERFLOW
from .tables import check_format, overflow_checked, write_csv


def regions(a: str, b: str, sizes: list[float], p: int, env: cm.Environment, n_min: float, n_max: float,
            params: dict[str, float]) -> list[dict[str, Any]]:
    """The size ranges between consecutive crossovers (and the ends), each with the faster algorithm at its
    geometric middle (None where they are equal there)."""
    ca, cb = cm.collective(a), cm.collective(b)
    qa = {k: v for k, v in params.items() if k in {q.name for q in ca.params}}
    qb = {k: v for k, v in params.items() if k in {q.name for q in cb.params}}
    edges = [n_min, *sizes, n_max]
    out = []
    for lo, hi in itertools.pairwise(edges):
        mid = math.sqrt(max(lo, 1.0) * hi) if hi > 0 else 0.0
        ta, tb = float(ca.time(mid, p, env, **qa)), float(cb.time(mid, p, env, **qb))
        out.append({"p": p, "from_bytes": lo, "to_bytes": hi, "faster": a if ta < tb else b if tb < ta else None})
    return out


def _size(x: float) -> str:
    return f"{cm.format_size(x)} ({x:,.0f} B)"


def _sentence(r: dict[str, Any], a: str, b: str) -> str:
    parts = r["regions"]
    if not r["crossovers_bytes"]:
        who = parts[0]["faster"]
        where = f"between {cm.format_size(parts[0]['from_bytes'])} and {cm.format_size(parts[0]['to_bytes'])}"
        return (f"p = {r['p']}: no crossover {where}: " +
                (f"{who} is faster everywhere" if who else f"{a} and {b} take the same time"))
    said = []
    for k, x in enumerate(parts):
        who = x["faster"] or "neither"
        if k == 0:
            said.append(f"{who} is faster below {cm.format_size(x['to_bytes'])}")
        elif k == len(parts) - 1:
            said.append(f"{who} above {cm.format_size(x['from_bytes'])}")
        else:
            said.append(f"{who} between {cm.format_size(x['from_bytes'])} and {cm.format_size(x['to_bytes'])}")
    return f"p = {r['p']}: they cross at {', '.join(_size(s) for s in r['crossovers_bytes'])}; {', '.join(said)}"


def crossover_command(
    a: Annotated[str, typer.Argument(help="one algorithm (commscope list collectives)")],
    b: Annotated[str, typer.Argument(help="another algorithm of the same primitive")],
    p: Annotated[list[str], typer.Option("--p", "-p", help="ranks, comma-separated or repeated: 8,64")],
    env: Annotated[str | None, typer.Option(help="preset name or environment JSON file")] = None,
    alpha: Annotated[float | None, typer.Option(help="latency, s (overrides --env)")] = None,
    beta: Annotated[float | None, typer.Option(help="inverse bandwidth, s/byte (overrides --env)")] = None,
    gamma: Annotated[float | None, typer.Option(help="reduction cost, s/byte (overrides --env)")] = None,
    param: Annotated[list[str], typer.Option("--param", help="algorithm parameter NAME=VALUE, e.g. k=4")] = [],  # noqa: B006
    min_size: Annotated[str, typer.Option("--min-size", "-b", help="smallest size searched")] = "1",
    max_size: Annotated[str, typer.Option("--max-size", "-e", help="largest size searched")] = "1TiB",
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="one CSV row per size range and p: which is faster")] = False,
) -> None:
    """Message sizes where two algorithms take the same time, and which one is faster on each side."""
    check_format(as_json, as_csv)
    ca, cb = cm.collective(a), cm.collective(b)
    environment = resolve_env(env, alpha, beta, gamma)
    ranks = int_list(p, "--p")
    params = parse_numbers(param, "--param")
    lo, hi = cm.parse_size(min_size), cm.parse_size(max_size)
    if not lo < hi:
        raise UsageError(f"--min-size must be below --max-size, got {min_size!r} and {max_size!r}")
    formula = cm.crossover_expr(ca.name, cb.name)
    results = []
    for q in ranks:
        qa = {k: v for k, v in params.items() if k in {x.name for x in ca.params}}
        qb = {k: v for k, v in params.items() if k in {x.name for x in cb.params}}
        with overflow_checked():  # times that overflow float64 have no crossover: one error, not a wrong one
            ends = [float(c.time(n, q, environment, **kw)) for c, kw in ((ca, qa), (cb, qb)) for n in (lo, hi)]
        if not all(math.isfinite(t) for t in ends):
            raise UsageError(f"the times of {ca.name} and {cb.name} at p = {q} overflow: {OVERFLOW}")
        x = cm.crossover(ca.name, cb.name, p=q, env=environment, n_min=float(lo), n_max=float(hi), **params)
        results.append({"p": q, "crossovers_bytes": [float(s) for s in x.sizes], "method": x.method,
                        "faster_below": x.cheaper_below,
                        "regions": regions(ca.name, cb.name, x.sizes, q, environment, float(lo), float(hi), params)})
    if as_csv:
        write_csv([{"a": ca.name, "b": cb.name, **g} for r in results for g in r["regions"]])
        return
    if as_json:
        print(json.dumps({"a": ca.name, "b": cb.name, "primitive": ca.primitive, "environment": environment.to_dict(),
                          "formula": None if formula is None else str(formula), "results": results},
                         indent=2, allow_nan=False))
        return
    from rich.markup import escape

    out = console()
    out.print(escape(f"{ca.name} vs {cb.name} ({ca.primitive}) on {environment.name}: {environment.summary()}"))
    if formula is not None:
        out.print(escape(f"crossover size n* = {formula} (both affine in n: at most one)"))
    for r in results:
        out.print(escape(_sentence(r, ca.name, cb.name)))


def register(app: typer.Typer) -> None:
    """Add ``commscope crossover``."""
    app.command("crossover")(crossover_command)
