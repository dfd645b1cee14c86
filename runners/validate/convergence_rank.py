"""The rank side of ``commscope validate --convergence``: one torchrun job trains every algorithm to the target.

    torchrun --nproc_per_node=N -m runners.validate.convergence_rank PLAN.json   # what the driver launches
    python -m runners.validate.convergence_rank --node PLAN.json                  # inside commscope emulate

One process group does, in order, appending every record to the plan's ``records`` file:

1. with ``cost_model``: **sweep** all-reduce and all-gather over the plan's sizes and **fit** the link in two
   regimes (as :mod:`runners.validate.rank` does), then **profile** the model on all ranks at once;
2. **constants**: ``commscope constants`` in-process (:func:`runners.constants.run.measure_run`) on the same
   model, data set, batch, learning rate and ranks, with every compressor the algorithms use: one "constants"
   record;
3. **train**: every run of the plan (seed x algorithm, rotated per seed) with ``--convergence`` from step 0 (no
   untimed warm-up: the wall clock starts with training), writing "convergence" records every ``eval_every``
   steps and one "iteration" record per run.

Rank 0 prints ``@@ stage K/N: what`` and ``@@ failed NAME: why`` lines for the driver. A run that raises the same
error on every rank is reported and the others go on; a failure on some ranks only ends the job.
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from runners.calibrate.cells import SWEEP_ALGORITHM, SWEEP_STATISTIC

from .rank import PROGRESS, _agree, _profile, _say, fit_link, load_plan, sweep_parts, torchrun_node


def _stages(plan: dict[str, Any]) -> int:
    return (2 if plan.get("cost_model") else 0) + 1 + len(plan["runs"])


def _guarded(ctx: Any, what: str, fn: Any) -> bool:
    """Run ``fn()`` on every rank; False (and the first rank's error said) when it raised anywhere."""
    error = None
    try:
        fn()
    except CommscopeError as exc:
        error = str(exc)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    bad = [f"rank {r}: {e}" for r, e in enumerate(_agree(ctx, error)) if e]
    if bad:
        _say(ctx, f"{PROGRESS}failed {what}: {bad[0]}")
    gc.collect()
    ctx.dist.barrier()
    return not bad


LINK_FIT = {"fit_method": "two_regimes", "fit_algorithm": SWEEP_ALGORITHM, "fit_statistic": SWEEP_STATISTIC}


def _sweep_and_fit(ctx: Any, plan: dict[str, Any]) -> None:
    """The link's collectives swept and fitted in two regimes (alpha below 64 KiB, beta from 256 KiB)."""
    from runners import results
    from runners.measure import sweep

    sw, records = plan["sweep"], Path(plan["records"])
    for part, iters in sweep_parts(sw):
        sweep.sweep(ctx, sweep.make_options(op=sw["ops"], min_size=part[0], max_size=part[-1],
                                            factor=float(sw["factor"]), warmup=sw["warmup"], iters=iters,
                                            out=str(records), timeout=plan["timeout"]))
    if ctx.rank == 0:
        res = fit_link(records, {**plan, **LINK_FIT})
        res.environment.save(plan["environment"])
        results.append(records, [res.record()])
        print(f"# {res.summary()}", flush=True)


def _constants(ctx: Any, plan: dict[str, Any]) -> None:
    """``commscope constants`` on this process group; rank 0 appends the record."""
    from runners import results
    from runners.constants import make_options
    from runners.constants.report import lines
    from runners.constants.run import measure_run, record

    c = plan["constants"]
    opts = make_options(plan["model"], plan["dataset"], plan["batch_size"], c.get("steps", 50),
                        c.get("checkpoints", 3), plan["lr"], "fusion", c.get("compressors", "all"), 0,
                        c.get("noise_samples", 1024), c.get("hvp_samples", 256), c.get("power_iterations", 20),
                        c.get("draws", 8), plan["threads"], plan.get("seed", 0), plan["timeout"])

    def say(text: str) -> None:
        _say(ctx, text)

    result = measure_run(opts, say, ctx.watchdog.arm)
    ctx.watchdog.disarm()
    if ctx.rank == 0:
        rec = record(opts, result, ctx.run_info())
        for line in lines(rec):
            print(line, flush=True)
        results.append(plan["records"], [rec])


def _train(ctx: Any, plan: dict[str, Any], run: dict[str, Any]) -> None:
    """One convergence run: ``plan['steps']`` steps (whole periods for local SGD) from step 0."""
    from runners.training import runner as rt
    from runners.training import technique as get_technique
    from runners.training.pricing import PERIODIC

    tctx = rt.Context(torch=ctx.torch, dist=ctx.dist, rank=ctx.rank, world=ctx.world, local_world=ctx.local_world,
                      backend=ctx.backend, device=ctx.device, devices=[r["name"] for r in ctx.ranks])
    name, options = run["technique"], dict(run["options"])
    steps = int(plan["steps"])
    if name in PERIODIC:
        period = int(options.get(PERIODIC[name], get_technique(name).options.get(PERIODIC[name], 1)))
        steps = -(-steps // period) * period
    opts = rt.Options(algorithm=name, model=plan["model"], iterations=steps, batch_size=plan["batch_size"],
                      lr=float(run["lr"]), options=options, warmup=0, convergence=True, dataset=plan["dataset"],
                      eval_every=int(plan["eval_every"]), threads=int(plan["threads"]), seed=int(run["seed"]),
                      backend=ctx.backend, out=Path(plan["records"]), timeout=plan["timeout"])
    rt.train(tctx, opts)


def run(ctx: Any, plan: dict[str, Any]) -> int:
    """The plan's stages on this rank; returns the exit code (1 if a stage or a run failed)."""
    total = _stages(plan)
    ctx.torch.set_num_threads(int(plan.get("threads", 1)))
    stage, failed = 1, []

    def next_stage(what: str) -> None:
        nonlocal stage
        _say(ctx, f"{PROGRESS}stage {stage}/{total}: {what}")
        stage += 1

    if plan.get("cost_model"):
        next_stage(f"sweep and fit {','.join(plan['sweep']['ops'])}")
        if not _guarded(ctx, "sweep", lambda: _sweep_and_fit(ctx, plan)):
            failed.append("sweep")
        next_stage(f"profile {plan['model']} (all ranks at once)")
        w = {"model": plan["model"], "batch_size": plan["batch_size"], "profile_path": plan["profile_path"]}
        if not _guarded(ctx, "profile", lambda: _profile(ctx, plan, w, int(plan["threads"]))):
            failed.append("profile")
    next_stage(f"constants of {plan['model']} on {plan['dataset']}")
    if not _guarded(ctx, "constants", lambda: _constants(ctx, plan)):
        failed.append("constants")
    for r in plan["runs"]:
        next_stage(f"train {r['label']} (seed {r['seed']})")
        if not _guarded(ctx, f"{r['label']}:seed{r['seed']}", lambda r=r: _train(ctx, plan, r)):
            failed.append(f"{r['label']}:seed{r['seed']}")
    _say(ctx, f"{PROGRESS}done" + (f" ({len(failed)} failed: {', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def _node(plan_path: str) -> int:
    return torchrun_node(plan_path, "runners.validate.convergence_rank")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--node":
        if len(args) != 2:
            print("usage: python -m runners.validate.convergence_rank --node PLAN.json", file=sys.stderr)
            return 2
        return _node(args[1])
    if len(args) != 1:
        print("usage: torchrun ... -m runners.validate.convergence_rank PLAN.json", file=sys.stderr)
        return 2
    from runners.torchrun.rank import rank_main, setup, teardown

    def work(ctx: Any, plan: dict[str, Any]) -> int:
        code = run(ctx, plan)
        teardown(ctx)
        return code

    return rank_main(args, lambda a: load_plan(a[0]), lambda plan: setup("gloo", plan["timeout"]), work,
                     "convergence validation")


if __name__ == "__main__":
    sys.exit(main())
