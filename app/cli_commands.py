"""The command line that computes what a page shows (pure, no Streamlit): each page offers its command to copy.

The environment goes as ``--env``: a preset's name, the shipped reference run's environment file, or
``env.json`` for an environment that lives only in the session (custom, or fitted on the Environments page;
the page offers it as a download). Where the page has a choice the command line lacks, the command says so in
a trailing ``#`` comment rather than pretending.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import costmodels as cm

ROOT = Path(__file__).resolve().parent.parent
ENV_FILE = "env.json"


def _q(x: Any) -> str:
    return shlex.quote(str(x))


def env_argument(env: cm.Environment) -> str:
    """``--env`` for this environment: a preset's name, the shipped reference run's file, or ``env.json``."""
    if env.name in cm.environments() and cm.environment(env.name).to_json() == env.to_json():
        return env.name
    from runners import reference

    for path in sorted(reference.VALIDATION_DIR.glob("*/environment.json")):
        if cm.Environment.from_json(path.read_text()) == env:
            return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    return ENV_FILE


def needs_env_file(command: str) -> bool:
    """True when the command reads ``env.json``, which the page then offers as a download."""
    return f"--env {ENV_FILE}" in command


def _join(words: Sequence[str], notes: Sequence[str] = ()) -> str:
    line = " ".join(words)
    return line + (f"  # {'; '.join(notes)}" if notes else "")


def collective_command(env: cm.Environment, primitive: str, algorithms: Sequence[str], p: int, lo_exp: int,
                       hi_exp: int, library: str | None = None, params: Mapping[str, Any] | None = None) -> str:
    """``commscope predict collective`` for the Collectives page (``auto``: what the library runs)."""
    names = [*algorithms, "auto"]
    words = ["commscope", "predict", "collective", "-a", _q(",".join(names)), "--primitive", primitive,
             "--env", _q(env_argument(env)), "-p", str(int(p)), "-b", cm.format_size(2**lo_exp),
             "-e", cm.format_size(2**hi_exp), "-f", "2"]
    if library and library != env.library:
        words += ["--library", library]
    for k, v in (params or {}).items():
        words += ["--param", f"{k}={v}"]
    return _join(words)


def iteration_commands(env: cm.Environment, model: str, model_path: str | None, ps: Sequence[int],
                       schedules: Sequence[str], compressor: str | None, collective: str, library: str,
                       schedule: str, p: int) -> str:
    """``commscope predict iteration`` for the curves and for the one iteration (with its Chrome trace)."""
    from app.data_iteration import AUTO, CHEAPEST

    base = ["commscope", "predict", "iteration", "--model", _q(model_path or model), "--env", _q(env_argument(env))]
    notes = []
    if collective not in (AUTO, CHEAPEST):
        base += ["--collective", collective]
    elif collective == CHEAPEST:
        notes.append("'cheapest per message' has no flag: the command prices with the environment's library")
    if library != env.library:
        notes.append(f"the page prices with {library}; the command with the environment's {env.library}")
    from costmodels.schedules import COMPRESSIBLE

    comp = ["--compressor", _q(compressor)] if compressor else []
    carried = [x for x in schedules if not compressor or x in COMPRESSIBLE]  # as the page: the others left out
    curves = [*base, "-p", ",".join(map(str, ps)), "--schedule", ",".join(carried), *comp]
    one = [*base, "-p", str(int(p)), "--schedule", schedule, *(comp if schedule in COMPRESSIBLE else []),
           "--trace", "iteration.json"]
    return _join(curves, notes) + "\n" + _join(one)


_CONVERGENCE_FLAGS = ("L", "sigma", "Delta", "n", "H", "tau", "s", "zeta", "gap", "delta", "omega", "mu")


def _constant_words(constants: Mapping[str, float], flags: Sequence[str]) -> list[str]:
    words = []
    for k, v in constants.items():
        words += [f"--{k}", format(float(v), "g")] if k in flags else ["--constant", f"{k}={float(v):g}"]
    return words


def convergence_command(bounds: Sequence[str], eps: float, constants: Mapping[str, float]) -> str:
    """``commscope predict convergence`` for the Convergence page's iterations to eps."""
    return _join(["commscope", "predict", "convergence", "--eps", format(eps, "g"), "--bound", ",".join(bounds),
                  *_constant_words(constants, _CONVERGENCE_FLAGS)])


def tta_command(env: cm.Environment, model: str, p: int, eps: float, specs: Sequence[str],
                constants: Mapping[str, float], constants_file: str | None = None) -> str:
    """``commscope predict tta`` for the Time-to-accuracy page's table."""
    words = ["commscope", "predict", "tta", "--model", _q(model), "--env", _q(env_argument(env)), "-p", str(int(p)),
             "--eps", format(eps, "g"), "-a", _q(",".join(specs))]
    if constants_file:
        words += ["--constants", _q(constants_file)]
    return _join(words + _constant_words(constants, ("L", "sigma", "Delta", "zeta", "mu")))


def llm_command(model: str, gpus: int, env_name: str, memory_gib: float, top: int, kernel: bool = False) -> str:
    """``commscope plan llm`` for the Large-models page's ranking (``kernel``: the kernel model of compute)."""
    return _join(["commscope", "plan", "llm", "--model", model, "--gpus", str(int(gpus)), "--env", _q(env_name),
                  "--device-memory", f"{memory_gib:g}GiB", "--top", str(int(top))]
                 + (["--achieved", "kernel"] if kernel else []))


def fit_command(files: Sequence[str], primitives: Sequence[str], algorithms: Sequence[str], statistic: str,
                gamma: str, min_bytes: int, method: str, name: str) -> str:
    """``commscope fit`` for the Environments page (``--method two``: the two-regime fit, as validate does)."""
    words = ["commscope", "fit", *map(_q, files), "--primitive", ",".join(primitives), "--algorithm",
             ",".join(algorithms) if len(set(algorithms)) > 1 or algorithms[0] != "auto" else "auto",
             "--statistic", statistic, "--method", method]
    if method == "one":
        words += ["--gamma", gamma, "--min-size", str(int(min_bytes))]
    return _join([*words, "--name", _q(name), "--out", _q(name.replace(":", "_") + ".json")])
