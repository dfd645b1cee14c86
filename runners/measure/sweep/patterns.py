"""The values a collective sweep fills its buffers with, and the count of wrong elements that ``--check`` reports.

Inputs are rank-dependent small integers (never all zeros), exact in every dtype and so are their
sums over ranks; an output element is wrong when it differs from the expected value by more than
the rounding of one partial sum per rank. The counts are summed over ranks.
"""

from __future__ import annotations

from typing import Any

from runners.torchrun.rank import Context

_EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7, "int32": 0.0}
_PERIOD = 7


def _torch_dtype(ctx: Context, dtype: str) -> Any:
    return getattr(ctx.torch, dtype)


def _pattern(ctx: Context, n: int, rank: int, dtype: str, start: int = 0) -> Any:
    """Rank-dependent values 1..7 (small integers: exact in every dtype, sums too)."""
    t = ctx.torch
    idx = t.arange(start, start + n, device=ctx.device, dtype=t.int64)
    return ((idx + 3 * rank) % _PERIOD + 1).to(_torch_dtype(ctx, dtype))


def _summed(ctx: Context, n: int, start: int = 0) -> Any:
    """The sum over ranks of :func:`_pattern` (float64)."""
    t = ctx.torch
    table = t.tensor([sum((k + 3 * r) % _PERIOD + 1 for r in range(ctx.world)) for k in range(_PERIOD)],
                     dtype=t.float64, device=ctx.device)
    return table[t.arange(start, start + n, device=ctx.device, dtype=t.int64) % _PERIOD]


def _wrong(ctx: Context, got: Any, expected: Any, dtype: str) -> int:
    tol = _EPS[dtype] * max(ctx.world, 2) / 2  # rounding of one partial sum per rank at most
    diff = (got.to(ctx.torch.float64) - expected).abs()
    return int((diff > tol * expected.abs()).sum().item())

