"""Tables of the Time-to-accuracy page, from :mod:`convergence` (pure functions, no Streamlit).

Seconds to eps per technique (:func:`tta_table`, :func:`tta_sentence`) and the winner over
bandwidth x p (:func:`winner_table`). Constants arrive as plain numbers; nothing typed by a user is
ever parsed as an expression.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


TTA_COLUMNS = ["technique", "name", "bound", "iterations", "seconds_per_iteration", "seconds", "time",
               "ratio_to_best", "winner", "note"]


def tta_table(model: str, env: cm.Environment, p: int, eps: float, specs: Sequence[str],
              constants: Mapping[str, float]) -> pd.DataFrame:
    """Seconds to eps of each technique (``cv.time_to_accuracy``) at one environment and p, fastest first."""
    r = cv.time_to_accuracy(model, env, int(p), eps, list(specs), **constants)
    df = pd.DataFrame(r.rows())
    df = df.rename(columns={"algorithm": "technique"})
    df["time"] = [format_duration(s) for s in df["seconds"]]
    return df[TTA_COLUMNS].sort_values("seconds", kind="stable").reset_index(drop=True)


def winner_table(model: str, env: cm.Environment, bandwidths: Sequence[float], ps: Sequence[int], eps: float,
                 specs: Sequence[str], constants: Mapping[str, float]) -> pd.DataFrame:
    """Long table over bandwidth x p x technique (``cv.winner_map`` at the environment's latency):
    bandwidth_Bps, p, technique, seconds, iterations, seconds_per_iteration, winner (the technique that
    wins that cell, ``-`` where no bound reaches eps)."""
    m = cv.winner_map(model, env, np.asarray(bandwidths, dtype=float), [env.alpha], np.asarray(ps), eps, list(specs),
                      **constants)
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
