"""Collective sweeps with torch.distributed, reported the way nccl-tests reports them: the options (:mod:`.options`),
one collective built and timed (:mod:`.calls`, :mod:`.patterns`, :mod:`.timing`), the sweep and its table
(:mod:`.loop`) and the rank-side entry ``python -m runners.measure.sweep collectives`` (:mod:`.entry`)."""

from __future__ import annotations

from runners.torchrun.rank import (
    BACKENDS,
    EXIT_FAILED,
    EXIT_USAGE,
    Context,
    fail,
    gloo_cuda_device,
    rank_main,
    setup,
    teardown,
)

from .calls import Prepared, build
from .entry import main
from .loop import HEADER, result_of, row, sweep
from .options import (
    DTYPE_ALIASES,
    DTYPES,
    EQUIVALENTS,
    OPS,
    REDUCING,
    ROOTED,
    SOURCE,
    BenchError,
    Options,
    config_of,
    describe,
    make_options,
    parse_args,
    round_size,
)
from .timing import Measurement, measure, probe

__all__ = ["BACKENDS", "DTYPES", "DTYPE_ALIASES", "EQUIVALENTS", "EXIT_FAILED", "EXIT_USAGE", "HEADER", "OPS",
           "REDUCING", "ROOTED", "SOURCE", "BenchError", "Context", "Measurement", "Options", "Prepared", "build",
           "config_of", "describe", "fail", "gloo_cuda_device", "main", "make_options", "measure", "parse_args",
           "probe", "rank_main", "result_of", "round_size", "row", "setup", "sweep", "teardown"]
