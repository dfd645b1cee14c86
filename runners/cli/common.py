"""What every command shares: the console, the usage error, and parsing of options (sizes, lists of integers,
NAME=VALUE options, parameters and constants, environments). Command modules import this, never the entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import costmodels as cm


class UsageError(cm.CommscopeError):
    """Bad command-line input."""


def console() -> Any:
    """A rich console: the terminal's, or 160 columns wide when the output is not a terminal."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=160)


def check_writable(path: Path, what: str, *, append: bool = False) -> None:
    """Refuse before any work a file that cannot be written (``append``: appended to): its directory is
    missing or read-only, it is a directory or not a regular file, or it is read-only
    (:func:`costmodels._io.check_writable`). A file that would be replaced must not be a results file: records
    are only ever appended to, so ``--out r.jsonl`` of a command that writes one JSON document is refused
    rather than losing the measurements in it."""
    from costmodels._io import check_writable as check

    try:
        check(path, what, append=append)
    except cm.CommscopeError as exc:
        raise UsageError(str(exc)) from None
    if not append and holds_records(path):
        raise UsageError(f"{path} holds commscope results records; writing {what} there would replace them: "
                         "choose another file (results files are only appended to)")


def holds_records(path: Path) -> bool:
    """Whether ``path`` is a results file: its first non-blank line is a record (``schema``
    ``commscope.result/...``). Reads at most the first 1 MiB."""
    import json

    from runners.results import SCHEMA

    prefix = SCHEMA.rsplit("/", 1)[0] + "/"  # any version of the record schema
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh.read(2**20).splitlines():
                if line.strip():
                    try:
                        first = json.loads(line)
                    except ValueError:
                        return False
                    return isinstance(first, dict) and str(first.get("schema", "")).startswith(prefix)
    except OSError:
        return False
    return False


def load_model_profile(model: str) -> cm.ModelProfile:
    """A shipped profile by name, or a profile JSON file (a name ending in .json or holding a /)."""
    return cm.load_profile(model) if model.endswith(".json") or "/" in model else cm.profile(model)


def resolve_env(env: str | None, alpha: float | None, beta: float | None, gamma: float | None) -> cm.Environment:
    """The environment of --env (a preset or a JSON file) with --alpha/--beta/--gamma overriding its values, or a
    one-level environment from --alpha and --beta alone."""
    if env is None and alpha is None and beta is None:
        raise UsageError("give --env NAME|FILE.json, or --alpha and --beta (seconds and seconds/byte)")
    if env is not None:
        base = cm.environment(env)
        changes = {k: v for k, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma)) if v is not None}
        return base.with_(**changes) if changes else base
    if alpha is None or beta is None:
        raise UsageError("a custom environment needs both --alpha and --beta")
    return cm.Environment(alpha=alpha, beta=beta, gamma=gamma or 0.0)


def parse_numbers(items: list[str], flag: str) -> dict[str, float]:
    """``NAME=VALUE`` items of ``flag`` (``--param``, ``--constant``) as numbers."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} must look like NAME=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise UsageError(f"{flag} {key.strip()}: value must be a number, got {value!r}") from None
    return out


def parse_sizes(size: list[str], min_size: str | None, max_size: str | None, factor: float) -> list[int]:
    """Message sizes from ``--size`` items plus a geometric range ``--min-size``..``--max-size`` by ``--factor``."""
    sizes = [cm.parse_size(s) for s in size]
    if (min_size is None) != (max_size is None):
        raise UsageError("a range needs both --min-size and --max-size")
    if min_size is not None and max_size is not None:
        sizes += cm.size_range(cm.parse_size(min_size), cm.parse_size(max_size), factor)
    if not sizes:
        raise UsageError("give at least one --size, or a range with --min-size/--max-size/--factor")
    return sizes


def int_list(items: list[str], what: str) -> list[int]:
    """Positive integers from comma-separated or repeated items (``--p 4,8 --p 16``)."""
    out = []
    for item in items:
        for x in item.split(","):
            x = x.strip()
            if not x:
                continue
            try:
                v = int(x)
            except ValueError:
                raise UsageError(f"{what} must be positive integers (e.g. 4,8,16), got {x!r}") from None
            if v < 1:
                raise UsageError(f"{what} must be positive integers, got {v}")
            out.append(v)
    if not out:
        raise UsageError(f"give at least one value for {what}")
    return out


def parse_options(items: list[str]) -> dict[str, Any]:
    """``--option NAME=VALUE`` items: ``true`` / ``false`` as booleans, integers, then floats, else text (sizes are
    parsed by their user)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--option must look like NAME=VALUE, got {item!r}")
        value = value.strip()
        if value.lower() in ("true", "false"):
            out[key.strip()] = value.lower() == "true"
            continue
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value  # sizes such as 25MiB are parsed by the schedule
    return out


def finite_or_none(x: Any) -> float | None:
    """JSON has no inf: an unreachable target (inf iterations or seconds) is written as null."""
    return float(x) if x is not None and np.isfinite(x) else None
