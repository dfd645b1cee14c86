"""Training algorithms: each links a convergence bound to the cost model of its iterations.

An :class:`Algorithm` names, under one name shared with the schedules and compressors where they
coincide, everything time-to-accuracy needs:

- ``bound``: the registered convergence bound (:mod:`convergence.bounds`) that counts its iterations;
- how one iteration is priced: ``schedule``, ``compressor``, ``collective`` (None = the cheapest
  registered algorithm for every message) and schedule ``options``, run through
  :func:`costmodels.sweep` (vectorized over environments and worker counts), or a ``timing``
  function where an iteration of the algorithm is not one schedule iteration (asynchronous updates,
  stale clocks, gossip);
- ``parameter``: its one tunable knob with a default (``H`` local steps, compression density, bits or
  rank, gossip topology, staleness ``s``), given as ``"name:value"`` (``"local_sgd:16"``,
  ``"topk:0.001"``, ``"dpsgd:torus"``) like compressor specs;
- ``constants(p, profile, value)``: a pure function from the worker counts p (an int array), the model
  profile (its tensors) and the parameter to the bound's constants that the algorithm fixes (``n = p``,
  ``tau = p - 1``, ``H``, ``s``, ``omega`` / ``delta`` of the compressor, spectral ``gap`` of the
  topology), each an array shaped like p.

Problem constants (L, sigma, Delta, zeta, ...) are not the algorithm's: :mod:`convergence.tta`
takes them. Algorithms whose bound is not registered stay listed but cannot be evaluated
(:func:`available` lists those that can).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

import costmodels as cm
from costmodels._inputs import as_ranks
from costmodels.environment_array import EnvironmentArray, as_environment_array
from costmodels.errors import CommscopeError
from costmodels.registry import Registry

from .bounds import BOUNDS, Bound
from .topology import TOPOLOGIES, degree, spectral_gap

Timing = Callable[["Algorithm", cm.ModelProfile, EnvironmentArray, np.ndarray, Any], np.ndarray]
Constants = Callable[[np.ndarray, cm.ModelProfile, Any], dict[str, np.ndarray]]


def sweep_time(algo: Algorithm, prof: cm.ModelProfile, envs: EnvironmentArray, p: np.ndarray, value: Any
               ) -> np.ndarray:
    """One iteration = one iteration of ``algo.schedule`` (with its compressor, collective and options):
    :func:`costmodels.sweep`'s iteration time, shape ``envs.shape + (len(p),)``."""
    return cm.sweep(prof, envs, p, algo.schedule, algo.collective, algo.compressor_spec(value),
                    **algo.schedule_options(value)).iteration_time


