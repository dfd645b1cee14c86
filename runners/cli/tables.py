"""What the predict tables share: the "vs best" column, ``--sort``, ``--csv`` beside ``--json``, and the check that
every number printed is finite (a float overflow is an error naming the row, never an inf or a NaN in the output)."""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .common import UsageError


def add_vs_best(rows: list[dict[str, Any]], value: str, group: Sequence[str]) -> None:
    """Set each row's ``vs_best``: how much longer its ``value`` is than the smallest of its group (rows equal in
    every ``group`` field), as a fraction (0 for the best; None where the best is 0 and this row's is not)."""
    best: dict[tuple[Any, ...], float] = {}
    for r in rows:
        key = tuple(r[g] for g in group)
        best[key] = min(best.get(key, math.inf), r[value])
    for r in rows:
        low = best[tuple(r[g] for g in group)]
        r["vs_best"] = r[value] / low - 1 if low > 0 else (0.0 if r[value] == low else None)


def vs_best_text(x: float | None) -> str:
    """``best``, ``+12.3%``, or ``-`` where there is no ratio."""
    if x is None:
        return "-"
    return "best" if x == 0 else f"+{x:.1%}"


def sort_rows(rows: list[dict[str, Any]], key: str | None, keys: Mapping[str, tuple[str, bool]],
              ) -> list[dict[str, Any]]:
    """``rows`` in the order ``--sort KEY`` asks for (``keys``: option value -> (field, descending)); stable, rows
    without a value last; None keeps the order they were computed in."""
    if key is None:
        return rows
    if key not in keys:
        raise UsageError(f"--sort must be one of {', '.join(keys)}, got {key!r}")
    field, descending = keys[key]
    have = [r for r in rows if r.get(field) is not None]
    return sorted(have, key=lambda r: r[field], reverse=descending) + [r for r in rows if r.get(field) is None]


def sort_help(keys: Mapping[str, tuple[str, bool]]) -> str:
    """The ``--sort`` help text: its keys and their directions."""
    return "order the rows by " + ", ".join(f"{k} ({'largest' if d else 'smallest'} first)" for k, (_, d) in
                                            keys.items()) + " [default: as computed]"


def check_format(as_json: bool, as_csv: bool) -> None:
    if as_json and as_csv:
        raise UsageError("give --json or --csv, not both")


def write_csv(rows: list[dict[str, Any]]) -> None:
    """``rows`` as CSV on stdout, one column per field (in the order they first appear)."""
    fields: dict[str, None] = {}
    for r in rows:
        fields.update(dict.fromkeys(r))
    writer = csv.DictWriter(sys.stdout, fieldnames=list(fields), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def check_finite(rows: list[dict[str, Any]], fields: Sequence[str], where: Callable[[dict[str, Any]], str],
                 hint: str) -> None:
    """Refuse a result whose ``fields`` overflowed float64 (inf or NaN): one error naming the row and ``hint``."""
    for r in rows:
        for f in fields:
            v = r.get(f)
            if isinstance(v, float) and not math.isfinite(v):
                raise UsageError(f"{f} is {v} for {where(r)}: the numbers overflow float64; {hint}")


@contextmanager
def overflow_checked() -> Iterator[None]:
    """numpy's overflow and invalid-value warnings off while a prediction is computed: :func:`check_finite` then
    turns a non-finite result into one error line, instead of a screen of warnings before it."""
    with np.errstate(over="ignore", invalid="ignore"):
        yield
