"""Problem constants measured on real training (``commscope constants`` records) as the bounds take them.

A "constants" record (:mod:`runners.constants`; results-store kind "constants") holds, with how each was
measured and its value at every checkpoint of a short real training run:

- ``L``: the largest |eigenvalue| of the loss's Hessian by power iteration on Hessian-vector products, the
  maximum over the checkpoints (the bounds need ``||grad f(x) - grad f(y)|| <= L ||x - y||`` everywhere);
- ``sigma``: one worker's mini-batch gradient noise, ``E||g_i - grad f_i||^2 <= sigma^2``
  (:mod:`convergence.symbols`), at the record's per-worker batch B. It is derived from the per-sample
  variance ``sigma_1^2`` as ``sigma^2 = sigma_1^2 / B (m - B) / (m - 1)`` (a batch of B drawn without
  replacement from a shard of m samples; Cochran, Sampling Techniques, Thm 2.2), so another batch size B'
  rescales it the same way (``batch_size=``);
- ``zeta``: ``zeta^2 = (1/n) sum_i ||grad f_i - grad f||^2`` across the workers' real shards;
- ``Delta = f(x_0) - f*``, with f* the data set's known optimum where it has one, else 0 (an upper bound);
- per compressor, its measured ``delta`` (contraction) or ``omega`` (variance) beside its worst case.

:func:`constants_from_records` gives the mapping ``convergence.time_to_accuracy(..., **constants)`` takes
(L, sigma, Delta, zeta); :func:`compressor_constants_from_records` the compressors' delta / omega, which
time to accuracy sets per algorithm; ``sigma1`` (signSGD's bound) comes from :func:`sign_constants_from_records`.
By default sigma^2, zeta^2, Delta and the compressors' constants are the means over checkpoints (the noise a
run meets on average); ``worst=True`` takes the largest sigma^2, zeta^2 and omega and the smallest delta seen.
Several records (seeds, repetitions) are combined: L and, with ``worst``, everything else by the worst
value, otherwise by the mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from costmodels.errors import CommscopeError

KIND = "constants"


def _records(records: Iterable[Mapping[str, Any]], model: str | None) -> list[Mapping[str, Any]]:
    if isinstance(records, Mapping):
        raise CommscopeError("records must be a list of record dicts (results.load(path).records), not one dict")
    picked = [r for r in records if isinstance(r, Mapping) and r.get("kind") == KIND]
    if model is not None:
        picked = [r for r in picked if r["config"].get("model") == model]
    if not picked:
        where = f" of model {model!r}" if model is not None else ""
        raise CommscopeError(f"no '{KIND}' records{where} among the records given (commscope constants writes them)")
    models = sorted({str(r["config"].get("model")) for r in picked})
    if len(models) > 1:
        raise CommscopeError(f"the records measure several models ({', '.join(models)}); choose one with model=")
    return picked


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise CommscopeError(f"a constants record has no usable {what} (got {value!r})")
    return float(value)


def _per_batch(sigma: Mapping[str, Any], batch_size: int | None, worst: bool) -> float:
    """sigma^2 per worker batch: the record's, or its per-sample variance rescaled to ``batch_size``."""
    if batch_size is None:
        return _number(sigma["sigma2_max" if worst else "sigma2"], "sigma^2")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise CommscopeError(f"batch_size must be a positive integer (samples per worker), got {batch_size!r}")
    per_sample = _number(sigma["sigma2_per_sample_max" if worst else "sigma2_per_sample"], "per-sample sigma^2")
    m = int(sigma["shard_size"])
    return per_sample / batch_size * max(0, m - batch_size) / (m - 1) if m > 1 else 0.0


def _combine(values: list[float], worst: bool) -> float:
    return max(values) if worst else sum(values) / len(values)


def constants_from_records(records: Iterable[Mapping[str, Any]], batch_size: int | None = None, worst: bool = False,
                           model: str | None = None) -> dict[str, float]:
    """``{"L", "sigma", "Delta", "zeta"}`` from "constants" records (other kinds are skipped), for
    ``time_to_accuracy(..., **constants)``. ``batch_size``: the per-worker batch sigma is wanted at (default:
    the measured one); ``worst``: the largest sigma^2 and zeta^2 seen instead of their means over checkpoints;
    ``model``: use only that model's records (needed when the records measure several)."""
    recs = _records(records, model)
    res = [r["result"] for r in recs]
    sigma2 = [_per_batch(x["sigma"], batch_size, worst) for x in res]
    zeta2 = [_number(x["zeta"]["zeta2_max" if worst else "zeta2"], "zeta^2") for x in res]
    return {"L": max(_number(x["L"]["value"], "L") for x in res),
            "sigma": math.sqrt(_combine(sigma2, worst)),
            "Delta": _combine([_number(x["Delta"]["value"], "Delta") for x in res], worst),
            "zeta": math.sqrt(_combine(zeta2, worst))}


def compressor_constants_from_records(records: Iterable[Mapping[str, Any]], worst: bool = False,
                                      model: str | None = None) -> dict[str, dict[str, Any]]:
    """Per compressor spec (``"topk:0.01"``): ``{"delta" or "omega": measured, "worst_case": the definition's,
    "constant": which}`` (mean over checkpoints, or with ``worst`` the smallest delta / largest omega seen);
    random-k also gives ``"omega"`` of its unbiased (d/k) form. Compressors without a constant (signsgd) are
    left out."""
    out: dict[str, dict[str, Any]] = {}
    gathered: dict[str, list[Mapping[str, Any]]] = {}
    for r in _records(records, model):
        for label, entry in r["result"]["compressors"].items():
            if entry.get("constant"):
                gathered.setdefault(label, []).append(entry)
    for label, entries in gathered.items():
        which = entries[0]["constant"]
        key = "worst_measured" if worst else "value"
        values = [_number(e[key], f"{which} of {label}") for e in entries]
        pick = (min if worst else lambda v: sum(v) / len(v)) if which == "delta" else (
            max if worst else lambda v: sum(v) / len(v))
        item: dict[str, Any] = {which: pick(values), "worst_case": entries[0]["worst_case"], "constant": which}
        if "unbiased" in entries[0]:
            unbiased = [_number(e["unbiased"][key], f"omega of {label}") for e in entries]
            item["omega"] = max(unbiased) if worst else sum(unbiased) / len(unbiased)
            item["omega_worst_case"] = entries[0]["unbiased"]["worst_case"]
        out[label] = item
    return out


def sign_constants_from_records(records: Iterable[Mapping[str, Any]], model: str | None = None) -> dict[str, float]:
    """``{"sigma1"}`` for signSGD's bound (``time_to_accuracy(..., algorithms=["signsgd"], sigma1=...)``), at
    the measured per-worker batch."""
    values = [_number(r["result"]["sigma1"]["value"], "sigma1") for r in _records(records, model)
              if isinstance(r["result"].get("sigma1"), Mapping)]
    if not values:
        raise CommscopeError("the constants records hold no sigma1")
    return {"sigma1": sum(values) / len(values)}
