"""Data-parallel training runs with one registered technique, timed per iteration, on torchrun ranks
(``torchrun ... -m runners.training.runner [options]``): options in :mod:`.options`, the rank's training
loop in :mod:`.loop`, the rank-side entry in :mod:`.entry`.
"""

from __future__ import annotations

from .entry import main
from .loop import SOURCE, Context, setup, train
from .options import BACKENDS, PARTS, Options, TrainError, make_options, parse_args

__all__ = ["BACKENDS", "PARTS", "SOURCE", "Context", "Options", "TrainError", "main", "make_options", "parse_args",
           "setup", "train"]
