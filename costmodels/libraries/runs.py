"""A formula that is not affine in the message size, evaluated once per run of equal rows.

A registered algorithm whose formula is not affine in n (a pipelined tree, a piecewise model) is priced
by its compiled numpy function at every point, all its branches included: over a large grid it costs
more than the rest of a pricer together. Yet its rows (p, the environment) often differ only in what
the formula never looks at once it reaches n: ``2 ceil(lg p) - 1`` is the same for every p from 129 to
256. :class:`Runs` traces the compiled function once (which elementwise numpy calls it makes, on what),
evaluates its size-free calls over every row, and splits the rows into runs of consecutive rows whose
*boundary* values (each size-free value that a call on n uses) are bitwise equal. The calls on n then run
on one row per run, and each row takes its run's values: the same calls on the same values, elementwise,
so the prices are the compiled function's, bit for bit.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .._compile import CompiledExpr

ELEMENTWISE = (np.select, np.where)  # numpy functions, besides ufuncs, that a traced formula may call
MOST_RUNS = 0.125  # more runs than this share of the rows: the formula is evaluated on every row instead
KEPT_SIZES = 4096  # sizes up to this many are priced once on every run, for all the rows of a grid


class UntraceableError(Exception):
    """The formula does something a trace does not follow (it is then evaluated whole)."""


class _Value:
    """A value of a traced formula: node ``index`` of ``trace`` (its inputs first, then one per call)."""

    __array_priority__ = 1e6
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, trace: _Trace, index: int) -> None:
        self.trace, self.index = trace, index

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> _Value:
        if method != "__call__" or kwargs or ufunc.nout != 1:
            raise UntraceableError(f"{ufunc.__name__}.{method}")
        return self.trace.record(ufunc, inputs, {})

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> _Value:
        if func not in ELEMENTWISE:
            raise UntraceableError(func.__name__)
        return self.trace.record(func, args, kwargs)

    def __bool__(self) -> bool:
        raise UntraceableError("a branch on a value")


def _operator(op: Callable[..., Any], reflected: bool = False) -> Callable[..., _Value]:
    if reflected:  # other <op> self, as Python evaluates it for the real arrays
        return lambda self, other: self.trace.record(op, (other, self), {})
    return lambda self, *other: self.trace.record(op, (self, *other), {})


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor"):
    _dunder = _name.rstrip("_")
    setattr(_Value, f"__{_dunder}__", _operator(getattr(operator, _name)))
    setattr(_Value, f"__r{_dunder}__", _operator(getattr(operator, _name), reflected=True))
for _name in ("lt", "le", "gt", "ge", "eq", "ne", "neg", "pos", "abs", "invert"):
    setattr(_Value, f"__{_name}__", _operator(getattr(operator, _name)))


def _refs(x: Any) -> list[int]:
    if isinstance(x, _Value):
        return [x.index]
    if isinstance(x, (list, tuple)):
        return [i for y in x for i in _refs(y)]
    if isinstance(x, dict):
        return [i for y in x.values() for i in _refs(y)]
    return []


def _put(x: Any, values: dict[int, Any]) -> Any:
    if isinstance(x, _Value):
        return values[x.index]
    if isinstance(x, (list, tuple)):
        return type(x)(_put(y, values) for y in x)
    if isinstance(x, dict):
        return {k: _put(y, values) for k, y in x.items()}
    return x


class _Trace:
    """The calls of ``compiled(n, args)`` in order, which of its values depend on n (``sized``), and the
    size-free values that calls on n use (``boundary``)."""

    def __init__(self, compiled: CompiledExpr) -> None:
        self.inputs = 1 + len(compiled.args)
        self.calls: list[tuple[Callable[..., Any], Any, Any]] = []
        leaves = [_Value(self, i) for i in range(self.inputs)]
        out = compiled(leaves[0], leaves[1:])
        if not isinstance(out, _Value):
            raise UntraceableError("a result that is no traced value")
        self.output = out.index
        self.sized = [i == 0 for i in range(self.inputs)]
        for _, args, kwargs in self.calls:
            self.sized.append(any(self.sized[j] for j in _refs((args, kwargs))))
        self.boundary = sorted({j for k, call in enumerate(self.calls) if self.sized[self.inputs + k]
                                for j in _refs(call[1:]) if not self.sized[j]})

    def record(self, func: Callable[..., Any], args: Any, kwargs: Any) -> _Value:
        self.calls.append((func, args, kwargs))
        return _Value(self, self.inputs + len(self.calls) - 1)

    def run(self, values: dict[int, Any], sized: bool) -> None:
        """Make the calls that depend on n (``sized``) or those that do not, into ``values``."""
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # as the compiled function
            for k, (func, args, kwargs) in enumerate(self.calls):
                if self.sized[self.inputs + k] == sized:
                    values[self.inputs + k] = func(*_put(args, values), **_put(kwargs, values))


_TRACES: dict[int, tuple[CompiledExpr, _Trace | None]] = {}


def _trace(compiled: CompiledExpr) -> _Trace | None:
    known = _TRACES.get(id(compiled))
    if known is None or known[0] is not compiled:
        try:
            trace: _Trace | None = _Trace(compiled)
        except (UntraceableError, TypeError, ValueError):  # a call that a traced value cannot stand in for
            trace = None
        known = _TRACES[id(compiled)] = (compiled, trace)
    return known[1]


def _bits(x: np.ndarray) -> np.ndarray:
    """Each row of x (leading axis) as raw bytes, for bitwise comparison."""
    x = np.ascontiguousarray(x)
    return x.reshape(x.shape[0], -1).view(np.uint8)


class Runs:
    """A formula's rows in runs of equal boundary values: ``Runs.of(compiled, args, ndim)`` (None where the
    formula cannot be traced, or where the runs would be too many to pay), then ``runs(rows, sizes)`` gives
    its values on rows ``rows.start:rows.stop`` of a result of ``ndim`` dimensions whose sizes are the same
    on every row."""

    def __init__(self, trace: _Trace, values: dict[int, Any], ndim: int) -> None:
        self.trace, self.ndim = trace, ndim
        self.varying = {i for i, v in values.items() if np.ndim(v) == ndim and np.shape(v)[0] > 1}
        self.count = max((np.shape(values[i])[0] for i in self.varying), default=1)
        change = np.zeros(self.count - 1, dtype=bool)
        for i in self.varying:
            b = _bits(values[i])
            change |= (b[1:] != b[:-1]).any(axis=1)
        self.first = np.flatnonzero(np.concatenate(([True], change)))  # the first row of each run
        self.run = np.concatenate(([0], np.cumsum(change)))  # the run of each row
        self.values = {i: v[self.first] if i in self.varying else v for i, v in values.items()}
        self.kept: tuple[Any, Any] = (None, None)  # (the sizes, the formula on every run) last priced

    @classmethod
    def of(cls, compiled: CompiledExpr, args: list[Any], ndim: int) -> Runs | None:
        trace = _trace(compiled)
        if trace is None or ndim == 0 or any(np.ndim(a) > ndim for a in args):
            return None
        values: dict[int, Any] = dict(enumerate([None, *args]))
        try:
            trace.run(values, sized=False)  # over every row, once
            runs = cls(trace, {i: values[i] for i in trace.boundary}, ndim)
        except (TypeError, ValueError):  # values that are no plain numeric arrays: the formula is evaluated whole
            return None
        return runs if runs.first.size <= MOST_RUNS * runs.count else None

    def __call__(self, start: int, stop: int, sizes: Any) -> Any:
        """The formula on rows ``start:stop`` (``sizes`` broadcasting along them), one evaluation per run: of
        every run at once for sizes as small as a grid's (kept for the next rows with the same sizes)."""
        sizes = np.asarray(sizes)
        key = (sizes.shape, sizes.dtype.str, sizes.tobytes()) if sizes.size <= KEPT_SIZES else None
        if key is not None and key == self.kept[0]:
            out, first = self.kept[1], 0
        else:
            first, last = (0, len(self.first)) if key is not None or not self.varying else \
                (int(self.run[start]), int(self.run[stop - 1]) + 1)
            values = {i: v[first:last] if i in self.varying else v for i, v in self.values.items()}
            values[0] = sizes
            self.trace.run(values, sized=True)
            out = values[self.trace.output]
            if key is not None:
                self.kept = (key, out)
        if self.varying and np.ndim(out) == self.ndim and np.shape(out)[0] > 1:
            out = out[self.run[start:stop] - first]
        return out
