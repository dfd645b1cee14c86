"""Tables the app plots, computed from the math layers (pure functions, no Streamlit).

Collectives page: :func:`collective_curves` (registered algorithms), :func:`library_curve` and
:func:`band_table` (what a collective library runs at each size), :func:`crossover_table` and
:func:`crossover_marks`,
:func:`measured_points` (sweep records, the shipped reference run's or published ones) and
:func:`citations` (where published records come from).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations, pairwise
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm


def collective_curves(algorithms: Sequence[str], p: int, env: cm.Environment, sizes: np.ndarray,
                      *, lower_bound: bool = True, params: dict[str, Any] | None = None) -> pd.DataFrame:
    """Long table (algorithm, primitive, bytes, time_s, algbw_GBps, busbw_GBps, kind) over sizes.

    Points outside an algorithm's domain (e.g. p not a power of two) are left out.
    """
    params = params or {}
    names = list(dict.fromkeys(algorithms))
    if lower_bound:
        for prim in sorted({cm.collective(a).primitive for a in names}):
            try:
                lb = cm.lower_bound(prim).name
            except cm.UnknownNameError:
                continue
            if lb not in names:
                names.append(lb)
    frames = []
    for name in names:
        c = cm.collective(name)
        mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
        t = np.asarray(c.time(sizes, p, env, out_of_domain="nan", **mine), dtype=float) * np.ones(len(sizes))
        frame = _rates(name, c.primitive, p, sizes, t, "lower bound" if c.is_lower_bound else "algorithm")
        if len(frame):
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CURVE_COLUMNS)


CURVE_COLUMNS = ["algorithm", "primitive", "bytes", "time_s", "algbw_GBps", "busbw_GBps", "kind"]
BAND_COLUMNS = ["from", "to", "choice", "algorithm", "protocol", "channels", "from_bytes", "to_bytes"]


def _rates(name: str, primitive: str, p: int, sizes: np.ndarray, t: np.ndarray, kind: str) -> pd.DataFrame:
    """One curve of the long table: time, algorithm and bus bandwidth at the sizes where ``t`` is a
    positive number (outside an algorithm's domain, or at p = 1, there is nothing to draw)."""
    ok = np.isfinite(t) & (t > 0)
    algbw = sizes[ok] / t[ok] / 1e9
    try:
        factor = cm.busbw_factor(primitive, p)
    except cm.UnknownNameError:
        factor = np.nan
    return pd.DataFrame({"algorithm": name, "primitive": primitive, "bytes": sizes[ok], "time_s": t[ok],
                         "algbw_GBps": algbw, "busbw_GBps": algbw * factor, "kind": kind}, columns=CURVE_COLUMNS)


def _labels(choice: cm.Choice) -> list[str]:
    """"algorithm/protocol" (or the algorithm alone) at each size, as :func:`cm.choice_bands` names them."""
    return [band[2] for band in cm.choice_bands(range(choice.algorithm.size), choice)
            for _ in range(band[0], band[1] + 1)]


def library_curve(primitive: str, p: int, env: cm.Environment, sizes: np.ndarray, library: str | None = None
                  ) -> tuple[pd.DataFrame, cm.Choice]:
    """What ``library`` (default: the environment's) runs for each of ``sizes`` on p ranks, and what it costs.

    Returns the curve (the columns of :func:`collective_curves`, algorithm ``"library: <name>"``, kind
    ``"library"``, plus ``choice`` ("ring/LL") and ``channels`` at each size) and :func:`cm.choose`'s
    :class:`cm.Choice`. A primitive the library has no rule for is priced by the ``ideal`` library, and the
    curve is named after the library that priced it. Raises :class:`cm.CommscopeError` when the library
    cannot price the primitive at this p.
    """
    sizes = np.asarray(sizes, dtype=float)
    if library is not None and library != env.library:
        env = env.with_(library=library)
    choice = cm.choose(primitive, sizes, int(p), env)
    t = np.broadcast_to(np.asarray(choice.time, dtype=float), sizes.shape)
    frame = _rates(f"library: {choice.library}", primitive, p, sizes, t, "library")
    ok = np.isfinite(t) & (t > 0)
    frame["choice"] = np.asarray(_labels(choice), dtype=object)[ok]
    frame["channels"] = np.broadcast_to(choice.channels, sizes.shape)[ok]
    return frame, choice


def band_table(sizes: np.ndarray, choice: cm.Choice) -> pd.DataFrame:
    """One row per run of sizes over which ``choice`` keeps its algorithm and protocol
    (:func:`cm.choice_bands`): the size range, the choice, and its channel count(s), e.g. "2" or "2-4"."""
    sizes = np.asarray(sizes, dtype=float)
    channels = np.broadcast_to(choice.channels, sizes.shape)
    rows = []
    for first, last, label in cm.choice_bands(sizes, choice):
        i, j = int(np.searchsorted(sizes, first)), int(np.searchsorted(sizes, last))
        lo, hi = int(channels[i:j + 1].min()), int(channels[i:j + 1].max())
        algorithm, _, protocol = label.partition("/")
        rows.append({"from": cm.format_size(first), "to": cm.format_size(last), "choice": label,
                     "algorithm": algorithm, "protocol": protocol or "-",
                     "channels": str(lo) if lo == hi else f"{lo}-{hi}", "from_bytes": first, "to_bytes": last})
    return pd.DataFrame(rows, columns=BAND_COLUMNS)


EQUAL_RTOL = 1e-9  # two times closer than this (relative) are equal: rounding must not make crossovers


def crossover_table(algorithms: Sequence[str], p: int, env: cm.Environment, n_max: float, n_min: float = 1.0,
                    params: dict[str, Any] | None = None) -> pd.DataFrame:
    """Crossover sizes of every pair of the chosen algorithms that implement the same primitive, in [n_min, n_max].

    Found numerically on the cost models themselves: sign changes of T_a - T_b on a log grid of 4096 sizes, each
    refined by Brent's method to 1e-9 relative (the sizes :func:`cm.crossover` finds, without its symbolic
    simplification, which takes most of a second per pair). Pairs not defined at this p are left out.
    """
    from scipy.optimize import brentq

    params = params or {}
    grid = np.geomspace(max(n_min, 1e-3), n_max, 4096)
    rows = []
    for a, b in combinations(dict.fromkeys(algorithms), 2):
        ca, cb = cm.collective(a), cm.collective(b)
        if ca.primitive != cb.primitive or ca.is_lower_bound or cb.is_lower_bound:
            continue
        qa = {k: v for k, v in params.items() if k in {q.name for q in ca.params}}
        qb = {k: v for k, v in params.items() if k in {q.name for q in cb.params}}

        def diff(x: Any, ca=ca, cb=cb, qa=qa, qb=qb) -> Any:
            return (np.asarray(ca.time(x, p, env, out_of_domain="nan", **qa), dtype=float)
                    - np.asarray(cb.time(x, p, env, out_of_domain="nan", **qb), dtype=float))

        d = diff(grid) * np.ones(len(grid))
        if not np.isfinite(d).all():  # one of them is not defined at this p
            continue
        scale = np.abs(np.asarray(ca.time(grid, p, env, out_of_domain="nan", **qa), dtype=float)) * np.ones(len(grid))
        sign = np.where(np.abs(d) <= EQUAL_RTOL * scale, 0, np.sign(d))  # equal up to rounding: no side
        sizes = []
        nonzero = np.nonzero(sign)[0]
        for i, j in pairwise(nonzero):
            if sign[i] == sign[j]:
                continue
            if j == i + 1:  # a crossing between two grid sizes
                sizes.append(float(brentq(lambda x: float(diff(x)), grid[i], grid[j], rtol=1e-9)))
            else:  # equal over a stretch of sizes: the crossover is where they start being equal
                sizes.append(float(grid[i + 1]))
        first = nonzero[0] if len(nonzero) else None
        below = "equal" if first is None else (a if sign[first] < 0 else b)
        for s in sizes or [None]:
            rows.append({"algorithm A": a, "algorithm B": b,
                         "crossover": "none in range" if s is None else cm.format_size(s),
                         "bytes": s, "faster below": below, "method": "numeric (log grid + Brent)"})
    return pd.DataFrame(rows, columns=["algorithm A", "algorithm B", "crossover", "bytes", "faster below", "method"])


def crossover_marks(table: pd.DataFrame, lo: float, hi: float) -> list[tuple[float, str, str]]:
    """(size, algorithm A, algorithm B) of each crossover of :func:`crossover_table` inside [lo, hi]: the marks
    the Collectives plot draws."""
    ok = table["bytes"].notna() if len(table) else []
    return [(float(r["bytes"]), str(r["algorithm A"]), str(r["algorithm B"])) for _, r in table[ok].iterrows()
            if lo <= float(r["bytes"]) <= hi]


def measured_points(records: Sequence[dict[str, Any]], primitive: str) -> pd.DataFrame:
    """Measured sweep points of ``primitive`` from ``collective`` result records: one row per record.

    Columns: bytes, p, time_s (the record's median), busbw_GBps, algbw_GBps, time_p10_s, time_p90_s,
    network (the emulated link's rate, or "host"), label (what the legend shows: ``"published: <system>"``
    for a published record, else ``"measured p=.. (link, backend)"``).
    """
    rows = []
    for r in records:
        if r.get("kind") != "collective" or r["config"].get("op") != primitive:
            continue
        res, run = r["result"], r["run"]
        net = run.get("network") or {}
        link = net.get("rate") or "host"
        p = int(run["world_size"])
        label = (f"published: {r.get('system', '?')}" if r.get("origin") == "published" else
                 f"measured p={p} ({link}, {run.get('backend', '?')})")
        rows.append({"bytes": float(r["config"]["bytes"]), "p": p, "time_s": float(res["time_s"]),
                     "busbw_GBps": float(res.get("busbw_GBps", 0.0)), "algbw_GBps": float(res.get("algbw_GBps", 0.0)),
                     "time_p10_s": float(res.get("time_p10_s", res["time_s"])),
                     "time_p90_s": float(res.get("time_p90_s", res["time_s"])),
                     "network": str(link), "label": label})
    cols = ["bytes", "p", "time_s", "busbw_GBps", "algbw_GBps", "time_p10_s", "time_p90_s", "network", "label"]
    return pd.DataFrame(rows, columns=cols).sort_values(["label", "bytes"]).reset_index(drop=True)


def citations(records: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """The distinct citations of published records, in order: system, source, where, url, notes.

    A source transcribed as "same file as above" is given the source of the first citation with its URL,
    so that it reads on its own."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    sources: dict[str, str] = {}
    for r in records:
        c = r.get("citation")
        if r.get("origin") != "published" or not isinstance(c, dict):
            continue
        row = {"system": str(r.get("system", "")), **{k: str(c.get(k) or "") for k in ("source", "where", "url",
                                                                                        "notes")}}
        if row["source"].lower().startswith("same file as above") and row["url"] in sources:
            row["source"] = sources[row["url"]]
        sources.setdefault(row["url"], row["source"])
        out.setdefault((row["system"], row["url"]), row)
    return list(out.values())
