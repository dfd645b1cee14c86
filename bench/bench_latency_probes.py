"""Issue 16: does the latency measured beside each technique's run predict it better than the sweep's fit?

    python bench/bench_latency_probes.py DIR [--json]

DIR is a finished ``commscope validate`` run whose environments kept latency probes (``latency_probes.jsonl``,
:mod:`runners.validate.latency`: one after the sweep, one before every technique's run). For every cell, prediction
(a) (the sweep-fitted environment, no interference terms) is made twice: as validate makes it, and with the
environment's latencies (``alpha``, ``intra_alpha``) scaled so that the library prices the probe message at what
the probes before the technique's runs measured (:func:`runners.validate.latency.latency_scale`; what validate's
predictions now take), the median of the probes
before that technique's runs over the probe after the sweep. Both errors are printed per cell, with the median and
largest |error| and the winner per (environment, model) for each. Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(root: Path) -> dict[str, Any]:
    import costmodels as cm
    from runners import results
    from runners.calibrate.cells import scale_latency
    from runners.calibrate.solve import TERMS, with_terms
    from runners.training.pricing import predict
    from runners.validate.latency import FILE, latency_scale
    from runners.validate.suite import profile_file

    if not (root / "validation.jsonl").is_file():
        raise cm.CommscopeError(f"{root} holds no finished validation (validation.jsonl)")
    rows = []
    for rec in results.load(root / "validation.jsonl").records:
        cfg, res = rec["config"], rec["result"]
        envdir = root / cfg["environment"]
        if not (envdir / FILE).is_file() or "predicted_s" not in res:
            continue
        plan = json.loads((envdir / "plan.json").read_text())
        env = with_terms(cm.Environment.load(envdir / "environment.json"), {t: 0.0 for t in TERMS})
        index = next(i for i, w in enumerate(plan["workloads"]) if w["model"] == cfg["model"])
        prof = cm.load_profile(profile_file(envdir, index, cfg["model"]))
        factor = latency_scale(env, int(cfg["world_size"]), results.load(envdir / FILE).records, cfg["technique"],
                               cfg["options"], cfg["model"])
        if factor is None:
            continue
        plain, _ = predict(cfg["technique"], cfg["options"], prof, env, int(cfg["world_size"]))
        scaled, _ = predict(cfg["technique"], cfg["options"], prof, scale_latency(env, factor),
                            int(cfg["world_size"]))
        measured = res["measured_s"]
        rows.append({"environment": cfg["environment"], "model": cfg["model"], "technique": cfg["technique"],
                     "options": cfg["options"], "measured_s": measured, "latency_scale": factor,
                     "error_sweep": plain / measured - 1, "error_probed": scaled / measured - 1,
                     "predicted_sweep_s": plain, "predicted_probed_s": scaled})
    if not rows:
        raise cm.CommscopeError(f"{root} has no cell with latency probes ({FILE}); run commscope validate again")

    def summary(key: str) -> dict[str, Any]:
        errs = [abs(r[key]) for r in rows]
        cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            cells.setdefault((r["environment"], r["model"]), []).append(r)
        right = sum(min(rs, key=lambda r: r["measured_s"]) is min(
            rs, key=lambda r: r["measured_s"] * (1 + r[key])) for rs in cells.values())
        return {"median": statistics.median(errs), "max": max(errs), "winner_right": right, "cells": len(cells)}

    return {"root": str(root), "rows": rows, "sweep": summary("error_sweep"), "probed": summary("error_probed")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        res = measure(a.root)
    except Exception as exc:  # one line, exit 2
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    for r in res["rows"]:
        opts = ",".join(f"{k}={v}" for k, v in r["options"].items())
        print(f"{r['environment']:>10} {r['model']:>12} {r['technique']:>13} {opts[:28]:28} "
              f"scale {r['latency_scale']:5.2f}  (a) {r['error_sweep']:+6.1%}  with probes {r['error_probed']:+6.1%}")
    for key, label in (("sweep", "(a) from the sweep's fit"), ("probed", "(a) latency from the probes")):
        s = res[key]
        print(f"{label}: median {s['median']:.1%}, max {s['max']:.1%}, winner right in {s['winner_right']} of "
              f"{s['cells']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
