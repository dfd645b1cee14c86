"""Vectorized sweeps: one schedule evaluated for many worker counts and many environments at once.

``sweep(profile, envs, p, schedule)`` returns the iteration time of every (environment, p) pair as
one array. Every registered schedule has a vectorized kernel (``Schedule.vectorized``) that
advances all configurations through the same recurrences as :func:`simulate`, with the
configurations on the arrays' leading axis (tested equal to 1e-12). A schedule registered without
one runs :func:`simulate` once per configuration (``SweepResult.method`` says which).

Configurations with interference or host overhead (or a profile with an optimizer step) run the
schedule's entry of :data:`~costmodels.schedules.core.TERMS` (the piecewise-rate engine, all of them in
lock-step); the others run the kernel, so a sweep may mix both.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._inputs import as_ranks
from ..environment import Environment
from ..environment_array import FIELDS, EnvironmentArray, as_environment_array
from ..errors import CommscopeError
from ..profiles import ModelProfile
from .core import (
    COMPRESSIBLE,
    SCHEDULES,
    TERMS,
    Compressed,
    Configurations,
    Schedule,
    compress,
    compressing,
    profile_has_terms,
    simulate,
)

CHUNK = 4096  # configurations per kernel call: bounds memory at CHUNK x layers floats per array


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Iteration times of one schedule over ``envs.shape + (len(p),)`` configurations.

    ``iteration_time[..., j]`` is for ``p[j]`` workers; ``envs[i]`` gives the i-th environment back.
    """

    schedule: str
    profile: str
    p: np.ndarray
    envs: EnvironmentArray
    iteration_time: np.ndarray
    compute_time: float
    batch_size: int
    method: str
    compressor: str | None = None

    @property
    def throughput(self) -> np.ndarray:
        """Samples per second over all p workers."""
        return self.p * self.batch_size / self.iteration_time

    @property
    def speedup(self) -> np.ndarray:
        return self.p * self.compute_time / self.iteration_time

    @property
    def scaling_efficiency(self) -> np.ndarray:
        return self.compute_time / self.iteration_time

    def rows(self) -> list[dict[str, Any]]:
        """One dict per configuration (environment name, p, times, rates): ready for a table."""
        eff = self.scaling_efficiency
        out = []
        for idx in np.ndindex(self.iteration_time.shape):
            e, j = idx[:-1], idx[-1]
            out.append({"schedule": self.schedule, "environment": str(self.envs.names[e]),
                        "alpha": float(self.envs.alpha[e]), "beta": float(self.envs.beta[e]),
                        "p": int(self.p[j]), "iteration_time": float(self.iteration_time[idx]),
                        "scaling_efficiency": float(eff[idx]), "throughput": float(self.throughput[idx])})
        return out


def _configurations(envs: EnvironmentArray, p: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, EnvironmentArray]:
    """Configurations lo..hi of the flattened (environment, p) product, as (C, 1) arrays."""
    flat = np.arange(lo, hi)
    e, j = np.divmod(flat, len(p))
    cols = {f: getattr(envs, f).reshape(-1)[e][:, None] for f in FIELDS}
    return p[j][:, None], EnvironmentArray(**cols, names=envs.names.reshape(-1)[e][:, None],
                                          descriptors=envs.descriptors)


def _chunk(entry: Schedule, prof: ModelProfile, squeezed: Compressed | None, ps: np.ndarray, es: EnvironmentArray,
           collective: str | None, options: dict[str, Any]) -> np.ndarray:
    """Iteration times of one chunk: the kernel where every term is 0, :data:`TERMS` elsewhere."""
    terms = es.has_terms.reshape(-1) | profile_has_terms(prof)
    if terms.any() and entry.name not in TERMS:
        raise CommscopeError(f"the {entry.name} schedule has no model of interference, host overhead or the "
                             "optimizer step; set kappa_c, kappa_m, host_overhead and optimizer_s to 0")
    out = np.empty(len(ps))
    for on in (False, True):
        sel = terms == on
        if not sel.any():
            continue
        idx = np.flatnonzero(sel)
        p, e = (ps, es) if sel.all() else (ps[idx], EnvironmentArray(**{f: getattr(es, f)[idx] for f in FIELDS},
                                                                     names=es.names[idx], descriptors=es.descriptors))
        # decoding per received byte depends on p: the wire is set for each chunk's configurations
        with nullcontext() if squeezed is None else compressing(squeezed, p):
            cfg = Configurations(prof, p, e)
            assert entry.vectorized is not None
            out[idx] = TERMS[entry.name](cfg, collective, False, **options).time if on else \
                entry.vectorized(cfg, collective, **options)
    return out


def sweep(profile: ModelProfile, envs: Environment | Sequence[Environment] | EnvironmentArray, p: Any,
          schedule: str = "wfbp", collective: str | None = None, compressor: str | None = None,
          **options: Any) -> SweepResult:
    """Iteration time of ``schedule`` for every environment in ``envs`` and every worker count in ``p``.

    ``envs``: an Environment, a list of them, or an :class:`EnvironmentArray` (e.g.
    ``EnvironmentArray.grid(env, alpha=[...], beta=[...])`` for many (alpha, beta) pairs).
    ``collective``, ``compressor`` and the options are those of :func:`simulate`. The result's
    arrays have shape ``envs.shape + (len(p),)``.
    """
    entry = SCHEDULES.get(schedule)
    if not isinstance(profile, ModelProfile):
        raise CommscopeError(f"profile must be a costmodels.ModelProfile, got {type(profile).__name__}")
    grid = as_environment_array(envs)
    ranks = as_ranks(p).reshape(-1)
    if not ranks.size:
        raise CommscopeError("p must name at least one worker count")
    shape = (*grid.shape, len(ranks))
    if not grid.uniform:  # environments with different libraries (or fabrics): each group priced on its own
        times = np.empty((grid.size, len(ranks)))
        parts = [(idx, sweep(profile, sub, ranks, schedule, collective, compressor, **options))
                 for idx, sub in grid.groups()]
        for idx, part in parts:
            times[idx] = part.iteration_time.reshape(len(idx), len(ranks))
        return SweepResult(entry.name, profile.name, ranks, grid, times.reshape(shape),
                           profile.compute_s + profile.optimizer_s,
                           profile.batch_size, parts[0][1].method, compressor)
    total = grid.size * len(ranks)
    if entry.vectorized is None:
        times = np.array([
            simulate(profile, grid[np.unravel_index(c // len(ranks), grid.shape)], int(ranks[c % len(ranks)]),
                     entry.name, collective, compressor, **options).iteration_time
            for c in range(total)
        ])
        return SweepResult(entry.name, profile.name, ranks, grid, times.reshape(shape),
                           profile.compute_s + profile.optimizer_s, profile.batch_size, "per-configuration loop",
                           compressor)
    squeezed = None
    if compressor is not None:
        if entry.name not in COMPRESSIBLE:
            raise CommscopeError(f"compression runs on top of the schedules {', '.join(COMPRESSIBLE)}; "
                                 f"{entry.name} communicates shards, got compressor {compressor!r}")
        squeezed = compress(profile, compressor)
    prof = profile if squeezed is None else squeezed.profile
    out = np.empty(total)
    for lo in range(0, total, CHUNK):
        hi = min(total, lo + CHUNK)
        ps, es = _configurations(grid, ranks, lo, hi)
        out[lo:hi] = _chunk(entry, prof, squeezed, ps, es, collective, options)
    return SweepResult(entry.name, profile.name, ranks, grid, out.reshape(shape),
                       profile.compute_s + profile.optimizer_s, profile.batch_size, "vectorized", compressor)
