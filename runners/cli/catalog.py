"""``commscope list`` and ``commscope show``: what the registries hold (collectives, compressors, environments,
primitives, profiles, schedules), and one collective's formula or one environment's numbers."""

from __future__ import annotations

import json
from typing import Annotated

import typer

import costmodels as cm

from .common import UsageError, console

LISTABLE = ("collectives", "compressors", "environments", "primitives", "profiles", "schedules")


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
    console().print(table)


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
    if c.host != 0:  # the library's own host buffers (costmodels.collectives.host_buffers), after the link
        print(f"    + {c.host}   (host buffers: mu = host_copy, phi = host_fault, s/byte)")
    print(f"  domain: {c.domain.describe()}")
    for q in c.params:
        print(f"  parameter {q.name}: {q.description} (default {q.default_text})")
    print(f"  source: {c.source}")


def register(app: typer.Typer) -> None:
    """Add ``list`` and ``show``."""
    app.command("list")(list_)
    app.command("show")(show)
