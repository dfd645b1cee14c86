"""The rank-side entry of a training run: ``python -m runners.training.runner [options]`` under torchrun."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from runners.torchrun.rank import rank_main, report_outcome

from .loop import setup, train
from .options import parse_args


def _train_and_finish(ctx: Any, opts: Any) -> int:
    written = train(ctx, opts)
    steps = [r["result"]["diverged_step"] if r["kind"] == "iteration" else r["result"]["step"] for r in written
             if r["result"].get("diverged")]
    if steps:  # rank 0: the records say where; the launcher ends with its own exit code
        report_outcome(f"training diverged at step {steps[0]} (its loss is not finite); "
                       + (f"recorded in {opts.out}" if opts.out else "recorded as diverged: true"))
    ctx.dist.barrier()
    ctx.dist.destroy_process_group()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.training.runner [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, setup, _train_and_finish, "training")

