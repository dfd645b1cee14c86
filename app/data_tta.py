"""Tables of the Time-to-accuracy page, from :mod:`convergence` (pure functions, no Streamlit).

Seconds to eps per technique, each technique's time over SGD's and the schedule that prices it (:func:`tta_table`,
:func:`tta_sentence`, :func:`ranking_sentence`) and the winner over bandwidth x p (:func:`winner_table`).
Constants arrive as plain numbers, or as measured "constants" records (``commscope constants``; shipped ones
from :func:`shipped_constants`, uploaded ones through :mod:`app.uploads`) that ``cv.time_to_accuracy(...,
constants=records)`` reads; nothing typed by a user is ever parsed as an expression.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import convergence as cv
import costmodels as cm
from convergence.algorithms import algorithm, available
from convergence.tta import format_duration

TECHNIQUES = tuple(available())  # ranked on the average squared gradient norm


def technique_parameter(name: str) -> tuple[str | None, Any]:
    """The technique's knob and its default (``("H", 8)`` for local_sgd, ``(None, None)`` for sgd)."""
    a = algorithm(name)
    return a.parameter, a.default_value


def technique_spec(name: str, value: Any = None) -> str:
    """``"local_sgd:16"`` from a technique and a widget's value (None: the default)."""
    a = algorithm(name)
    if a.parameter is None or value is None:
        return name
    v = value if isinstance(value, str) else format(float(value), "g")
    return f"{name}:{v}"


def format_bandwidth(bps: float) -> str:
    """``1.18 GB/s`` (decimal units of bytes per second)."""
    for unit, size in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.3g} {unit}"
    return f"{bps:.3g} B/s"


TTA_COLUMNS = ["technique", "name", "schedule", "bound", "iterations", "seconds_per_iteration", "seconds", "time",
               "ratio_to_sgd", "ratio_to_best", "winner", "note"]
UNITS = {  # column -> (header with its unit, help): the page's table labels
    "technique": ("technique", "the algorithm and its parameter"),
    "schedule": ("schedule priced", "the cost-model schedule, collective and compressor that price one iteration"),
    "bound": ("bound", "the convergence bound that counts its iterations"),
    "iterations": ("iterations to eps (count)", "smallest T at which the bound is <= eps"),
    "seconds_per_iteration": ("time / iteration (s)", "the cost model's seconds per iteration"),
    "seconds": ("time to eps (s)", "iterations x seconds per iteration"),
    "time": ("time to eps", "the same, in readable units"),
    "ratio_to_sgd": ("time / SGD's (ratio)", "time to eps over sgd's; < 1 is faster than SGD"),
    "ratio_to_best": ("time / winner's (ratio)", "time to eps over the fastest technique's"),
}
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "runners" / "reference" / "convergence"
"""Where a shipped convergence run keeps its measured constants (``*.jsonl`` with records of kind "constants")."""


def shipped_constants(directory: str | Path = SHIPPED_DIR) -> tuple[list[dict[str, Any]], list[str]]:
    """The "constants" records of the shipped convergence run, and the files they came from (both empty when
    the repository ships none)."""
    from runners import results

    records, files = [], []
    for path in sorted(Path(directory).glob("*.jsonl")):
        found = results.load(path, kind="constants").records
        if found:
            records += found
            files.append(path.name)
    return records, files


