"""Validation of the numeric inputs of cost models: ranks, bytes and algorithm parameters.

Each check is a vectorized reduction (min/max) over the input so that validating 10^7 points
costs a small fraction of evaluating them; errors name the first bad value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import CommscopeError, DomainError


def _first(arr: np.ndarray, bad: np.ndarray) -> Any:
    return arr[bad].flat[0].item()


MAX_RANKS = 2**40
"""Largest rank count accepted (far beyond any machine, well inside exact int64/float64)."""


def _huge_integers(arr: np.ndarray) -> bool:
    """True for an object array of Python integers, some beyond int64 (numpy keeps those as objects)."""
    flat = arr.reshape(-1)
    return bool(flat.size) and all(isinstance(x, int) and not isinstance(x, bool) for x in flat)


def as_ranks(p: Any, name: str = "p") -> np.ndarray:
    """``p`` as an int64 array of integers in [1, :data:`MAX_RANKS`] (floats must be integral), whatever the
    integer type (Python int, numpy signed or unsigned)."""
    try:
        arr = np.asarray(p)
    except Exception as exc:  # pragma: no cover - numpy raises many kinds
        raise CommscopeError(f"{name} must be a positive integer or an array of them, got {p!r}") from exc
    if arr.dtype.kind == "O" and _huge_integers(arr):
        big = next(x for x in arr.reshape(-1) if abs(x) > MAX_RANKS)
        raise CommscopeError(f"{name} must be between 1 and {MAX_RANKS} ranks, got {big!r}")
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise CommscopeError(f"{name} must be a positive integer or an array of them, got {p!r}")
    if arr.size and arr.max() > MAX_RANKS:
        raise CommscopeError(f"{name} must be at most {MAX_RANKS} ranks, got {_first(arr, arr > MAX_RANKS)!r}")
    if arr.dtype.kind == "f":
        if arr.size and not np.isfinite(arr).all():
            raise CommscopeError(f"{name} must be a finite positive integer, got {_first(arr, ~np.isfinite(arr))!r}")
        frac = arr != np.floor(arr)
        if frac.any():
            raise CommscopeError(f"{name} must be an integer number of ranks, got {_first(arr, frac)!r}")
        arr = arr.astype(np.int64)
    elif arr.dtype != np.int64:
        arr = arr.astype(np.int64)
    if arr.size and arr.min() < 1:
        raise CommscopeError(f"{name} must be >= 1 rank, got {_first(arr, arr < 1)!r}")
    return arr


def as_rank(p: Any, name: str = "p") -> int:
    """One number of ranks: an integer (Python or numpy, not bool) in [1, :data:`MAX_RANKS`]."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise CommscopeError(f"{name} must be a positive integer number of workers, got {p!r}")
    return int(as_ranks(int(p), name))


def as_bytes(n: Any, name: str = "n") -> np.ndarray:
    """``n`` as a float64 array of finite, non-negative byte counts."""
    if n is None:
        raise CommscopeError(f"{name} must be a number of bytes, got None")
    if isinstance(n, str) or (isinstance(n, np.ndarray) and n.dtype.kind in "USO"):
        raise CommscopeError(
            f"{name} must be a number of bytes, got {n!r} (parse sizes such as '100MiB' with "
            "costmodels.parse_size)"
        )
    try:
        arr = np.asarray(n, dtype=np.float64)
    except (TypeError, ValueError):
        raise CommscopeError(f"{name} must be a number of bytes or an array of them, got {n!r}") from None
    if arr.size:
        lo, hi = arr.min(), arr.max()
        if not (lo >= 0) or np.isinf(hi):
            bad = ~((arr >= 0) & np.isfinite(arr))
            raise CommscopeError(f"{name} must be finite and >= 0 bytes, got {_first(arr, bad)!r}")
    return arr


def check_power_of_two(p: np.ndarray, who: str) -> None:
    bad = (p & (p - 1)) != 0
    if np.any(bad):
        raise DomainError(
            f"{who} needs p to be a power of two (1, 2, 4, 8, ...), got p={_first(p, bad)}"
        )


def as_scalar_or_array(x: np.ndarray) -> Any:
    """0-d arrays become Python floats; arrays are returned as they are."""
    return float(x) if np.ndim(x) == 0 else x
