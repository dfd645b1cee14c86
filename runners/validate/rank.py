"""The rank side of ``commscope validate``: one torchrun job per environment measures everything.

    torchrun --nproc_per_node=N -m runners.validate.rank PLAN.json     # what commscope validate launches
    python -m runners.validate.rank --node PLAN.json                     # inside commscope emulate: torchrun
                                                                         # with this node's COMMSCOPE_* layout

One process group does, in order, and appends every record to the plan's ``records`` file:

1. **sweep**: the plan's collectives over its sizes (``runners.measure.sweep.sweep``, max over ranks);
2. **fit**: rank 0 fits alpha/beta(/gamma) to the sweep (``runners.measure.fit.fit``, or with the plan's
   ``fit_method: two_regimes`` :func:`runners.measure.fit.fit_two_regimes`) and saves the environment;
3. **profile**: every rank runs the layer-wise profiler *at the same time*, with the run's threads per
   rank, so each rank's compute shares the cores exactly as it does while training; the per-layer
   mean over ranks gives each layer's share, and the totals are those of synchronised compute-only
   iterations, max over ranks (:func:`runners.validate.compute.synchronised_compute`): what a synchronous
   iteration waits for;
4. **train**: each technique of the plan, warm-up then timed iterations (``runners.training.runner.train``),
   each after a short probe of the synchronised compute; the profile is then rescaled to the median of the probes.
   A latency probe (:mod:`runners.validate.latency`) is taken after the sweep and before every technique's run.

Steps 3 and 4 run for every workload (model, batch size) of the plan in turn, and step 4 ``repeats`` times
with the techniques in rotated order, so that the spread over repetitions is measured and any drift of
the machine falls on every technique alike.

Rank 0 prints ``@@ stage K/N: what`` lines that ``commscope validate`` turns into progress. A technique
that raises the same error on every rank (bad options) is reported and the rest go on; a failure
on some ranks only (a dead peer, a timeout) ends the job, naming the stage.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError

PROGRESS = "@@ "


def load_plan(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The plan ``commscope validate`` wrote (a JSON object; see :func:`runners.validate.make_plan`)."""
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CommscopeError(f"cannot read the validation plan {str(path)!r}: {exc}") from None
    if not isinstance(plan, dict) or "techniques" not in plan or "records" not in plan:
        raise CommscopeError(f"{path} is not a validation plan (needs 'techniques' and 'records')")
    return plan


def _say(ctx: Any, text: str) -> None:
    if ctx.rank == 0:
        print(text, flush=True)


def _agree(ctx: Any, error: str | None) -> list[str | None]:
    """Every rank's error message (or None), so that all ranks take the same branch."""
    errors: list[Any] = [None] * ctx.world
    ctx.dist.all_gather_object(errors, error)
    return errors


def sweep_sizes(sw: dict[str, Any]) -> list[int]:
    """The message sizes of a plan's sweep: ``min_size`` times ``factor`` to the k, up to ``max_size``."""
    import costmodels as cm

    lo, hi, factor = cm.parse_size(sw["min_size"]), cm.parse_size(sw["max_size"]), float(sw["factor"])
    sizes = [lo]
    while sizes[-1] * factor <= hi:
        sizes.append(int(sizes[-1] * factor))
    return sizes


def sweep_parts(sw: dict[str, Any]) -> list[tuple[list[int], int]]:
    """The sweep's sizes in the parts timed with as many iterations: those below ``latency_iters_below`` (a plan
    without it: ``latency_bytes``) ``latency_iters`` times, the rest ``iters`` times; empty parts left out."""
    many_below = int(sw.get("latency_iters_below", sw.get("latency_bytes", 0)))
    sizes = sweep_sizes(sw)
    parts = [([n for n in sizes if n < many_below], int(sw.get("latency_iters", sw["iters"]))),
             ([n for n in sizes if n >= many_below], int(sw["iters"]))]
    return [(part, iters) for part, iters in parts if part]


