"""One collective algorithm's cost model: :class:`Collective`, its :class:`Param` and :class:`Domain`.

A :class:`Collective` holds a name, the primitive it implements, a sympy expression in ``p``,
``n``, ``alpha``, ``beta``, ``gamma`` (plus the intra-node link, ``g`` and ``r`` for hierarchical
algorithms, and algorithm parameters such as ``k`` servers), its domain, and its source.
``Collective.time(n, p, env)`` evaluates it over numpy-broadcast arrays.

Message size ``n`` follows nccl-tests: see :data:`PRIMITIVES`.

In a two-level environment a *flat* algorithm runs at the speed of its slowest link: the
intra-node link when all ``p`` ranks fit in one node (``p <= gpus_per_node``), the inter-node link
otherwise (every ring/tree step then waits for a message that crosses nodes). Hierarchical
algorithms use both links explicitly. Lower bounds use the faster of the two links (still a
valid bound).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import sympy as sp

from .._compile import CompiledExpr, compile_expr
from .._inputs import as_bytes, as_ranks, as_scalar_or_array, check_power_of_two
from ..environment import Environment, factors_of
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError, DomainError
from ..primitives import PRIMITIVES
from ..symbols import alpha, alpha_intra, beta, beta_intra, g, gamma, n, p, r
from .evaluator import Evaluator
from .host_buffers import NO_HOST, SYMBOLS, host_values
from .token_bucket import token_bucket_gradient, token_bucket_time

TOPOLOGIES = ("flat", "hierarchical", "bound")


@dataclass(frozen=True)
class Param:
    """An algorithm parameter beyond (n, p): its symbol, default and allowed range."""

    symbol: sp.Symbol
    description: str
    default: float | Callable[[np.ndarray], Any]
    default_text: str
    integer: bool = False
    minimum: float = 0.0
    minimum_inclusive: bool = False
    maximum: float | None = None

    @property
    def name(self) -> str:
        return self.symbol.name

    def allowed(self) -> str:
        lo = f"{'>=' if self.minimum_inclusive else '>'} {self.minimum:g}"
        hi = "" if self.maximum is None else f" and <= {self.maximum:g}"
        return f"{'an integer' if self.integer else 'a number'} {lo}{hi}"

    def value(self, given: Any, p: np.ndarray) -> Any:
        if given is None:
            return self.default(p) if callable(self.default) else self.default
        if isinstance(given, (bool, np.bool_)):
            raise CommscopeError(f"{self.name} must be {self.allowed()}, got {given!r}")
        try:
            arr = np.asarray(given, dtype=np.float64)
        except (TypeError, ValueError):
            raise CommscopeError(f"{self.name} must be {self.allowed()}, got {given!r}") from None
        ok = np.isfinite(arr) & ((arr >= self.minimum) if self.minimum_inclusive else (arr > self.minimum))
        if self.maximum is not None:
            ok &= arr <= self.maximum
        if self.integer:
            ok &= arr == np.floor(np.where(np.isfinite(arr), arr, 0))
        if not np.all(ok):
            bad = arr[~ok].flat[0].item() if arr.ndim else arr.item()
            raise CommscopeError(f"{self.name} must be {self.allowed()}, got {bad!r}")
        return arr if arr.ndim else arr.item()


@dataclass(frozen=True)
class Domain:
    """Where a formula is defined: all p >= min_p, or powers of two only."""

    power_of_two: bool = False
    min_p: int = 1

    def describe(self) -> str:
        if self.power_of_two:
            return "p a power of two"
        return "any p" if self.min_p <= 1 else f"p >= {self.min_p}"


NO_SERIAL = sp.Integer(0)  # no bytes wait behind another rank's message


@dataclass(frozen=True, eq=False)
class Collective:
    """One collective algorithm (or lower bound) and its cost model.

    Attributes:
        name: registry name, e.g. ``"ring_allreduce"``.
        primitive: one of :data:`PRIMITIVES`.
        expr: sympy expression of the time in seconds.
        source: paper and section/equation the formula comes from (or "derived: ...").
        description: one line on how the algorithm works.
        domain: valid p.
        params: algorithm parameters beyond (n, p) with defaults.
        topology: ``"flat"``, ``"hierarchical"`` (uses both links) or ``"bound"``.
        lower_bound_exempt: why the primitive's lower bound (Chan et al. 2007) does not bind this
            algorithm; empty when it does.
        extra_resources: hardware it needs beyond the p ranks (e.g. server nodes); such
            algorithms are compared by :func:`costmodels.cheapest` only when asked for.
        serial: bytes of ``expr``'s wire term that wait behind another rank's message rather than
            follow a step of the algorithm (0 for most); a token bucket hides them up to its size
            (:mod:`.token_bucket`).
        host: seconds the library's own host buffers take per call (copies, page faults) in ``n``, ``p`` and
            mu, phi (:mod:`.host_buffers`), added after the link's shaping; 0 for most.
    """

    name: str
    primitive: str
    expr: sp.Expr
    source: str
    description: str
    domain: Domain = field(default_factory=Domain)
    params: tuple[Param, ...] = ()
    topology: str = "flat"
    lower_bound_exempt: str = ""
    extra_resources: str = ""
    serial: sp.Expr = NO_SERIAL
    host: sp.Expr = NO_HOST

    def __post_init__(self) -> None:
        if self.primitive not in PRIMITIVES:
            raise ValueError(f"{self.name}: unknown primitive {self.primitive!r}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"{self.name}: unknown topology {self.topology!r}")
        allowed = {p, n, alpha, beta, gamma} | {q.symbol for q in self.params}
        if self.topology == "hierarchical":
            allowed |= {alpha_intra, beta_intra, g, r}
        used = self.expr.free_symbols | self.serial.free_symbols
        extra = used - allowed | self.host.free_symbols - {n, p, *SYMBOLS}
        if extra:
            raise ValueError(f"{self.name}: expression has undeclared symbols {extra}")

    # ---------------------------------------------------------------- views
    @property
    def is_lower_bound(self) -> bool:
        return self.topology == "bound"

    def latex(self) -> str:
        """The formula as LaTeX (``T = ...``)."""
        return "T = " + sp.latex(self.expr + self.host)

    @cached_property
    def _args(self) -> tuple[sp.Symbol, ...]:
        base: tuple[sp.Symbol, ...] = (p, alpha, beta, gamma) + (SYMBOLS if self.host != 0 else ())
        if self.topology == "hierarchical":
            base += (alpha_intra, beta_intra, g, r)
        return base + tuple(q.symbol for q in self.params)

    @cached_property
    def _compiled(self) -> dict[str, CompiledExpr]:
        return {}

    def _derivative(self, sym: sp.Symbol) -> CompiledExpr:
        """d time / d ``sym``, compiled once (the derivative is only taken on the first call)."""
        return self._compiled.get(f"d/d{sym.name}") or self._compile(f"d/d{sym.name}", sp.diff(self.expr, sym))

    def _total(self) -> CompiledExpr:
        """The time without a token bucket: the formula plus its host buffers (one compiled expression)."""
        return self._compile("time", self.expr) if self.host == 0 else self._compile("total", self.expr + self.host)

    def _compile(self, key: str, expr: sp.Expr) -> CompiledExpr:
        c = self._compiled.get(key)
        if c is None:
            c = self._compiled[key] = compile_expr(expr, n, self._args)
        return c

    # ----------------------------------------------------------- evaluation
    def _prepare(self, n_: Any, p_: Any, env: Environment, params: Mapping[str, Any], out_of_domain: str
                 ) -> tuple[np.ndarray, np.ndarray, list[Any], np.ndarray | None, dict[str, Any]]:
        if not isinstance(env, (Environment, EnvironmentArray)):
            raise CommscopeError(
                f"env must be a costmodels.Environment or EnvironmentArray, got {type(env).__name__}"
            )
        if out_of_domain not in ("raise", "nan"):
            raise CommscopeError(f"out_of_domain must be 'raise' or 'nan', got {out_of_domain!r}")
        names = {q.name for q in self.params}
        unknown = sorted(set(params) - names)
        if unknown:
            allowed = ", ".join(sorted(names)) or "none"
            raise CommscopeError(f"{self.name} has no parameter {', '.join(unknown)}; its parameters: {allowed}")
        nb = as_bytes(n_)
        pr = as_ranks(p_)
        invalid: np.ndarray | None = None
        if self.domain.power_of_two:
            if out_of_domain == "raise":
                check_power_of_two(pr, self.name)
            else:
                invalid = (pr & (pr - 1)) != 0
        if self.domain.min_p > 1:
            low = pr < self.domain.min_p
            if np.any(low):
                if out_of_domain == "raise":
                    raise DomainError(
                        f"{self.name} needs p >= {self.domain.min_p}, got p={pr[low].flat[0]}"
                    )
                invalid = low if invalid is None else invalid | low
        values, link = self._env_values(pr, env, out_of_domain)
        if link.get("invalid") is not None:
            invalid = link["invalid"] if invalid is None else invalid | link["invalid"]
        args = [values[s] for s in self._args[: len(self._args) - len(self.params)]]
        args += [q.value(params.get(q.name), pr) for q in self.params]
        return nb, pr, args, invalid, link

    def _env_values(self, pr: np.ndarray, env: Environment, out_of_domain: str
                    ) -> tuple[dict[sp.Symbol, Any], dict[str, Any]]:
        """Values of the environment symbols for these p, and which link each one came from; each link's alpha and
        beta as this primitive's code path sees them (``Environment.primitive_factors``)."""
        vals, link = self._link_values(pr, env, out_of_domain)
        fa, fb = self._factors(env)
        if np.any(fa != 1.0) or np.any(fb != 1.0):
            for sym, f in ((alpha, fa), (alpha_intra, fa), (beta, fb), (beta_intra, fb)):
                if sym in vals:
                    vals[sym] = vals[sym] * f
        return vals, link

    def _factors(self, env: Environment | EnvironmentArray) -> tuple[Any, Any]:
        """(alpha factor, beta factor) of this primitive in ``env``: numbers, or arrays over an array's entries."""
        if isinstance(env, EnvironmentArray):
            value = env.descriptors.get("primitive_factors", ())
            if isinstance(value, np.ndarray):  # entries that differ: one factor each
                pairs = np.array([factors_of(v, self.primitive) for v in value.flat]).reshape(*value.shape, 2)
                return pairs[..., 0], pairs[..., 1]
            return factors_of(value, self.primitive)
        return factors_of(env.primitive_factors, self.primitive)

    def _link_values(self, pr: np.ndarray, env: Environment, out_of_domain: str
                     ) -> tuple[dict[sp.Symbol, Any], dict[str, Any]]:
        """Values of the environment symbols for these p, and which link each one came from."""
        vals: dict[sp.Symbol, Any] = {p: pr, gamma: env.gamma, **host_values(env)}
        link: dict[str, Any] = {}
        gp = env.gpus_per_node
        if self.topology == "hierarchical":
            ge = np.minimum(gp, pr)
            bad = (pr % ge) != 0
            if np.any(bad):
                if out_of_domain == "raise":
                    raise DomainError(
                        f"{self.name} needs p to be a multiple of gpus_per_node={gp} (or at most "
                        f"{gp}), got p={pr[bad].flat[0]}"
                    )
                link["invalid"] = bad
            ia = env.alpha if env.intra_alpha is None else env.intra_alpha
            ib = env.beta if env.intra_beta is None else env.intra_beta
            vals.update({alpha: env.alpha, beta: env.beta, alpha_intra: ia, beta_intra: ib,
                         g: ge, r: np.minimum(env.nics_per_node, ge)})
            return vals, link
        burst = np.asarray(getattr(env, "burst_bytes", 0.0), dtype=np.float64)
        shaped = self.topology == "flat" and bool(np.any(burst > 0))
        if not env.two_level:
            vals.update({alpha: env.alpha, beta: env.beta})
            link["intra_alpha"] = link["intra_beta"] = False
            if shaped:
                link["burst"] = burst
            return vals, link
        assert env.intra_alpha is not None and env.intra_beta is not None
        in_node = pr <= gp
        if self.topology == "bound":
            use_ia = in_node | (env.intra_alpha <= env.alpha)
            use_ib = in_node | (env.intra_beta <= env.beta)
        else:
            use_ia = use_ib = in_node
        vals[alpha] = np.where(use_ia, env.intra_alpha, env.alpha)
        vals[beta] = np.where(use_ib, env.intra_beta, env.beta)
        if np.ndim(vals[alpha]) == 0:
            vals[alpha], vals[beta] = float(vals[alpha]), float(vals[beta])
        link["intra_alpha"], link["intra_beta"] = use_ia, use_ib
        if shaped:  # the bucket shapes the inter-node link only
            link["burst"] = np.where(use_ib, 0.0, burst)
        return vals, link

    def _shaping(self, args: list[Any], link: Mapping[str, Any]
                 ) -> tuple[CompiledExpr, CompiledExpr, Any, Any, CompiledExpr] | None:
        """What :func:`.token_bucket_time` needs besides n, or None over links without a bucket."""
        if "burst" not in link:
            return None
        d_alpha, d_beta = self._derivative(alpha), self._derivative(beta)
        return (d_alpha, d_beta, args[self._args.index(beta)], link["burst"],
                self._compile("serial", self.serial))

    def time(self, n: Any, p: Any, env: Environment, *, out_of_domain: str = "raise",
             **params: Any) -> Any:
        """Predicted time in seconds; ``n`` (bytes) and ``p`` broadcast like numpy arrays.

        ``out_of_domain="nan"`` returns NaN where p is outside the domain instead of raising.
        Algorithm parameters (e.g. ``k`` servers) are keyword arguments.
        """
        nb, pr, args, invalid, link = self._prepare(n, p, env, params, out_of_domain)
        shaping = self._shaping(args, link)
        t = self._total()(nb, args) if shaping is None else token_bucket_time(  # host buffers after the bucket
            self._compile("time", self.expr)(nb, args), shaping[0](nb, args), shaping[1](nb, args), shaping[2],
            shaping[3], shaping[4](nb, args)) + (0.0 if self.host == 0 else self._compile("host", self.host)(nb, args))
        if invalid is not None and np.any(invalid):
            t = np.where(invalid, np.nan, t)
        shape = np.broadcast_shapes(nb.shape, pr.shape, *(np.shape(a) for a in args))
        if np.shape(t) != shape:  # a formula free of p (or n) still answers with the inputs' shape
            t = np.array(np.broadcast_to(t, shape), dtype=np.float64)
        return as_scalar_or_array(np.asarray(t, dtype=np.float64) if np.ndim(t) == 0 else t)

    def evaluator(self, p: Any, env: Environment | EnvironmentArray, *, out_of_domain: str = "raise",
                  **params: Any) -> Evaluator:
        """``time`` with p, the environment(s) and parameters fixed: a fast function of n alone.

        Everything that does not depend on n (validation, the environment's arrays, and for
        models affine in n the intercept A and slope B) is computed once, so each call is
        ``A + B n`` (NaN outside the domain with ``out_of_domain="nan"``). Shapes broadcast as in
        :meth:`time`; used by schedule sweeps, which price thousands of messages per configuration.
        The :class:`Evaluator` keeps those parts, so that a caller can price a large grid block by block.
        """
        _, pr, args, invalid, link = self._prepare(0.0, p, env, params, out_of_domain)
        shape = np.broadcast_shapes(pr.shape, *(np.shape(a) for a in args))
        shaping = self._shaping(args, link)
        if shaping is not None:
            compiled = self._compile("time", self.expr)
            host = None if self.host == 0 else self._compile("host", self.host)
            shape = np.broadcast_shapes(shape, np.shape(shaping[3]))
            bad = invalid if invalid is not None and np.any(invalid) else None
            if compiled.affine and shaping[0].affine and shaping[1].affine and shaping[4].affine:
                coefficients = [np.broadcast_to(np.asarray(v, dtype=np.float64), shape)
                                for c in (compiled, shaping[0], shaping[1], shaping[4]) for v in c.coefficients(args)]
                return Evaluator(shape, compiled, args, bad, shaped=shaping,
                                 affine_shaped=(*coefficients, shaping[2], shaping[3]), host=host)
            return Evaluator(shape, compiled, args, bad, shaped=shaping, host=host)
        compiled = self._total()
        if compiled.affine:
            a, b = (np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in compiled.coefficients(args))
            if invalid is not None and np.any(invalid):
                a = np.where(invalid, np.nan, a)
            return Evaluator(shape, compiled, args, None, a, b)
        return Evaluator(shape, compiled, args, invalid if invalid is not None and np.any(invalid) else None)

    def sensitivity(self, n: Any, p: Any, env: Environment, *, relative: bool = False,
                    **params: Any) -> dict[str, Any]:
        """d time / d parameter for each environment field (alpha, beta, gamma, intra_*; host_copy and
        host_fault where the algorithm has host buffers).

        With ``relative=True`` the elasticities ``(x / T) dT/dx``: the share of the time due to
        each parameter. Every model here is homogeneous of degree one in (alpha, beta, gamma, mu, phi),
        so the elasticities add up to 1 (Euler's theorem).
        """
        nb, pr, args, _, link = self._prepare(n, p, env, params, "raise")
        out: dict[str, Any] = {}
        pairs = [("alpha", alpha), ("beta", beta), ("gamma", gamma)]
        if self.topology == "hierarchical":
            pairs += [("intra_alpha", alpha_intra), ("intra_beta", beta_intra)]
        shape = np.broadcast_shapes(np.shape(nb), np.shape(pr))
        raw = {sym: np.asarray(self._derivative(sym)(nb, args), dtype=np.float64)
               * np.ones(shape) for _, sym in pairs}
        shaping = self._shaping(args, link)
        if shaping is not None:  # piecewise linear: the derivative of the branch of the minimum that binds
            t0 = self._compile("time", self.expr)(nb, args)
            steps, wire = raw[alpha], raw[beta]
            serial = shaping[4](nb, args)
            raw = {sym: token_bucket_gradient(t0, steps, wire, shaping[2], shaping[3], d, sym is beta, serial)
                   for sym, d in raw.items()}
        for field_name, sym in pairs:
            d = raw[sym]
            if self.topology != "hierarchical" and field_name in ("alpha", "beta") and env.two_level:
                use_intra = np.broadcast_to(link[f"intra_{field_name}"], d.shape)
                out[f"intra_{field_name}"] = np.where(use_intra, d, 0.0)
                d = np.where(use_intra, 0.0, d)
            out[field_name] = d
        if self.topology == "hierarchical" and not env.two_level:
            out["alpha"] = out["alpha"] + out.pop("intra_alpha")
            out["beta"] = out["beta"] + out.pop("intra_beta")
        for field_name, sym in zip(("host_copy", "host_fault"), SYMBOLS, strict=True):
            if sym in self.host.free_symbols:  # after the bucket: its derivative is the host expression's
                d_host = self._compile(f"host d/d{sym.name}", sp.diff(self.host, sym))(nb, args)
                out[field_name] = np.asarray(d_host, dtype=np.float64) * np.ones(shape)
        fa, fb = self._factors(env)  # d/d field = factor x d/d what the path sees
        out = {f: d * (fa if f.endswith("alpha") else fb if f.endswith("beta") else 1.0) for f, d in out.items()}
        if relative:
            t = np.asarray(self.time(nb, pr, env, **params), dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                out = {f: np.where(t > 0, d * getattr(env, f) / t, 0.0) for f, d in out.items()}
        return {f: as_scalar_or_array(v) for f, v in out.items()}

    def at(self, p_value: int, env: Environment, **params: Any) -> sp.Expr:
        """The expression as a function of n alone, for one p, environment and parameter set."""
        pr = as_ranks(p_value)
        if pr.ndim:
            raise CommscopeError(f"p must be a single integer here, got {p_value!r}")
        _, _, args, _, _ = self._prepare(0.0, pr, env, params, "raise")
        subs = {s: sp.Integer(int(v)) if s is p else sp.Float(float(v)) for s, v in zip(self._args, args, strict=True)}
        return (self.expr + self.host).subs(subs)
