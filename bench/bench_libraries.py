"""Throughput of ``cm.choose``: what a collective library runs, and its price, over a grid of sizes x p.

    python bench/bench_libraries.py [--sizes 40] [--ranks 250000] [--repeat 5] [--json]

The grid is ``sizes`` message sizes (8 B .. 4 GiB, a row) times ``ranks`` worker counts (a column), in the
two-level DGX A100 preset: NCCL chooses among 6 (algorithm, protocol) options per point, the one its own
model estimates fastest; gloo and mpich choose among registered formulas; ideal is the cheapest of all of
them (8 for allreduce, one of them, the double binary tree, not affine in n). ``nccl+nvls`` is NCCL on the
one-level NVLink-H100 preset (every p on one NVSwitch, however unreal past 8: NVLS is priced at every point),
whose NVLS option adds its pipeline fill per size (costmodels/libraries/nccl_nvls.py).
Reports points per second (best of ``repeat``, the machine being shared) per library; the goal is >= 1e7 for
nccl, nccl+nvls and ideal.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from _timing import best_of  # bench/ is on sys.path when a script in it runs

import costmodels as cm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, default=40)
    ap.add_argument("--ranks", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    sizes = np.geomspace(8, 2.0**32, args.sizes)
    ranks = np.arange(2, 2 + args.ranks)[:, None]
    points = sizes.size * ranks.size
    env = cm.environment("8xA100-NVLink+IB-HDR")
    out = {"points": points, "environment": env.name}
    cases = {lib: env.with_(library=lib) for lib in ("nccl", "gloo", "mpich", "ideal")}
    cases["nccl+nvls"] = cm.environment("NVLink-H100")
    for lib, e in cases.items():
        seconds = best_of(lambda e=e: cm.choose("allreduce", sizes, ranks, e), args.repeat)
        out[lib] = {"seconds": seconds, "points_per_s": points / seconds}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"cm.choose('allreduce', {args.sizes} sizes x {args.ranks} p) on {env.name} "
          f"(nccl+nvls: {cases['nccl+nvls'].name}): {points:,} points")
    for lib in cases:
        print(f"  {lib:9s} {out[lib]['seconds'] * 1e3:8.1f} ms  {out[lib]['points_per_s'] / 1e6:7.2f} M points/s")


if __name__ == "__main__":
    main()
