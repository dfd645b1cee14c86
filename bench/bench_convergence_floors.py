"""How far a convergence validation's Kendall tau could rise with tighter bounds (issue 17): floors on each bound's
steps to eps, and the largest tau any predictions between those floors and today's could reach.

    python bench/bench_convergence_floors.py [--dir DIR] [--json]     # default: the shipped run

A tighter valid bound only lowers an algorithm's steps to eps, so its predicted ratio to SGD lies between a floor and
today's value (SGD's is 1: eps is anchored on SGD's bound). Three floors, each from the registered bound's own members
(``B = 2 Delta/(gamma T) + A gamma + C gamma^2``, gamma <= gamma_max), on the run's measured constants:

* ``gradient noise``: the A term alone, no step limit: T >= 8 Delta A / eps^2 (SGD's noise for all; QSGD's
  (1 + omega) sigma^2 + omega zeta^2);
* ``+ disagreement``: and the least C of any member at SGD's step limit 1/L (error feedback: (1 - delta)/delta sigma^2,
  the order of the best published EF rates);
* ``+ step limit``: and the largest step limit of any member, C left out (error feedback: of order delta/L, the best
  known).

For each set of floors every order of the algorithms is tried (8! orders), each algorithm as low as its floor allows
above the one before; the best reachable tau, and the pairs that stay discordant in every best order, are printed.
``--json`` writes bench/results/bench_convergence_floors.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "runners" / "reference" / "convergence"
LEVELS = ("gradient noise", "+ disagreement", "+ step limit")


def member_extremes(bound: object, given: dict[str, float]) -> tuple[float, float, float]:
    """(least A, least C, largest step limit) over the bound's members at these constants."""
    vals = bound._values(given)  # type: ignore[attr-defined]
    t = np.ones(1)
    if hasattr(bound, "_family_fns"):
        parts = [[], [], []]
        for fns, _valid, grid in bound._family_fns:  # type: ignore[attr-defined]
            m = len(grid[0]) if grid else 1
            with np.errstate(over="ignore", invalid="ignore"):
                for i, f in enumerate(fns):
                    parts[i].append(np.broadcast_to(np.asarray(f(t, *vals, *grid), dtype=float), (m,)))
        a, c, cap = (np.concatenate(p) for p in parts)
        c = np.where(np.isfinite(c), c, np.inf)
        return float(a.min()), float(c.min()), float(cap.max())
    var_f, dis_f, max_f, _ = bound._fns  # type: ignore[attr-defined]
    return tuple(float(np.asarray(f(t, *vals))) for f in (var_f, dis_f, max_f))  # type: ignore[return-value]


def floors(bound: object, given: dict[str, float], eps: float) -> dict[str, float]:
    """Steps to eps under each set of floors (module docstring), from the continuous root of the shape."""
    from convergence.iterations import shape_iterations

    a, c, cap = member_extremes(bound, given)
    big, e, two_delta = np.array([[np.inf]]), np.array([eps]), np.array([[2 * given["Delta"]]])
    arr = lambda x: np.array([[x]])  # noqa: E731
    one_over_l = 1 / given["L"]
    yes = np.array([[True]])
    noise = float(shape_iterations(e, arr(a), arr(0.0), big, two_delta, yes)[0])
    dis = float(shape_iterations(e, arr(a), arr(c), arr(one_over_l), two_delta, yes)[0])
    step = float(shape_iterations(e, arr(a), arr(0.0), arr(cap), two_delta, yes)[0])
    return {"least_A": a, "least_C": c, "largest_step_L": cap * given["L"], LEVELS[0]: noise,
            LEVELS[1]: max(noise, dis), LEVELS[2]: max(noise, dis, step)}


