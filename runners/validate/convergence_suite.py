"""What ``commscope validate --convergence`` runs: the convergence suites (task, algorithms, targets, step
budget, constants measurement) and the JSON plan of the one torchrun job that trains them all
(:mod:`runners.validate.convergence_rank`), with the command that starts that job.

Every algorithm of the survey's convergence comparison that has a runner is trained: SGD (``fusion``, PyTorch
DDP, the schedule ``convergence.algorithms`` prices "sgd" with), local SGD, D-PSGD, QSGD, top-k, random-k,
PowerSGD, signSGD and EF-signSGD. Asynchronous SGD and SSP have bounds (``convergence.bounds``) but no runner
(:data:`NOT_RUN`), so they are named in the report and not measured.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .suite import LATENCY_BYTES, ValidationError

#: (label in the report, training technique, its options, the convergence algorithm whose bound counts its steps
#: or None where no bound applies). The labels are the survey's algorithm names (``convergence.algorithms``).
ALGORITHMS: tuple[tuple[str, str, Mapping[str, Any], str | None], ...] = (
    ("sgd", "fusion", {}, "sgd"),
    ("local_sgd", "local_sgd", {"H": 8}, "local_sgd"),
    ("dpsgd", "dpsgd", {"topology": "ring"}, "dpsgd"),
    ("qsgd", "qsgd", {"bits": 4}, "qsgd"),
    ("topk", "topk", {"density": 0.01}, "topk"),
    ("randomk", "randomk", {"density": 0.01}, "randomk"),
    ("powersgd", "powersgd", {"rank": 2}, "powersgd"),
    ("signsgd", "signsgd", {}, "signsgd"),
    ("ef_signsgd", "ef_signsgd", {}, "ef_signsgd"),
)
NOT_RUN = {"async_sgd": "asynchronous SGD on a parameter server has a bound and a cost model but no runner",
           "ssp": "stale synchronous parallel has a bound and a cost model but no runner"}


@dataclass(frozen=True)
class ConvergenceSuite:
    """One convergence suite: a classifier of the zoo on its generated data set, trained by every algorithm for at
    most ``steps`` steps (SGD steps of ``batch_size`` samples per rank at ``lr``; ``lr_scale`` multiplies it for an
    algorithm whose step is not a gradient step, e.g. signSGD's ``lr sign(.)``), evaluated every ``eval_every``
    steps; the target is ``target_loss`` (test loss at or below) and ``target_accuracy`` (test accuracy at or
    above), both. ``constants``: the options of the one ``commscope constants`` measurement (same model, data, batch
    and lr, the SGD technique). ``cost_model``: also sweep the link, fit it and profile the model, so that every
    algorithm's iteration is priced by the cost models too."""

    name: str
    model: str
    dataset: str
    batch_size: int
    lr: float
    steps: int
    eval_every: int
    target_loss: float
    target_accuracy: float
    seeds: int = 3
    algorithms: tuple[tuple[str, str, Mapping[str, Any], str | None], ...] = ALGORITHMS
    lr_scale: Mapping[str, float] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)
    cost_model: bool = True
    sweep_sizes: tuple[str, str, float] = ("4", "1MiB", 4.0)
    sweep_iters: tuple[int, int, int] = (2, 8, 30)  # warm-up, timed (bandwidth sizes), timed (latency sizes)
    profile_iters: tuple[int, int] = (3, 20)

    def lr_of(self, label: str) -> float:
        """The learning rate an algorithm trains with."""
        return self.lr * float(self.lr_scale.get(label, 1.0))

    @property
    def labels(self) -> list[str]:
        return [a[0] for a in self.algorithms]


