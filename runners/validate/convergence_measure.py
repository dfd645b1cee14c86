"""Measured time to accuracy from "convergence" records: the first evaluation at the target, per run; censoring;
statistics over seeds; ratios to SGD; rankings and Kendall's tau.

A run's **time to target** is the wall clock (``time_s`` of the convergence record: seconds since its training
began, evaluations included) of its first evaluation at or below the target test loss *and* at or above the
target test accuracy; its **steps to target** the step of that evaluation. Each target is also found on its own.
A run that never gets there within its step budget is **censored**: it has no time, only the lower bound "more
than the wall clock of its last evaluation" (survival analysis' right-censoring). Over seeds, the median counts a
censored run as +inf (Kaplan & Meier's median where under half are censored), so a median exists while more than
half the seeds reached the target, and is censored otherwise; the spread is min..max over the seeds that reached.

Kendall's tau (tau-b, ties counted: Kendall, 'The treatment of ties in ranking problems', Biometrika 33, 1945;
``scipy.stats.kendalltau``) compares the predicted and measured orders.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

WHATS = ("both", "loss", "accuracy")


@dataclass(frozen=True)
class Target:
    """Test loss at or below ``loss`` and test accuracy at or above ``accuracy``."""

    loss: float
    accuracy: float

    def met(self, point: Mapping[str, Any], what: str = "both") -> bool:
        """Whether one evaluation meets the target (``what``: both, loss or accuracy); the training loss stands in
        for the test loss of a model without a test split, and a point without an accuracy never meets it."""
        loss = point.get("test_loss", point.get("loss"))
        acc = point.get("accuracy")
        ok_loss = loss is not None and math.isfinite(loss) and loss <= self.loss
        ok_acc = acc is not None and math.isfinite(acc) and acc >= self.accuracy
        return {"both": ok_loss and ok_acc, "loss": ok_loss, "accuracy": ok_acc}[what]


def curves(records: Iterable[Mapping[str, Any]], label_of: Mapping[str, str]) -> dict[tuple[str, int], list[dict]]:
    """Every run's evaluations, by (label, seed), sorted by step. ``label_of`` maps a technique to its label in the
    report (``fusion`` -> ``sgd``); convergence records of other techniques are left out."""
    out: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        if r.get("kind") != "convergence":
            continue
        cfg = r["config"]
        label = label_of.get(cfg["algorithm"])
        if label is None:
            continue
        out.setdefault((label, int(cfg.get("seed", 0))), []).append(dict(r["result"]))
    return {k: sorted(v, key=lambda p: p["step"]) for k, v in out.items()}


def reach(points: Sequence[Mapping[str, Any]], target: Target) -> dict[str, Any]:
    """One run against the target: per ``what`` (both, loss, accuracy) the step and wall clock of the first
    evaluation that meets it, or None (censored); with the run's last step, its wall clock and final values. A run
    that diverged (its last record says ``diverged``: the step its loss stopped being finite) before meeting the
    target is censored at that step, with no final loss."""
    if not points:
        raise ValueError("a run without evaluations")
    last = points[-1]
    diverged = bool(last.get("diverged"))
    out: dict[str, Any] = {"last_step": int(last["step"]), "last_time_s": float(last["time_s"]),
                           "final_loss": None if diverged else last.get("test_loss", last.get("loss")),
                           "final_accuracy": last.get("accuracy"),
                           "best_accuracy": max((p["accuracy"] for p in points if p.get("accuracy") is not None),
                                                default=None),
                           "seconds_per_step": float(last["time_s"]) / last["step"] if last["step"] else None,
                           "diverged": diverged}
    evaluated = [p for p in points if not p.get("diverged")]  # a divergence record meets no target
    for what in WHATS:
        hit = next((p for p in evaluated if target.met(p, what)), None)
        out[what] = None if hit is None else {"step": int(hit["step"]), "time_s": float(hit["time_s"])}
    out["reached"] = out["both"] is not None
    return out


def censored_median(values: Sequence[float | None]) -> float | None:
    """The median with None (censored) counted as +inf; None when the median itself is censored or nothing given."""
    if not values:
        return None
    xs = sorted(math.inf if v is None else float(v) for v in values)
    n = len(xs)
    m = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return m if math.isfinite(m) else None


def over_seeds(runs: Sequence[Mapping[str, Any]], what: str = "both", key: str = "time_s") -> dict[str, Any]:
    """Median (censored median), min, max and relative spread ((max - min) / median) of ``key`` (time_s or step)
    over seeds; ``reached``/``n`` counts the seeds; ``at_least``: for a censored median, the largest last value
    of a censored run (it took longer than that)."""
    values = [None if r[what] is None else float(r[what][key]) for r in runs]
    got = [v for v in values if v is not None]
    med = censored_median(values)
    last = "last_time_s" if key == "time_s" else "last_step"
    return {"n": len(values), "reached": len(got), "median": med, "min": min(got) if got else None,
            "max": max(got) if got else None, "values": values,
            "spread": (max(got) - min(got)) / med if med and len(got) > 1 else None,
            "at_least": None if med is not None or not runs else max(float(r[last]) for r in runs if r[what] is None)}


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference`` where both exist and the reference is > 0."""
    if value is None or reference is None or not reference > 0 or not math.isfinite(value):
        return None
    return float(value) / float(reference)


def within(predicted: float | None, measured: float | None, factor: float = 2.0) -> bool | None:
    """Whether ``predicted`` is within ``factor`` of ``measured`` (1/factor <= predicted / measured <= factor);
    None when either is missing."""
    if predicted is None or measured is None or not (predicted > 0 and measured > 0):
        return None
    return bool(1 / factor <= predicted / measured <= factor)


def ranking(values: Mapping[str, float | None]) -> dict[str, float]:
    """Rank 1 = fastest; equal values share their mean rank; None (censored or undefined) ranks after every value,
    all such tied."""
    from scipy.stats import rankdata

    labels = list(values)
    xs = np.array([math.inf if values[k] is None else float(values[k]) for k in labels])  # type: ignore[arg-type]
    return {k: float(r) for k, r in zip(labels, rankdata(xs, method="average"), strict=True)}


def kendall_tau(a: Mapping[str, float | None], b: Mapping[str, float | None]) -> dict[str, Any]:
    """Kendall's tau-b between two orders over the labels both have (None in ``a`` or ``b`` ranks last, tied:
    a censored measurement is slower than every measured one); ``n`` the labels compared. tau is None with fewer
    than two labels or when one side is all ties."""
    from scipy.stats import kendalltau

    common = [k for k in a if k in b]
    if len(common) < 2:
        return {"tau": None, "p_value": None, "n": len(common), "labels": common}
    ra, rb = ranking({k: a[k] for k in common}), ranking({k: b[k] for k in common})
    res = kendalltau([ra[k] for k in common], [rb[k] for k in common])
    tau = float(res.statistic) if math.isfinite(res.statistic) else None
    p = float(res.pvalue) if math.isfinite(res.pvalue) else None
    return {"tau": tau, "p_value": p, "n": len(common), "labels": common}


def seconds_per_step(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """The median over seeds of a run's wall clock per step (its last evaluation's time / its step): what one step
    costs in the same terms as the measured time to target, evaluations included."""
    xs = [r["seconds_per_step"] for r in runs if r.get("seconds_per_step")]
    return float(np.median(xs)) if xs else None
