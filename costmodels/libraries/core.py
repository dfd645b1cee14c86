"""The collective-library layer: what a library runs for a message, and what that costs.

A :class:`Library` offers, for a primitive on p ranks in an environment, a few :class:`Option` s (an
algorithm, a protocol, a channel count, and two prices of a message: the library's own estimate, which
it selects by, and commscope's, which says what the message really costs). The library picks one option
per message size by its own rule; :func:`choose` returns that pick, vectorized over sizes and ranks.

Libraries that only choose among registered collective algorithms (``ideal``, ``gloo``, ``mpich``) price
them with those algorithms' formulas; ``nccl`` has a model of its own (:mod:`.nccl`).

A large grid is priced in blocks of rows (:class:`Rows`, about :data:`BLOCK` points each), so that the few
buffers a block needs stay in the CPU's cache while every option is priced and compared on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from math import prod
from typing import Any

import numpy as np

from ..collectives import PRIMITIVES
from ..collectives import collective as get_collective
from ..environment import LIBRARY_NAMES, Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError, UnknownNameError
from ..registry import Registry

Prices = Callable[..., tuple[np.ndarray, np.ndarray]]
BLOCK = 1 << 15  # points priced at a time (a block's buffers of 256 KiB stay in the cache)


class Rows:
    """Rows ``start:stop`` of the leading axis of a result with ``ndim`` dimensions: ``rows(x)`` is the part of
    ``x`` (anything that broadcasts to the result) on those rows; x itself where it broadcasts along that
    axis (fewer dimensions, or one row). A pricer makes new ones for each block it prices, so options may
    keep what they derive from the sizes of a block under its identity."""

    __slots__ = ("ndim", "start", "stop")

    def __init__(self, start: int, stop: int, ndim: int) -> None:
        self.start, self.stop, self.ndim = start, stop, ndim

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
    their part of the sizes. None: an option that prices whole grids only."""

    algorithm: str
    protocol: str
    channels: Any
    prices: Prices
    shape: tuple[int, ...] | None = None


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

    def prices(n: np.ndarray, out: Any = None, rows: Rows | None = None) -> tuple[np.ndarray, np.ndarray]:
        if a is not None and out is not None:  # affine: slope * n + intercept in the buffer, as the evaluator
            t = np.multiply(b if rows is None else rows(b), n, out=out[0])
            t += a if rows is None else rows(a)
            return t, t
        part = evaluate if rows is None else replace(
            evaluate, args=[rows(x) for x in evaluate.args], invalid=rows(evaluate.invalid),
            intercept=rows(a), slope=rows(b))
        t = part(n)
        if out is None:
            return t, t
        np.copyto(out[0], t)
        return out[0], out[0]

    return Option(algorithm, "-", 1, prices, evaluate.shape)


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
        in blocks of rows, every option on one block before the next."""
        sizes = np.asarray(sizes, dtype=np.float64)
        shapes = [o.shape for o in self.options]
        blocks = all(s is not None for s in shapes)
        if not blocks:  # an option that prices whole grids only: one block, as large as its price
            shapes = [np.shape(self.options[0].prices(sizes)[0])]
        shape = np.broadcast_shapes(sizes.shape, np.shape(self.p), *shapes)
        t, index = np.empty(shape), np.empty(shape, dtype=np.intp)
        step = max(1, BLOCK // max(1, prod(shape[1:])) if blocks else shape[0]) if shape else 1
        work = np.empty((3, min(step, shape[0]), *shape[1:]) if shape else (3,))  # two options' prices, the best
        flags = np.empty(work.shape[1:], dtype=bool)
        if not shape:  # one point
            self._block(sizes, None, t, index, work, flags)
        for start in range(0, shape[0] if shape else 0, step):
            rows = Rows(start, min(start + step, shape[0]), len(shape))
            size = rows.stop - start
            self._block(rows(sizes) if blocks else sizes, rows if blocks else None, rows(t), rows(index),
                        work[:, :size], flags[:size])
        return index, t

    def _block(self, n: np.ndarray, rows: Rows | None, t: np.ndarray, index: np.ndarray, work: np.ndarray,
               flags: np.ndarray) -> None:
        """Choose and price the rows ``rows`` of the result (sizes ``n``) into their parts ``t`` and ``index``,
        with three buffers of their shape (``work``) and one of flags."""
        buffers, best = (work[0, ...], work[1, ...]), work[2, ...]
        if self.library.select is not None:
            p = self.p if rows is None else rows(self.p)
            np.copyto(index, self.library.select(self.primitive, n, p, t.shape))
            t.fill(np.nan)
            for k, o in enumerate(self.options):
                np.equal(index, k, out=flags)
                if flags.any():
                    np.copyto(t, o.prices(n, buffers, rows)[0], where=flags)
        else:
            first_t, first_e = self.options[0].prices(n, (t, best), rows)
            if first_t is not t:
                np.copyto(t, first_t)
            if first_e is not best:
                np.copyto(best, first_e)
            np.copyto(best, np.inf, where=np.isnan(best, out=flags))
            index.fill(0)
            for k, o in enumerate(self.options[1:], start=1):
                tk, ek = o.prices(n, buffers, rows)
                np.less(ek, best, out=flags)
                np.copyto(best, ek, where=flags)
                np.copyto(t, tk, where=flags)
                np.copyto(index, k, where=flags)
        if np.isnan(t, out=flags).any():
            raise CommscopeError(f"library {self.library.name} has no algorithm of {self.primitive} defined at "
                                 "some of these p")

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
    algorithms = np.array([o.algorithm for o in pricer.options], dtype=object).take(index)
    protocols = np.array([o.protocol for o in pricer.options], dtype=object).take(index)
    first = pricer.options[0].channels
    if all(o.channels is first for o in pricer.options):  # one channel count for every option (NCCL's)
        channels = np.broadcast_to(first, shape)
    else:
        stacked = np.stack([np.broadcast_to(o.channels, shape) for o in pricer.options])
        channels = np.take_along_axis(stacked, index[None], axis=0)[0]
    return Choice(pricer.library.name, primitive, algorithms, protocols, np.asarray(channels, dtype=np.int64), t)


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