@dataclass(frozen=True)
class Algorithm:
    """A registered training algorithm (module docstring).

    ``description`` says how its iteration time and its bound's constants follow from the cost model
    and what that leaves out; ``schedule`` is the costmodels schedule that prices it (None for gossip,
    which no schedule carries: ``timing`` prices it); ``compressor`` a compressor name whose knob is
    ``parameter`` (or a full spec such as ``"topk:0.01"``); ``collective`` None = the cheapest per
    message; ``options`` extra schedule options; ``timing(algo, profile, envs, p, value)`` the
    seconds per iteration, ``envs.shape + (len(p),)`` (default: :func:`sweep_time`).
    """

    name: str
    description: str
    bound: str
    schedule: str | None
    constants: Constants
    compressor: str | None = None
    collective: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    parameter: str | None = None
    default: Any = None
    timing: Timing = sweep_time

    # ------------------------------------------------------------------ parameter
    @property
    def _compressor_entry(self) -> cm.Compressor | None:
        if self.compressor is None or ":" in self.compressor:
            return None
        return cm.compressor(self.compressor)

    @property
    def default_value(self) -> Any:
        c = self._compressor_entry
        if self.default is None and c is not None and c.parameter == self.parameter:
            return c.default
        return self.default

    def resolve(self, value: Any = None) -> Any:
        """The parameter value to use (the default for None), validated; errors name the allowed values."""
        if self.parameter is None:
            if value is not None:
                raise CommscopeError(f"algorithm {self.name} takes no parameter, got {value!r}")
            return None
        if value is None:
            value = self.default_value
        if self.parameter == "topology":
            if not isinstance(value, str) or value.lower() not in TOPOLOGIES:
                raise CommscopeError(f"algorithm {self.name}: topology must be one of "
                                     f"{', '.join(TOPOLOGIES.names())}, got {value!r}")
            return value.lower()
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise CommscopeError(f"algorithm {self.name}: {self.parameter} must be a number, got {value!r}") from None
        if self.parameter in ("H", "s"):
            least = 1 if self.parameter == "H" else 0
            if not math.isfinite(v) or v != int(v) or v < least:
                raise CommscopeError(f"algorithm {self.name}: {self.parameter} must be an integer >= {least}, "
                                     f"got {value!r}")
            return int(v)
        c = self._compressor_entry
        if c is not None:
            q = c.resolve(v)  # the compressor's own check (density in (0, 1], bits in [2, 16], ...)
            return int(q) if c.parameter in ("bits", "rank") else q  # type: ignore[arg-type]
        return v

    def label(self, value: Any = None) -> str:
        """``"local_sgd (H=8)"``: the name with its resolved parameter."""
        v = self.resolve(value)
        if v is None:
            return self.name
        return f"{self.name} ({self.parameter}={v if isinstance(v, str) else format(v, 'g')})"

    # ------------------------------------------------------------------ pricing
    def compressor_spec(self, value: Any = None) -> str | None:
        """The compressor spec its iterations use (``"topk:0.01"``), or None."""
        c = self._compressor_entry
        if c is None:
            return self.compressor
        v = self.resolve(value)
        if c.parameter is not None and self.parameter == c.parameter:
            return f"{c.name}:{v:g}"
        return c.name

    def schedule_options(self, value: Any = None) -> dict[str, Any]:
        opts = dict(self.options)
        if self.schedule is None:
            return opts
        if self.parameter is not None and self.parameter in cm.schedule(self.schedule).options:
            opts[self.parameter] = self.resolve(value)
        return opts

    def iteration_time(self, profile: cm.ModelProfile, envs: Any, p: Any, value: Any = None) -> np.ndarray:
        """Seconds per iteration (as the bound counts iterations), shape ``envs.shape + (len(p),)``."""
        ranks = as_ranks(p).reshape(-1)
        return self.timing(self, profile, as_environment_array(envs), ranks, self.resolve(value))

    def bound_constants(self, p: Any, profile: cm.ModelProfile, value: Any = None) -> dict[str, np.ndarray]:
        """The constants the algorithm fixes for its bound, each shaped like p."""
        return self.constants(as_ranks(p).reshape(-1), profile, self.resolve(value))

    # ------------------------------------------------------------------ bound
    @property
    def available(self) -> bool:
        return self.bound in BOUNDS

    def get_bound(self) -> Bound:
        if self.bound not in BOUNDS:
            raise CommscopeError(f"algorithm {self.name} needs the bound {self.bound!r}, which is not registered; "
                                 f"registered bounds: {', '.join(BOUNDS.names())}")
        return BOUNDS.get(self.bound)


# -------------------------------------------------------------------------------- constants
def _n(p: np.ndarray, prof: cm.ModelProfile, q: Any) -> dict[str, np.ndarray]:
    return {"n": p.astype(np.float64)}


def _with(**fixed: Callable[[np.ndarray, cm.ModelProfile, Any], Any]) -> Constants:
    """``n = p`` plus the named constants, each a function of (p, profile, parameter) broadcast to p's shape."""

    def constants(p: np.ndarray, prof: cm.ModelProfile, q: Any) -> dict[str, np.ndarray]:
        out = _n(p, prof, q)
        for k, f in fixed.items():
            out[k] = np.broadcast_to(np.asarray(f(p, prof, q), dtype=np.float64), p.shape).copy()
        return out

    return constants


