"""Prediction from a fit: the relative errors of an environment's model over measured records (P1 of
benchmark 8c).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .records import _gather, _primitives, _select
from .selection import _candidates

DEFAULT_P1_BYTES = 64 * 1024


@dataclass(frozen=True)
class PredictionErrors:
    """Relative errors |predicted - measured| / measured of a model over records (P1 of benchmark 8c)."""

    median: float
    max: float
    rms: float
    count: int
    min_bytes: int
    algorithm: str

    def to_dict(self) -> dict[str, Any]:
        return {"median_rel_error": self.median, "max_rel_error": self.max, "rms_rel_error": self.rms,
                "count": self.count, "min_bytes": self.min_bytes, "algorithm": self.algorithm}


def prediction_errors(env: cm.Environment | str, records: Any, primitive: str | Sequence[str] | None = None,
                      algorithm: str | Sequence[str] | None = None, min_bytes: int | str = DEFAULT_P1_BYTES,
                      ) -> PredictionErrors:
    """Median, max and RMS of |predicted - measured| / measured over the records of at least ``min_bytes``.

    ``primitive`` and ``algorithm`` default to those a fitted environment's metadata names (else
    allreduce and its ring). Benchmark 8c's P1: median and max for n >= 64 KiB (goal: median <= 3%).
    """
    environment = cm.environment(env) if isinstance(env, str) else env
    if not isinstance(environment, cm.Environment):
        raise CommscopeError(f"env must be an Environment, a preset name or a JSON file, got {type(env).__name__}")
    meta = environment.metadata or {}
    if primitive is None:
        primitive = meta.get("primitives") or "allreduce"
    prims = _primitives(primitive)
    if algorithm is None and isinstance(meta.get("algorithms"), Mapping):
        algorithm = [v for q, v in meta["algorithms"].items() if q in prims] or None
    cands = _candidates(prims, algorithm)
    auto = [q for q, v in cands.items() if len(v) != 1]
    if auto:
        raise CommscopeError(f"name the algorithm of {', '.join(auto)} (auto has no single prediction)")
    algos = {q: v[0] for q, v in cands.items()}
    try:
        min_b = cm.parse_size(min_bytes)
    except CommscopeError as exc:
        raise CommscopeError(f"min_bytes: {exc}") from None
    pairs, bad, paths = _gather(records)
    d, _ = _select(pairs, prims, min_b, bad, paths)
    pred = np.empty_like(d.y)
    for q, name in algos.items():
        m = d.prim == q
        if m.any():
            pred[m] = np.asarray(cm.collective(name).time(d.n[m], d.p[m], environment), dtype=np.float64)
    rel = np.abs(pred - d.y) / d.y
    label = "+".join(algos[q] for q in prims)
    return PredictionErrors(float(np.median(rel)), float(np.max(rel)), float(np.sqrt(np.mean(rel**2))), len(rel), min_b,
                            label)