def tta_table(model: str, env: cm.Environment, p: int, eps: float, specs: Sequence[str],
              constants: Mapping[str, float], records: Sequence[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Seconds to eps of each technique (``cv.time_to_accuracy``) at one environment and p, fastest first, with
    its time over SGD's (nan without sgd) and the schedule priced; ``records``: measured "constants" records
    (``constants`` then override them). ``df.attrs``: the constants used and where they came from."""
    r = cv.time_to_accuracy(model, env, int(p), eps, list(specs), None if records is None else list(records),
                            **constants)
    df = pd.DataFrame(r.rows())
    df = df.rename(columns={"algorithm": "technique"})
    df["time"] = [format_duration(s) for s in df["seconds"]]
    df = df[TTA_COLUMNS].sort_values("seconds", kind="stable").reset_index(drop=True)
    df.attrs.update(constants=dict(r.constants), source=r.constants_source)
    return df


def winner_table(model: str, env: cm.Environment, bandwidths: Sequence[float], ps: Sequence[int], eps: float,
                 specs: Sequence[str], constants: Mapping[str, float],
                 records: Sequence[Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Long table over bandwidth x p x technique (``cv.winner_map`` at the environment's latency):
    bandwidth_Bps, p, technique, seconds, iterations, seconds_per_iteration, winner (the technique that
    wins that cell, ``-`` where no bound reaches eps)."""
    m = cv.winner_map(model, env, np.asarray(bandwidths, dtype=float), [env.alpha], np.asarray(ps), eps, list(specs),
                      None if records is None else list(records), **constants)
    names = m.winner_names()[:, 0, :]  # (bandwidth, p)
    nb, npp = len(m.bandwidths), len(m.p)
    frames = []
    for i, label in enumerate(m.algorithms):
        frames.append(pd.DataFrame({
            "bandwidth_Bps": np.repeat(m.bandwidths, npp), "p": np.tile(m.p, nb).astype(int), "technique": label,
            "seconds": m.time[i, :, 0, :].reshape(-1), "iterations": m.iterations[i, :, 0, :].reshape(-1),
            "seconds_per_iteration": m.seconds_per_iteration[i, :, 0, :].reshape(-1),
            "winner": names.reshape(-1)}))
    return pd.concat(frames, ignore_index=True)


def tta_sentence(table: pd.DataFrame, model: str, env_name: str, p: int, eps: float) -> str:
    """Who reaches eps first, and by how much over the runner-up (markdown), from :func:`tta_table`."""
    where = f"On {env_name} with {p} workers and {model}"
    win = table[table["winner"]]
    if win.empty:
        return f"{where}, no technique's bound reaches eps = {eps:g}."
    w = win.iloc[0]
    line = (f"{where}, **{w['technique']}** reaches eps = {eps:g} first ({w['time']}: {w['iterations']:.4g} "
            f"iterations of {w['seconds_per_iteration']:.4g} s)")
    ranked = table[np.isfinite(table["ratio_to_best"].astype(float)) & ~table["winner"]]
    ranked = ranked[np.isfinite(ranked["seconds"].astype(float))]
    if ranked.empty:
        return line + "."
    r = ranked.iloc[0]
    return line + f", {r['ratio_to_best']:.3g}x faster than the runner-up {r['technique']} ({r['time']})."


def ranking_sentence(table: pd.DataFrame) -> str:
    """The techniques ranked by time to eps over SGD's, in words (markdown), from :func:`tta_table`: bounds are
    worst-case, so the ratio, not the seconds, is the answer."""
    ratio = table["ratio_to_sgd"].astype(float)
    if not np.isfinite(ratio).any():
        return "Add **sgd** to the techniques to rank them by their time to eps over SGD's."
    ranked = table[np.isfinite(ratio)].sort_values("ratio_to_sgd", kind="stable")
    parts = [f"{t} {x:.3g}x" for t, x in zip(ranked["technique"], ranked["ratio_to_sgd"], strict=True)]
    faster = ranked.loc[ranked["ratio_to_sgd"] < 1, "technique"].tolist()
    lead = (f"{', '.join(faster)} {'reaches' if len(faster) == 1 else 'reach'} eps sooner than SGD"
            if faster else "No technique's bound reaches eps sooner than SGD's")
    rest = table.loc[~np.isfinite(ratio) & (table["technique"] != "sgd"), "technique"].tolist()
    tail = f" Not ranked (another metric, or never reaching eps): {', '.join(rest)}." if rest else ""
    return f"{lead}. Ranked by time to eps over SGD's (worst-case bounds: compare ratios): {', '.join(parts)}.{tail}"


RANKING_COLUMNS = ["rank", "technique", "time", "seconds", "behind_best_pct", "speedup_over_sgd"]


def ranking_table(table: pd.DataFrame) -> pd.DataFrame:
    """The techniques that reach eps, fastest first (the Iteration page's ranking, for time to eps): time, how far
    behind the fastest (%), and speedup over SGD (SGD's time / this one's; NaN without sgd), from
    :func:`tta_table`. Techniques ranked on another metric, or never reaching eps, are left out."""
    secs = table["seconds"].astype(float)
    ranked = table[np.isfinite(secs) & ~table["note"].astype(str).str.contains("not ranked")]
    ranked = ranked.sort_values("seconds", kind="stable").reset_index(drop=True)
    if ranked.empty:
        return pd.DataFrame(columns=RANKING_COLUMNS)
    t = ranked["seconds"].to_numpy(dtype=float)
    out = pd.DataFrame({"rank": np.arange(1, len(ranked) + 1), "technique": ranked["technique"], "time": ranked["time"],
                        "seconds": t, "behind_best_pct": (t / t[0] - 1.0) * 100,
                        "speedup_over_sgd": 1.0 / ranked["ratio_to_sgd"].to_numpy(dtype=float)})
    return out[RANKING_COLUMNS]
