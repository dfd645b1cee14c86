"""Options of a constants measurement: checked (:func:`make_options`), parsed from the rank's command line
(:func:`parse_args`) and written back as one (:meth:`Options.argv`).

    torchrun --nproc_per_node=N -m runners.constants --model mlp [--dataset NAME] [--batch-size 32]
             [--steps 50] [--checkpoints 3] [--lr 0.05] [--technique fusion] [--compressors all|topk,qsgd:4,...]
             [--samples 0] [--noise-samples 1024] [--hvp-samples 256] [--power-iterations 20] [--draws 8]
             [--threads 1] [--seed 0] [--timeout 600] [--out constants.jsonl]
    commscope constants --model mlp --ranks N [same options]        # launches torchrun for you
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodels.errors import CommscopeError

DEFAULT_TECHNIQUE = "fusion"  # PyTorch DDP, the schedule convergence.algorithms prices "sgd" with
NOT_REPLICATED = ("local_sgd", "dpsgd", "fsdp")  # ranks hold different or partial models: no one x to measure at


class ConstantsError(CommscopeError):
    """Bad options of a constants measurement (the message names the value and what is allowed)."""


@dataclass
class Options:
    model: str
    dataset: str
    batch_size: int = 32
    steps: int = 50
    checkpoints: int = 3
    lr: float = 0.05
    technique: str = DEFAULT_TECHNIQUE
    compressors: list[str] = field(default_factory=list)  # "name" or "name:value", checked
    samples: int = 0  # samples of each shard for f_i and grad f_i (0: the whole shard)
    noise_samples: int = 1024  # samples of each shard whose per-sample gradients give sigma^2
    hvp_samples: int = 256  # samples of each shard in the Hessian of the power iteration
    power_iterations: int = 20
    draws: int = 8  # mini-batch gradients per rank and checkpoint (sigma per batch, compressors), draws of C
    threads: int = 1
    seed: int = 0
    timeout: float = 600.0
    out: Path | None = None

    @property
    def checkpoint_steps(self) -> list[int]:
        """Steps at which the constants are measured: ``checkpoints`` evenly spaced over 0..steps."""
        if self.checkpoints == 1:
            return [0]
        return sorted({round(i * self.steps / (self.checkpoints - 1)) for i in range(self.checkpoints)})

    def argv(self) -> list[str]:
        """The command line of ``python -m runners.constants`` for these options."""
        args = ["--model", self.model, "--dataset", self.dataset, "--batch-size", str(self.batch_size),
                "--steps", str(self.steps), "--checkpoints", str(self.checkpoints), "--lr", repr(self.lr),
                "--technique", self.technique, "--compressors", ",".join(self.compressors) or "none",
                "--samples", str(self.samples), "--noise-samples", str(self.noise_samples),
                "--hvp-samples", str(self.hvp_samples), "--power-iterations", str(self.power_iterations),
                "--draws", str(self.draws), "--threads", str(self.threads), "--seed", str(self.seed),
                "--timeout", repr(self.timeout)]
        if self.out is not None:
            args += ["--out", str(self.out)]
        return args

    def config(self, world_size: int) -> dict[str, Any]:
        """The ``config`` of the "constants" record."""
        return {"model": self.model, "dataset": self.dataset, "batch_size": self.batch_size,
                "world_size": int(world_size), "steps": self.steps, "checkpoints": self.checkpoint_steps,
                "lr": self.lr, "technique": self.technique, "compressors": list(self.compressors),
                "samples": self.samples, "noise_samples": self.noise_samples, "hvp_samples": self.hvp_samples,
                "power_iterations": self.power_iterations, "draws": self.draws, "seed": self.seed,
                "threads": self.threads}


def parse_compressor_list(text: str) -> list[str]:
    """``"all"`` (every registered compressor at its default), ``"none"``, or comma-separated ``name[:value]``."""
    import costmodels as cm

    low = text.strip().lower()
    if low == "none":
        return []
    items = cm.compressors() if low == "all" else [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConstantsError(f"--compressors must be all, none or names such as topk,qsgd:4; got {text!r}")
    out = []
    for item in items:
        try:
            entry, value = cm.parse_compressor(item)
        except CommscopeError as exc:
            raise ConstantsError(f"--compressors {item!r}: {exc}") from None
        # a code's width on the wire does not change the compressor's constants: signsgd:8 is measured as signsgd
        label = entry.name if value is None or entry.wire_only else f"{entry.name}:{value:g}"
        if label in out:
            raise ConstantsError(f"--compressors lists {label} twice")
        out.append(label)
    return out


def _int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConstantsError(f"{name} must be an integer >= {low}, got {value!r}")


def make_options(model: str, dataset: str | None = None, batch_size: int = 32, steps: int = 50, checkpoints: int = 3,
                 lr: float = 0.05, technique: str = DEFAULT_TECHNIQUE, compressors: str = "all", samples: int = 0,
                 noise_samples: int = 1024, hvp_samples: int = 256, power_iterations: int = 20, draws: int = 8,
                 threads: int = 1, seed: int = 0, timeout: float = 600.0,
                 out: str | os.PathLike[str] | None = None) -> Options:
    """Checked options (raises :class:`ConstantsError` with a one-line message naming the bad value)."""
    from runners.training import TECHNIQUES, zoo

    for name, value, low in (("--batch-size", batch_size, 1), ("--steps", steps, 0), ("--checkpoints", checkpoints, 1),
                             ("--samples", samples, 0), ("--noise-samples", noise_samples, 0),
                             ("--hvp-samples", hvp_samples, 1), ("--power-iterations", power_iterations, 1),
                             ("--draws", draws, 2), ("--threads", threads, 1), ("--seed", seed, 0)):
        _int(name, value, low)
    if checkpoints > steps + 1:
        raise ConstantsError(f"--checkpoints {checkpoints} needs at least {checkpoints - 1} --steps, got {steps}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not (math.isfinite(lr) and lr > 0):
        raise ConstantsError(f"--lr must be a number > 0, got {lr!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConstantsError(f"--timeout must be a number > 0, got {timeout!r}")
    if model.lower() not in zoo.models():
        raise ConstantsError(f"unknown --model {model!r}; the zoo has: {', '.join(zoo.models())}")
    entry = zoo.model(model)
    if not entry.available():
        raise ConstantsError(f"model {entry.name} needs {', '.join(entry.requires)}, which is not installed")
    data = dataset or entry.dataset
    if data is None:
        raise ConstantsError(f"model {entry.name} has no paired data set; give --dataset ({', '.join(zoo.datasets())})")
    if data.lower() not in zoo.datasets():
        raise ConstantsError(f"unknown --dataset {data!r}; the generated data sets are: {', '.join(zoo.datasets())}")
    allowed = [t for t in TECHNIQUES.names() if t not in NOT_REPLICATED]
    if technique not in allowed:
        why = " (its ranks do not hold one full model to measure at)" if technique in NOT_REPLICATED else ""
        raise ConstantsError(f"--technique {technique!r} cannot be measured{why}; choose one of: {', '.join(allowed)}")
    target = Path(out) if out is not None else None
    if target is not None and not target.parent.is_dir():
        raise ConstantsError(f"cannot write results to {target}: directory {target.parent} does not exist")
    return Options(model=entry.name, dataset=zoo.DATASETS.get(data).name, batch_size=batch_size, steps=steps,
                   checkpoints=checkpoints, lr=float(lr), technique=technique,
                   compressors=parse_compressor_list(compressors), samples=samples, noise_samples=noise_samples,
                   hvp_samples=hvp_samples, power_iterations=power_iterations, draws=draws, threads=threads, seed=seed,
                   timeout=float(timeout), out=target)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage block
        raise ConstantsError(message)


def parse_args(argv: Sequence[str]) -> Options:
    """Options from the rank's command line (:meth:`Options.argv`)."""
    p = _Parser(prog="python -m runners.constants", add_help=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", default=None)
    for flag, default in (("--batch-size", 32), ("--steps", 50), ("--checkpoints", 3), ("--samples", 0),
                          ("--noise-samples", 1024), ("--hvp-samples", 256), ("--power-iterations", 20),
                          ("--draws", 8), ("--threads", 1), ("--seed", 0)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--technique", default=DEFAULT_TECHNIQUE)
    p.add_argument("--compressors", default="all")
    p.add_argument("--out", default=None)
    a = p.parse_args(list(argv))
    return make_options(a.model, a.dataset, a.batch_size, a.steps, a.checkpoints, a.lr, a.technique, a.compressors,
                        a.samples, a.noise_samples, a.hvp_samples, a.power_iterations, a.draws, a.threads, a.seed,
                        a.timeout, a.out)
