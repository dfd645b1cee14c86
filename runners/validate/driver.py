"""The suite driver: one torchrun job per environment (the host, or emulated clusters), its progress and
failures, then every technique predicted and compared, and the report written."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError
from runners import results
from runners.calibrate.cells import SWEEP_STATISTIC
from runners.measure import host_load
from runners.measure.fit.records import STATISTIC_WORDS
from runners.torchrun import lifeline

from . import host_cpu
from .prediction import compare
from .rank import fit_link
from .report import write_tables
from .suite import SUITES, Suite, ValidationError, env_label, job_command, make_plan, profile_file

_STAGE = re.compile(r"@@ stage (\d+)/(\d+): (.*)")
_FAILED = re.compile(r"@@ failed (\S+): (.*)")
JOB_STOP_GRACE_S = 30.0  # a stopped job's emulator stops its nodes and deletes its namespaces meanwhile


def run_job(cmd: Sequence[str], log: Path, on_stage: Callable[[int, int, str], None], threads: int
            ) -> tuple[int, list[str], list[str]]:
    """Run one environment's job, its output into ``log``; returns (exit code, failed techniques, its
    ``commscope: error:`` lines, or its last lines where it printed none). The job runs in a process group of its
    own that dies with this process; SIGTERM, SIGHUP or Ctrl-C here stop it (an emulator removes its network)
    and raise :class:`runners.torchrun.lifeline.Terminated` or KeyboardInterrupt."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    failed: list[str] = []
    tail: list[str] = []
    errors: list[str] = []
    with open(log, "w") as fh, lifeline.supervised(cmd, JOB_STOP_GRACE_S, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True, env=env, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            fh.flush()  # log.txt follows the job as it runs
            tail = [*tail, line.rstrip()][-15:]
            if "commscope: error:" in line:
                errors.append(line.strip())
            m = _STAGE.search(line)
            if m:
                on_stage(int(m.group(1)), int(m.group(2)), m.group(3))
            f = _FAILED.search(line)
            if f:
                failed.append(f"{f.group(1)} ({f.group(2)})")
    return proc.returncode, failed, errors or tail


def environments(emulate: Sequence[str], ranks: int, ranks_per_node: int | None) -> list[tuple[str | None, int]]:
    """(rate, ranks per node) of every environment: ``RATE`` (``--ranks-per-node``, default 1) or ``RATE:K`` (K ranks
    per emulated node: loopback inside a node, the shaped link between nodes); the host alone without --emulate."""
    from runners.measure.emulate import parse_rate

    if ranks_per_node is not None:
        if isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int) or ranks_per_node < 1:
            raise ValidationError(f"--ranks-per-node must be an integer >= 1, got {ranks_per_node!r}")
        if not emulate:
            raise ValidationError(f"--ranks-per-node {ranks_per_node} is for emulated clusters: add --emulate RATE "
                                  "(without it every rank runs on this host)")
    if not emulate:
        return [(None, ranks)]
    out: list[tuple[str | None, int]] = []
    seen: dict[tuple[int, int], str] = {}
    for item in emulate:
        rate, _, k = item.partition(":")
        bps = parse_rate(rate)  # a bad rate fails before anything runs
        rpn = ranks_per_node or 1
        if k:
            try:
                rpn = int(k)
            except ValueError:
                rpn = 0
            if rpn < 1:
                raise ValidationError(f"--emulate {item!r}: ranks per node after ':' must be an integer >= 1, "
                                      f"e.g. 1gbit:2")
        if ranks % rpn:
            raise ValidationError(f"--ranks {ranks} is not a multiple of {rpn} ranks per node (--emulate {item!r})")
        if (bps, rpn) in seen:
            raise ValidationError(f"--emulate gives the same environment twice: {seen[bps, rpn]!r} and {item!r} "
                                  f"({rpn} rank(s) per node at {bps} bit/s); give each rate once")
        seen[bps, rpn] = item
        out.append((rate, rpn))
    return out


# the first line of each report commscope writes into --out starts so (the CSV: its first column's name)
REPORTS = {"validation.md": "# commscope validate", "validation.csv": "technique"}