@cache
def _gap(topology: str, p: int) -> float:
    return spectral_gap(topology, p)


@cache
def _degree(topology: str, p: int) -> int:
    """Distinct neighbours of a worker in the topology's mixing matrix (the graphs here are regular)."""
    return degree(topology, p)


def gaps(topology: str, p: np.ndarray) -> np.ndarray:
    """Spectral gap of ``topology`` for every worker count in p (closed form or one FFT, cached per p)."""
    return np.array([_gap(topology, int(x)) for x in np.asarray(p).reshape(-1)]).reshape(np.shape(p))


def degrees(topology: str, p: np.ndarray) -> np.ndarray:
    return np.array([_degree(topology, int(x)) for x in np.asarray(p).reshape(-1)]).reshape(np.shape(p))


def _compressor_constant(spec_of: Callable[[Any], str], which: str
                         ) -> Callable[[np.ndarray, cm.ModelProfile, Any], float]:
    """delta or omega of the compressor applied to each tensor of the model on its own (costmodels'
    ``Compressor.model_constants``: the worst tensor's)."""

    def constant(p: np.ndarray, prof: cm.ModelProfile, q: Any) -> float:
        entry, value = cm.parse_compressor(spec_of(q))
        v = entry.model_constants([(layer.params, layer.shape) for layer in prof.layers], value)[which]
        if v is None:
            raise CommscopeError(f"compressor {entry.name} has no {which} in costmodels")
        return float(v)

    return constant


# ----------------------------------------------------------------------------------- timings
def async_time(algo: Algorithm, prof: cm.ModelProfile, envs: EnvironmentArray, p: np.ndarray, value: Any
               ) -> np.ndarray:
    """Seconds per update: the ``ps`` schedule's iteration time / p (each of the p workers pushes one
    gradient per ps iteration). An approximation: server contention is priced only as far as the ps
    schedule prices it (all p workers pushing and pulling together in each iteration)."""
    return cm.sweep(prof, envs, p, "ps").iteration_time / p


def ssp_time(algo: Algorithm, prof: cm.ModelProfile, envs: EnvironmentArray, p: np.ndarray, value: Any
             ) -> np.ndarray:
    """Seconds per clock. s = 0 is BSP over the parameter server: the ``ps`` schedule's iteration time.
    With s >= 1 a worker may start clock c + 1 before clock c's push and pull finish, so in steady state
    communication pipelines behind computation: ``max(compute, C)``, with C the total time of the
    parameter-server messages of one iteration (the ``bsp`` schedule over ``parameter_server`` minus its
    compute). Stragglers, SSP's other motive, are not modelled (the workers here are identical)."""
    if value == 0:
        return cm.sweep(prof, envs, p, "ps").iteration_time
    t = cm.sweep(prof, envs, p, "bsp", "parameter_server").iteration_time
    return np.maximum(prof.compute_s, t - prof.compute_s)


def neighbour_exchange(topology: str, nbytes: float, envs: EnvironmentArray, p: np.ndarray) -> np.ndarray:
    """Seconds for every worker to send ``nbytes`` to and receive them from each of its neighbours.

    Priced with the registered gossip collectives' per-neighbour cost ``alpha + n beta + n gamma``
    (``gossip_ring`` = min(p - 1, 2) of them, on the link a flat algorithm uses at that p) times the
    topology's number of distinct neighbours: exactly ``gossip_ring`` for the ring and ``gossip_torus``
    for the torus with p >= 9; derived the same way for the other topologies and for small tori.
    Shape ``envs.shape + (len(p),)``.
    """
    q = np.maximum(p, 2)
    grid = envs.reshape(*envs.shape, 1)
    ring = np.asarray(cm.collective("gossip_ring").time(float(nbytes), q, grid), dtype=np.float64)
    per_neighbour = ring / np.minimum(q - 1, 2)
    return per_neighbour * degrees(topology, p)


