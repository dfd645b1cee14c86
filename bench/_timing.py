"""Timing helper shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable


def times_of(fn: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``repeat`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls, after one warm-up call (compiles and caches models)."""
    return min(times_of(fn, repeat))
