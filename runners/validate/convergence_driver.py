"""``commscope validate --convergence``: every algorithm trained to a target on CPU ranks behind an emulated link,
seeds repeated, the constants measured on the same task, and predicted time to accuracy beside the measured one.

    commscope validate --convergence [--suite quick|smoke] [--emulate RATE] [--ranks N] [--seeds K] --out DIR

One torchrun job (:mod:`.convergence_rank`; under ``commscope emulate`` with ``--emulate``) sweeps and fits the
link and profiles the model (for the cost-model prices), measures the constants, and trains every run. Then
:func:`.convergence_analysis.analyse` extracts the measured time to target (:mod:`.convergence_measure`),
predicts the ratios to SGD (:mod:`.convergence_predict`), and :mod:`.convergence_report` writes
``convergence.md``, ``convergence.csv`` and ``convergence.jsonl``. DIR also receives ``suite.json``,
``constants.jsonl`` (the "constants" record, which ``cv.time_to_accuracy(..., constants=records)`` and the app's
Time to accuracy page take) and, per environment, ``<env>/records.jsonl`` (sweep, environment, profile,
constants, convergence and iteration records), ``plan.json``, ``log.txt``, ``host_load.json``,
``environment.json`` and ``profile.json``. A DIR that already holds a run is refused.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from runners import results
from runners.measure import host_load

from .convergence_analysis import analyse, suite_dict
from .convergence_report import write
from .convergence_suite import ConvergenceSuite, compressor_labels, get_suite, job_command, make_plan
from .driver import check_out, environments, run_job
from .suite import ValidationError, env_label


def _check(suite: ConvergenceSuite, ranks: Any, seeds: Any, emulate: list[str], threads: Any, timeout: Any
           ) -> None:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ValidationError(f"--ranks must be an integer >= 2, got {ranks!r}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValidationError(f"--seeds must be an integer >= 1, got {seeds!r}")
    if len(emulate) > 1:
        raise ValidationError(f"--convergence trains behind one link: give one --emulate rate, got {','.join(emulate)}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValidationError(f"--threads must be an integer >= 1, got {threads!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValidationError(f"--timeout must be > 0 seconds, got {timeout!r}")
    from runners.training import zoo

    shard = zoo.DATASETS.get(suite.dataset).sizes["train"] // ranks
    if suite.batch_size > shard:
        raise ValidationError(f"--ranks {ranks}: a rank's shard of {suite.dataset} ({shard} samples) is smaller than "
                              f"the batch ({suite.batch_size})")


def check_inputs(suite: str | ConvergenceSuite, ranks: Any, out: str | os.PathLike[str], emulate: list[str],
                 seeds: Any, threads: Any, timeout: Any, ranks_per_node: int | None
                 ) -> tuple[ConvergenceSuite, int, str | None, int, str, Path]:
    """Everything checked before anything runs or is written: (suite, seeds, rate, ranks per node, environment
    label, its directory). Raises :class:`ValidationError` naming the bad value and what is allowed."""
    s = get_suite(suite)
    k = s.seeds if seeds is None else seeds
    _check(s, ranks, k, list(emulate), threads, timeout)
    (rate, rpn), = environments(list(emulate), ranks, ranks_per_node)
    outdir = Path(out)
    if (outdir / "convergence.jsonl").exists() or (outdir / "suite.json").exists():
        raise ValidationError(f"{outdir} already holds a convergence validation; choose another --out")
    check_out(outdir, {"convergence.md": "# commscope validate --convergence", "convergence.csv": "label"})
    label = env_label(rate, None if rpn in (1, ranks) else rpn, ranks)
    envdir = outdir / re.sub(r"[^A-Za-z0-9_.-]", "_", label)
    if envdir.exists() and any(envdir.iterdir()):
        raise ValidationError(f"{envdir} is not empty; choose another --out")
    return s, k, rate, rpn, label, envdir


def validate_convergence(suite: str | ConvergenceSuite = "quick", ranks: int = 4, out: str | os.PathLike[str] = ".",
                         emulate: list[str] | None = None, seeds: int | None = None, threads: int = 1,
                         timeout: float = 600.0, ranks_per_node: int | None = None, command: str = "",
                         progress: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Run the convergence suite (module docstring); returns (the analysis, failures)."""
    s, k, rate, rpn, label, envdir = check_inputs(suite, ranks, out, list(emulate or []), seeds, threads, timeout,
                                                  ranks_per_node)
    outdir = Path(out)
    envdir.mkdir(parents=True, exist_ok=True)
    meta = {"environment": envdir.name, "ranks": ranks, "seeds": k, "rate": rate, "ranks_per_node": rpn,
            "threads": threads, "command": command, "suite": suite_dict(s, compressor_labels(s))}
    (outdir / "suite.json").write_text(json.dumps(meta, indent=1))
    plan = make_plan(s, envdir, ranks, rpn, k, threads, timeout)
    plan_path = envdir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    stages = (2 if s.cost_model else 0) + 1 + len(plan["runs"])
    task = progress.add_task(label, total=stages) if progress is not None else None

    def on_stage(i: int, n: int, what: str) -> None:
        if progress is not None:
            progress.update(task, completed=i - 1, description=f"{label}: {what}")

    before = host_load.cpu_seconds()
    code, failed, tail = run_job(job_command(plan_path, rate, ranks, rpn), envdir / "log.txt", on_stage, threads)
    load = host_load.cpu_share(before, host_load.cpu_seconds())
    (envdir / "host_load.json").write_text(json.dumps({**load, "disturbed": host_load.disturbed(load)}, indent=1))
    if progress is not None:
        progress.update(task, completed=stages, description=f"{label}: done")
    failures = [f"{label}: {f}" for f in failed]
    if code and not failed:
        failures.append(f"{label}: the job exited with code {code} ({envdir / 'log.txt'} has its output):\n  "
                        + "\n  ".join(tail[-6:]))
    recs = results.load(envdir / "records.jsonl").records if (envdir / "records.jsonl").exists() else []
    constants = [r for r in recs if r["kind"] == "constants"]
    if constants:  # beside the report, where the Time to accuracy page looks for measured constants
        results.append(outdir / "constants.jsonl", constants)
    summary = analyse(recs, meta["suite"], ranks, envdir)
    write(outdir, summary, command, notes(s, meta, load))
    return summary, failures


