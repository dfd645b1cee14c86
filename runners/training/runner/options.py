"""Options of a training run: checked (:func:`make_options`), parsed from the rank's command line
(:func:`parse_args`) and written back as one (:meth:`Options.argv`).

    torchrun --nproc_per_node=N -m runners.training.runner --algorithm dear --model resnet_small --iterations 100
             [--batch-size 32] [--lr 0.05] [--option key=value ...] [--warmup 5] [--threads 1] [--seed 0]
             [--convergence [--dataset NAME] [--eval-every K]] [--backend auto|gloo|nccl] [--out results.jsonl]
    commscope train --nproc N [same options]                 # launches torchrun for you
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
from runners.torchrun.rank import BACKENDS

PARTS = ("total", "forward", "backward", "exposed_comm", "compression", "update")


class TrainError(CommscopeError):
    """Bad options of a training run, or a run that cannot go on (the message says why)."""


def _coerce_option(technique: str, key: str, default: Any, text: str) -> Any:
    """``text`` (from ``--option key=text``) as the type of the technique's default for ``key``."""
    low = text.strip().lower()
    try:
        if isinstance(default, bool):
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            return value
    except ValueError:
        kind = "true or false" if isinstance(default, bool) else f"a{'n' if isinstance(default, int) else ''} " \
            f"{type(default).__name__}"
        raise TrainError(f"--option {key} of {technique} must be {kind}, got {text!r}") from None
    if default is None and low in ("none", "null", ""):
        return None
    return text


@dataclass
class Options:
    algorithm: str
    model: str
    iterations: int
    batch_size: int = 32
    lr: float = 0.05
    options: dict[str, Any] = field(default_factory=dict)  # the technique's options given, typed
    given: list[str] = field(default_factory=list)  # as given: key=value
    warmup: int = 5
    convergence: bool = False
    dataset: str | None = None
    eval_every: int = 10
    threads: int = 1
    seed: int = 0
    backend: str = "auto"
    out: Path | None = None
    timeout: float = 600.0

    def argv(self) -> list[str]:
        """The command line of ``python -m runners.training.runner`` for these options."""
        args = ["--algorithm", self.algorithm, "--model", self.model, "--iterations", str(self.iterations),
                "--batch-size", str(self.batch_size), "--lr", repr(self.lr), "--warmup", str(self.warmup),
                "--threads", str(self.threads), "--seed", str(self.seed), "--backend", self.backend,
                "--timeout", repr(self.timeout)]
        for item in self.given:
            args += ["--option", item]
        if self.convergence:
            args += ["--convergence", "--eval-every", str(self.eval_every)]
            if self.dataset:
                args += ["--dataset", self.dataset]
        if self.out is not None:
            args += ["--out", str(self.out)]
        return args


def make_options(algorithm: str, model: str, iterations: int, batch_size: int = 32, lr: float = 0.05,
                 option: Sequence[str] = (), warmup: int = 5, convergence: bool = False, dataset: str | None = None,
                 eval_every: int = 10, threads: int = 1, seed: int = 0, backend: str = "auto",
                 out: str | os.PathLike[str] | None = None, timeout: float = 600.0) -> Options:
    """Checked options (raises :class:`CommscopeError` with a one-line message)."""
    from runners.training import technique as get_technique
    from runners.training import zoo

    tech = get_technique(algorithm)
    entry = zoo.model(model)
    if not entry.available():
        raise TrainError(f"model {entry.name} needs {', '.join(entry.requires)}, which is not installed")
    for name, value, low in (("--iterations", iterations, 1), ("--batch-size", batch_size, 1),
                             ("--warmup", warmup, 0), ("--eval-every", eval_every, 1), ("--threads", threads, 1),
                             ("--seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise TrainError(f"{name} must be an integer >= {low}, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise TrainError(f"--lr must be a number > 0, got {lr!r}")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise TrainError(f"--timeout must be a number > 0, got {timeout!r}")
    if backend not in BACKENDS:
        raise TrainError(f"unknown --backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    typed: dict[str, Any] = {}
    for item in option:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TrainError(f"--option must look like KEY=VALUE, got {item!r}")
        if key not in tech.options:
            takes = ", ".join(f"{k}={v}" for k, v in tech.options.items()) or "no options"
            raise TrainError(f"technique {tech.name} has no option {key!r}; it takes: {takes}")
        typed[key] = _coerce_option(tech.name, key, tech.options[key], value)
    if tech.compressor is not None:  # the compressor's knob checked here, before any rank starts
        import costmodels as cm

        comp = cm.parse_compressor(tech.compressor)[0]  # a spec: "signsgd:8" prices the int8 codes it sends
        if comp.parameter is not None and comp.parameter in typed:
            try:
                comp.resolve(typed[comp.parameter])
            except cm.CommscopeError as exc:
                raise TrainError(f"--option {comp.parameter}={typed[comp.parameter]}: {exc}") from None
    data = None
    if convergence:
        data = dataset or entry.dataset
        if data is None:
            raise TrainError(f"model {entry.name} has no paired data set; give --dataset "
                             f"({', '.join(zoo.datasets())})")
        data = zoo.DATASETS.get(data).name
    elif dataset is not None:
        raise TrainError("--dataset is for convergence runs; add --convergence")
    target = Path(out) if out is not None else None
    if target is not None and not target.parent.is_dir():
        raise TrainError(f"cannot write results to {target}: directory {target.parent} does not exist")
    return Options(algorithm=tech.name, model=entry.name, iterations=iterations, batch_size=batch_size,
                   lr=float(lr), options=typed, given=[f"{k.strip()}={v}" for k, _, v in
                                                       (s.partition("=") for s in option)],
                   warmup=warmup, convergence=convergence, dataset=data, eval_every=eval_every, threads=threads,
                   seed=seed, backend=backend, out=target, timeout=float(timeout))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, no usage block
        raise TrainError(message)


def parse_args(argv: Sequence[str]) -> Options:
    p = _Parser(prog="python -m runners.training.runner", add_help=True)
    p.add_argument("--algorithm", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--option", action="append", default=[])
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--convergence", action="store_true")
    p.add_argument("--dataset", default=None)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default=None)
    a = p.parse_args(list(argv))
    return make_options(a.algorithm, a.model, a.iterations, a.batch_size, a.lr, a.option, a.warmup, a.convergence,
                        a.dataset, a.eval_every, a.threads, a.seed, a.backend, a.out, a.timeout)