def fit_link(records: Path, plan: dict[str, Any], per_primitive: bool = True) -> Any:
    """The link's environment fitted to its sweep as the plan says (``fit_method: two_regimes``: alpha from the
    latency-bound sizes, beta from the bandwidth-bound ones, where the sweep reaches both; else one fit); each
    primitive's code path on its own where the AIC says so, unless ``per_primitive`` is False (one link)."""
    import costmodels as cm
    from runners.measure import fit, host_buffers

    sw = plan["sweep"]
    lat_bytes = int(sw.get("latency_bytes", 0))
    sizes = sweep_sizes(sw)
    from runners import results

    # the plan names textbook algorithms; the fit prices what the records' backend ran (gloo's allgather)
    backend = fit.records_backend(results.load(records).records)
    how = dict(primitive=sw["ops"], algorithm=fit.as_run_by(plan.get("fit_algorithm"), backend),
               name=plan.get("environment_name"), statistic=plan.get("fit_statistic", "median"),
               per_primitive=per_primitive, host=host_buffers.load(plan["host_buffers"]) if plan.get("host_buffers")
               else None)
    two = sizes[-1] >= fit.BANDWIDTH_FROM and sizes[0] < (lat_bytes or fit.LATENCY_BELOW)
    if plan.get("fit_method") == "two_regimes" and not two:
        print(f"# note: the sweep ({cm.format_size(sizes[0])} to {cm.format_size(sizes[-1])}) does not reach "
              f"both regimes (below {cm.format_size(lat_bytes or fit.LATENCY_BELOW)}, from "
              f"{cm.format_size(fit.BANDWIDTH_FROM)}): one fit over every size", flush=True)
    if plan.get("fit_method") == "two_regimes" and two:
        return fit.fit_two_regimes([str(records)], latency_below=lat_bytes or fit.LATENCY_BELOW, **how)
    return fit.fit([str(records)], **how)


