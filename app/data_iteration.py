"""Tables of the Iteration page, computed from the schedules (pure functions, no Streamlit).

Scaling curves versus p come from :func:`costmodels.sweep` (vectorized); one iteration's timeline,
breakdown and trace come from :func:`costmodels.simulate`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import costmodels as cm
from costmodels.schedules import COMPRESSIBLE

CURVE_COLUMNS = ["schedule", "compressor", "p", "iteration_time_s", "throughput", "scaling_efficiency", "speedup"]
EVENT_COLUMNS = ["stream", "kind", "name", "start_s", "end_s", "duration_s", "bytes"]
AUTO = "auto"  # the environment's fitted algorithms when it has them, else what its collective library runs
CHEAPEST = "cheapest"
REFERENCE_PREFIX = "measured: "


# ------------------------------------------------------------------------------------- models
def reference_profiles() -> dict[str, Path]:
    """The profiles measured in the shipped reference run: label -> profile JSON path (one per model and link)."""
    from runners import reference

    out = {}
    for link in reference.environments():
        models = reference.profiles(link)
        for model, path in models.items():
            label = f"{link} reference run" if len(models) == 1 else f"{model}, {link} reference run"
            out[f"{REFERENCE_PREFIX}{label}"] = path
    return out


def model_choices() -> list[str]:
    """Shipped profile names, then the measured profiles of the reference run."""
    return [*cm.profiles(), *reference_profiles()]


@cache
def load_model(choice: str) -> cm.ModelProfile:
    """The profile behind a :func:`model_choices` entry (shipped name or reference label)."""
    refs = reference_profiles()
    if choice in refs:
        return cm.load_profile(refs[choice])
    return cm.profile(choice)


# ------------------------------------------------------------------------ worker counts, names
def p_values(lo_exp: int, hi_exp: int, *, dense: bool = False) -> list[int]:
    """Worker counts from 2**lo_exp to 2**hi_exp: powers of two, and 3 * 2**k between them if dense."""
    if hi_exp < lo_exp:
        raise ValueError(f"empty p range 2^{lo_exp}..2^{hi_exp}")
    lo, hi = 2**lo_exp, 2**hi_exp
    ps = {2**k for k in range(lo_exp, hi_exp + 1)}
    if dense:
        ps |= {3 * 2**k for k in range(max(0, lo_exp - 1), hi_exp) if lo <= 3 * 2**k <= hi}
    return sorted(ps)


def collective_for(schedule: str, env: cm.Environment, choice: str = AUTO) -> str | dict[str, str] | None:
    """The ``collective`` argument of a schedule for a page choice (``auto``, ``cheapest`` or a name).

    ``auto``: the algorithms a fitted environment was fitted with (``metadata["algorithms"]``),
    else what the environment's collective library runs (None); ``cheapest`` is None too, priced on
    the environment with the ``ideal`` library (:func:`priced_environment`). The ps schedule always runs
    over the parameter server (None).
    """
    if schedule == "ps" or choice == CHEAPEST:
        return None
    if choice == AUTO:
        algos = env.metadata.get("algorithms") if isinstance(env.metadata, Mapping) else None
        return dict(algos) if isinstance(algos, Mapping) and algos else None
    return choice


def priced_environment(env: cm.Environment, choice: str = AUTO) -> cm.Environment:
    """The environment a page choice prices on: ``cheapest`` swaps in the ``ideal`` library (the cheapest
    registered algorithm at every size); every other choice keeps the environment's own library."""
    return env.with_(library="ideal") if choice == CHEAPEST else env


def compressor_spec(name: str, parameter: float | None = None) -> str | None:
    """``"none"`` -> None; ``("topk", 0.01)`` -> ``"topk:0.01"``; a parameterless name as is."""
    if name in ("none", "", None):
        return None
    entry = cm.compressor(name)
    if entry.parameter is None or parameter is None:
        return entry.name
    return f"{entry.name}:{parameter:g}"


def compressor_conflicts(schedules: Sequence[str], compressor: str | None) -> list[str]:
    """The schedules that cannot carry a compressor (they communicate shards, not gradients)."""
    if compressor is None:
        return []
    return [s for s in schedules if s not in COMPRESSIBLE]


