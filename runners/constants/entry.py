"""The rank-side entry of a constants measurement: ``python -m runners.constants [options]`` under torchrun.

Every rank joins the gloo process group on its CPU (:func:`runners.torchrun.rank.setup`), measures
(:func:`.run.measure_run`) under the hang watchdog, and rank 0 prints the constants and appends one
"constants" record to ``--out`` at the end: a run that fails writes nothing. Errors follow
:func:`runners.torchrun.rank.rank_main`: one ``commscope: error:`` line, exit 2 for bad options, 1 for a
failure on a rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from runners import results
from runners.torchrun.rank import rank_main, setup, teardown

from .options import ConstantsError, Options, parse_args
from .report import lines
from .run import measure_run, record


def _setup(opts: Options) -> Any:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConstantsError("run this under torchrun (torchrun --nproc_per_node=N -m runners.constants --model "
                             "NAME ...) or use: commscope constants --model NAME --ranks N --out FILE")
    ctx = setup("gloo", opts.timeout)
    ctx.torch.set_num_threads(opts.threads)
    return ctx


def _work(ctx: Any, opts: Options) -> int:
    lead = ctx.rank == 0

    def say(text: str) -> None:
        if lead:
            print(text, flush=True)

    say(f"# commscope constants: {opts.model} on {opts.dataset}, {ctx.world} rank(s) x batch {opts.batch_size}, "
        f"{opts.technique} for {opts.steps} steps (lr {opts.lr:g}), checkpoints at {opts.checkpoint_steps}")
    result = measure_run(opts, say, ctx.watchdog.arm)  # each checkpoint and step within --timeout
    ctx.watchdog.disarm()
    if lead:
        rec = record(opts, result, ctx.run_info())
        for line in lines(rec):
            print(line)
        if opts.out is not None:
            results.append(opts.out, [rec])
            print(f"# wrote 1 constants record to {opts.out}", flush=True)
    teardown(ctx)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.constants [options]`` under torchrun."""
    args = list(sys.argv[1:] if argv is None else argv)
    return rank_main(args, parse_args, _setup, _work, "constants measurement")
