"""The "constants" record's result: the checkpoints' measurements (every rank's) turned into the constants
the convergence bounds take, each with how it was measured, its value per checkpoint and the value used.

Values used (:func:`convergence.measured_constants.constants_from_records` reads them): L the maximum over
the checkpoints of the power iteration's |eigenvalue| (the bounds need the supremum; a larger secant, every
estimate being a lower bound on L, replaces it); sigma^2 and zeta^2
the mean over the checkpoints (the noise and heterogeneity a run meets on average; their maxima beside);
Delta = f(x_0) - f* with f* the data set's known optimal loss where it has one, else 0 (cross-entropy is
>= 0, so Delta is then an upper bound); each compressor's delta / omega the mean over checkpoints, ranks and
gradients, with the worst measured value (min delta, max omega) beside.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .compressors import NO_CONSTANT, constant_of, worst_case
from .noise import per_batch, per_sample_from_batch

Ranks = Sequence[dict[str, Any]]  # one checkpoint: every rank's measurement, in rank order


def mean_of(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def max_of(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def smoothness(points: Sequence[Ranks], between: Sequence[float | None]) -> dict[str, Any]:
    power = [r[0].get("power") for r in points]
    local = [r[0]["secant_local"] for r in points]
    iterated = max_of([p["abs"] for p in power if p])
    secants = max_of([*local, *between])
    value = max_of([iterated, secants])
    if iterated is None:
        used = "max secant (the power iteration failed): a lower bound on L"
    elif secants is not None and secants > iterated:
        used = ("max secant, above the power iteration's max |eigenvalue| (not converged, or steeper between "
                "points): every estimate is a lower bound on L, so the largest is used")
    else:
        used = "max over checkpoints of the power iteration's |eigenvalue|"
    negative = [r[0]["step"] for r, p in zip(points, power, strict=True) if p and p["rayleigh"] < 0]
    return {
        "value": value, "used": used,
        "method": "power iteration on Hessian-vector products (double backward) of the global loss on "
                  "hvp_samples samples per shard; secants along the full-gradient step and between checkpoints",
        "power": [p["abs"] if p else None for p in power], "rayleigh": [p["rayleigh"] if p else None for p in power],
        "iterations": [p["iterations"] if p else None for p in power],
        "converged": [p["converged"] if p else None for p in power],
        "secant_local": local, "secant_between": list(between),
        "note": (f"the largest-magnitude curvature is negative at step(s) {negative}: f is not convex there, "
                 "L bounds |curvature|" if negative else "")}


def noise(points: Sequence[Ranks], batch: int, shard: int) -> dict[str, Any]:
    sample = [mean_of([r.get("sigma2_sample") for r in ranks]) for ranks in points]
    measured = [mean_of([r["sigma2_batch_measured"] for r in ranks]) for ranks in points]
    per_sample = all(x is not None for x in sample)
    if not per_sample:  # BatchNorm, or per-sample gradients failed: the measured batches give it
        sample = [per_sample_from_batch(x, batch, shard) for x in measured]
    from_sample = [None if x is None or not per_sample else per_batch(x, batch, shard) for x in sample]
    used = from_sample if per_sample else measured
    s2 = mean_of(used) or 0.0
    return {
        "value": math.sqrt(s2), "sigma2": s2, "sigma2_max": max_of(used) or 0.0, "batch_size": batch,
        "per_sample_measured": per_sample,
        "shard_size": shard, "sigma2_per_sample": mean_of(sample), "sigma2_per_sample_max": max_of(sample),
        "per_sample": sample, "per_batch_from_sample": from_sample, "per_batch_measured": measured,
        "method": ("per-sample gradients (torch.func) on noise_samples samples per shard: sigma_1^2 = mean "
                   "||grad l_s - grad f_i||^2; per batch sigma^2 = sigma_1^2 / B (m - B) / (m - 1)" if per_sample
                   else "mean ||g_B - grad f_i||^2 over draws mini-batches per shard; per sample = that x B (m - 1)"
                   " / (m - B)"),
        "used": "sigma = sqrt(mean over checkpoints and ranks of the per-worker-batch sigma^2) at batch_size "
                "(the bounds' sigma: one worker's stochastic gradient)"}


def heterogeneity(points: Sequence[Ranks], world: int) -> dict[str, Any]:
    z = [ranks[0]["zeta"] for ranks in points]
    zeta2 = [x["zeta2"] for x in z]
    z2 = mean_of(zeta2) or 0.0
    return {"value": math.sqrt(z2), "zeta2": z2, "zeta2_max": max_of(zeta2) or 0.0,
            "per_checkpoint": zeta2, "raw": [x["raw"] for x in z], "bias": [x["bias"] for x in z],
            "method": "(1/N) sum_i ||grad f_i - grad f||^2 over the N ranks' shards (zoo.shard, as training "
                      "shards them), less the bias of shard gradients estimated on part of a shard",
            "used": "zeta = sqrt(mean over checkpoints)",
            "note": "one rank: one shard, so zeta = 0 by definition" if world == 1 else ""}


def gap(points: Sequence[Ranks], optimal: float | None) -> dict[str, Any]:
    losses = [ranks[0]["loss"] for ranks in points]
    f0, lowest = losses[0], min(losses)
    f_star, how = (optimal, "the data set's known optimal loss (its generator's entropy)") if optimal is not None else (
        0.0, "cross-entropy >= 0, so Delta = f(x0) - 0 is an upper bound")
    return {"value": max(0.0, f0 - f_star), "f0": f0, "f_star": f_star, "f_star_method": how,
            "estimates": {"zero": f0, "known": None if optimal is None else f0 - optimal, "lowest": f0 - lowest},
            "note": "'lowest' uses the lowest loss of this short run, so it underestimates Delta"}


def _pick(values: Sequence[float | None], which: str, worst: bool) -> float | None:
    vals = [x for x in values if x is not None]
    if not vals:
        return None
    if not worst:
        ratio = sum(vals) / len(vals)
    else:
        ratio = max(vals)  # the largest error: min delta, max omega
    return 1 - ratio if which == "delta" else ratio


def _flat(points: Sequence[Ranks], label: str, key: str) -> list[list[float | None]]:
    """Per checkpoint, every rank's and gradient's ratios under ``key``."""
    return [[x for r in ranks for x in r["compressors"][label].get(key, [])] for ranks in points]


def _tensor_ratios(points: Sequence[Ranks], label: str, key: str, j: int) -> list[float | None]:
    return [x for ranks in points for r in ranks for x in r["compressors"][label][key][j]]


def compressor(points: Sequence[Ranks], label: str, tensors: list[tuple[str, int, tuple[int, ...]]]
               ) -> dict[str, Any]:
    name = label.split(":")[0]
    which = constant_of(name)
    if which is None:
        return {"constant": None, "value": None, "worst_case": None, "note": NO_CONSTANT}
    wc = worst_case(label, tensors)
    out: dict[str, Any] = {}
    for prefix, const in (("", which), ("scaled_", "omega")):
        if prefix and name != "randomk":
            continue
        per_ckpt = _flat(points, label, prefix + "overall")
        every = [x for c in per_ckpt for x in c]
        per_tensor = [{"name": n, "elements": d, "measured": _pick(_tensor_ratios(points, label, prefix + "tensors", j),
                                                                    const, False),
                       "worst_case": wc[prefix + "tensors"][j]} for j, (n, d, _) in enumerate(tensors)]
        measured_tensors = [t["measured"] for t in per_tensor if t["measured"] is not None]
        entry = {"constant": const, "value": _pick(every, const, False), "worst_measured": _pick(every, const, True),
                 "worst_case": wc[prefix + "overall"],
                 "per_checkpoint": [_pick(c, const, False) for c in per_ckpt],
                 "tensor_extreme": (min if const == "delta" else max)(measured_tensors) if measured_tensors else None,
                 "tensors": per_tensor}
        if prefix:
            entry["note"] = "the unbiased rand-k (d/k) C(g), which the runner does not send"
            out["unbiased"] = entry
        else:
            out.update(entry)
    return out
