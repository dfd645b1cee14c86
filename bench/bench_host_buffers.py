"""Held-out check of gloo's host buffer terms (costmodels.collectives.host_buffers): a link fitted to its sweep up to
16 MiB, with the host's measured ``host_copy`` and ``host_fault`` or without them, predicts the 64 MiB messages
that the fit never saw.

    python bench/bench_host_buffers.py [DIR] [--json]

``DIR`` (default: the shipped ``bench/results/gloo_host_buffers/heldout``) holds ``host_buffers.json`` (``commscope
bench host-buffers --ranks 4``, the probe: copies and clones on the host, no collective) and one sweep per link,
``<link>.jsonl`` (``commscope emulate ... -- commscope bench collectives -o allreduce,reduce_scatter,allgather -b 16
-e 64MiB -f 4 -w 2 -n 10``). Each link is fitted as ``commscope validate`` fits its sweep (two regimes, the chain
statistic, gloo's algorithms, each code path on its own where the AIC says so) to its records up to 16 MiB, twice:
with the probe's host buffers given and with none. Both then price every primitive at 64 MiB, where glibc maps
gloo's buffers afresh on every call. The table gives measured, predicted and the error of each. ``--json`` prints
one JSON object. Exit code 2 with one line on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "bench" / "results" / "gloo_host_buffers" / "heldout"
FIT_UP_TO = 16 * 2**20
HELD_OUT = 64 * 2**20
OPS = ("allreduce", "allgather", "reduce_scatter")
ALGORITHMS = "gloo_ring_allreduce,gloo_ring_allgather,allreduce_reduce_scatter"


def measure(root: Path) -> dict[str, Any]:
    """Per link: the two fits and their predictions at :data:`HELD_OUT` against the measured times."""
    import costmodels as cm
    from runners import results as rs
    from runners.measure import fit
    from runners.measure import host_buffers as probe
    from runners.measure.fit.records import record_time

    host = probe.load(root / "host_buffers.json")
    links = sorted(p for p in root.glob("*.jsonl"))
    if not links:
        raise cm.CommscopeError(f"{root} holds no sweep (<link>.jsonl)")
    out: dict[str, Any] = {"root": str(root), "host_copy": host[0], "host_fault": host[1], "links": {}}
    for path in links:
        recs = rs.load(path).of_kind("collective")
        seen = [r for r in recs if int(r["config"]["bytes"]) <= FIT_UP_TO]
        held = [r for r in recs if int(r["config"]["bytes"]) == HELD_OUT]
        if not seen or not held:
            raise cm.CommscopeError(f"{path}: needs records up to {cm.format_size(FIT_UP_TO)} and at "
                                    f"{cm.format_size(HELD_OUT)}")
        rows: dict[str, Any] = {}
        for label, given in (("with", host), ("without", None)):
            env = fit.fit_two_regimes(seen, list(OPS), ALGORITHMS, statistic="chain", host=given).environment
            for r in held:
                op, n, p = r["config"]["op"], int(r["config"]["bytes"]), int(r["run"]["world_size"])
                measured = record_time(r, "chain")
                predicted = float(cm.choose(op, n, p, env).time)
                row = rows.setdefault(op, {"bytes": n, "p": p, "measured_s": measured})
                row[f"predicted_{label}_s"] = predicted
                row[f"error_{label}"] = predicted / measured - 1.0
        out["links"][path.stem] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    import costmodels as cm

    try:
        res = measure(args.dir)
    except cm.CommscopeError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{res['root']}: host_copy {res['host_copy'] * 1e9:.3g} ns/B, host_fault {res['host_fault'] * 1e9:.3g} "
          f"ns/B (probe); fitted up to {cm.format_size(FIT_UP_TO)}, predicted at {cm.format_size(HELD_OUT)}")
    for link, rows in res["links"].items():
        for op, r in rows.items():
            print(f"{link:>10} {op:>15} p={r['p']}: measured {r['measured_s'] * 1e3:9.2f} ms   with host buffers "
                  f"{r['predicted_with_s'] * 1e3:9.2f} ms ({r['error_with']:+.1%})   without "
                  f"{r['predicted_without_s'] * 1e3:9.2f} ms ({r['error_without']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
