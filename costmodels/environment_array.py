"""Many environments at once: the fields of :class:`Environment` as numpy arrays of one shape.

Collective models and schedule sweeps evaluate over an ``EnvironmentArray`` in one vectorized pass
(``Collective.time(n, p, envs)`` broadcasts its fields against n and p). A one-level environment is
stored as a two-level one whose intra-node link *is* the inter-node link, with one GPU per node:
every model gives it exactly the one-level time (flat algorithms use the intra-node link only
while p <= gpus_per_node = 1, where both links coincide).

What is not a number (the collective library, the kinds of link, the fabric: ``DESCRIPTORS``) is kept in
``descriptors``: one value where every entry shares it, else an object array of the entries' values. A
library prices an array whose entries share these (:attr:`EnvironmentArray.uniform`); :meth:`groups`
splits any other into such arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .environment import HOST_BUFFERS, TERMS, Environment
from .errors import CommscopeError

FIELDS = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta", "gpus_per_node", "nics_per_node", "kappa_c", "kappa_m",
          "host_overhead", "contended_step", "compute_loss_step", "burst_bytes", *HOST_BUFFERS)
DEFAULTED = (*TERMS, "burst_bytes", *HOST_BUFFERS)  # fields that default to 0 in every entry
DESCRIPTORS = ("library", "link", "intra_link", "compute_capability", "oversubscription", "nodes_per_leaf",
               "rail_optimized", "sharp", "nvls", "primitive_factors")


def _real(name: str, value: Any, *, allow_zero: bool) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise CommscopeError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0) | ((arr == 0) & (not allow_zero))
    if bad.any():
        allowed = ">= 0" if allow_zero else "> 0"
        raise CommscopeError(f"{name} must be finite and {allowed}, got {arr[bad].flat[0].item()!r}")
    return arr


@dataclass(frozen=True, eq=False)
class EnvironmentArray:
    """Alpha-beta-gamma parameters of ``shape`` environments (see :class:`Environment`).

    Build one with :meth:`of` (a list of environments) or :meth:`grid` (one environment with its
    inter-node alpha and/or beta swept over an outer product); ``names`` labels each entry;
    ``descriptors`` holds the fields that are not numbers, the same for every entry. ``kappa_c``,
    ``kappa_m``, ``host_overhead``, ``contended_step`` and ``compute_loss_step`` (issue 16), ``burst_bytes``,
    ``host_copy`` and ``host_fault`` default to 0 in every entry.
    """

    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray
    intra_alpha: np.ndarray
    intra_beta: np.ndarray
    gpus_per_node: np.ndarray
    nics_per_node: np.ndarray
    names: np.ndarray
    descriptors: Mapping[str, Any] = field(default_factory=dict)
    kappa_c: Any = 0.0
    kappa_m: Any = 0.0
    host_overhead: Any = 0.0
    contended_step: Any = 0.0
    compute_loss_step: Any = 0.0
    burst_bytes: Any = 0.0
    host_copy: Any = 0.0
    host_fault: Any = 0.0

    two_level = True  # read by the collective models: always the two-link path (see module doc)

    def __post_init__(self) -> None:
        for f in DEFAULTED:  # interference, host overhead and token bucket: numbers >= 0, 0 when not given
            object.__setattr__(self, f, _real(f, getattr(self, f), allow_zero=True))
        arrays = [np.asarray(getattr(self, f)) for f in FIELDS]
        try:
            shape = np.broadcast_shapes(*(a.shape for a in arrays), np.shape(self.names))
        except ValueError:
            raise CommscopeError(
                "environment fields must broadcast to one shape, got shapes "
                + ", ".join(f"{f}={a.shape}" for f, a in zip(FIELDS, arrays, strict=True))
            ) from None
        for f, a in zip(FIELDS, arrays, strict=True):
            object.__setattr__(self, f, np.broadcast_to(a, shape))
        object.__setattr__(self, "names", np.broadcast_to(np.asarray(self.names, dtype=object), shape))
        if (self.nics_per_node > self.gpus_per_node).any() or (self.gpus_per_node < 1).any():
            raise CommscopeError("need 1 <= nics_per_node <= gpus_per_node in every environment")
        unknown = sorted(set(self.descriptors) - set(DESCRIPTORS))
        if unknown:
            raise CommscopeError(f"unknown environment descriptor(s) {', '.join(unknown)}")
        defaults = {f.name: f.default for f in fields(Environment) if f.name in DESCRIPTORS}
        merged = {}
        for key, value in {**defaults, **dict(self.descriptors)}.items():
            if isinstance(value, np.ndarray):
                value = np.broadcast_to(value.astype(object), shape)
                first = value.flat[0] if value.size else None
                value = first if all(v == first for v in value.flat) else value
            merged[key] = value
        object.__setattr__(self, "descriptors", merged)

    @property
    def has_terms(self) -> np.ndarray:
        """Boolean array of ``shape``: where interference or host overhead is on (see ``Environment.has_terms``)."""
        return np.logical_or.reduce([np.asarray(getattr(self, k)) > 0 for k in TERMS])

    @property
    def uniform(self) -> bool:
        """True when every entry has the same library, link kinds and fabric (``DESCRIPTORS``)."""
        return not any(isinstance(v, np.ndarray) for v in self.descriptors.values())

    def __getattr__(self, name: str) -> Any:
        if name in DESCRIPTORS:  # env.library etc. read the same on an array as on one Environment
            value = self.__dict__["descriptors"][name]
            if isinstance(value, np.ndarray):
                kinds = ", ".join(sorted(set(map(str, value.flat))))
                raise CommscopeError(f"these environments differ in {name} ({kinds}): price each group of equal "
                                     "ones on its own (EnvironmentArray.groups())")
            return value
        raise AttributeError(name)

    def _descriptors_at(self, index: Any) -> dict[str, Any]:
        return {k: (v[index] if isinstance(v, np.ndarray) else v) for k, v in self.descriptors.items()}

    def groups(self) -> list[tuple[np.ndarray, EnvironmentArray]]:
        """(flat indices, 1-d array of those entries) for each set of entries sharing ``DESCRIPTORS``."""
        flat = self.reshape(-1)
        if self.uniform:
            return [(np.arange(self.size), flat)]
        keys = [tuple(str(flat._descriptors_at(i)[d]) for d in DESCRIPTORS) for i in range(self.size)]
        out = []
        for key in dict.fromkeys(keys):
            idx = np.array([i for i, k in enumerate(keys) if k == key])
            first = flat._descriptors_at(int(idx[0]))
            out.append((idx, EnvironmentArray(**{f: getattr(flat, f)[idx] for f in FIELDS}, names=flat.names[idx],
                                              descriptors=first)))
        return out

    # ----------------------------------------------------------- construction
    @classmethod
    def of(cls, envs: Sequence[Environment] | Environment) -> EnvironmentArray:
        """The environments of a sequence, in order (shape ``(len(envs),)``)."""
        if isinstance(envs, Environment):
            envs = [envs]
        envs = list(envs)
        if not envs:
            raise CommscopeError("give at least one environment")
        for e in envs:
            if not isinstance(e, Environment):
                raise CommscopeError(f"expected costmodels.Environment objects, got {type(e).__name__}")
        col = {f: np.array([_field(e, f) for e in envs]) for f in FIELDS}
        descriptors = {}
        for d in DESCRIPTORS:
            values = np.empty(len(envs), dtype=object)
            for i, e in enumerate(envs):  # one by one: a tuple (primitive_factors) is one value, not a row
                values[i] = getattr(e, d)
            descriptors[d] = values
        return cls(**col, names=np.array([e.name for e in envs], dtype=object), descriptors=descriptors)

    @classmethod
    def grid(cls, base: Environment, *, alpha: Any = None, beta: Any = None) -> EnvironmentArray:
        """``base`` with its (inter-node) alpha and beta over the outer product ``alpha x beta``.

        Shape ``(len(alpha), len(beta))`` (a field left as None keeps the base value and its axis
        has length 1). For a one-level base, the sweep changes its only link.
        """
        if not isinstance(base, Environment):
            raise CommscopeError(f"base must be a costmodels.Environment, got {type(base).__name__}")
        a = _real("alpha", base.alpha if alpha is None else alpha, allow_zero=True).reshape(-1, 1)
        b = _real("beta", base.beta if beta is None else beta, allow_zero=False).reshape(1, -1)
        a, b = np.broadcast_arrays(a, b)
        ia = a if not base.two_level else np.full(a.shape, base.intra_alpha)
        ib = b if not base.two_level else np.full(a.shape, base.intra_beta)
        names = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            names[idx] = f"{base.name} (alpha={a[idx]:.3g} s, beta={b[idx]:.3g} s/B)"
        return cls(a, b, np.full(a.shape, base.gamma), ia, ib, np.full(a.shape, base.gpus_per_node),
                   np.full(a.shape, base.nics_per_node), names, {d: getattr(base, d) for d in DESCRIPTORS},
                   **{f: np.full(a.shape, getattr(base, f)) for f in DEFAULTED})

    # ----------------------------------------------------------------- views
    @property
    def shape(self) -> tuple[int, ...]:
        return self.alpha.shape

    @property
    def size(self) -> int:
        return int(self.alpha.size)

    def reshape(self, *shape: int) -> EnvironmentArray:
        return EnvironmentArray(**{f: np.reshape(getattr(self, f), shape) for f in FIELDS},
                                names=np.reshape(self.names, shape),
                                descriptors={k: np.reshape(v, shape) if isinstance(v, np.ndarray) else v
                                             for k, v in self.descriptors.items()})

    def __getitem__(self, index: Any) -> Environment:
        """One entry as an :class:`Environment` (``index`` into ``shape``)."""
        v = {f: getattr(self, f)[index] for f in FIELDS}
        if np.ndim(v["alpha"]):
            raise CommscopeError(f"index {index!r} selects {np.size(v['alpha'])} environments; select one")
        gp = int(v["gpus_per_node"])
        two = gp > 1
        return Environment(float(v["alpha"]), float(v["beta"]), float(v["gamma"]),
                           float(v["intra_alpha"]) if two else None, float(v["intra_beta"]) if two else None,
                           gp, int(v["nics_per_node"]), name=str(self.names[index]),
                           **{f: float(v[f]) for f in DEFAULTED}, **self._descriptors_at(index))


def _field(env: Environment, name: str) -> float:
    if name == "intra_alpha":
        return env.alpha if env.intra_alpha is None else env.intra_alpha
    if name == "intra_beta":
        return env.beta if env.intra_beta is None else env.intra_beta
    return getattr(env, name)


def as_environment_array(envs: Any) -> EnvironmentArray:
    """An :class:`EnvironmentArray` from one, an :class:`Environment`, or a sequence of them."""
    if isinstance(envs, EnvironmentArray):
        return envs
    if isinstance(envs, (Environment, list, tuple)):
        return EnvironmentArray.of(envs)
    raise CommscopeError(
        f"envs must be an Environment, a list of them or an EnvironmentArray, got {type(envs).__name__}"
    )
