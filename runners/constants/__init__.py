"""Measured problem constants of the convergence bounds (``commscope constants``): L, sigma, zeta, Delta and
every compressor's delta / omega on real training of a zoo model on its generated data set, under torchrun
(``python -m runners.constants``), written as one "constants" record of the results store.

Options in :mod:`.options`; flat gradients, per-sample gradients and Hessian-vector products in
:mod:`.gradients`; sigma^2 and zeta^2 in :mod:`.noise`; L in :mod:`.smoothness`; compressors' constants
in :mod:`.compressors`; one checkpoint in :mod:`.checkpoint`; the run in :mod:`.run`; the record's
constants in :mod:`.summary`; its text in :mod:`.report`; the rank-side entry in :mod:`.entry`;
collectives in :mod:`.comm`. :func:`convergence.measured_constants.constants_from_records` turns the
records into the constants ``convergence.time_to_accuracy`` takes.
"""

from __future__ import annotations

from .options import ConstantsError, Options, make_options, parse_args

__all__ = ["ConstantsError", "Options", "make_options", "parse_args"]