def best_tau(measured: dict[str, float], low: dict[str, float], high: dict[str, float]) -> tuple[float, list]:
    """The largest Kendall tau (no ties) of predictions p_a in [low_a, high_a] against ``measured``, and the pairs
    discordant in every order that reaches it."""
    names = list(measured)
    pairs = list(itertools.combinations(names, 2))
    best, always = -2.0, None
    for order in itertools.permutations(names):
        prev, pred = -np.inf, {}
        for k in order:
            v = max(low[k], prev * (1 + 1e-12) + 1e-12)
            if v > high[k] * (1 + 1e-9):
                break
            pred[k] = prev = v
        else:
            disc = {(a, b) for a, b in pairs if (pred[a] - pred[b]) * (measured[a] - measured[b]) < 0}
            tau = (len(pairs) - 2 * len(disc)) / len(pairs)
            if tau > best + 1e-12:
                best, always = tau, disc
            elif abs(tau - best) <= 1e-12:
                always &= disc
    return best, sorted(always or [])


def analyse(directory: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from convergence.algorithms import algorithm
    from runners.validate.convergence_analysis import load_dir
    from runners.validate.convergence_predict import _fixed, _given

    s = load_dir(directory)
    eps, p = s["eps"], s["ranks"]
    prob = {k: s["constants"][k] for k in ("L", "sigma", "Delta", "zeta")}
    rows = [r for r in s["rows"] if r.get("predicted_ratio") is not None and r.get("time_median_s") is not None]
    sgd = next(r for r in rows if r["label"] == "sgd")
    out: dict = {"directory": str(directory), "eps": eps, "algorithms": {}}
    for r in rows:
        bound = algorithm(r["bound"]).get_bound()
        comp = {r["constant"]: r["measured_constant"]} if r.get("constant") else {}
        fixed = {**_fixed(r["bound"], r["options"], p, None, False), **comp}
        given = _given(bound, prob, fixed)
        f = floors(bound, {**bound.defaults, **given}, eps)
        spst = r["seconds_per_step"] / sgd["seconds_per_step"]
        out["algorithms"][r["label"]] = {
            "measured_ratio": r["measured_ratio"], "predicted_ratio": r["predicted_ratio"],
            "iterations": r["iterations"], "seconds_per_step_ratio": spst,
            "iterations_ratio_to_beat_sgd": 1 / spst, **{k: v for k, v in f.items()},
            **{f"floor_ratio {lv}": f[lv] / sgd["iterations"] * spst for lv in LEVELS}}
    measured = {k: v["measured_ratio"] for k, v in out["algorithms"].items()}
    high = {k: v["predicted_ratio"] for k, v in out["algorithms"].items()}
    out["tau_now"] = s["kendall"]["tau"]
    out["best_tau"] = {}
    for lv in LEVELS:
        low = {k: (1.0 if k == "sgd" else v[f"floor_ratio {lv}"]) for k, v in out["algorithms"].items()}
        tau, disc = best_tau(measured, low, high)
        out["best_tau"][lv] = {"tau": tau, "always_discordant": [list(d) for d in disc]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=SHIPPED)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = analyse(args.dir)
    print(f"from {res['directory']}; eps = {res['eps']:.4g}; tau now {res['tau_now']:.3f}")
    print(f"{'algorithm':<11} {'measured':>8} {'predicted':>9} {'T':>7} {'s/step':>7} {'beat SGD':>8} "
          + " ".join(f"{'T>= ' + lv:>20}" for lv in LEVELS))
    for k, v in res["algorithms"].items():
        print(f"{k:<11} {v['measured_ratio']:>8.3f} {v['predicted_ratio']:>9.3f} {v['iterations']:>7.0f} "
              f"{v['seconds_per_step_ratio']:>7.3f} {'T<' + format(190 * v['iterations_ratio_to_beat_sgd'], '.0f'):>8} "
              + " ".join(f"{v[lv]:>20.0f}" for lv in LEVELS))
    for lv, b in res["best_tau"].items():
        print(f"floors '{lv}': best reachable tau = {b['tau']:.3f}; discordant in every best order: "
              + ", ".join(f"({a}, {c})" for a, c in b["always_discordant"]))
    if args.json:
        path = ROOT / "bench" / "results" / "bench_convergence_floors.json"
        res["directory"] = str(Path(res["directory"]).resolve().relative_to(ROOT))
        path.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
