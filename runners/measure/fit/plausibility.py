"""Plausibility guards of a fit, and of a prediction made with it: warnings that each name the number.

One function, :func:`plausibility`, for every place that shows a fit or predicts with one (``commscope fit``, the
predict commands, the app). It takes a :class:`FitResult` or an environment carrying a fit's metadata (an
environment without one, such as a preset, gives no warnings) and, optionally, the sizes and p it is used at:

- **faster than the link**: the fitted bandwidth (1/beta) above the link's configured rate (an emulated link's
  rate with its framing, from the records' network spec) or a nominal rate the caller gives;
- **poor fit**: an RMS relative error above :data:`RMS_LIMIT` (15%);
- **undetermined parameter**: a fitted parameter whose 95% confidence interval includes zero;
- **far from the data**: sizes more than :data:`FAR_SIZES` times outside the sizes measured, or p more than
  :data:`FAR_P` times outside the p measured;
- **past gloo's fresh buffers**: a gloo fit whose records end below :data:`FRESH_MAPPING_BYTES` (32 MiB) used at
  that size or more, where PyTorch's gloo ``all_gather`` and ``reduce_scatter`` start to map and first-touch a
  buffer of the message's size on every call, which the fit has not seen; the model prices the reduce-scatter's
  where the environment carries a measured ``host_fault`` (:mod:`costmodels.collectives.host_buffers`), the
  all-gather's never (``bench/bench_fresh_buffers.py`` says why and measures it).

    >>> from runners.measure.fit.plausibility import plausibility
    >>> for line in plausibility(env, sizes=[2**10, 2**30], p=[64]):   # doctest: +SKIP
    ...     print("warning:", line)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import costmodels as cm

from .result import FitResult
from .selection import WIRE_TOLERANCE

RMS_LIMIT = 0.15  # a fit that misses its own measurements by more than this (RMS) is flagged
FAR_SIZES = 10.0  # sizes more than a decade outside the measured ones
FAR_P = 4.0  # p more than 4x outside the measured ones
_PARAMS = ("alpha", "beta", "gamma", "intra_alpha", "intra_beta")
#: glibc's ceiling on its dynamic mmap threshold on 64-bit, DEFAULT_MMAP_THRESHOLD_MAX = 4 MiB x sizeof(long)
#: (malloc.c since 2006-08-22; mallopt(3), M_MMAP_THRESHOLD): a freed block of at most this size raises the
#: threshold to its own, so later allocations of that size come from the heap (here after 8-9 calls); from this
#: size on, every allocation is a fresh mapping whose pages the kernel zeroes at their first touch. PyTorch's gloo
#: allocates one of the message's size per all_gather (the flat output) and reduce_scatter (the input's clone) call
#: (ProcessGroupGloo.cpp). Measured here (bench/results/bench_fresh_buffers.json): a copy into a fresh buffer of
#: 32 MiB or more 0.46-0.52 ns/B against 0.06-0.08 reused, 31 MiB fresh 0.06-0.08: the step exactly at 32 MiB.
FRESH_MAPPING_BYTES = 32 * 2**20


@dataclass(frozen=True)
class FitFacts:
    """What the guards read of a fit: its name, per-parameter value / status / 95% CI, RMS relative error, the
    sizes (bytes) and p it was measured on, and the records' network spec."""

    name: str
    beta: float
    parameters: Mapping[str, Mapping[str, Any]]
    rms_rel_error: float | None
    sizes: tuple[float, float] | None
    p: tuple[int, ...]
    network: Mapping[str, Any] | None
    library: str | None = None
    host_fault: float = 0.0


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def facts(source: FitResult | cm.Environment | None) -> FitFacts | None:
    """The :class:`FitFacts` of a fit result or of an environment with a fit's metadata; None for an environment
    that was not fitted (no ``metadata["parameters"]``)."""
    if isinstance(source, FitResult):
        sizes = [float(r["bytes"]) for r in source.residuals]
        return FitFacts(source.environment.name, float(source.environment.beta),
                        {k: v.to_dict() for k, v in source.parameters.items()}, source.rms_rel_error,
                        (min(sizes), max(sizes)) if sizes else None, tuple(int(p) for p in source.world_sizes),
                        source.network if isinstance(source.network, Mapping) else None,
                        getattr(source.environment, "library", None), source.environment.host_fault)
    if not isinstance(source, cm.Environment):
        return None
    meta = source.metadata if isinstance(source.metadata, Mapping) else {}
    params = meta.get("parameters")
    if not isinstance(params, Mapping) or not params:
        return None
    rng = meta.get("bytes_range")
    sizes = (float(rng[0]), float(rng[1])) if (isinstance(rng, (list, tuple)) and len(rng) == 2
                                               and all(_num(x) for x in rng)) else None
    ps = tuple(int(p) for p in meta.get("world_sizes") or () if _num(p))
    net = meta.get("network")
    return FitFacts(source.name, float(source.beta), {k: v for k, v in params.items() if isinstance(v, Mapping)},
                    _num(meta.get("rms_rel_error")), sizes, ps, net if isinstance(net, Mapping) else None,
                    source.library, source.host_fault)


