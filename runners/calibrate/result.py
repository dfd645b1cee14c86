"""What a calibration returns: the environment, each term with its 95% CI, and every cell's error three ways
(sweep only, calibrated on every technique, calibrated without the cell's own technique)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import costmodels as cm

from .cells import Cell

METHOD = ("alpha, beta, gamma fitted to the collective sweeps; kappa_c, kappa_m and host_overhead by weighted "
          "least squares on the relative error of the measured iterations (scipy.optimize.least_squares, terms "
          ">= 0, host_overhead <= the cheapest lone message the sweep prices, two starts, finite-difference "
          "Jacobian); 95% CIs from s^2 (J^T J)^-1 and Student's t")


UNITS = {"kappa_c": "", "kappa_m": "", "host_overhead": "s/message", "contended_step": "s/step",
         "compute_loss_step": "s/step"}


@dataclass(frozen=True)
class TermFit:
    """One iteration term: value, status (fitted or not identifiable), 95% CI and standard error."""

    name: str
    value: float
    status: str
    ci95: tuple[float, float] | None = None
    stderr: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": UNITS.get(self.name, ""),
                "status": self.status, "ci95": list(self.ci95) if self.ci95 else None, "stderr": self.stderr,
                "note": self.note}


@dataclass(frozen=True)
class LeftOut:
    """A technique predicted from terms fitted without it."""

    technique: str
    terms: Mapping[str, float]
    predictions: Sequence[tuple[Cell, float]]
    note: str = ""
    stderr_s: Sequence[float] = ()  # each prediction's standard error from the terms' covariance (delta method)

    def errors(self) -> list[float]:
        return [pred / c.measured_s - 1.0 for c, pred in self.predictions]


def _stats(errors: Sequence[float]) -> dict[str, float]:
    e = np.abs(np.array([x for x in errors if math.isfinite(x)]))
    if not e.size:
        return {"n": 0, "median_abs_error": math.nan, "max_abs_error": math.nan}
    return {"n": int(e.size), "median_abs_error": float(np.median(e)), "max_abs_error": float(e.max())}


@dataclass
class CalibrationResult:
    """A calibrated environment and how well it explains what was measured."""

    environment: cm.Environment
    sweep: Any  # the sweep's FitResult, or None when the network terms were given
    cells: list[Cell]
    terms: dict[str, TermFit]
    predicted_s: np.ndarray
    sweep_only_s: np.ndarray
    left_out: list[LeftOut] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        meta = dict(self.environment.metadata)
        meta["calibration"] = {"method": METHOD, "files": self.files, "cells": len(self.cells),
                               "techniques": sorted({c.technique for c in self.cells}),
                               "terms": {k: v.to_dict() for k, v in self.terms.items()},
                               "summary": self.summary()}
        name = self.environment.name if self.environment.name != "custom" else "calibrated"
        self.environment = replace(
            self.environment, name=name if name.startswith("calibrated") else f"calibrated:{name}",
            description=(self.environment.description + "; " if self.environment.description else "")
            + "interference and overhead calibrated on " + ", ".join(sorted({c.technique for c in self.cells})),
            metadata=meta)

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell: measured (with spread), sweep-only, calibrated and left-out predictions and errors, and
        the left-out prediction's standard error relative to the measurement (``left_out_stderr``)."""
        loto = {id(c): pred for lo in self.left_out for c, pred in lo.predictions}
        loto_se = {id(c): se for lo in self.left_out for (c, _), se in zip(lo.predictions, lo.stderr_s, strict=False)}
        out = []
        for i, c in enumerate(self.cells):
            lo = loto.get(id(c), math.nan)
            se = loto_se.get(id(c), math.nan)
            out.append({"technique": c.technique, "model": c.model, "p": c.p, "measured_s": c.measured_s,
                        "spread": c.spread, "sweep_only_s": float(self.sweep_only_s[i]),
                        "sweep_only_error": float(self.sweep_only_s[i] / c.measured_s - 1.0),
                        "calibrated_s": float(self.predicted_s[i]),
                        "calibrated_error": float(self.predicted_s[i] / c.measured_s - 1.0),
                        "left_out_s": lo, "left_out_error": lo / c.measured_s - 1.0 if math.isfinite(lo) else math.nan,
                        "left_out_stderr": se / c.measured_s if math.isfinite(se) else math.nan})
        return out

    def summary(self) -> dict[str, dict[str, float]]:
        """Median and max |error| of the three predictions over the cells."""
        rows = self.rows()
        return {k: _stats([r[f"{k}_error"] for r in rows]) for k in ("sweep_only", "calibrated", "left_out")}

    def to_dict(self) -> dict[str, Any]:
        return {"environment": self.environment.to_dict(), "terms": {k: v.to_dict() for k, v in self.terms.items()},
                "cells": self.rows(), "summary": self.summary(),
                "left_out": [{"technique": lo.technique, "terms": dict(lo.terms), "note": lo.note}
                             for lo in self.left_out],
                "sweep": self.sweep.to_dict() if self.sweep is not None else None, "files": self.files}