def check_out(outdir: Path, reports: Mapping[str, str] = REPORTS) -> None:
    """Refuse an ``outdir`` holding a report of :data:`REPORTS` that commscope did not write (its first line is
    not commscope's): the run would overwrite it at the end; and an ``outdir`` that is a file."""
    if outdir.exists() and not outdir.is_dir():
        raise ValidationError(f"--out {outdir} is a file, not a directory; give a directory for the run")
    for name, marker in reports.items():
        path = outdir / name
        if not path.exists():
            continue
        first = _first_line(path)
        if not path.is_file() or not (first.startswith(marker) if marker.startswith("#") else
                                       first.split(",")[0].strip() == marker):
            raise ValidationError(f"{path} was not written by commscope and the run would overwrite it; choose "
                                  "another --out or move it")


def _first_line(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.readline(4096).decode(errors="replace").rstrip("\r\n")
    except OSError:
        return ""


def validate(suite: str | Suite, ranks: int, out: str | os.PathLike[str], emulate: Sequence[str] = (),
             threads: int = 1, timeout: float = 300.0, ranks_per_node: int | None = None,
             command: str = "", progress: Any = None, backend: str = "auto"
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the suite on every environment; returns (validation records, failures). See the module docstring."""
    import costmodels as cm
    if isinstance(suite, Suite):
        s = suite
    elif suite in SUITES:
        s = SUITES[suite]
    else:
        raise ValidationError(f"unknown suite {suite!r}; choose one of: {', '.join(SUITES)}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ValidationError(f"--ranks must be an integer >= 2, got {ranks!r}")
    envs = environments(emulate, ranks, ranks_per_node)
    from runners.torchrun.rank import BACKENDS

    if backend not in BACKENDS:
        raise ValidationError(f"unknown --backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    outdir = Path(out)
    check_out(outdir)
    if (outdir / "validation.jsonl").exists():
        raise ValidationError(f"{outdir} already holds a validation (validation.jsonl); choose another --out")
    envdirs = [outdir / re.sub(r"[^A-Za-z0-9_.-]", "_", env_label(r, None if k in (1, ranks) else k, ranks))
               for r, k in envs]
    for envdir in envdirs:  # every environment checked before the first job runs
        if envdir.exists() and any(envdir.iterdir()):
            raise ValidationError(f"{envdir} is not empty; choose another --out")
    outdir.mkdir(parents=True, exist_ok=True)
    all_records: list[dict[str, Any]] = []
    failures: list[str] = []
    models = ", ".join(f"{m} (batch {b} per rank)" for m, b in s.workloads)
    layout = ", ".join(f"{env_label(r, k, ranks)}: {k} per node" for r, k in envs)
    notes = [f"suite {s.name}: {models}; {ranks} ranks ({layout}), {threads} thread(s) per rank, "
             f"{s.iterations} timed iterations after {s.warmup}"
             + (f", every technique {s.repeats} times in rotated order" if s.repeats > 1 else ""),
             PREDICTIONS_NOTE,
             "compute: profiled inside the distributed run, on all ranks at once with the same threads per rank "
             "(each rank's per-layer medians scaled to its unhooked forward and backward, then the mean over ranks, "
             "then to the slowest rank's forward plus backward with all ranks in step, the median of one such "
             "measurement before each technique's run); the optimizer step is the SGD update timed the same way",
             f"environment: fitted to the {STATISTIC_WORDS[SWEEP_STATISTIC]} of this run's own sweep of "
             + ", ".join(s.sweep_ops) + " in two regimes (Hockney): alpha from the sizes below 64 KiB, beta and "
             "gamma from those from 256 KiB"]
    emulated = [r for r, _ in envs if r is not None]
    host_cpu_data = host_cpu.measure(emulated, outdir, lambda m: notes.append(m)) if emulated else None
    if host_cpu_data:
        notes.append(host_cpu.note(host_cpu_data))
    buffers = host_buffers_file(outdir, ranks, backend, notes)
    for (rate, rpn), envdir in zip(envs, envdirs, strict=True):
        label = env_label(rate, None if rpn in (1, ranks) else rpn, ranks)
        envdir.mkdir(parents=True, exist_ok=True)
        plan = make_plan(s, envdir, ranks, rpn, threads, timeout, backend=backend, host_buffers=buffers)
        plan_path = envdir / "plan.json"
        plan_path.write_text(json.dumps(plan, indent=2))
        cmd = job_command(plan_path, rate, ranks, rpn)
        stages = 2 + len(s.workloads) * (1 + s.repeats * len(s.techniques))
        task = progress.add_task(label, total=stages) if progress is not None else None

        def on_stage(k: int, n: int, what: str, task: Any = task) -> None:
            if progress is not None:
                progress.update(task, completed=k - 1, description=f"{label}: {what}")

        before = host_load.cpu_seconds()
        code, failed, tail = run_job(cmd, envdir / "log.txt", on_stage, threads)
        load = host_load.cpu_share(before, host_load.cpu_seconds())
        (envdir / "host_load.json").write_text(json.dumps({**load, "disturbed": host_load.disturbed(load)}, indent=1))
        notes.append(_host_note(label, load))
        if progress is not None:
            progress.update(task, completed=stages, description=f"{label}: done")
        for f in failed:
            failures.append(f"{label}: {f}")
        if code and not failed:
            failures.append(f"{label}: the job exited with code {code} ({envdir / 'log.txt'} has its output):\n  "
                            + "\n  ".join(tail[-6:]))
        if not (envdir / "environment.json").exists():
            continue
        env = cm.Environment.load(envdir / "environment.json")
        profs = {model: cm.load_profile(profile_file(envdir, i, model))
                 for i, (model, _) in enumerate(s.workloads) if profile_file(envdir, i, model).exists()}
        if not profs:
            continue
        loaded = results.load(envdir / "records.jsonl")
        recs = compare(loaded.records, profs, env, label,
                       host=host_cpu.shared_host(host_cpu_data, loaded.records, threads, env))
        for r in recs:
            r["config"]["host_other_work_share"] = round(load["other_work"], 4)
        if recs:
            results.append(outdir / "validation.jsonl", recs)
        all_records += recs
    write_tables(outdir, all_records, command, notes)
    return all_records, failures


def host_buffers_file(outdir: Path, ranks: int, backend: str, notes: list[str]) -> str | None:
    """Measure what gloo's own host buffers cost with ``ranks`` processes at once (:mod:`runners.measure.
    host_buffers`), once per validation, into ``outdir / host_buffers.json`` for every link's fit; None where the
    ranks run NCCL (no host buffers) or the probe fails (a note says so)."""
    import torch

    from runners.measure import host_buffers

    if backend == "nccl" or (backend == "auto" and torch.cuda.is_available()):
        return None
    try:
        res = host_buffers.measure(ranks)
    except CommscopeError as exc:
        notes.append(f"host buffers not measured ({exc}): gloo's reduce_scatter and allgather priced without them")
        return None
    path = host_buffers.save(res, outdir / "host_buffers.json")
    notes.append(f"host buffers (gloo's clone and copies; {ranks} processes at once): host_copy "
                 f"{res['host_copy'] * 1e9:.3g} ns/B, host_fault {res['host_fault'] * 1e9:.3g} ns/B "
                 "(costmodels.collectives.host_buffers), given to every link's fit")
    return str(path.resolve())


def _host_note(label: str, load: dict[str, Any]) -> str:
    return (f"host, {label}: other work took {load['other_work']:.1%} of the CPUs while it ran "
            f"(this run {load['this_run']:.0%}, interrupts and softirq {load['softirq']:.0%})"
            + (f"; DISTURBED (over {host_load.DISTURBED:.0%}): its compute and communication were measured beside "
               "other work" if host_load.disturbed(load) else ""))


PREDICTIONS_NOTE = ("predictions: (a) the sweep-fitted environment alone; (b) calibrated leave-one-technique-out on "
                    "the environment's other techniques (commscope calibrate), ± its standard error from the "
                    "calibrated terms' covariance (delta method); (c) with the shipped default interference and "
                    "overhead terms")


def latency_probes(envdir: Path) -> list[dict[str, Any]] | None:
    """The latency probes an environment's job kept (:mod:`.latency`), or None (runs before them)."""
    from .latency import FILE

    path = envdir / FILE
    return results.load(path).records if path.is_file() else None


PROVENANCE = ("source", "path", "records_in_file")  # fields of a fitted environment that say where, not what


def same_fit(old: Any, new: Any, rtol: float = 1e-6) -> bool:
    """Whether two fitted environments agree in every field, numbers to ``rtol`` (relative; exact at 0).

    Fitting the same sweep again moves a parameter by ~1e-10 of itself and an alternative model's fit
    statistics by up to ~1e-9 (the solver's float order); rewriting ``environment.json`` for that would churn
    a shipped file with nothing changed in it, and hand calibration noise in place of the stored numbers.
    A millionth is far inside any fitted parameter's confidence interval. Where the records were read from
    (``source``, a file's ``path``, and how many records the file held: training appends to it after the fit) is
    provenance, not fit: a run copied or moved elsewhere, or read after its training, fits the same."""
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a if k not in PROVENANCE)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and not isinstance(b, bool):
            return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))
        return bool(a == b)

    return same(old.to_dict(), new.to_dict())


def repredict(out: str | os.PathLike[str], terms: Sequence[str] | None = None, probes: bool = False,
              per_primitive: bool = True, calibrate: bool = True) -> list[dict[str, Any]]:
    """Predict a finished validation again with today's models: every environment directory's link is fitted again
    to its sweep (``environment.json`` replaced, atomically), and its records, that environment and its profiles
    go through :func:`compare` once more, and ``validation.jsonl``, ``.csv`` and ``.md``
    are replaced (each written beside and renamed over the old one, so a failure leaves the old files whole).
    The measurements are not touched. The command and the notes of the old ``validation.md`` are kept, the
    host notes refreshed from each ``host_load.json``. ``terms``: what (b) calibrates (default: calibrate's
    ``FITTED``); ``probes``: every cell at the latency its runs' probes measured (:mod:`.latency`; runs that kept
    them); ``per_primitive``: False fits one link for every primitive (:func:`.rank.fit_link`); ``calibrate``:
    False leaves prediction (b) out (its leave-one-technique-out fits are most of the time)."""
    import tempfile

    import costmodels as cm

    outdir = Path(out)
    old_md = outdir / "validation.md"
    if not old_md.is_file():
        raise ValidationError(f"{outdir} holds no finished validation (validation.md); nothing to predict again")
    text = old_md.read_text().splitlines()
    command = next((ln.split("`")[1] for ln in text if ln.startswith("Command: `")), "")
    head = text[:next((i for i, ln in enumerate(text) if ln.startswith("|")), len(text))]  # notes precede tables
    notes = [PREDICTIONS_NOTE if ln.startswith("- predictions: ") else ln[2:]
             for ln in head if ln.startswith("- ") and not ln.startswith("- host, ")]
    records: list[dict[str, Any]] = []
    host_cpu_data = host_cpu.load(outdir)
    if host_cpu_data:
        notes = [n for n in notes if not n.startswith("(c) on shared cores")] + [host_cpu.note(host_cpu_data)]
    order: dict[str, int] = {}  # the run's order of environments, as its old table has them
    if (outdir / "validation.jsonl").is_file():
        for r in results.load(outdir / "validation.jsonl").records:
            order.setdefault(str(r["config"].get("environment")), len(order))
    envdirs = sorted((d for d in outdir.iterdir() if (d / "plan.json").is_file()),
                     key=lambda d: (order.get(d.name, len(order)), d.name))
    for envdir in envdirs:
        plan = json.loads((envdir / "plan.json").read_text())
        if not (envdir / "environment.json").is_file():
            continue
        env = cm.Environment.load(envdir / "environment.json")
        if "sweep" in plan and (envdir / "records.jsonl").is_file():  # today's link model, fitted again
            refit = fit_link(envdir / "records.jsonl", plan, per_primitive).environment
            if not same_fit(env, refit):  # else the stored file stays byte for byte, and is what predicts
                env = refit
                env.save(envdir / "environment.json")
        profs = {w["model"]: cm.load_profile(profile_file(envdir, i, w["model"]))
                 for i, w in enumerate(plan.get("workloads", [])) if profile_file(envdir, i, w["model"]).is_file()}
        if not profs:
            continue
        measured = results.load(envdir / "records.jsonl").records
        recs = compare(measured, profs, env, envdir.name,
                       host=host_cpu.shared_host(host_cpu_data, measured, int(plan.get("threads", 1)), env),
                       terms=terms,
                       probes=latency_probes(envdir) if probes else None, calibrate=calibrate)
        load_file = envdir / "host_load.json"
        if load_file.is_file():
            load = json.loads(load_file.read_text())
            notes.append(_host_note(envdir.name, load))
            for r in recs:
                r["config"]["host_other_work_share"] = round(load["other_work"], 4)
        records += recs
    with tempfile.TemporaryDirectory(dir=outdir) as tmp:
        staged = Path(tmp)
        if records:
            results.append(staged / "validation.jsonl", records)
        write_tables(staged, records, command, notes)
        for name in ("validation.jsonl", "validation.csv", "validation.md"):
            if (staged / name).exists():
                os.replace(staged / name, outdir / name)
    return records