def gossip_time(algo: Algorithm, prof: cm.ModelProfile, envs: EnvironmentArray, p: np.ndarray, value: Any
                ) -> np.ndarray:
    """Seconds per iteration: forward + backward (+ encoding), then the gossip exchange of the model with
    every neighbour (:func:`neighbour_exchange`; no overlap, as in the adapt-then-combine form the bound
    analyses: the exchange carries the model after this iteration's step). With a compressor
    (CHOCO-SGD) the message is the compressed model difference: the compressor's wire bytes of the
    model, encoding on the compute stream and decoding per received byte, as costmodels prices them."""
    spec = algo.compressor_spec(value) if algo.compressor else None
    topology = value if algo.parameter == "topology" else "ring"
    if spec is None:
        return prof.compute_s + neighbour_exchange(topology, prof.grad_bytes, envs, p)
    from costmodels.schedules import compressed_profile

    small, wire = compressed_profile(prof, spec)
    received = small.grad_bytes * degrees(topology, p)
    return small.compute_s + neighbour_exchange(topology, small.grad_bytes, envs, p) + received * wire.decode_per_byte


# ---------------------------------------------------------------------------------- registry
ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def _spec(name: str) -> Callable[[Any], str]:
    return lambda q: name if q is None else f"{name}:{q:g}"


_CHOCO_COMPRESSOR = "topk:0.01"

for _a in (
    Algorithm("sgd", "synchronous mini-batch SGD: n = p; one iteration = one iteration of PyTorch DDP's bucketed "
              "all-reduce (schedule fusion, cheapest all-reduce per bucket)", "sgd", "fusion", _n),
    Algorithm("local_sgd", "local SGD: n = p and H local steps between model averagings; one iteration = one local "
              "step with the averaging amortised over H (schedule local_sgd)", "local_sgd", "local_sgd",
              _with(H=lambda p, prof, q: q), parameter="H", default=8),
    Algorithm("async_sgd", "asynchronous SGD on a parameter server: one iteration = one update of one worker's "
              "gradient; tau = p - 1 (each update is at most p - 1 updates stale when the p workers take turns; the "
              "bound draws the worker uniformly, so zeta counts as noise); seconds per update = ps iteration time "
              "/ p (see async_time)", "async_sgd", "ps",
              lambda p, prof, q: {"tau": (p - 1).astype(np.float64)}, collective="parameter_server", timing=async_time),
    Algorithm("ssp", "stale synchronous parallel on a parameter server: n = p, staleness s; one iteration = one "
              "clock (see ssp_time)", "ssp", "ps", _with(s=lambda p, prof, q: q), collective="parameter_server",
              parameter="s", default=1, timing=ssp_time),
    Algorithm("dpsgd", "decentralized parallel SGD: n = p, gap = spectral gap of the topology's mixing matrix at p; "
              "one iteration = compute, then the model exchanged with every neighbour (see gossip_time)", "dpsgd",
              None, _with(gap=lambda p, prof, q: gaps(q, p)), collective="gossip_ring", parameter="topology",
              default="ring", timing=gossip_time),
    Algorithm("choco_sgd", f"CHOCO-SGD: gossip of {_CHOCO_COMPRESSOR}-compressed model differences; n = p, gap of the "
              "topology at p, delta of the compressor on the model's worst tensor (see gossip_time)", "choco_sgd", None,
              _with(gap=lambda p, prof, q: gaps(q, p),
                    delta=_compressor_constant(lambda q: _CHOCO_COMPRESSOR, "delta")),
              compressor=_CHOCO_COMPRESSOR, collective="gossip_ring", parameter="topology", default="ring",
              timing=gossip_time),
    Algorithm("qsgd", "QSGD with b bits per tensor: n = p, omega = max over tensors of min(d_j/s^2, sqrt(d_j)/s) "
              "with s = 2^(b-1) - 1 (Compressor.model_constants); gradients all-gathered in DDP buckets",
              "qsgd", "fusion",
              _with(omega=_compressor_constant(_spec("qsgd"), "omega")), compressor="qsgd", parameter="bits"),
    Algorithm("topk", "Top-k with error feedback per tensor: n = p, delta = min_j ceil(q d_j)/d_j >= q (density q); "
              "values and indices all-gathered in DDP buckets", "topk", "fusion",
              _with(delta=_compressor_constant(_spec("topk"), "delta")), compressor="topk", parameter="density"),
    Algorithm("randomk", "Random-k with error feedback and a shared seed: n = p, delta = min_j k_j/d_j; summed "
              "in place by an all-reduce in DDP buckets", "randomk", "fusion",
              _with(delta=_compressor_constant(_spec("randomk"), "delta")), compressor="randomk",
              parameter="density"),
    Algorithm("powersgd", "PowerSGD rank r with error feedback: n = p, delta = min over weight tensors "
              "(m x the rest) of r / min(m, n), the exact rank-r truncation's contraction (vectors go "
              "uncompressed); factors all-reduced in DDP buckets", "powersgd", "fusion",
              _with(delta=_compressor_constant(_spec("powersgd"), "delta")), compressor="powersgd",
              parameter="rank"),
    Algorithm("ef_signsgd", "EF-signSGD per tensor: n = p, delta = 1/d_max (the worst case of ||g||_1^2 / (d ||g||^2) "
              "on the largest tensor: the bound is then very pessimistic); scaled signs all-gathered in DDP buckets",
              "ef_signsgd",
              "fusion", _with(delta=_compressor_constant(lambda q: "ef_signsgd", "delta")), compressor="ef_signsgd"),
    Algorithm("signsgd", "signSGD with majority vote: n = p; one iteration = T accumulated mini-batches of the "
              "profile (the batch K = T its bound needs) and one exchange of signs. Its bound measures (E mean "
              "||grad f||_1)^2, not the squared l2 norm of the others, so it is left out of time-to-accuracy "
              "comparisons unless asked for",
              "signsgd", "fusion", _n, compressor="signsgd"),
    Algorithm("sgd_sc", "synchronous SGD on a strongly convex problem (bound on E||x_T - x*||^2): n = p; priced as "
              "sgd", "sgd_sc", "fusion", _n),
    Algorithm("local_sgd_sc", "local SGD on a strongly convex problem (bound on E||x_T - x*||^2): n = p, H; priced "
              "as local_sgd", "local_sgd_sc", "local_sgd", _with(H=lambda p, prof, q: q), parameter="H", default=8),
):
    ALGORITHMS.register(_a)