def run(ctx: Any, plan: dict[str, Any]) -> int:
    """Run the plan's stages on this rank; returns the exit code (1 if a technique failed)."""
    from runners import results
    from runners.measure import sweep

    from .latency import probe_and_keep

    workloads = plan.get("workloads") or [{"model": plan["model"], "batch_size": plan["batch_size"],
                                           "profile_path": plan["profile_path"], "techniques": plan["techniques"]}]
    repeats = int(plan.get("repeats", 1))
    stages = 2 + sum(1 + repeats * len(w["techniques"]) for w in workloads)
    records = Path(plan["records"])
    threads = int(plan.get("threads", 1))
    ctx.torch.set_num_threads(threads)
    sw = plan["sweep"]
    _say(ctx, f"{PROGRESS}stage 1/{stages}: sweep {','.join(sw['ops'])}")
    for part, iters in sweep_parts(sw):  # sizes whose time scatters: more iterations
        opts = sweep.make_options(op=sw["ops"], min_size=part[0], max_size=part[-1], factor=float(sw["factor"]),
                                  warmup=sw["warmup"], iters=iters, out=str(records), timeout=plan["timeout"])
        sweep.sweep(ctx, opts)

    probe_and_keep(ctx, records, {"after": "sweep"})  # the latency the fit saw (latency.py)
    _say(ctx, f"{PROGRESS}stage 2/{stages}: fit")
    env_error: str | None = None
    if ctx.rank == 0:
        try:
            res = fit_link(records, plan)
            res.environment.save(plan["environment"])
            results.append(records, [res.record()])
            print(f"# {res.summary()}", flush=True)
        except CommscopeError as exc:
            env_error = f"fitting the environment failed: {exc}"
    errs = [x for x in _agree(ctx, env_error) if x]
    if errs:
        raise CommscopeError(errs[0])

    stage, failed = 3, []
    for w in workloads:
        _say(ctx, f"{PROGRESS}stage {stage}/{stages}: profile {w['model']} (all ranks at once)")
        stage += 1
        probes = [_profile(ctx, plan, w, threads)]
        for r in range(repeats):
            order = w["techniques"][r % len(w["techniques"]):] + w["techniques"][:r % len(w["techniques"])]
            for name, options in order:  # rotated per repetition, so that drift spreads over all techniques
                _say(ctx, f"{PROGRESS}stage {stage}/{stages}: train {name} on {w['model']}"
                          + (f" (repetition {r + 1}/{repeats})" if repeats > 1 else ""))
                stage += 1
                probes.append(_probe(ctx, plan, w))
                probe_and_keep(ctx, records, {"technique": name, "options": options, "model": w["model"],
                                              "repetition": r + 1})
                if not _train(ctx, plan, w, name, options, threads, records):
                    failed.append(f"{name}:{w['model']}" if len(workloads) > 1 else name)
        _settle_profile(ctx, plan, w, probes)
    _say(ctx, f"{PROGRESS}done" + (f" ({len(failed)} failed: {', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


def _probe(ctx: Any, plan: dict[str, Any], w: dict[str, Any]) -> tuple[float, float, float, float]:
    """The synchronised compute (:func:`runners.validate.compute.synchronised_compute`) measured again, in a few
    iterations, just before a technique trains: the compute the iterations around it ran at."""
    from .compute import synchronised_compute

    pr = plan["profile"]
    return synchronised_compute(ctx, w["model"], w["batch_size"], int(pr.get("probe_iterations", 5)), 1,
                                plan.get("seed", 0), plan.get("lr", 0.05))


def _settle_profile(ctx: Any, plan: dict[str, Any], w: dict[str, Any],
                    probes: list[tuple[float, float, float, float]]) -> None:
    """Rank 0 rescales the saved profile to the median of every probe of the workload (the profile's own
    synchronised compute and one before each technique's run), saves it and appends it as the workload's last
    profile record, which predictions and ``commscope calibrate`` use.

    Why (measured): the host's speed drifts. In a four-rank run on 2500 Mbit/s links the one profile, taken before
    the techniques, found resnet_small's compute 15% faster (89 ms) than on the two other links (104-105 ms), while
    that run's local SGD, which hardly communicates, trained at 105 ms as on the others; every technique of that cell
    was then predicted 15-28% fast. Probes of 10 iterations taken back to back spread over 113-139 ms. The median of
    one probe per technique run samples the same hours as the runs it predicts.
    """
    import dataclasses

    import numpy as np

    import costmodels as cm
    from runners import results

    from .compute import scaled_profile, split_total

    if ctx.rank == 0 and len(probes) > 1:
        prof = cm.load_profile(w["profile_path"])
        arr = np.array(probes, dtype=float)
        totals = arr[:, 0] + arr[:, 1]
        median = float(np.median(totals))
        lo, hi = np.percentile(totals, [10, 90])
        f, b = split_total(median, float(np.median(arr[:, 0])), float(np.median(arr[:, 1])))
        u, a = (float(np.median(arr[:, k])) for k in (2, 3))
        prof = dataclasses.replace(prof, metadata={**prof.metadata, "compute_probes_s": [list(r) for r in probes],
                                                   "compute_probe_spread": float(0.5 * (hi - lo) / median)})
        how = (f"{prof.metadata.get('how', '')}; then rescaled to the median of {len(probes)} such measurements, "
               "the profile's and one before each technique's run")
        prof = scaled_profile(prof, f, b, how, optimizer_s=u, pass_s=a, codecs=prof.metadata.get("codecs"))
        prof.save(w["profile_path"])
        results.append(plan["records"], [results.record(
            "profile", {"model": w["model"], "batch_size": w["batch_size"], "device": str(ctx.device.type),
                        "threads": int(plan.get("threads", 1)), "concurrent_ranks": ctx.world,
                        "probes": len(probes)},
            prof.to_dict(), ctx.run_info(), "commscope validate")])
        print(f"# compute of {w['model']} over {len(probes)} probes: forward + backward median {median * 1e3:.2f} ms "
              f"(10-90%: {lo * 1e3:.2f}-{hi * 1e3:.2f} ms; the profile alone {totals[0] * 1e3:.2f} ms)", flush=True)
    ctx.dist.barrier()


def _profile(ctx: Any, plan: dict[str, Any], w: dict[str, Any], threads: int) -> tuple[float, float, float, float]:
    """Profile one workload on all ranks at once; rank 0 saves it and appends its profile record. Returns the
    synchronised compute measured (forward, backward, optimizer step, averaging pass)."""
    import costmodels as cm
    from runners import results
    from runners.training import profiler
    from runners.training.profiler.codecs import synchronised_codecs

    from .compute import mean_profile, scaled_profile, synchronised_compute

    pr = plan["profile"]
    mine = profiler.profile_model(w["model"], w["batch_size"], device=str(ctx.device.type),
                                  warmup=pr["warmup"], iterations=pr["iterations"], threads=threads,
                                  seed=plan.get("seed", 0))
    gathered: list[Any] = [None] * ctx.world
    ctx.dist.all_gather_object(gathered, mine.to_dict())
    sync_f, sync_b, sync_u, sync_pass = synchronised_compute(ctx, w["model"], w["batch_size"], pr["iterations"],
                                                             pr["warmup"], plan.get("seed", 0), plan.get("lr", 0.05))
    codecs = synchronised_codecs(ctx, w["model"], w["batch_size"], w["techniques"], pr["iterations"], pr["warmup"],
                                 plan.get("seed", 0), plan.get("lr", 0.05))
    if ctx.rank == 0:
        prof = mean_profile([cm.ModelProfile.from_dict(d) for d in gathered], ctx.world, threads)
        prof = scaled_profile(prof, sync_f, sync_b, prof.metadata["how"] + "; then scaled to the median over "
                              "iterations of the slowest rank's forward and backward with all ranks in step "
                              "(barrier before each, no communication); the optimizer step is the same median "
                              "of the SGD update, and of the averaging division for the memory-pass cost",
                              optimizer_s=sync_u, pass_s=sync_pass, codecs=codecs)
        prof.save(w["profile_path"])
        results.append(plan["records"], [results.record(
            "profile", {"model": w["model"], "batch_size": w["batch_size"], "device": str(ctx.device.type),
                        "threads": threads, "concurrent_ranks": ctx.world},
            prof.to_dict(), ctx.run_info(), "commscope validate")])
        print(f"# profile {w['model']}: forward {prof.forward_s * 1e3:.2f} ms, backward {prof.backward_s * 1e3:.2f} "
              f"ms, optimizer step {prof.optimizer_s * 1e3:.2f} ms, averaging pass {sync_pass * 1e3:.2f} ms "
              f"(slowest of {ctx.world} ranks in step; layer "
              f"shares from all ranks, spread between ranks "
              f"{prof.metadata['rank_spread']:.1%})", flush=True)
        for key, c in codecs.items():
            print(f"# codec {key} on {w['model']}: encode {c['encode_s'] * 1e3:.2f} ms, decode "
                  f"{c['decode_s'] * 1e3:.2f} ms (slowest of {ctx.world} ranks in step)", flush=True)
    ctx.dist.barrier()
    return sync_f, sync_b, sync_u, sync_pass


def _train(ctx: Any, plan: dict[str, Any], w: dict[str, Any], name: str, options: dict[str, Any], threads: int,
           records: Path) -> bool:
    """Train one technique on one workload on every rank; False (and its error said) when a rank failed."""
    from runners.training import runner as rt
    from runners.training import technique as get_technique
    from runners.training.pricing import PERIODIC, steady_warmup

    tctx = rt.Context(torch=ctx.torch, dist=ctx.dist, rank=ctx.rank, world=ctx.world, local_world=ctx.local_world,
                      backend=ctx.backend, device=ctx.device, devices=[r["name"] for r in ctx.ranks])
    error = None
    try:
        iterations, warmup = plan["iterations"], plan["warmup"]
        period = int(options.get("H", get_technique(name).options.get("H", 1))) if name in PERIODIC else 1
        warmup = steady_warmup(name, options, warmup)  # PowerSGD: past its uncompressed start
        iterations, warmup = -(-iterations // period) * period, -(-warmup // period) * period  # whole periods
        topts = rt.Options(algorithm=name, model=w["model"], iterations=iterations,
                           batch_size=w["batch_size"], lr=plan.get("lr", 0.05), options=dict(options),
                           warmup=warmup, threads=threads, seed=plan.get("seed", 0),
                           backend=ctx.backend, out=records, timeout=plan["timeout"])
        rt.train(tctx, topts)
    except CommscopeError as exc:
        error = str(exc)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    errors = _agree(ctx, error)
    bad = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
    if bad:
        _say(ctx, f"{PROGRESS}failed {name}: {bad[0]}")
    gc.collect()
    ctx.dist.barrier()
    return not bad


def torchrun_node(plan_path: str, module: str) -> int:
    """Inside ``commscope emulate`` (or on one node): torchrun ``module`` with the node's layout from the plan."""
    import signal

    from runners.torchrun.launcher import launch_args, start_torchrun

    plan = load_plan(plan_path)
    where, _world = launch_args(plan.get("ranks_per_node"))
    cmd = [sys.executable, "-m", "torch.distributed.run", *where, "-m", module, plan_path]
    env = {**os.environ, "OMP_NUM_THREADS": str(plan.get("threads", 1))}
    try:
        return start_torchrun(cmd, env)
    except KeyboardInterrupt as exc:  # torchrun and its ranks are down
        return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _node(plan_path: str) -> int:
    return torchrun_node(plan_path, "runners.validate.rank")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "--node":
        if len(args) != 2:
            print("usage: python -m runners.validate.rank --node PLAN.json", file=sys.stderr)
            return 2
        return _node(args[1])
    if len(args) != 1:
        print("usage: torchrun ... -m runners.validate.rank PLAN.json", file=sys.stderr)
        return 2
    from runners.torchrun.rank import rank_main, setup, teardown

    def parse(a: Sequence[str]) -> dict[str, Any]:
        return load_plan(a[0])

    def work(ctx: Any, plan: dict[str, Any]) -> int:
        code = run(ctx, plan)
        teardown(ctx)
        return code

    return rank_main(args, parse, lambda plan: setup(plan.get("backend", "auto"), plan["timeout"]), work, "validation")


if __name__ == "__main__":
    sys.exit(main())
