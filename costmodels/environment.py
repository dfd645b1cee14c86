"""The environment a collective runs in: Hockney alpha-beta-gamma parameters of one or two levels.

One level: every pair of ranks is joined by the same link (``alpha`` s per message, ``beta`` s per
byte). Two levels: ``gpus_per_node`` ranks share a node joined by an intra-node link
(``intra_alpha``, ``intra_beta``), nodes are joined by the inter-node link (``alpha``, ``beta``)
through ``nics_per_node`` NICs. ``gamma`` is the reduction cost (s per byte reduced) of the device.
The model is Hockney's (Parallel Computing 20(3), 1994) as used by Thakur et al. (IJHPCA 2005).

Beyond the two links, an environment names what runs on them and how they are wired:

* ``library``: the collective library that chooses the algorithm of each message
  (:mod:`costmodels.libraries`: ``nccl``, ``gloo``, ``mpich``, or ``ideal``, the cheapest registered
  algorithm, which is what no real library does);
* ``link`` / ``intra_link``: what kind of link each level is (``network``, ``nvlink``, ``pcie``), which
  sets the library's per-hop latency class (NCCL's NET / NVLINK / PCI) and, for a one-level ``nvlink`` or
  ``pcie`` environment, that all ranks share one node;
* ``compute_capability``: the GPU's (70 V100, 80 A100, 90 H100), for NCCL's per-architecture limits;
* the fabric: ``oversubscription`` of a two-tier fat tree, ``nodes_per_leaf`` under one leaf switch
  (``None``: traffic between any two nodes crosses the spine), ``rail_optimized`` leaves, and in-network
  reduction (``sharp`` on InfiniBand switches, ``nvls`` on NVLink switches).

And what overlap and dispatch cost on the hosts (issue 16; :mod:`costmodels.schedules.engine`):

* ``kappa_c``: compute runs 1 + kappa_c times slower while a collective is in flight (NCCL kernels take
  SMs and memory bandwidth; gloo's threads take cores);
* ``kappa_m``: communication runs 1 + kappa_m times slower while compute runs;
* ``host_overhead``: LogP's o (Culler et al., PPoPP 1993), seconds of the issuing thread per message,
  distinct from the network's alpha;
* ``contended_step``: the least time one latency step of a message takes while compute runs beside it
  (CPU ranks sharing their cores: the communication thread waits for a core at every step), so that a
  message of S steps takes at least S x contended_step beside compute (:mod:`costmodels.schedules.engine`);
* ``compute_loss_step``: the compute seconds a rank loses per latency step of a message that runs beside its
  compute (CPU ranks sharing their cores: the communication's own CPU work per step, times ranks per core), so
  that a message of S steps beside compute takes S x compute_loss_step from it (:mod:`costmodels.schedules.engine`).

And ``burst_bytes``: the token bucket of a shaped (inter-node, or only) link, such as the emulator's
``tc tbf``: after idle time up to that many bytes pass at the host's speed, which hides the latency of
back-to-back steps (:mod:`costmodels.collectives.token_bucket`). 0 (the default) for a NIC.

And ``primitive_factors``: how a primitive's own code path prices the link, as multiples of ``alpha`` and ``beta``
(``{"allgather": {"alpha": 1.25, "beta": 1.05}}``; every other primitive at 1). A library runs each primitive
through its own code: gloo's all-gather (``allgather.cc``) copies every block into place and waits on each
step's pair of buffers, where its ring all-reduce (``allreduce.cc``) streams segments two at a time, so their
cost per step is not the same. ``commscope fit`` fits each code path of a sweep on its own and keeps the factors
only where the AIC says the records show them (:mod:`runners.measure.fit.per_primitive`). Formula-priced
libraries (``ideal``, ``gloo``, ``mpich``) apply them; NCCL's model carries its own per-collective constants,
so an ``nccl`` environment takes none.

And what a library's own host buffers cost (``HOST_BUFFERS``; :mod:`costmodels.collectives.host_buffers`): PyTorch's
gloo backend clones a reduce-scatter's input and copies an all-gather's result out of a buffer of its own, so
``host_copy`` (s per byte copied on a rank's host, as its ranks pay it together) and ``host_fault`` (s per byte of
such a buffer that glibc maps afresh, every call above 32 MiB: a page fault per 4 KiB) price them. 0: free.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ._io import atomic_write_text, loads, read_json
from .errors import CommscopeError
from .primitives import PRIMITIVES

SCHEMA = "commscope.environment/1"
LIBRARY_NAMES = ("ideal", "nccl", "gloo", "mpich")  # the entries of costmodels.libraries.LIBRARIES
LINK_KINDS = ("network", "nvlink", "pcie")
TERMS = {  # interference and per-message host overhead (issue 16): what each is, for error messages
    "kappa_c": "compute slowdown while a collective is in flight, dimensionless",
    "kappa_m": "communication slowdown while compute runs, dimensionless",
    "host_overhead": "seconds of the issuing thread per message, LogP's o",
    "contended_step": "least seconds per latency step of a message while compute runs",
    "compute_loss_step": "compute seconds lost per latency step of a message beside compute",
}
HOST_BUFFERS = {  # what a library's own host buffers cost (costmodels.collectives.host_buffers)
    "host_copy": "seconds per byte a rank's host takes to copy a library buffer",
    "host_fault": "seconds per byte of a library buffer mapped afresh (page faults)",
}


def _check_real(name: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommscopeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise CommscopeError(f"{name} must be finite, got {v!r}")
    if v < 0 or (v == 0 and not allow_zero):
        allowed = ">= 0" if allow_zero else "> 0"
        raise CommscopeError(f"{name} must be {allowed}, got {v!r}")
    return v


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise CommscopeError(f"{name} must be a positive integer, got {value!r}")
    if int(value) < 1:
        raise CommscopeError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Environment:
    """Alpha-beta-gamma parameters of one link, or of an intra- and an inter-node link.

    Attributes:
        alpha: latency of the (inter-node) link, seconds per message (>= 0).
        beta: inverse bandwidth of the (inter-node) link, seconds per byte (> 0).
        gamma: reduction cost, seconds per byte reduced (>= 0).
        intra_alpha, intra_beta: the intra-node link (both or neither; required when
            ``gpus_per_node`` > 1).
        gpus_per_node: ranks per node (1 for a one-level environment).
        nics_per_node: NICs per node that the inter-node phase of hierarchical algorithms can use
            in parallel (1 <= nics_per_node <= gpus_per_node).
        library: the collective library choosing each message's algorithm (``LIBRARY_NAMES``).
        link, intra_link: kind of the inter-node (or only) link and of the intra-node link
            (``LINK_KINDS``); a one-level ``nvlink`` or ``pcie`` environment is one node.
        compute_capability: the GPU's compute capability (e.g. 80), or None without GPUs.
        oversubscription: down/up bandwidth ratio of a two-tier fat tree's leaves (>= 1): traffic
            that crosses the spine gets 1/oversubscription of the per-node bandwidth.
        nodes_per_leaf: nodes under one leaf switch (None: every inter-node path crosses the spine).
        rail_optimized: NIC k of every node on leaf k (a leaf then serves nics_per_node times as many
            nodes before traffic crosses the spine).
        sharp, nvls: in-network reduction on the InfiniBand switches (SHARP; NCCL's CollNet) or on
            the NVLink switches (NVLink SHARP; NCCL's NVLS).
        kappa_c, kappa_m: interference (dimensionless, >= 0): compute slows by 1 + kappa_c while a
            collective is in flight, communication by 1 + kappa_m while compute runs.
        host_overhead: seconds per message on the thread that issues it (LogP's o, >= 0).
        contended_step: least seconds per latency step of a message while compute runs (>= 0; 0: none).
        compute_loss_step: compute seconds a rank loses per latency step of a message beside it (>= 0; 0: none).
        burst_bytes: token bucket of the shaped inter-node (or only) link, bytes (>= 0; 0: no bucket).
        host_copy, host_fault: s per byte of a library's own host buffer copies, and extra s per byte of such a
            buffer mapped afresh (>= 0; 0: free; ``HOST_BUFFERS``).
        primitive_factors: ``((primitive, alpha factor, beta factor), ...)``: the link as that primitive's code
            path sees it, on both levels (a mapping ``{primitive: {"alpha": a, "beta": b}}`` is accepted too;
            entries of 1 and 1 are dropped). Empty: every primitive sees ``alpha`` and ``beta``.
        name, description, source: what it is and where its numbers come from.
        metadata: free JSON-able provenance (e.g. the files and fit quality of a fitted one).
    """

    alpha: float
    beta: float
    gamma: float = 0.0
    intra_alpha: float | None = None
    intra_beta: float | None = None
    gpus_per_node: int = 1
    nics_per_node: int = 1
    library: str = "ideal"
    link: str = "network"
    intra_link: str = "nvlink"
    compute_capability: int | None = None
    oversubscription: float = 1.0
    nodes_per_leaf: int | None = None
    rail_optimized: bool = False
    sharp: bool = False
    nvls: bool = False
    kappa_c: float = 0.0
    kappa_m: float = 0.0
    host_overhead: float = 0.0
    contended_step: float = 0.0
    compute_loss_step: float = 0.0
    burst_bytes: float = 0.0
    host_copy: float = 0.0
    host_fault: float = 0.0
    primitive_factors: tuple[tuple[str, float, float], ...] = ()
    name: str = "custom"
    description: str = ""
    source: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "alpha", _check_real("alpha", self.alpha, allow_zero=True))
        set_(self, "beta", _check_real("beta", self.beta, allow_zero=False))
        set_(self, "gamma", _check_real("gamma", self.gamma, allow_zero=True))
        for key, meaning in TERMS.items():
            set_(self, key, _check_real(f"{key} ({meaning})", getattr(self, key), allow_zero=True))
        set_(self, "burst_bytes", _check_real("burst_bytes (token bucket of the shaped link)", self.burst_bytes,
                                              allow_zero=True))
        for key, meaning in HOST_BUFFERS.items():
            set_(self, key, _check_real(f"{key} ({meaning})", getattr(self, key), allow_zero=True))
        set_(self, "primitive_factors", primitive_factors(self.primitive_factors))
        if self.primitive_factors and self.library == "nccl":
            raise CommscopeError("primitive_factors apply to formula-priced libraries (ideal, gloo, mpich); NCCL's "
                                 f"model has its own per-collective constants, got {self.factors_text()} with nccl")
        set_(self, "gpus_per_node", _check_count("gpus_per_node", self.gpus_per_node))
        set_(self, "nics_per_node", _check_count("nics_per_node", self.nics_per_node))
        if (self.intra_alpha is None) != (self.intra_beta is None):
            raise CommscopeError(
                "give both intra_alpha and intra_beta for a two-level environment, or neither; "
                f"got intra_alpha={self.intra_alpha!r}, intra_beta={self.intra_beta!r}"
            )
        if self.intra_alpha is not None:
            set_(self, "intra_alpha", _check_real("intra_alpha", self.intra_alpha, allow_zero=True))
            set_(self, "intra_beta", _check_real("intra_beta", self.intra_beta, allow_zero=False))
            if self.gpus_per_node < 2:
                raise CommscopeError(
                    "an intra-node link needs gpus_per_node >= 2, "
                    f"got gpus_per_node={self.gpus_per_node}"
                )
        elif self.gpus_per_node > 1:
            raise CommscopeError(
                f"gpus_per_node={self.gpus_per_node} needs an intra-node link: "
                "give intra_alpha and intra_beta"
            )
        if self.nics_per_node > self.gpus_per_node:
            raise CommscopeError(
                f"nics_per_node must be <= gpus_per_node ({self.gpus_per_node}), "
                f"got {self.nics_per_node}"
            )
        for key, allowed in (("library", LIBRARY_NAMES), ("link", LINK_KINDS), ("intra_link", LINK_KINDS)):
            if getattr(self, key) not in allowed:
                raise CommscopeError(f"{key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        if self.compute_capability is not None:
            set_(self, "compute_capability", _check_count("compute_capability", self.compute_capability))
        oversub = _check_real("oversubscription", self.oversubscription, allow_zero=False)
        if oversub < 1:
            raise CommscopeError(f"oversubscription must be >= 1 (down/up bandwidth of a leaf), got {oversub!r}")
        set_(self, "oversubscription", oversub)
        if self.nodes_per_leaf is not None:
            set_(self, "nodes_per_leaf", _check_count("nodes_per_leaf", self.nodes_per_leaf))
        for key in ("rail_optimized", "sharp", "nvls"):
            if not isinstance(getattr(self, key), bool):
                raise CommscopeError(f"{key} must be true or false, got {getattr(self, key)!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise CommscopeError(f"name must be a non-empty string, got {self.name!r}")
        try:
            json.dumps(dict(self.metadata))
        except (TypeError, ValueError) as exc:
            raise CommscopeError(f"metadata must be JSON-serialisable: {exc}") from None
        set_(self, "metadata", dict(self.metadata))

    # ----------------------------------------------------------------- views
    @property
    def two_level(self) -> bool:
        """True when the environment has an intra-node link (``gpus_per_node`` > 1)."""
        return self.intra_alpha is not None

    @property
    def bandwidth(self) -> float:
        """Inter-node (or only) link bandwidth, bytes per second (1/beta)."""
        return 1.0 / self.beta

    @property
    def intra_bandwidth(self) -> float | None:
        """Intra-node link bandwidth, bytes per second, or None for a one-level environment."""
        return None if self.intra_beta is None else 1.0 / self.intra_beta

    @property
    def has_terms(self) -> bool:
        """True when interference or host overhead is on (``TERMS`` not all 0)."""
        return any(getattr(self, k) > 0 for k in TERMS)

    def factors(self, primitive: str) -> tuple[float, float]:
        """(alpha factor, beta factor) of ``primitive``'s code path; (1, 1) unless ``primitive_factors`` names it."""
        return factors_of(self.primitive_factors, primitive)

    def factors_text(self) -> str:
        """``primitive_factors`` in words, e.g. ``allgather: alpha x1.25, beta x1.05``; empty when none."""
        return "; ".join(f"{q}: alpha x{a:.3g}, beta x{b:.3g}" for q, a, b in self.primitive_factors)

    def with_(self, **changes: Any) -> Environment:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metadata"] = dict(self.metadata)
        for key in HOST_BUFFERS:  # written only when set: every environment file from before reads the same
            if not d[key]:
                del d[key]
        factors = d.pop("primitive_factors")
        if factors:  # written only when set (after burst_bytes): every environment file from before reads the same
            at = list(d).index("host_fault" if "host_fault" in d else "host_copy" if "host_copy" in d
                               else "burst_bytes") + 1
            items = list(d.items())
            mapping = {q: {"alpha": a, "beta": b} for q, a, b in factors}
            d = dict([*items[:at], ("primitive_factors", mapping), *items[at:]])
        return {"schema": SCHEMA, **d}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Environment:
        if not isinstance(data, Mapping):
            raise CommscopeError(f"an environment must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        schema = data.pop("schema", SCHEMA)
        if schema != SCHEMA:
            raise CommscopeError(f"unsupported environment schema {schema!r}; expected {SCHEMA!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise CommscopeError(
                f"unknown environment field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
            )
        missing = [k for k in ("alpha", "beta") if k not in data]
        if missing:
            raise CommscopeError(f"environment is missing required field(s): {', '.join(missing)}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Environment:
        return cls.from_dict(loads(text, "environment JSON"))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write JSON atomically (temporary file + rename): a failure leaves any old file intact."""
        return atomic_write_text(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Environment:
        data = read_json(path, "environment file")
        try:
            return cls.from_dict(data)
        except CommscopeError as exc:
            raise CommscopeError(f"{path}: {exc}") from None

    # --------------------------------------------------------------- display
    def summary(self) -> str:
        """One line: the link(s) in microseconds and GB/s."""
        s = f"alpha={self.alpha * 1e6:.3g} us, {self.bandwidth / 1e9:.4g} GB/s"
        if self.two_level:
            assert self.intra_alpha is not None and self.intra_bandwidth is not None
            s = (
                f"{self.gpus_per_node} GPUs/node: intra alpha={self.intra_alpha * 1e6:.3g} us, "
                f"{self.intra_bandwidth / 1e9:.4g} GB/s; inter {s}, {self.nics_per_node} NIC(s)/node"
            )
        s += f", gamma={self.gamma:.3g} s/B"
        if self.library != "ideal":
            s += f"; {self.library}"
        if self.has_terms:
            s += (f"; kappa_c={self.kappa_c:.3g}, kappa_m={self.kappa_m:.3g}, "
                  f"o={self.host_overhead * 1e6:.3g} us")
            if self.contended_step > 0:
                s += f", contended step {self.contended_step * 1e3:.3g} ms"
            if self.compute_loss_step > 0:
                s += f", compute lost {self.compute_loss_step * 1e3:.3g} ms per step"
        if self.burst_bytes > 0:
            s += f"; token bucket {self.burst_bytes:,.0f} B"
        if self.host_copy > 0 or self.host_fault > 0:
            s += f"; host buffers {self.host_copy * 1e9:.3g} ns/B copied, {self.host_fault * 1e9:.3g} ns/B mapped"
        if self.primitive_factors:
            s += f"; {self.factors_text()}"
        if self.oversubscription > 1:
            s += f"; fat tree {self.oversubscription:g}:1" + ("" if self.nodes_per_leaf is None else
                                                           f" above {self.nodes_per_leaf} nodes per leaf")
        return s


def primitive_factors(value: Any) -> tuple[tuple[str, float, float], ...]:
    """``primitive_factors`` in canonical form: sorted ``(primitive, alpha factor, beta factor)`` triples, those of
    1 and 1 dropped. Accepts that form or ``{primitive: {"alpha": a, "beta": b}}`` (a factor left out is 1)."""
    allowed = ", ".join(PRIMITIVES)
    if isinstance(value, Mapping):
        items = []
        for q, f in value.items():
            if not isinstance(f, Mapping) or set(f) - {"alpha", "beta"}:
                raise CommscopeError(f"primitive_factors[{q!r}] must be a mapping with keys alpha and/or beta, "
                                     f"got {f!r}")
            items.append((q, f.get("alpha", 1.0), f.get("beta", 1.0)))
    elif isinstance(value, (tuple, list)):
        items = list(value)
    else:
        raise CommscopeError(f"primitive_factors must be a mapping {{primitive: {{alpha, beta}}}}, got {value!r}")
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise CommscopeError(f"primitive_factors entries must be (primitive, alpha factor, beta factor), "
                                 f"got {item!r}")
        q, a, b = item
        if q not in PRIMITIVES:
            raise CommscopeError(f"primitive_factors: unknown primitive {q!r}; allowed: {allowed}")
        if q in out:
            raise CommscopeError(f"primitive_factors names {q} twice")
        a = _check_real(f"primitive_factors[{q!r}] alpha factor", a, allow_zero=False)
        b = _check_real(f"primitive_factors[{q!r}] beta factor", b, allow_zero=False)
        if (a, b) != (1.0, 1.0):
            out[q] = (a, b)
    return tuple((q, *out[q]) for q in sorted(out))


def factors_of(factors: Any, primitive: str) -> tuple[float, float]:
    """(alpha factor, beta factor) of ``primitive`` in canonical ``primitive_factors``; (1, 1) when absent."""
    for q, a, b in factors or ():
        if q == primitive:
            return a, b
    return 1.0, 1.0
