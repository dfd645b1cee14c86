"""``commscope calibrate``: an environment calibrated on a person's own measurements.

    commscope calibrate RECORDS.jsonl... --out env.json [--environment ENV.json] [--profile PROFILE.json]
                        [--terms kappa_c,kappa_m,host_overhead[,contended_step][,compute_loss_step]]
                        [--name NAME] [--json]

What a person with a real cluster does: one collective sweep and two short training jobs (one technique
that overlaps communication with computation, one that does not), then predict the rest. alpha, beta and
gamma come from the sweep (or ``--environment``), kappa_c, kappa_m and host_overhead from the iterations.
The table shows each cell's error three ways: with the sweep only, calibrated on every technique, and
calibrated without the cell's own technique (leave-one-technique-out). The fit comes first and the file is
written last: a failing calibration leaves ``--out`` untouched; ``--out`` is replaced atomically.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import UsageError, check_writable, console, finite_or_none


def _pct(x: float | None) -> str:
    return f"{x:+.1%}" if x is not None and math.isfinite(x) else "-"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float):
        return finite_or_none(x)
    return x


def calibrate_command(
    records: Annotated[list[Path], typer.Argument(help="results files (JSON lines): collective sweeps, iteration and "
                                                       "profile records (commscope bench, train, validate, imports)")],
    out: Annotated[Path | None, typer.Option(help="write the calibrated environment JSON here (atomically)")] = None,
    environment: Annotated[str | None, typer.Option(
        "--environment", help="take alpha, beta, gamma from this environment (preset or JSON) instead of a sweep")
    ] = None,
    profile: Annotated[str | None, typer.Option(
        help="model profile (shipped name or JSON) for every iteration [default: the records' profile records]")
    ] = None,
    terms: Annotated[str, typer.Option(
        help="terms to calibrate, comma-separated (also: contended_step, a message's least time per latency step "
             "beside compute; compute_loss_step, the compute a message on an idle link takes per latency step)")
    ] = "kappa_c,kappa_m,host_overhead",
    name: Annotated[str | None, typer.Option(help="environment name [default: calibrated:<sweep fit name>]")] = None,
    host_buffers: Annotated[Path | None, typer.Option(
        "--host-buffers", help="gloo's host buffer costs measured on the ranks' host ('commscope bench host-buffers "
                               "--out FILE'), given to the sweep's fit")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Calibrate alpha, beta, gamma on sweeps and interference and overhead on measured iterations."""
    import costmodels as cm
    from runners.calibrate import calibrate, solve

    from .common import load_model_profile

    if not records:
        raise UsageError("give at least one results file")
    for path in records:
        if not path.is_file():
            raise UsageError(f"no results file {str(path)!r}")
    if out is not None:
        check_writable(out, "the environment")
    wanted = [t.strip() for t in terms.split(",") if t.strip()]
    bad = [t for t in wanted if t not in solve.TERMS]
    if bad or not wanted:
        raise UsageError(f"--terms {terms!r}: unknown term(s) {', '.join(bad) or '(none)'}; allowed: "
                         f"{', '.join(solve.TERMS)}")
    env = cm.environment(environment) if environment is not None else None
    prof = load_model_profile(profile) if profile is not None else None
    from runners.measure import host_buffers as probe

    host = None if host_buffers is None else probe.load(host_buffers)
    res = calibrate(records, environment=env, profile=prof, terms=wanted, name=name, host=host)
    for b in res.bad:
        print(f"commscope: skipped {b}", file=sys.stderr)
    if out is not None:
        try:
            res.environment.save(out)
        except OSError as exc:
            raise cm.CommscopeError(f"cannot write the environment {str(out)!r}: {exc.strerror or exc}") from None
    if as_json:
        print(json.dumps(_jsonable({**res.to_dict(), "written": str(out) if out else None}), indent=2,
                         allow_nan=False))
        return
    _print(res, out)


def _print(res: Any, out: Path | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    c = console()
    e = res.environment
    net = f"alpha {e.alpha * 1e6:.4g} us, beta {e.beta * 1e9:.4g} ns/B, gamma {e.gamma * 1e9:.4g} ns/B"
    src = "the sweep" if res.sweep is not None else "the given environment"
    c.print(escape(f"{len(res.cells)} measured cell(s) of {', '.join(sorted({x.technique for x in res.cells}))}; "
                   f"network from {src}: {net}"))
    t = Table("term", "value", "95% CI", "status", title="iteration terms")
    for k, f in res.terms.items():
        scale, unit = (1e6, " us") if k == "host_overhead" else (1e3, " ms") if k in ("contended_step",
                                                                                     "compute_loss_step") else (1.0, "")
        ci = f"[{f.ci95[0] * scale:.4g}, {f.ci95[1] * scale:.4g}]{unit}" if f.ci95 else "-"
        t.add_row(k, f"{f.value * scale:.4g}{unit}", ci, escape(f.status + (f": {f.note}" if f.note else "")))
    c.print(t)
    rows = Table("technique", "model", "p", "measured (ms)", "spread", "sweep only", "calibrated",
                 "left out (own technique not calibrated on)", title="error per cell")
    for r in res.rows():
        rows.add_row(r["technique"], r["model"], str(r["p"]), f"{r['measured_s'] * 1e3:,.1f}",
                     f"±{r['spread']:.1%}" if r["spread"] is not None else "-", _pct(r["sweep_only_error"]),
                     _pct(r["calibrated_error"]), _pct(r["left_out_error"]) + (
                         f" ± {r['left_out_stderr']:.1%}" if math.isfinite(r["left_out_stderr"]) else ""))
    c.print(rows)
    s = res.summary()
    c.print(" ; ".join(f"{k.replace('_', ' ')}: median |error| {v['median_abs_error']:.1%}, max "
                       f"{v['max_abs_error']:.1%}" for k, v in s.items() if v["n"]))
    for lo in res.left_out:
        if lo.note:
            c.print(escape(f"note: without {lo.technique}, {lo.note}"))
    if out is not None:
        c.print(escape(f"wrote the environment to {out}"))


def register(app: typer.Typer) -> None:
    """Add ``commscope calibrate`` to the command line."""
    app.command("calibrate")(calibrate_command)
