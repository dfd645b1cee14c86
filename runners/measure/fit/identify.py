"""Which parameters of a model the records can tell apart (identifiability).

Identifiability is decided on the weighted, column-normalised design matrix, column by column in the
order beta, alpha, intra_beta, intra_alpha, gamma: a column whose distance to the span of those already
accepted is below 0.1 (its variance inflation factor would exceed 100) cannot be told apart from them.
In every allreduce model gamma's column is collinear with beta's (ring: gamma (p-1)/p n beside beta
2 (p-1)/p n; nearly so in the pipelined double binary tree), so allreduce records alone leave gamma
fixed at 0 with beta absorbing it; records of a primitive that reduces differently (allgather reduces
nothing, reduce_scatter half as much per byte sent) separate it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError

from .records import _Data

ORDER = ("beta", "alpha", "intra_beta", "intra_alpha", "gamma")  # identifiability is decided in this order
SEPARATION_MIN = 0.1  # a column closer than this (relative) to the span of the others is not separable (VIF > 100)


def _distance(col: np.ndarray, basis: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """Relative distance of ``col`` to the span of ``basis`` (sin of the angle), and the coefficients."""
    if not basis:
        return 1.0, np.zeros(0)
    B = np.column_stack(basis)
    coef, *_ = np.linalg.lstsq(B, col, rcond=None)
    return float(np.linalg.norm(col - B @ coef) / np.linalg.norm(col)), coef


class _SkipError(CommscopeError):
    """A candidate algorithm that cannot be fitted to these records (the message says why)."""


def _greedy(cols: Mapping[str, np.ndarray], order: Sequence[str], w: np.ndarray, names: str, g: int,
            ) -> tuple[list[str], dict[str, str]]:
    """Accept the columns in ``order`` that stand apart from those accepted before them; say why not the others."""
    accepted: list[str] = []
    basis: list[np.ndarray] = []
    why: dict[str, str] = {}
    for k in order:
        col = cols[k] * w
        norm = float(np.linalg.norm(col))
        if norm == 0.0:
            if k == "gamma":
                why[k] = f"not in the model: {names} reduce(s) nothing in these records; fixed at 0"
            elif k.startswith("intra"):
                why[k] = f"no records from within one node (p <= {g} ranks)"
            else:
                why[k] = "no record depends on it"
            continue
        dist, _ = _distance(col / norm, basis)
        if dist >= SEPARATION_MIN:
            accepted.append(k)
            basis.append(col / norm)
            continue
        coef, *_ = np.linalg.lstsq(np.column_stack([cols[a] * w for a in accepted]), col, rcond=None)
        weight, *_ = np.linalg.lstsq(np.column_stack(basis), col / norm, rcond=None)
        used = [(a, c) for a, c, x in zip(accepted, coef, weight, strict=True) if abs(x) > 1e-6]
        others = " and ".join(a for a, _ in used) or ", ".join(accepted)
        if dist < 1e-9:
            how = (f"its column is collinear with {others}'s (distance {dist:.1e}): in {names} its coefficient is "
                   f"{' + '.join(f'{c:.3g} x {a}' + chr(39) + 's' for a, c in used)} in every record")
        else:
            how = (f"its column is nearly collinear with {others}'s (distance {dist:.3g} < {SEPARATION_MIN:g}, "
                   f"variance inflation {1 / dist**2:.0f}): these records cannot separate it")
        if k == "gamma":
            absorbed = ", ".join(f"{a} is {a} + {c:.3g} gamma" for a, c in used)
            how += (f"{', so the fitted ' + absorbed if dist < 1e-9 else ''}; records of a primitive that reduces "
                    "differently (e.g. primitive 'allreduce,allgather') separate it; fixed at 0")
        why[k] = how
    return accepted, why


def _identify(cols: dict[str, np.ndarray], d: _Data, g: int, gamma_fixed: float | None, algos: Mapping[str, str],
              ) -> tuple[list[str], dict[str, str], dict[str, str], float]:
    """Free parameters, tied ones (intra -> inter), why each left-out one is left out, and the condition number
    of the free parameters' (relative, column-normalised) design matrix."""
    w = 1.0 / d.y
    names = " + ".join(dict.fromkeys(algos.values()))
    order = [k for k in ORDER if (k != "gamma" or gamma_fixed is None) and (g > 1 or not k.startswith("intra"))]
    accepted, why = _greedy(cols, order, w, names, g)
    tied: dict[str, str] = {}
    if g > 1 and not {"intra_alpha", "intra_beta"} <= set(accepted):
        reasons = {k: why[k] for k in ("intra_beta", "intra_alpha") if k in why}
        reason = ("; ".join(f"{k}: {v}" for k, v in reasons.items()) if len(set(reasons.values())) > 1
                  else next(iter(reasons.values()), "only one of the pair is separable"))
        merged = dict(cols)
        for k in ("intra_alpha", "intra_beta"):
            tied[k] = k.removeprefix("intra_")
            merged[tied[k]] = cols[tied[k]] + cols[k]
        accepted, why = _greedy(merged, [k for k in order if not k.startswith("intra")], w, names, g)
        for k in ("intra_alpha", "intra_beta"):
            why[k] = f"not identifiable ({reason}): set equal to the inter-node link"
        cols = merged
    if gamma_fixed is not None:
        why["gamma"] = "fixed by the caller"
    if "alpha" not in accepted and "beta" in accepted and not np.any(cols["alpha"]):
        # every record's latency hidden behind its sends by the link's token bucket: nothing depends on alpha
        why["alpha"] = ("not identifiable: the link's token bucket hides every record's latency behind its sends "
                        "(costmodels.collectives.token_bucket); fixed at 0: sweep sizes below the bucket to fit it")
    for k in ("beta", "alpha"):
        if k not in accepted and not (k == "alpha" and why.get("alpha", "").startswith("not identifiable: the link")):
            sizes = sorted(set(d.n.tolist()))
            raise _SkipError(f"alpha and beta are not separable from these records ({k}: {why.get(k, '')}; sizes "
                        f"{', '.join(cm.format_size(s) for s in sizes[:6])}{' ...' if len(sizes) > 6 else ''}): "
                        "measure a sweep from small (latency-bound) to large (bandwidth-bound) sizes")
    basis = [cols[k] * w / np.linalg.norm(cols[k] * w) for k in accepted]
    cond = float(np.linalg.cond(np.column_stack(basis)))
    return accepted, tied, why, cond