def _link_beta(network: Mapping[str, Any] | None) -> tuple[float, str] | None:
    """The configured link's seconds per byte (framing included where the spec says) and what it is."""
    if not network:
        return None
    burst = ((network.get("qdisc") or {}).get("tbf") or {}).get("burst_bytes")
    bucket = f"; its token bucket of {burst:,} B lets bursts through faster" if _num(burst) else ""
    wire, bps = _num(network.get("expected_beta_s_per_byte")), _num(network.get("rate_bps"))
    if wire and wire > 0:
        return wire, f"the link's configured rate ({network.get('rate', '?')}, framing included{bucket})"
    if bps and bps > 0:
        return 8.0 / bps, f"the link's configured rate ({network.get('rate', '?')}{bucket})"
    return None


def _rate(beta: float) -> str:
    return f"{1 / beta / 1e9:.4g} GB/s"


def _scaled(name: str, v: float) -> str:
    return f"{v * 1e6:.4g} us" if name.endswith("alpha") else f"{v * 1e9:.4g} ns/B"


def fit_warnings(source: FitResult | cm.Environment | None, *, nominal_beta: float | None = None) -> list[str]:
    """The guards on the fit itself: faster than the link, RMS error above 15%, a 95% CI that includes zero.

    ``nominal_beta``: a nominal seconds per byte of the link (a NIC's rate) to hold the fit to, beside the
    configured rate of an emulated link that the records name."""
    f = facts(source)
    if f is None:
        return []
    out = []
    links = [x for x in (_link_beta(f.network),
                         (nominal_beta, "the link's nominal rate") if nominal_beta and nominal_beta > 0 else None) if x]
    for wire, what in links:
        if f.beta < WIRE_TOLERANCE * wire:
            out.append(f"fitted bandwidth {_rate(f.beta)} (beta {f.beta * 1e9:.4g} ns/B) is {wire / f.beta:.2f}x "
                       f"{what}: {_rate(wire)}, faster than the wire")
    if f.rms_rel_error is not None and f.rms_rel_error > RMS_LIMIT:
        out.append(f"RMS relative error {f.rms_rel_error:.1%} is above {RMS_LIMIT:.0%}: the model misses the "
                   "measurements it was fitted to")
    for name in _PARAMS:
        prm = f.parameters.get(name)
        if not prm or prm.get("status") != "fitted":
            continue
        ci = prm.get("ci95")
        if isinstance(ci, (list, tuple)) and len(ci) == 2 and _num(ci[0]) is not None and _num(ci[1]) is not None \
                and ci[0] <= 0.0 <= ci[1]:
            out.append(f"{name}'s 95% confidence interval [{_scaled(name, ci[0])}, {_scaled(name, ci[1])}] includes "
                       f"zero: the measurements do not tell {name} from 0")
    return out