# ---------------------------------------------------------------------------- scaling curves
@dataclass(frozen=True)
class Problem:
    """A schedule that could not be priced at some worker counts, and why."""

    schedule: str
    p: tuple[int, ...]
    message: str

    def describe(self, all_p: Sequence[int]) -> str:
        where = "at any p in the range" if len(self.p) == len(all_p) else f"at p = {', '.join(map(str, self.p))}"
        return f"{self.schedule}: not priced {where}: {self.message}"


def _curve_frame(schedule: str, compressor: str | None, r: cm.SweepResult) -> pd.DataFrame:
    return pd.DataFrame({
        "schedule": schedule, "compressor": compressor or "none", "p": r.p.astype(int),
        "iteration_time_s": r.iteration_time[0], "throughput": r.throughput[0],
        "scaling_efficiency": r.scaling_efficiency[0], "speedup": r.speedup[0],
    })


def scaling_curves(prof: cm.ModelProfile, env: cm.Environment, ps: Sequence[int], schedules: Sequence[str],
                   compressor: str | None = None, collective: str = AUTO, **options: Any
                   ) -> tuple[pd.DataFrame, list[Problem]]:
    """Iteration time, throughput, scaling efficiency and speedup of each schedule at every p.

    One vectorized :func:`costmodels.sweep` per schedule. Where a sweep fails (an algorithm not
    defined at some p), the p values are swept one by one and the failing ones reported as
    :class:`Problem`. Schedules that cannot be compressed are reported, not swept.
    """
    ps = [int(x) for x in ps]
    frames, problems = [], []
    for name in dict.fromkeys(schedules):
        if compressor is not None and name not in COMPRESSIBLE:
            problems.append(Problem(name, tuple(ps), f"compression runs on top of {', '.join(COMPRESSIBLE)} only"))
            continue
        coll = collective_for(name, env, collective)
        env_c = priced_environment(env, collective)
        try:
            swept = cm.sweep(prof, [env_c], ps, name, coll, compressor, **options)
            frames.append(_curve_frame(name, compressor, swept))
            continue
        except cm.CommscopeError:
            pass
        good, bad, message = [], [], ""
        for p in ps:
            try:
                good.append(_curve_frame(name, compressor, cm.sweep(prof, [env_c], [p], name, coll, compressor,
                                                                    **options)))
            except cm.CommscopeError as exc:
                bad.append(p)
                message = message or str(exc)
        frames += good
        problems.append(Problem(name, tuple(bad), message))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CURVE_COLUMNS)
    return df[CURVE_COLUMNS], problems


RANKING_COLUMNS = ["rank", "schedule", "iteration_ms", "throughput", "behind_best_pct", "speedup_over_bsp"]


def ranking_at(curves: pd.DataFrame, p: int) -> pd.DataFrame:
    """The schedules ranked at p, fastest first: iteration time (ms), throughput (samples/s), how far behind the
    fastest (%), and speedup over bsp (bsp's time / this one's; NaN where bsp is not among ``curves``).

    ``curves``: :func:`scaling_curves` at (at least) this p, bsp included for the speedup."""
    at = curves[curves["p"] == int(p)]
    if at.empty:
        return pd.DataFrame(columns=RANKING_COLUMNS)
    names = [s if c == "none" else f"{s} + {c}" for s, c in zip(at["schedule"], at["compressor"], strict=True)]
    t = at["iteration_time_s"].to_numpy(dtype=float)
    bsp = at.loc[at["schedule"] == "bsp", "iteration_time_s"]
    base = float(bsp.iloc[0]) if len(bsp) else np.nan
    df = pd.DataFrame({"schedule": names, "iteration_ms": t * 1e3, "throughput": at["throughput"].to_numpy(float),
                       "behind_best_pct": (t / np.nanmin(t) - 1.0) * 100, "speedup_over_bsp": base / t})
    df = df.sort_values("iteration_ms", kind="stable").reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df[RANKING_COLUMNS]


# ----------------------------------------------------------------------------- one iteration
def simulate_iteration(prof: cm.ModelProfile, env: cm.Environment, p: int, schedule: str,
                       compressor: str | None = None, collective: str = AUTO, **options: Any) -> cm.IterationResult:
    """:func:`costmodels.simulate` with the page's collective choice."""
    return cm.simulate(prof, priced_environment(env, collective), int(p), schedule,
                       collective_for(schedule, env, collective), compressor, **options)


