"""Fitting an environment (alpha, beta, gamma; an intra-node link too) to measured collective times: the records
(:mod:`.records`), least squares (:mod:`.least_squares`) where identifiable (:mod:`.identify`), model selection
(:mod:`.selection`), the two-regime fit (:mod:`.two_regimes`), plausibility guards (:mod:`.plausibility`),
prediction errors (:mod:`.prediction`), results, and the algorithms as a backend runs them (:mod:`.backend`)."""

from __future__ import annotations

from .backend import RUN_BY, as_run_by, records_backend
from .identify import ORDER, SEPARATION_MIN
from .plausibility import FAR_P, FAR_SIZES, RMS_LIMIT, fit_warnings, plausibility, use_warnings
from .prediction import DEFAULT_P1_BYTES, PredictionErrors, prediction_errors
from .records import STATISTICS, record_time
from .result import METHOD, PARAMS, UNITS, Candidate, FitResult, FittedParameter
from .selection import MAX_COMBINATIONS, WIRE_TOLERANCE, faster_than_the_wire, fit
from .two_regimes import BANDWIDTH_FROM, LATENCY_BELOW, fit_two_regimes

__all__ = [
           "BANDWIDTH_FROM",
           "DEFAULT_P1_BYTES",
           "FAR_P",
           "FAR_SIZES",
           "LATENCY_BELOW",
           "MAX_COMBINATIONS",
           "METHOD",
           "ORDER",
           "PARAMS",
           "RMS_LIMIT",
           "RUN_BY",
           "SEPARATION_MIN",
           "STATISTICS",
           "UNITS",
           "WIRE_TOLERANCE",
           "Candidate",
           "FitResult",
           "FittedParameter",
           "PredictionErrors",
           "as_run_by",
           "faster_than_the_wire",
           "fit",
           "fit_two_regimes",
           "fit_warnings",
           "plausibility",
           "prediction_errors",
           "record_time",
           "records_backend",
           "use_warnings",
]
