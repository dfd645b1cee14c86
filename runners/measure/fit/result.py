"""What a fit found: each parameter with its 95% CI (:class:`FittedParameter`), each candidate algorithm
tried (:class:`Candidate`) and the whole result (:class:`FitResult`), with its record and metadata.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import costmodels as cm
from runners import results as rs

PARAMS = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta")
UNITS = {"alpha": "s", "beta": "s/byte", "gamma": "s/byte", "intra_alpha": "s", "intra_beta": "s/byte"}
METHOD = ("weighted least squares on relative error (scipy.optimize.least_squares, parameters >= 0); "
          "95% CIs from s^2 (J^T J)^-1 and Student's t")


@dataclass(frozen=True)
class FittedParameter:
    """One environment parameter: value, 95% CI, and whether it was fitted, fixed or not identifiable."""

    name: str
    value: float
    status: str  # "fitted" | "not identifiable" | "fixed"
    ci95: tuple[float, float] | None = None
    stderr: float | None = None
    note: str = ""

    @property
    def unit(self) -> str:
        return UNITS[self.name]

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "status": self.status,
                "ci95": None if self.ci95 is None else list(self.ci95), "stderr": self.stderr, "note": self.note}


@dataclass(frozen=True)
class Candidate:
    """One algorithm (one per primitive) fitted to the data, or why it could not be."""

    algorithm: str  # "ring_allreduce" or "ring_allreduce+ring_allgather"
    algorithms: dict[str, str]
    rms_rel_error: float | None = None
    max_rel_error: float | None = None
    aic: float | None = None
    parameters: int = 0
    skipped: str = ""
    delta_aic: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "algorithms": dict(self.algorithms), "rms_rel_error": self.rms_rel_error,
                "max_rel_error": self.max_rel_error, "aic": self.aic, "delta_aic": self.delta_aic,
                "parameters": self.parameters, "skipped": self.skipped, "note": self.note}


@dataclass
class FitResult:
    """What :func:`fit` found: the environment, its parameters with CIs, the fit quality, the residuals."""

    environment: cm.Environment
    primitives: tuple[str, ...]
    algorithms: dict[str, str]
    parameters: dict[str, FittedParameter]
    r2: float
    r2_log: float
    rms_rel_error: float
    median_rel_error: float
    max_rel_error: float
    aic: float
    condition_number: float
    residuals: list[dict[str, Any]]
    ranking: list[Candidate]
    files: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    bad: list[rs.BadLine] = field(default_factory=list)
    two_level: bool = False
    ranks_per_node: int = 1
    world_sizes: list[int] = field(default_factory=list)
    network: Any = None
    run: dict[str, Any] = field(default_factory=dict)
    min_bytes: int = 0
    verdict: str = ""
    cpu: dict[str, Any] | None = None  # CPU seconds per step and per byte (runners.measure.fit.cpu)
    code_paths: list[dict[str, Any]] | None = None  # primitives fitted on their own (runners.measure.fit.per_primitive)

    @property
    def algorithm(self) -> str:
        return "+".join(self.algorithms[q] for q in self.primitives)

    @property
    def records(self) -> int:
        return len(self.residuals)

    @property
    def bytes_range(self) -> list[int] | None:
        """The smallest and largest message size (bytes) the fit saw; the plausibility guards warn beyond them."""
        sizes = [int(r["bytes"]) for r in self.residuals]
        return [min(sizes), max(sizes)] if sizes else None

    def metadata(self) -> dict[str, Any]:
        """Provenance and quality of the fit, as the fitted environment carries it (JSON-able)."""
        return _jsonable({
            "fitted_by": "commscope fit", "method": METHOD, "files": self.files, "records": self.records,
            "primitives": list(self.primitives), "algorithm": self.algorithm, "algorithms": dict(self.algorithms),
            "min_bytes": self.min_bytes, "bytes_range": self.bytes_range,
            "parameters": {k: v.to_dict() for k, v in self.parameters.items()},
            "r2": self.r2, "r2_log": self.r2_log, "rms_rel_error": self.rms_rel_error,
            "median_rel_error": self.median_rel_error, "max_rel_error": self.max_rel_error, "aic": self.aic,
            "condition_number": self.condition_number, "two_level": self.two_level,
            "ranks_per_node": self.ranks_per_node, "world_sizes": self.world_sizes, "network": self.network,
            "ranking": [c.to_dict() for c in self.ranking] if len(self.ranking) > 1 else [],
            "verdict": self.verdict, "notes": list(self.notes),
            **({} if self.cpu is None else {"cpu": dict(self.cpu)}),
            **({} if not self.code_paths else {"code_paths": list(self.code_paths)}),
        })

    def to_dict(self) -> dict[str, Any]:
        """Everything, residual table included (for ``commscope fit --json``)."""
        return {"environment": self.environment.to_dict(), "fit": self.metadata(),
                "residuals": _jsonable(self.residuals), "bad_lines": [str(b) for b in self.bad]}

    def record(self) -> dict[str, Any]:
        """An ``environment``-kind record of the results store for this fit."""
        config = {"primitive": ",".join(self.primitives), "algorithm": self.algorithm,
                  "files": [f["path"] for f in self.files], "min_bytes": self.min_bytes}
        result = {"environment": self.environment.to_dict(), "fit": self.metadata()}
        return rs.record("environment", config, result, self.run, source="commscope fit")

    def summary(self) -> str:
        a, b = self.parameters["alpha"], self.parameters["beta"]
        return (f"{self.algorithm}: alpha = {a.value * 1e6:.4g} us, beta = {b.value * 1e9:.4g} ns/B "
                f"({1 / b.value / 1e9:.4g} GB/s); RMS relative error {self.rms_rel_error:.2%}, R^2 {self.r2:.5f}")


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else None
    return x