def timeline_table(timeline: cm.Timeline) -> pd.DataFrame:
    """One row per event of the timeline (stream, kind, name, start, end, duration, bytes)."""
    rows = [(e.stream, e.kind, e.label, e.start, e.end, e.duration, e.nbytes) for e in timeline.events]
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def breakdown(result: cm.IterationResult, prof: cm.ModelProfile) -> pd.DataFrame:
    """Parts of the iteration time: forward, backward, compression (encode), exposed communication.

    The parts sum to ``result.iteration_time``. Exposed communication is what the compute does not
    hide: the iteration time minus compute (and minus encoding when a compressor runs; encoding is
    on the compute stream, after each layer's backward).
    """
    total = float(result.iteration_time)
    fwd, bwd = float(prof.forward_s), float(prof.backward_s)
    parts = [("forward", fwd), ("backward", bwd)]
    if result.details.get("compressor"):
        encode = result.timeline.busy("compute") - prof.compute_s
        parts.append(("compression (encode)", min(max(0.0, encode), max(0.0, total - fwd - bwd))))
    parts.append(("exposed communication", total - sum(v for _, v in parts)))
    df = pd.DataFrame(parts, columns=["part", "seconds"])
    df["share"] = df["seconds"] / total if total > 0 else np.nan
    return df


def breakdowns(prof: cm.ModelProfile, env: cm.Environment, p: int, schedules: Sequence[str],
               compressor: str | None = None, collective: str = AUTO) -> tuple[pd.DataFrame, list[Problem]]:
    """:func:`breakdown` of several schedules at one p, long table (schedule, part, seconds, share).

    With a compressor, schedules that cannot carry it are simulated without it and labelled
    ``"<name> (uncompressed)"``.
    """
    frames, problems = [], []
    for name in dict.fromkeys(schedules):
        comp = compressor if name in COMPRESSIBLE else None
        try:
            r = simulate_iteration(prof, env, p, name, comp, collective)
        except cm.CommscopeError as exc:
            problems.append(Problem(name, (int(p),), str(exc)))
            continue
        label = f"{name} (uncompressed)" if compressor is not None and comp is None else name
        frames.append(breakdown(r, prof).assign(schedule=label))
    cols = ["schedule", "part", "seconds", "share"]
    return (pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)), problems


def communication_stats(result: cm.IterationResult, prof: cm.ModelProfile) -> pd.DataFrame:
    """Messages, bytes and link time of the timeline, and how much of it the compute hides.

    ``value`` is in ``unit``; ``shown`` is the value formatted for people (MiB, ms).
    """
    comm = result.timeline.on("comm")
    busy = sum(e.duration for e in comm)
    exposed = float(breakdown(result, prof)["seconds"].iloc[-1])
    nbytes = float(sum(e.nbytes for e in comm))
    rows = [("messages", float(len(comm)), "", f"{len(comm)}"),
            ("bytes sent per worker", nbytes, "B", cm.format_size(nbytes)),
            ("link busy", busy, "s", f"{busy * 1e3:.4g} ms")]
    if result.schedule != "local_sgd":  # its timeline is the step with the averaging, amortised over H
        hidden = max(0.0, busy - exposed)
        rows.append(("communication hidden behind compute", hidden, "s", f"{hidden * 1e3:.4g} ms"))
    return pd.DataFrame(rows, columns=["quantity", "value", "unit", "shown"])


def chrome_trace_json(result: cm.IterationResult, process: str = "commscope prediction") -> str:
    """The timeline in Chrome / Perfetto Trace Event Format, as a JSON string."""
    return json.dumps(result.timeline.to_chrome_trace(process=process))


def terms_text(env: cm.Environment) -> str:
    """The environment's interference and host overhead in words (0 each: overlap is free)."""
    return (f"interference: kappa_c = {env.kappa_c:.3g} (compute slowdown while a collective is in flight), "
            f"kappa_m = {env.kappa_m:.3g} (communication slowdown while compute runs); host overhead "
            f"o = {env.host_overhead * 1e6:.3g} us per message"
            + (f"; contended step {env.contended_step * 1e3:.3g} ms (a message's least time per latency step "
               "beside compute)" if env.contended_step > 0 else "")
            + (f"; compute lost {env.compute_loss_step * 1e3:.3g} ms per latency step of a message on an idle link "
               "beside it" if env.compute_loss_step > 0 else ""))
