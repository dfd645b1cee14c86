"""Message sizes as people write them: ``100MiB``, ``1.5GB``, ``64K`` (nccl-tests' binary K/M/G)."""

from __future__ import annotations

import math
import re

from .errors import CommscopeError

UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    # nccl-tests' -b/-e accept 8, 1K, 64M, 1G meaning powers of 1024
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int | float) -> int:
    """Bytes in a size such as ``'100MiB'`` (binary), ``'100MB'`` (decimal), ``'64K'`` (binary).

    Raises :class:`CommscopeError` naming the text and the accepted units.
    """
    if isinstance(text, bool):
        raise CommscopeError(f"size must be a number of bytes or text like '100MiB', got {text!r}")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise CommscopeError(
                f"cannot read size {text!r}; write a number with an optional unit "
                f"({', '.join(u for u in ('B', 'KB', 'MB', 'GB', 'KiB', 'MiB', 'GiB', 'K', 'M', 'G'))})"
            )
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit not in UNITS:
            raise CommscopeError(
                f"unknown size unit {m.group(2)!r} in {text!r}; allowed: B, KB, MB, GB, TB "
                "(powers of 1000), KiB, MiB, GiB, TiB, K, M, G, T (powers of 1024)"
            )
    nbytes = value * UNITS[unit]
    if not math.isfinite(nbytes) or nbytes < 0:
        raise CommscopeError(f"size must be finite and >= 0 bytes, got {text!r}")
    if nbytes != int(nbytes):
        raise CommscopeError(f"size {text!r} is not a whole number of bytes ({nbytes:g})")
    return int(nbytes)


MAX_SIZES = 10_000
"""Most sizes a range may hold: a factor barely above 1 would otherwise grow the list to gigabytes."""


def size_range(min_size: int, max_size: int, factor: float = 2.0) -> list[int]:
    """Sizes ``min, min*f, min*f^2, ... <= max`` (nccl-tests' -b/-e/-f); at most :data:`MAX_SIZES` of them."""
    if min_size <= 0:
        raise CommscopeError(f"the smallest size must be > 0 bytes for a geometric range, got {min_size}")
    if max_size < min_size:
        raise CommscopeError(f"max size {max_size} is smaller than min size {min_size}")
    if not factor > 1:
        raise CommscopeError(f"factor must be > 1, got {factor}")
    span = math.log(max_size / min_size) if max_size > min_size else 0.0
    count = math.floor(span / math.log(factor) * (1 + 1e-12)) + 1 if math.isfinite(factor) else 1
    if count > MAX_SIZES:
        least = math.exp(span / (MAX_SIZES - 1))
        raise CommscopeError(
            f"the range {format_size(min_size)}..{format_size(max_size)} by factor {factor!r} holds {count:,} sizes, "
            f"more than {MAX_SIZES:,}; use a factor of at least {least:.6g}")
    out, s = [], float(min_size)
    while s <= max_size * (1 + 1e-12):
        out.append(round(s))
        s *= factor
    return out


def format_size(nbytes: float) -> str:
    """``1048576 -> '1MiB'``; exact binary multiples are shown without decimals."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:.0f}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{nbytes:.0f}B"
