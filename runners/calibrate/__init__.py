"""Calibration: an environment fitted to what a person measured on their own cluster.

``calibrate(records)`` takes collective sweeps and measured training iterations (from ``commscope
train``, ``commscope validate`` or an import) and returns an environment whose network terms (alpha,
beta, gamma) come from the sweeps and whose interference and overhead terms (kappa_c, kappa_m,
host_overhead; on request the contended step too) come from the iterations, with confidence intervals and a
leave-one-technique-out table.

- :mod:`.cells`: the measured iterations (cells), their profiles and the sweep-fitted environment;
- :mod:`.solve`: the least-squares fit of the iteration terms and the leave-one-technique-out check;
- :mod:`.result`: what a calibration returns and writes.
"""

from .cells import Cell, gather_cells
from .result import CalibrationResult
from .solve import FITTED, TERMS, calibrate, fit_terms, leave_one_technique_out

__all__ = ["FITTED", "TERMS", "CalibrationResult", "Cell", "calibrate", "fit_terms", "gather_cells",
           "leave_one_technique_out"]