def notes(s: ConvergenceSuite, meta: dict[str, Any], load: dict[str, Any]) -> list[str]:
    """The report's notes on how the run was made."""
    where = f"each rank behind its own emulated link of {meta['rate']}" if meta["rate"] else "on this host"
    lrs = ", ".join(f"{k} {s.lr_of(k):g}" for k in s.lr_scale)
    return [
        f"task: {s.model} on {s.dataset} (generated, no download), {meta['ranks']} CPU gloo ranks {where}, "
        f"{meta['threads']} thread(s) per rank, batch {s.batch_size} per rank, SGD lr {s.lr:g}"
        + (f" ({lrs})" if lrs else "") + f"; at most {s.steps} steps per run, evaluated every {s.eval_every} steps "
        f"on the held-out split; {meta['seeds']} seed(s) per algorithm (the seed draws the model, the data set's "
        "structure and the batches), algorithms rotated by one place per seed",
        f"target: test loss <= {s.target_loss:g} and test accuracy >= {s.target_accuracy:g}; measured time to "
        "target = the wall clock since training began (evaluations included) at the first evaluation meeting "
        "both; median over seeds, (min-max) over the seeds that reached; a run that never met it is censored",
        "predicted ratio to SGD = (bound's steps to eps x seconds per step) / SGD's; seconds per step: the "
        "algorithm's own measured wall clock per step in this run (median over seeds); the cost-model column "
        "prices a step on the link fitted to this run's sweep and the profile measured in it (no evaluations)",
        f"host: other work took {load['other_work']:.1%} of the CPUs while the job ran (this run "
        f"{load['this_run']:.0%})" + ("; DISTURBED" if host_load.disturbed(load) else ""),
    ]