DEFAULT_MEASURE = "avg_grad_sq"


def algorithms() -> list[str]:
    """Names of the registered training algorithms."""
    return ALGORITHMS.names()


def algorithm(name: str) -> Algorithm:
    return ALGORITHMS.get(name)


def available(measure: str | None = DEFAULT_MEASURE) -> list[str]:
    """Algorithms whose bound is registered (upper bounds only), of one measure (None: any)."""
    out = []
    for a in ALGORITHMS:
        if a.available:
            b = a.get_bound()
            if b.kind == "upper" and (measure is None or b.measure == measure):
                out.append(a.name)
    return out


def parse_algorithm(spec: Any) -> tuple[Algorithm, Any]:
    """``"local_sgd:16"`` -> (the local_sgd entry, 16); ``"sgd"`` -> (sgd, None); ``"dpsgd:torus"``."""
    if isinstance(spec, Algorithm):
        return spec, spec.resolve(None)
    if not isinstance(spec, str) or not spec.strip():
        raise CommscopeError(f"an algorithm is a name or name:parameter (e.g. local_sgd:16), got {spec!r}")
    name, sep, value = spec.strip().partition(":")
    entry = ALGORITHMS.get(name.strip())
    if not sep:
        return entry, entry.resolve(None)
    if entry.parameter is None:
        raise CommscopeError(f"algorithm {entry.name} takes no parameter, got {spec!r}")
    if not value.strip():
        raise CommscopeError(f"algorithm {entry.name}: give a {entry.parameter} after ':', got {spec!r}")
    return entry, entry.resolve(value.strip())