def _values(x: Any) -> list[float]:
    if x is None:
        return []
    items = x if isinstance(x, Iterable) and not isinstance(x, (str, bytes)) else [x]
    return [float(v) for v in items if _num(v) is not None and float(v) > 0]


def use_warnings(source: FitResult | cm.Environment | None, *, sizes: Any = None, p: Any = None,
                 measured_sizes: tuple[float, float] | None = None) -> list[str]:
    """The guard on using a fit: sizes (bytes) or p far outside those it was measured on.

    ``measured_sizes`` (smallest, largest) stands in where the fit's metadata lacks them (fits made before
    ``bytes_range`` was recorded)."""
    f = facts(source)
    if f is None:
        return []
    out = []
    have = measured_sizes or f.sizes
    used = _values(sizes)
    if have and used:
        lo, hi = min(used), max(used)
        if hi > FAR_SIZES * have[1]:
            out.append(f"used at sizes up to {cm.format_size(hi)}, {hi / have[1]:.3g}x the largest size it was "
                       f"measured on ({cm.format_size(have[1])}): far outside the fit")
        if lo * FAR_SIZES < have[0]:
            out.append(f"used at sizes down to {cm.format_size(lo)}, 1/{have[0] / lo:.3g} of the smallest size it "
                       f"was measured on ({cm.format_size(have[0])}): far outside the fit")
    if f.library == "gloo" and used and max(used) >= FRESH_MAPPING_BYTES and have and have[1] < FRESH_MAPPING_BYTES:
        start = f"used at sizes up to {cm.format_size(max(used))}: from {cm.format_size(FRESH_MAPPING_BYTES)} on, "
        every = "a fresh buffer of the message's size on every call (glibc's mmap threshold stops rising there), "
        measured = ("slower where the wire does not hide the host's work (measured 1.14-1.25x per byte at 2.5 "
                    "Gbit/s, 1.01-1.02x at 200 Mbit/s)")
        if f.host_fault > 0:  # the reduce-scatter's clone is priced (host_buffers.py); the all-gather's output not
            out.append(start + "PyTorch's gloo all_gather gathers into " + every + "whose page faults overlap its "
                       "receives and are not priced (reduce_scatter's fresh clone is, at the measured host_fault): "
                       "expect all_gather " + measured)
        else:
            out.append(start + "PyTorch's gloo all_gather and reduce_scatter map and first-touch " + every +
                       f"which this fit's records (up to {cm.format_size(have[1])}) do not show and which this "
                       "environment does not price (no host_fault: 'commscope bench host-buffers', then 'commscope "
                       "fit --host-buffers'): expect those two " + measured)
    ps = [q for q in _values(p) if q >= 2]
    if f.p and ps:
        hi_p, lo_p = max(ps), min(ps)
        measured = ", ".join(map(str, f.p))
        if hi_p > FAR_P * max(f.p):
            out.append(f"used at p = {hi_p:g}, {hi_p / max(f.p):.3g}x the largest p it was measured on "
                       f"({measured}): far outside the fit")
        if lo_p * FAR_P < min(f.p):
            out.append(f"used at p = {lo_p:g}, 1/{min(f.p) / lo_p:.3g} of the smallest p it was measured on "
                       f"({measured}): far outside the fit")
    return out


def plausibility(source: FitResult | cm.Environment | None, *, sizes: Any = None, p: Any = None,
                 nominal_beta: float | None = None, measured_sizes: tuple[float, float] | None = None) -> list[str]:
    """Every guard (:func:`fit_warnings`, then :func:`use_warnings`) as one list of one-line warnings; empty for a
    plausible fit used where it was measured, and for an environment that was not fitted."""
    return (fit_warnings(source, nominal_beta=nominal_beta)
            + use_warnings(source, sizes=sizes, p=p, measured_sizes=measured_sizes))
