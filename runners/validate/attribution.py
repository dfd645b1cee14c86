"""Which term of the model accounts for a cell's error: each term's share of the predicted iteration time, and the
change of the largest one that would close the gap to the measurement.

A term's contribution is what the prediction loses when the term is switched off, everything else equal:

    S_k = T(env) - T(env with term group k at zero)

for the groups latency (alpha, intra_alpha), bandwidth (beta, intra_beta, gamma; "zero" is 1e-30 s/B since
an environment needs a positive beta), interference (kappa_c, kappa_m) and overhead (host_overhead). The
gap r = measured - predicted is then attributed to the group with the largest contribution, with the
relative change r / S_k of that contribution that would close it: "bandwidth +18%" reads "the bandwidth
term would have to cost 18% more". A gap larger than every contribution (|r| > max S_k) is not a wrong
coefficient of one term: it is named "missing term" (compute or a cost the model does not have).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from costmodels.errors import CommscopeError

GROUPS: Mapping[str, tuple[str, ...]] = {
    "latency": ("alpha", "intra_alpha"),
    "bandwidth": ("beta", "intra_beta", "gamma"),
    "interference": ("kappa_c", "kappa_m"),
    "overhead": ("host_overhead",),
}
TINY_BETA = 1e-30  # "no bandwidth cost": Environment needs beta > 0


def _without(env: Any, group: str) -> Any:
    changes: dict[str, float] = {}
    for name in GROUPS[group]:
        value = getattr(env, name, None)
        if value is None:
            continue
        changes[name] = TINY_BETA if name in ("beta", "intra_beta") else 0.0
    return dataclasses.replace(env, **changes)


def contributions(technique: str, options: Mapping[str, Any], profile: Any, env: Any, p: int) -> dict[str, float]:
    """Seconds of the predicted iteration each term group accounts for (``S_k`` above), and ``total``."""
    from runners.training.pricing import predict

    total = predict(technique, options, profile, env, p)[0]
    out = {"total": total}
    for group in GROUPS:
        try:
            out[group] = total - predict(technique, options, profile, _without(env, group), p)[0]
        except CommscopeError:
            out[group] = math.nan
    return out


def attribute(measured_s: float, contrib: Mapping[str, float]) -> dict[str, Any]:
    """The term that accounts for the gap between ``measured_s`` and ``contrib['total']``.

    Returns ``term`` (a group, or "missing term" when the gap exceeds every contribution), ``change`` (the
    relative change of that term's contribution that closes the gap; None when no term contributes) and
    ``gap_s``.
    """
    gap = measured_s - contrib["total"]
    groups = {g: s for g, s in contrib.items() if g != "total" and math.isfinite(s) and s > 0}
    if not groups:  # nothing in the model costs time beyond compute: the gap is a term it lacks
        return {"term": "missing term", "change": None, "gap_s": gap}
    term, size = max(groups.items(), key=lambda kv: kv[1])
    if abs(gap) > size:  # more than doubling or removing the largest term: not one term's coefficient
        return {"term": "missing term", "change": gap / size, "gap_s": gap}
    return {"term": term, "change": gap / size, "gap_s": gap}