# the MLP (76 810 parameters, 300 KB of gradients) on the 10-class Gaussian mixture (Bayes accuracy near 0.78):
# a step's compute is a few milliseconds, so behind a 100 Mbit/s link the all-reduce is most of an SGD step and
# compression changes the time per step several-fold, while the steps to the target differ by algorithm (SGD
# needs 160-240 of them at lr 0.2 depending on the seed's data; random-k at 1% about twice as many): both halves
# of time to accuracy. signSGD's step is lr per coordinate: lr 0.2 x 0.005 = 0.001 (0.002 reaches the target
# sooner on seed 0 but then wanders above it; 0.0005 is slower than SGD)
SUITES: dict[str, ConvergenceSuite] = {
    "quick": ConvergenceSuite(
        "quick", "mlp", "gaussian_mixture", batch_size=32, lr=0.2, steps=500, eval_every=10, target_loss=0.85,
        target_accuracy=0.70, seeds=3, lr_scale={"signsgd": 0.005},
        constants={"steps": 200, "checkpoints": 3, "noise_samples": 1024, "hvp_samples": 512,
                   "power_iterations": 30, "draws": 8}),
    "smoke": ConvergenceSuite(  # a minute-long check of the whole pipeline, not a measurement
        "smoke", "mlp", "gaussian_mixture", batch_size=32, lr=0.2, steps=60, eval_every=10, target_loss=1.8,
        target_accuracy=0.4, seeds=1, lr_scale={"signsgd": 0.005},
        algorithms=tuple(a for a in ALGORITHMS if a[0] in ("sgd", "local_sgd", "topk")),
        constants={"steps": 4, "checkpoints": 2, "noise_samples": 64, "hvp_samples": 32, "power_iterations": 3,
                   "draws": 2}, cost_model=False),
}


def get_suite(suite: str | ConvergenceSuite) -> ConvergenceSuite:
    """A suite by name (or the suite given); an unknown name names the allowed ones."""
    if isinstance(suite, ConvergenceSuite):
        return suite
    if suite not in SUITES:
        raise ValidationError(f"unknown convergence suite {suite!r}; with --convergence choose --suite "
                              f"{' or '.join(SUITES)}")
    return SUITES[suite]


def compressor_labels(suite: ConvergenceSuite) -> dict[str, str]:
    """Each compressing algorithm's compressor as ``commscope constants`` labels it (``topk:0.01``)."""
    from runners.constants.options import parse_compressor_list
    from runners.training.pricing import schedule_call

    out = {}
    for label, technique, options, _ in suite.algorithms:
        _, spec, _ = schedule_call(technique, options)
        if spec is not None:
            out[label] = parse_compressor_list(spec)[0]
    return out


def make_plan(suite: ConvergenceSuite, envdir: Path, ranks: int, ranks_per_node: int, seeds: int, threads: int,
              timeout: float) -> dict[str, Any]:
    """The JSON plan of the job (paths inside ``envdir``): runs in the order seed-major, the algorithms rotated by
    one place per seed so that any drift of the machine falls on every algorithm alike."""
    envdir = envdir.resolve()
    algos = [[label, tech, dict(opts), suite.lr_of(label)] for label, tech, opts, _ in suite.algorithms]
    runs = []
    for seed in range(seeds):
        k = seed % len(algos)
        runs += [{"seed": seed, "label": a[0], "technique": a[1], "options": a[2], "lr": a[3]}
                 for a in algos[k:] + algos[:k]]
    lo, hi, factor = suite.sweep_sizes
    return {"suite": suite.name, "model": suite.model, "dataset": suite.dataset, "batch_size": suite.batch_size,
            "lr": suite.lr, "steps": suite.steps, "eval_every": suite.eval_every, "threads": threads,
            "timeout": timeout, "seed": 0, "runs": runs, "techniques": [[a[1], a[2]] for a in algos],
            "constants": {**suite.constants, "compressors": ",".join(compressor_labels(suite).values()) or "none"},
            "cost_model": suite.cost_model,
            "sweep": {"ops": ["allreduce", "allgather"], "min_size": lo, "max_size": hi, "factor": factor,
                      "warmup": suite.sweep_iters[0], "iters": suite.sweep_iters[1],
                      "latency_iters": suite.sweep_iters[2], "latency_bytes": LATENCY_BYTES},
            "profile": {"warmup": suite.profile_iters[0], "iterations": suite.profile_iters[1]},
            "records": str(envdir / "records.jsonl"), "environment": str(envdir / "environment.json"),
            "environment_name": f"fitted:{envdir.name}", "profile_path": str(envdir / "profile.json"),
            "ranks": ranks, "ranks_per_node": ranks_per_node, "backend": "gloo"}


def job_command(plan_path: Path, rate: str | None, ranks: int, ranks_per_node: int) -> list[str]:
    """The job: the rank side on this host, or under ``commscope emulate`` behind links of ``rate``."""
    node = [sys.executable, "-m", "runners.validate.convergence_rank", "--node", str(plan_path)]
    if rate is None:
        return node
    return [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(ranks // ranks_per_node),
            "--ranks-per-node", str(ranks_per_node), "--rate", rate, "--", *node]
