"""The rank side of ``python -m runners.measure.sweep collectives [options]`` under torchrun: parse the
options, join the process group, sweep, leave (with the error protocol of :func:`runners.torchrun.rank.rank_main`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from runners.torchrun.rank import EXIT_FAILED, Context, rank_main, setup, teardown

from .loop import sweep
from .options import Options, parse_args


def _sweep_and_finish(ctx: Context, opts: Options) -> int:
    written = sweep(ctx, opts)
    teardown(ctx)
    return EXIT_FAILED if opts.check and ctx.rank == 0 and any(r["result"]["wrong"] for r in written) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.measure.sweep collectives [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, lambda opts: setup(opts.backend, opts.timeout), _sweep_and_finish, "the sweep")

