"""The plausibility guards (:mod:`runners.measure.fit.plausibility`) where the app shows a fit or predicts with
one: :func:`warnings` is pure; :func:`show` draws each as one warning line.

Environments fitted before fits recorded the sizes they saw (``bytes_range``), such as the shipped reference
run's, name their records files in their metadata: the sizes are read from those files when they exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import costmodels as cm
from app.text import md

ROOT = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=32)
def _sizes_in(path: str, primitives: tuple[str, ...], min_bytes: int) -> tuple[float, float] | None:
    from runners import results

    sizes = [int(r["config"]["bytes"]) for r in results.load(path, kind="collective").records
             if r["config"].get("op") in primitives and int(r["config"]["bytes"]) >= min_bytes]
    return (float(min(sizes)), float(max(sizes))) if sizes else None


def measured_sizes(env: cm.Environment) -> tuple[float, float] | None:
    """The smallest and largest size a fitted environment was measured on: its ``bytes_range``, else read from
    the records files its metadata names (None when neither is there)."""
    meta = env.metadata if isinstance(env.metadata, Mapping) else {}
    rng = meta.get("bytes_range")
    if isinstance(rng, (list, tuple)) and len(rng) == 2:
        return float(rng[0]), float(rng[1])
    found = []
    for f in meta.get("files") or []:
        path = Path(str(f.get("path", ""))) if isinstance(f, Mapping) else None
        path = path if path is None or path.is_absolute() else ROOT / path
        if path is not None and path.is_file():
            got = _sizes_in(str(path), tuple(meta.get("primitives") or ()), int(meta.get("min_bytes") or 0))
            if got:
                found.append(got)
    return (min(a for a, _ in found), max(b for _, b in found)) if found else None


def warnings(env: cm.Environment, sizes: Any = None, p: Any = None) -> list[str]:
    """Every guard on a (fitted) environment used at ``sizes`` (bytes) and ``p``; empty for a preset."""
    from runners.measure.fit.plausibility import facts, plausibility

    if facts(env) is None:
        return []
    return plausibility(env, sizes=sizes, p=p, measured_sizes=measured_sizes(env))


def show(env: cm.Environment, sizes: Any = None, p: Any = None, where: Any = None) -> list[str]:
    """Draw each guard as a warning line (in ``where``, default the page) naming the fit; returns them."""
    import streamlit as st

    lines = warnings(env, sizes, p)
    for line in lines:
        (where or st).warning(f"Fit **{md(env.name)}**: {md(line)}", icon=":material/warning:")
    return lines
