"""``commscope fit``: fit an environment's alpha, beta (and gamma, and an intra-node link) to measured results.

    commscope fit RESULTS.jsonl... --primitive allreduce [--algorithm ring_allreduce|auto]
                  [--min-size 64KiB] [--gamma auto|S_PER_BYTE] [--method one|two] [--out env.json]
                  [--record results.jsonl] [--host-buffers host_buffers.json] [--json]

``--method two`` is Hockney's two-regime fit (alpha from the sizes below 64 KiB, beta and gamma from 256 KiB; one
fit over every size on a link whose token bucket the records name), what ``commscope validate`` runs.

Plausibility guards (:mod:`runners.measure.fit.plausibility`) print one ``warning:`` line per number that looks
wrong (faster than the link, RMS error above 15%, a confidence interval that includes zero); ``--json`` lists them
under ``warnings``. The fit comes first and the files are written last: a failing fit leaves ``--out`` and ``--record``
untouched; ``--out`` is replaced atomically. Bad lines of the inputs are reported on stderr
(``file:line: reason``) and skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from .common import UsageError, check_writable, console

PARAM_ORDER = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta")


def _value(name: str, v: float) -> str:
    """A parameter in the units people read: us for latencies, ns/B (and GB/s) for per-byte costs."""
    if name.endswith("alpha"):
        return f"{v * 1e6:.4g} us"
    text = f"{v * 1e9:.4g} ns/B"
    if name.endswith("beta") and v > 0:
        text += f" ({1 / v / 1e9:.4g} GB/s)"
    return text


def _interval(name: str, ci: tuple[float, float] | None) -> str:
    if ci is None:
        return "-"
    lo, hi = ci
    if name.endswith("alpha"):
        return f"[{lo * 1e6:.4g}, {hi * 1e6:.4g}] us"
    return f"[{lo * 1e9:.4g}, {hi * 1e9:.4g}] ns/B"


def _residual_rows(residuals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records of the same (primitive, p, size) in one row: their count, median measured time and error."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in residuals:
        groups.setdefault((r["primitive"], r["p"], r["bytes"]), []).append(r)
    rows = []
    for (prim, p, nbytes), rs_ in sorted(groups.items()):
        rows.append({"primitive": prim, "p": p, "bytes": nbytes, "records": len(rs_),
                     "measured_s": float(np.median([r["measured_s"] for r in rs_])),
                     "predicted_s": rs_[0]["predicted_s"],
                     "rel_error": float(np.median([r["rel_error"] for r in rs_]))})
    return rows


def fit_command(
    results: Annotated[list[Path], typer.Argument(help="results files (JSON lines) with collective records")],
    primitive: Annotated[str, typer.Option(
        help="primitive(s) fitted together, comma-separated, e.g. allreduce,allgather (separates gamma)",
    )] = "allreduce",
    algorithm: Annotated[str | None, typer.Option(
        "--algorithm", "-a", help="algorithm per primitive (comma-separated), or 'auto' to fit and rank every one "
                                  "[default: ring_<primitive>]")] = None,
    min_size: Annotated[str, typer.Option("--min-size", help="leave out smaller records, e.g. 64KiB")] = "0",
    gamma: Annotated[str, typer.Option(help="'auto' (fitted where identifiable, else 0) or a fixed s/byte")] = "auto",
    statistic: Annotated[str, typer.Option(
        help="time of a record: median (time_s), mean of its per-iteration times, or chain (each rank's calls "
             "summed, the slowest rank's; messages back to back)")
    ] = "median",
    out: Annotated[Path | None, typer.Option(help="write the fitted environment JSON here (atomically)")] = None,
    record: Annotated[Path | None, typer.Option(help="append an environment record to this results file")] = None,
    name: Annotated[str | None, typer.Option(help="environment name [default: fitted:<file stems>]")] = None,
    method: Annotated[str, typer.Option(
        help="'one' least-squares fit over the sizes, or 'two' regimes (Hockney: alpha below 64 KiB, beta and "
             "gamma from 256 KiB), as commscope validate fits")] = "one",
    one_link: Annotated[bool, typer.Option(
        "--one-link", help="one alpha and beta for every primitive; by default each code path (primitives of one "
                           "formula) is fitted on its own and kept as primitive_factors where the AIC says so")
    ] = False,
    host_buffers: Annotated[Path | None, typer.Option(
        "--host-buffers", help="the library's host buffer costs measured on the ranks' host ('commscope bench "
                               "host-buffers --out FILE'): priced in gloo's reduce_scatter and allgather, not fitted")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Fit alpha, beta (and gamma where identifiable) of a cost model to measured collective times."""
    import costmodels as cm
    from runners import results as rs
    from runners.measure import fit as fitting
    from runners.measure import host_buffers as probe

    if not results:
        raise UsageError("give at least one results file")
    for path, what, append in ((out, "the environment", False), (record, "the record", True)):
        if path is not None:
            check_writable(path, what, append=append)
    host = None if host_buffers is None else probe.load(host_buffers)
    loaded = {str(p): rs.load(p) for p in results}
    bad = [b for x in loaded.values() for b in x.bad]
    for b in bad:
        print(f"commscope: skipped {b}", file=sys.stderr)
    if method not in ("one", "two"):
        raise UsageError(f"--method must be 'one' or 'two', got {method!r}")
    if method == "two":
        if min_size != "0" or gamma != "auto":
            raise UsageError("--min-size and --gamma apply to --method one (two regimes choose the sizes of each "
                             "parameter)")
        res = fitting.fit_two_regimes(loaded, primitive, algorithm, statistic=statistic, name=name,
                                      per_primitive=not one_link, host=host)
    else:
        res = fitting.fit(loaded, primitive, algorithm, min_bytes=min_size, gamma=gamma, name=name,
                          statistic=statistic, per_primitive=not one_link, host=host)
    warnings = fitting.plausibility(res)  # the same guards as the app's and the predict commands'
    entry = res.record() if record is not None else None  # validated before anything is written
    written: dict[str, str] = {}
    if out is not None:
        try:
            res.environment.save(out)
        except OSError as exc:
            raise cm.CommscopeError(f"cannot write the environment {str(out)!r}: {exc.strerror or exc}") from None
        written["environment"] = str(out)
    if record is not None and entry is not None:
        try:
            rs.append(record, [entry])
        except OSError as exc:
            raise cm.CommscopeError(f"cannot append to {str(record)!r}: {exc.strerror or exc}") from None
        written["record"] = str(record)
    if as_json:
        print(json.dumps({**res.to_dict(), "warnings": warnings, "written": written}, indent=2, allow_nan=False))
        return
    from rich.markup import escape
    from rich.table import Table

    out_console = console()
    files = ", ".join(f"{f['path']} ({f['records']} of {f['records_in_file']} records)" for f in res.files)
    out_console.print(escape(f"{res.algorithm} fitted to {res.records} {'/'.join(res.primitives)} record(s) from "
                             f"{files}; p = {', '.join(map(str, res.world_sizes))}"
                             + (f", {res.ranks_per_node} ranks per node" if res.two_level else "")))
    table = Table("parameter", "value", "95% CI", "status", title=escape(f"environment {res.environment.name}"))
    for key in PARAM_ORDER:
        prm = res.parameters.get(key)
        if prm is None:
            continue
        status = prm.status + (f": {prm.note}" if prm.note else "")
        table.add_row(key, _value(key, prm.value), _interval(key, prm.ci95), escape(status))
    for path in res.code_paths or ():
        table.add_row(f"{'/'.join(path['primitives'])} path", f"alpha x{path['alpha_factor']:.3g}, beta "
                      f"x{path['beta_factor']:.3g}", "-", "fitted on its own (primitive_factors)")
    out_console.print(table)
    out_console.print(f"R^2 = {res.r2:.6f} on times, {res.r2_log:.6f} on log times; relative error: RMS "
                  f"{res.rms_rel_error:.2%}, median {res.median_rel_error:.2%}, max {res.max_rel_error:.2%}; "
                  f"condition number {res.condition_number:.3g}")
    if res.cpu:
        cpu, alpha = res.cpu, res.environment.alpha
        busy = f"; a latency-bound step keeps {cpu['s_per_step'] / alpha:.0%} of a core busy per rank" if alpha else ""
        out_console.print(escape(f"CPU per rank: {cpu['s_per_step'] * 1e6:.3g} us per step + "
                                 f"{cpu['s_per_byte'] * 1e9:.3g} ns per byte (RMS relative error "
                                 f"{cpu['rms_rel_error']:.1%} over {cpu['records']} records){busy}"))
    rows = _residual_rows(res.residuals)
    resid = Table("primitive", "p", "size", "bytes", "records", "measured (us)", "predicted (us)", "rel. error",
                  title="residuals (median over repeated records)")
    for r in rows:
        resid.add_row(r["primitive"], str(r["p"]), cm.format_size(r["bytes"]), str(r["bytes"]), str(r["records"]),
                      f"{r['measured_s'] * 1e6:,.1f}", f"{r['predicted_s'] * 1e6:,.1f}", f"{r['rel_error']:+.2%}")
    out_console.print(resid)
    if res.ranking:
        rank = Table("rank", "algorithm", "RMS rel. error", "max rel. error", "AIC", "delta AIC", "parameters", "note",
                     title="algorithms ranked by AIC (relative residuals)")
        for i, c in enumerate(res.ranking, start=1):
            if c.skipped:
                rank.add_row("-", c.algorithm, "-", "-", "-", "-", "-", escape(f"skipped: {c.skipped}"))
                continue
            rank.add_row(str(i), c.algorithm, f"{c.rms_rel_error:.2%}", f"{c.max_rel_error:.2%}", f"{c.aic:.1f}",
                         f"{c.delta_aic:.1f}", str(c.parameters), escape(c.note))
        out_console.print(rank)
        if res.verdict:
            out_console.print(escape(res.verdict))
    for line in warnings:
        out_console.print(escape(f"warning: {line}"), style="bold yellow")
    for note in res.notes:
        if not (warnings and note.startswith("implausible")):  # said by the warning above, with the numbers
            out_console.print(escape(f"note: {note}"))
    if bad:
        out_console.print(f"note: {len(bad)} bad line(s) skipped (listed on stderr)")
    for what, path in written.items():
        out_console.print(escape(f"wrote {what} to {path}"))


def register(app: typer.Typer) -> None:
    """Add ``commscope fit`` to the command line."""
    app.command("fit")(fit_command)
