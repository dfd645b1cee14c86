"""The rank-side entry of a training run: ``python -m runners.training.runner [options]`` under torchrun."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from runners.torchrun.rank import rank_main

from .loop import setup, train
from .options import parse_args


def _train_and_finish(ctx: Any, opts: Any) -> int:
    train(ctx, opts)
    ctx.dist.barrier()
    ctx.dist.destroy_process_group()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.training.runner [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, setup, _train_and_finish, "training")

