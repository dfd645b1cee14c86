"""Pricing the messages of a schedule: one configuration (p, environment) or many at once.

A :class:`Comm` answers "how long does a message of n bytes of this primitive take" for a named
collective algorithm, or, with none named, for what the environment's collective library runs at each size
(:mod:`costmodels.libraries`; the ``ideal`` library takes the cheapest registered algorithm). ``p`` and ``env`` may be a
single configuration or arrays of them (an int array of p and an
:class:`~costmodels.environment_array.EnvironmentArray` of matching shape, typically ``(C, 1)``):
schedule sweeps price every message of every configuration in one broadcast evaluation.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .analysis import default_candidates
from .collectives import collective as get_collective
from .environment import Environment
from .environment_array import EnvironmentArray
from .errors import CommscopeError
from .libraries import Pricer, resolve


@dataclass(frozen=True)
class Wire:
    """How compressed messages travel (set by ``simulate``/``sweep`` while a compressor is active).

    Sizes handed to :class:`Comm` are then the bytes one worker sends. With ``primitive ==
    "allgather"`` every worker receives all p messages: the allgather moves p times that (nccl-tests'
    n is the whole output buffer), and decoding costs ``decode_per_byte`` for each received byte.
    """

    primitive: str
    decode_per_byte: float | np.ndarray  # per configuration in sweeps, where decoding depends on p


WIRE: contextvars.ContextVar[Wire | None] = contextvars.ContextVar("commscope_wire", default=None)


class Comm:
    """The time of one message of ``primitive`` on p ranks: a named algorithm, or the library's choice.

    ``algorithm`` may also map primitives to algorithms (the one of ``primitive`` is used, the
    library's choice where it has none), so one argument serves schedules that mix primitives.

    ``p`` is an int (one configuration) or an int array broadcasting against ``env`` (an
    :class:`EnvironmentArray`); calls then return one time per configuration and size. A single
    worker (p = 1) communicates nothing and costs 0.
    """

    def __init__(self, primitive: str, p: Any, env: Environment | EnvironmentArray,
                 algorithm: str | Mapping[str, str] | None = None,
                 params: Mapping[str, Any] | None = None) -> None:
        self.wire = WIRE.get()
        if self.wire is not None and primitive == "allreduce":
            primitive = self.wire.primitive
        if isinstance(algorithm, Mapping):  # primitive -> algorithm (e.g. a fitted environment's); else cheapest
            algorithm = algorithm.get(primitive)
        self.primitive, self.p, self.env, self.params = primitive, p, env, dict(params or {})
        if algorithm is not None:
            c = get_collective(algorithm)
            if c.is_lower_bound:
                raise CommscopeError(f"{algorithm} is a lower bound, not an algorithm to run")
            if c.primitive != primitive:
                raise CommscopeError(
                    f"this schedule needs a {primitive} algorithm, but {algorithm} implements {c.primitive}"
                )
            unknown = set(self.params) - {q.name for q in c.params}
            if unknown:
                raise CommscopeError(f"{algorithm} has no parameter(s) {', '.join(sorted(unknown))}")
            self.candidates = [algorithm]
        else:
            self.candidates = default_candidates(primitive)
            known = {q.name for x in self.candidates for q in get_collective(x).params}
            unknown = set(self.params) - known
            if unknown:
                raise CommscopeError(f"no candidate of {primitive} has parameter(s) {', '.join(sorted(unknown))}")
        self.algorithm = algorithm
        self.library = None if algorithm is not None else resolve(primitive, env).name
        self._pricer: Pricer | None = None
        if self.library not in (None, "ideal"):  # the library's own rule and prices (one pricer per Comm)
            self.candidates = []
            self._pricer = Pricer(primitive, np.where(np.asarray(p) == 1, 2, p) if np.ndim(p) else max(int(p), 2),
                                  env, self.params)
        self.single = np.ndim(p) == 0
        self._solo = np.asarray(p) == 1  # where nothing is sent
        self._evaluators: list[Callable[[Any], np.ndarray]] | None = None

    def _prices(self) -> list[Callable[[Any], np.ndarray]]:
        if self._evaluators is None:
            ranks = np.where(self._solo, 2, self.p)  # p = 1 is priced as 2, then zeroed
            mode = "raise" if self.algorithm is not None else "nan"
            evs = []
            for name in self.candidates:
                c = get_collective(name)
                mine = {k: v for k, v in self.params.items() if k in {q.name for q in c.params}}
                evs.append(c.evaluator(ranks, self.env, out_of_domain=mode, **mine))
            self._evaluators = evs
        return self._evaluators

    def __call__(self, sizes: Any) -> np.ndarray:
        sizes = np.asarray(sizes, dtype=np.float64)
        if self.single:
            sizes = np.atleast_1d(sizes)
            if self._solo:
                return np.zeros_like(sizes)
        if self.wire is not None:
            received = sizes * (self.p if self.primitive == "allgather" else 1)
            t = self._price(received) + received * self.wire.decode_per_byte
        else:
            t = self._price(sizes)
        return t if self.single or not self._solo.any() else np.where(self._solo, 0.0, t)

    def _price(self, sizes: np.ndarray) -> np.ndarray:
        if self._pricer is not None:
            return self._pricer(sizes)
        evs = self._prices()
        if len(evs) == 1:
            return evs[0](sizes)
        stack = np.stack(np.broadcast_arrays(*(ev(sizes) for ev in evs)))
        best = np.fmin.reduce(stack, axis=0)
        if np.isnan(best).any():
            raise CommscopeError(f"no candidate algorithm of {self.primitive} is defined at some of these p")
        return best

    def latency(self) -> Any:
        """Time of an empty message: the per-message cost that fusing two messages saves."""
        t = self(0.0)
        return float(t[0]) if self.single else t
