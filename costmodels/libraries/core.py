"""The collective-library layer: what a library runs for a message, and what that costs.

A :class:`Library` offers, for a primitive on p ranks in an environment, a few :class:`Option` s (an
algorithm, a protocol, a channel count, and two prices of a message: the library's own estimate, which
it selects by, and commscope's, which says what the message really costs). The library picks one option
per message size by its own rule; :func:`choose` returns that pick, vectorized over sizes and ranks.

Libraries that only choose among registered collective algorithms (``ideal``, ``gloo``, ``mpich``) price
them with those algorithms' formulas; ``nccl`` has a model of its own (:mod:`.nccl`).

A large grid is priced in blocks of rows (:class:`Rows`, about :data:`BLOCK` points each), so that the few
buffers a block needs stay in the CPU's cache while every option is priced and compared on it; an option
whose bounds show that it cannot win on a block is not priced there, and a formula not affine in n is
evaluated once per run of equal rows (:mod:`.runs`). Each is exact: the prices are those of the formulas.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from math import prod
from typing import Any

import numpy as np

from ..collectives import PRIMITIVES
from ..collectives import collective as get_collective
from ..collectives.evaluator import Evaluator
from ..environment import LIBRARY_NAMES, Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError, UnknownNameError
from ..registry import Registry
from .runs import Runs

Prices = Callable[..., tuple[np.ndarray, np.ndarray]]
BLOCK = 1 << 15  # points priced at a time (a block's buffers of 256 KiB stay in the cache)
PRUNE = 1 << 12  # blocks of at least this many points leave out the options that cannot win on them,
PRUNED_TOGETHER = 8  # found for this many blocks at once


class Rows:
    """Rows ``start:stop`` of the leading axis of a result with ``ndim`` dimensions: ``rows(x)`` is the part of
    ``x`` (anything that broadcasts to the result) on those rows; x itself where it broadcasts along that
    axis (fewer dimensions, or one row). ``sizes`` is the sizes' part, as given (a pricer may pass an option
    the same values spread over the whole block). A pricer makes new ones for each block it prices, so
    options may keep what they derive from the sizes of a block under its identity."""

    __slots__ = ("ndim", "sizes", "start", "stop")

    def __init__(self, start: int, stop: int, ndim: int, sizes: Any = None) -> None:
        self.start, self.stop, self.ndim = start, stop, ndim
        self.sizes = self(sizes)

    def __call__(self, x: Any) -> Any:
        if getattr(x, "ndim", 0) == self.ndim and x.shape[0] != 1:
            return x[self.start:self.stop]
        return x


@dataclass(frozen=True)
class Option:
    """One way a library may run a message: ``prices(n, out=None, rows=None)`` gives (what it costs, what the
    library believes it costs); the library selects by the second, its own model (the same values where it
    has none). Both are NaN where the option does not apply. With ``out`` (two arrays of the result's shape)
    it writes into them and returns them (``out[0]`` twice where the estimate is the price), so that a pricer
    reuses two buffers for all its options. ``shape`` is the broadcast shape of what the option holds besides
    n (p, the environment); with ``rows`` (:class:`Rows` of the result) it prices those rows alone, n being
    their part of the sizes. None: an option that prices whole grids only. ``estimate`` False says that the
    library's estimate is the price (one array returned twice), so that a pricer keeps only one of them.
    ``bounds(rows, low, high)``, where known, gives per row a lower and an upper bound of the estimates that
    ``prices`` computes for sizes in [low, high] (of the computed values, rounding included; both NaN only
    where the option has no price), so that a pricer can leave out an option that cannot win on a block."""

    algorithm: str
    protocol: str
    channels: Any
    prices: Prices
    shape: tuple[int, ...] | None = None
    estimate: bool = True
    bounds: Callable[[Rows, float, float], tuple[Any, Any]] | None = None


@dataclass(frozen=True)
class Choice:
    """What a library runs for each message size (and p): arrays broadcast over the inputs."""

    library: str
    primitive: str
    algorithm: np.ndarray
    protocol: np.ndarray
    channels: np.ndarray
    time: np.ndarray


@dataclass(frozen=True)
class Library:
    """A collective library: its name, where its rules come from, and how it picks.

    ``options(primitive, p, env, params)`` lists what it may run; ``select(primitive, n, p, shape)``
    returns, per size, the index of the option a rule-based library runs (None: the option with the lowest
    estimate, as NCCL's tuner and the ideal library choose). ``primitives`` are those it has rules for; any
    other primitive is priced as the ideal library would (the cheapest registered algorithm), and
    :func:`choose` says so.
    """

    name: str
    description: str
    source: str
    primitives: tuple[str, ...]
    options: Callable[[str, Any, Any, Mapping[str, Any]], list[Option]]
    select: Callable[[str, np.ndarray, Any, tuple[int, ...]], np.ndarray] | None = None


LIBRARIES: Registry[Library] = Registry("collective library")


def register(entry: Library) -> Library:
    if entry.name not in LIBRARY_NAMES:
        raise CommscopeError(f"library {entry.name!r} must be listed in costmodels.environment.LIBRARY_NAMES")
    return LIBRARIES.register(entry)


def library(name: str) -> Library:
    """A registered library by name (``libraries()`` lists them)."""
    return LIBRARIES.get(name)


def libraries() -> list[str]:
    """Names of the registered collective libraries."""
    return LIBRARIES.names()


def registered_option(algorithm: str, p: Any, env: Environment | EnvironmentArray,
                      params: Mapping[str, Any]) -> Option:
    """A registered collective algorithm as an option (its formula; NaN outside its domain)."""
    c = get_collective(algorithm)
    mine = {k: v for k, v in params.items() if k in {q.name for q in c.params}}
    evaluate = c.evaluator(p, env, out_of_domain="nan", **mine)
    a, b = evaluate.intercept, evaluate.slope
    runs: dict[int, Runs | None] = {}  # a formula not affine in n: its rows in runs, per number of dimensions

    def prices(n: np.ndarray, out: Any = None, rows: Rows | None = None) -> tuple[np.ndarray, np.ndarray]:
        if a is not None:  # affine: intercept + slope * n, as the evaluator (in the buffer, where there is one)
            intercept, slope = (a, b) if rows is None else (rows(a), rows(b))
            if out is None:
                t = intercept + slope * n
                return t, t
            t = np.multiply(slope, n, out=out[0])
            t += intercept
            return t, t
        if rows is None:
            t = evaluate(n)
        elif evaluate.shaped is None and (np.ndim(rows.sizes) < rows.ndim or np.shape(rows.sizes)[0] == 1):
            # sizes alike on every row
            if rows.ndim not in runs:
                runs[rows.ndim] = Runs.of(evaluate.compiled, evaluate.args, rows.ndim)
            t = _on_rows(evaluate, rows, runs[rows.ndim])
        else:
            t = _on_rows(evaluate, rows, None)
        if out is None:
            return t, t
        np.copyto(out[0], t)
        return out[0], out[0]

    def bounds(rows: Rows, low: float, high: float) -> tuple[Any, Any]:
        """slope * n + intercept at either end, as ``prices`` computes it: monotonic in n, so they bound it."""
        ends = [np.multiply(rows(b), end) + rows(a) for end in (low, high)]
        return np.fmin(*ends), np.fmax(*ends)

    return Option(algorithm, "-", 1, prices, evaluate.shape, estimate=False, bounds=None if a is None else bounds)


def _on_rows(evaluate: Evaluator, rows: Rows, runs: Runs | None) -> np.ndarray:
    """A formula not affine in n on the rows ``rows``: once per run of equal rows where there are runs."""
    if runs is None:
        return evaluate.on_rows(rows)(rows.sizes)
    t = np.asarray(runs(rows.start, rows.stop, rows.sizes), dtype=np.float64)
    return t if evaluate.invalid is None else np.where(rows(evaluate.invalid), np.nan, t)


def resolve(primitive: str, env: Environment | EnvironmentArray) -> Library:
    """The library that prices ``primitive`` in ``env``: the environment's, or the ideal one where the
    environment's library has no rule for the primitive."""
    lib = library(env.library)
    return lib if primitive in lib.primitives else library("ideal")


class Pricer:
    """The price of messages of one primitive on p ranks as the environment's library runs them:
    everything that does not depend on the size is prepared once, as schedules price many messages."""

    def __init__(self, primitive: str, p: Any, env: Environment | EnvironmentArray,
                 params: Mapping[str, Any] | None = None) -> None:
        if primitive not in PRIMITIVES:
            raise UnknownNameError("primitive", primitive, PRIMITIVES)
        self.primitive, self.p, self.env = primitive, p, env
        self.library = resolve(primitive, env)
        self.options = self.library.options(primitive, p, env, dict(params or {}))
        if not self.options:
            raise CommscopeError(f"library {self.library.name} has no algorithm for {primitive}")

    def pick(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index of the chosen option, its time) at each size, broadcast against p and the environment.

        The lowest estimate wins (a running minimum over the options, the first of equal ones), or the
        library's rule decides; NaN options never win. A grid of more than :data:`BLOCK` points is priced
        in blocks of rows, every option on one block before the next, leaving out on blocks of at least
        :data:`PRUNE` points the options that cannot win on them (where their bounds say so)."""
        sizes = np.asarray(sizes, dtype=np.float64)
        if len(self.options) == 1 and self.library.select is None:  # one option (gloo's): its price, whole
            t = self.options[0].prices(sizes)[0]
            self._priced(np.isnan(t))
            return np.zeros(np.shape(t), dtype=np.intp), t
        shapes = [o.shape for o in self.options]
        blocks = all(s is not None for s in shapes)
        if not blocks:  # an option that prices whole grids only: one block, as large as its price
            shapes = [np.shape(self.options[0].prices(sizes)[0])]
        shape = np.broadcast_shapes(sizes.shape, np.shape(self.p), *shapes)
        t, index = np.empty(shape), np.empty(shape, dtype=np.intp)
        if not shape:  # one point
            self._block(sizes, None, t, index, [np.empty(()) for _ in range(3)],
                        [np.empty((), dtype=bool) for _ in range(2)])
            return index, t
        step = max(1, BLOCK // max(1, prod(shape[1:])) if blocks else shape[0])
        block = (min(step, shape[0]), *shape[1:])
        # a block of more rows than its last axis is long is laid out column by column, the sizes spread over
        # it: numpy's inner loops then run down the rows (p), not along a short last axis (a few sizes)
        columns = blocks and len(shape) > 1 and block[0] > shape[-1]
        order = "F" if columns else "C"
        work = [np.empty(block, order=order) for _ in range(5 if columns else 3)]
        # two buffers of flags apart, not one array of both (numpy 2.4's isnan skips elements of a strided output)
        flags = [np.empty(block, dtype=bool, order=order) for _ in range(2)]
        # the chosen option's index in a byte per point while a block is priced
        index_block = np.empty(block, dtype=np.uint8 if len(self.options) < 256 else np.intp, order=order)
        prune = blocks and prod(block) >= PRUNE and self.library.select is None
        live = None
        for start in range(0, shape[0], step):
            rows = Rows(start, min(start + step, shape[0]), len(shape), sizes)
            if prune and start % (step * PRUNED_TOGETHER) == 0:  # the options that may win on the next blocks
                live = self._live(Rows(start, min(start + step * PRUNED_TOGETHER, shape[0]), len(shape), sizes))
            parts = [w[:rows.stop - start] for w in work]
            chosen, flagged = index_block[:rows.stop - start], [f[:rows.stop - start] for f in flags]
            if columns:
                np.copyto(parts[3], rows.sizes)
                self._block(parts[3], rows, parts[4], chosen, parts[:3], flagged, live)
                np.copyto(rows(t), parts[4])
            else:
                self._block(rows.sizes if blocks else sizes, rows if blocks else None, rows(t), chosen, parts, flagged,
                            live)
            np.copyto(rows(index), chosen)
        return index, t

    def _block(self, n: np.ndarray, rows: Rows | None, t: np.ndarray, index: np.ndarray, work: list[np.ndarray],
               flags: list[np.ndarray], live: list[int] | None = None) -> None:
        """Choose and price the rows ``rows`` of the result (sizes ``n``) into their parts ``t`` and ``index``,
        with three buffers of their shape (``work``) and two of flags; ``live``: the options that may win
        there (:meth:`_live`; None: all of them).

        Where every option's estimate is its price, the lowest estimate so far is kept in ``t`` itself (the
        first option's NaN as infinity, and NaN again where nothing else has a price). An option whose
        estimate is nowhere lower than the best so far leaves the block as it is."""
        buffers, (better, unpriced) = (work[0], work[1]), flags
        if self.library.select is not None:
            p = self.p if rows is None else rows(self.p)
            np.copyto(index, self.library.select(self.primitive, n, p, t.shape), casting="unsafe")  # < 256 options
            t.fill(np.nan)
            for k, o in enumerate(self.options):
                np.equal(index, k, out=better)
                if better.any():
                    np.copyto(t, o.prices(n, buffers, rows)[0], where=better)
        else:
            live = range(len(self.options)) if live is None else live
            best = work[2] if any(o.estimate for o in self.options) else t
            first_t, first_e = self.options[live[0]].prices(n, (t, best), rows)
            if first_t is not t:
                np.copyto(t, first_t)
            if first_e is not best:
                np.copyto(best, first_e)
            gaps = np.isnan(best, out=unpriced).any()
            if gaps:
                np.copyto(best, np.inf, where=unpriced)
            index.fill(live[0])
            for k in live[1:]:
                tk, ek = self.options[k].prices(n, buffers, rows)
                if not np.less(ek, best, out=better).any():
                    continue
                np.copyto(index, k, where=better)
                if best is not t:
                    np.copyto(t, tk, where=better)
                np.fmin(best, ek, out=best)  # ek where lower, else best (NaN never wins)
            if gaps and best is t:
                np.copyto(t, np.nan, where=unpriced & (index == live[0]))
        self._priced(np.isnan(t, out=better))

    def _priced(self, unpriced: Any) -> None:
        """Raise if a time is NaN (``unpriced``: where): no option of the library has a price there."""
        if np.any(unpriced):
            raise CommscopeError(f"library {self.library.name} has no algorithm of {self.primitive} defined at "
                                 "some of these p")

    def _live(self, rows: Rows) -> list[int]:
        """The options that may win on these rows, in order. An option never is the lowest on a row where its
        least estimate over the block's sizes exceeds the least of all options' greatest estimates, nor where
        it has no price (both bounds NaN); one that never is on any row is left out (all of them never are)."""
        everything = list(range(len(self.options)))
        low, high = float(np.min(rows.sizes)), float(np.max(rows.sizes))
        if not low <= high:  # NaN sizes
            return everything
        bounds = [None if o.bounds is None else o.bounds(rows, low, high) for o in self.options]
        greatest = [b[1] for b in bounds if b is not None]
        if len(greatest) < 2:
            return everything
        least = reduce(np.fmin, greatest)  # NaN (no price on a row) bounds nothing
        live = [k for k, b in zip(everything, bounds, strict=True)
                if b is None or not np.all((b[0] > least) | (np.isnan(b[0]) & np.isnan(b[1])))]
        return live or everything

    def __call__(self, sizes: Any) -> np.ndarray:
        return self.pick(np.asarray(sizes, dtype=np.float64))[1]


def choose(primitive: str, n: Any, p: Any, env: Environment | EnvironmentArray, **params: Any) -> Choice:
    """What ``env``'s library runs for messages of ``n`` bytes on ``p`` ranks, and what it costs.

    ``n`` and ``p`` broadcast (e.g. ``n`` of shape (M,) and ``p`` of shape (P, 1) give (P, M) arrays).
    A primitive the library has no rule for is priced as the ideal library would, and the choice's
    ``library`` says ``ideal``.
    """
    n_arr = np.asarray(n, dtype=np.float64)
    p_arr = np.asarray(p)
    if np.any(n_arr < 0) or not np.all(np.isfinite(n_arr)):
        raise CommscopeError("message sizes must be finite and >= 0 bytes")
    if np.any(p_arr < 1):
        raise CommscopeError(f"p must be >= 1, got {p_arr[p_arr < 1].flat[0]!r}")
    solo = p_arr == 1
    pricer = Pricer(primitive, np.where(solo, 2, p_arr) if np.ndim(p_arr) else (2 if solo else p_arr), env,
                    params)
    index, t = pricer.pick(n_arr)
    if np.any(solo):
        t = np.where(solo, 0.0, t)
    shape = np.shape(t)
    index = np.broadcast_to(index, shape)
    algorithms = _names([o.algorithm for o in pricer.options], index)
    protocols = _names([o.protocol for o in pricer.options], index)
    first = pricer.options[0].channels
    if all(o.channels is first for o in pricer.options):  # one channel count for every option (NCCL's)
        channels = np.broadcast_to(np.asarray(first, dtype=np.int64), shape)  # a view: no copy per point
    else:
        stacked = np.stack([np.broadcast_to(o.channels, shape) for o in pricer.options])
        channels = np.take_along_axis(stacked, index[None], axis=0)[0]
    return Choice(pricer.library.name, primitive, algorithms, protocols, np.asarray(channels, dtype=np.int64), t)


def _names(names: list[str], index: np.ndarray) -> Any:
    """The name of the chosen option at each point (an object array; one name for every option is a
    read-only view of it, as no copy per point is needed)."""
    if all(x == names[0] for x in names):
        return np.broadcast_to(np.array(names[0], dtype=object), index.shape)[()]
    return np.array(names, dtype=object).take(index)


def choice_bands(sizes: Sequence[float], choice: Choice) -> list[tuple[float, float, str]]:
    """Runs of consecutive ``sizes`` (sorted, 1-d) with the same algorithm and protocol:
    (first size, last size, "algorithm/protocol" or "algorithm")."""
    labels = [a if pr == "-" else f"{a}/{pr}" for a, pr in zip(np.ravel(choice.algorithm),
                                                               np.ravel(choice.protocol), strict=True)]
    sizes = list(np.ravel(sizes))
    if len(sizes) != len(labels):
        raise CommscopeError(f"{len(sizes)} sizes but {len(labels)} choices: give a 1-d choice over the sizes")
    bands: list[tuple[float, float, str]] = []
    for s, label in zip(sizes, labels, strict=True):
        if bands and bands[-1][2] == label:
            bands[-1] = (bands[-1][0], s, label)
        else:
            bands.append((s, s, label))
    return bands
