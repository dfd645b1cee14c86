"""What a fresh buffer costs the host, and what it does to PyTorch's gloo all_gather and reduce_scatter.

    python bench/bench_fresh_buffers.py [--sizes 8,16,24,31,32,48,64] [--repeat 15] [--json]
    sudo python bench/bench_fresh_buffers.py --emulate 2500mbit [--nodes 4] [--json]     # adds the collectives

PyTorch's gloo backend allocates a buffer of the message's size on every call of two collectives
(``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp``): ``all_gather`` (and ``all_gather_into_tensor``, which
calls it) gathers into a new flat output (``newLikeFlat``) and then copies it into the outputs;
``reduce_scatter_tensor`` all-reduces a clone of the whole input and copies the own shard out. glibc's malloc
serves an allocation of at least its mmap threshold with a fresh ``mmap``, whose pages the kernel zeroes at their
first touch; the threshold rises to the size of each mapped block that is freed, but never above
``DEFAULT_MMAP_THRESHOLD_MAX``: 32 MiB on 64-bit (malloc.c, 2006-08-22; mallopt(3), M_MMAP_THRESHOLD). So a
buffer below 32 MiB comes back from the heap after a few calls (8-9 here), and one of 32 MiB or more is mapped
and first-touched on every call.

Part 1 (any machine, seconds): ``torch.empty(n).copy_(src)`` (a fresh buffer) against ``dst.copy_(src)`` (one
reused buffer), one thread, median of ``repeat`` calls per size: seconds per byte of each, and their ratio.
Part 2 (``--emulate RATE``, root): ``commscope bench collectives`` of allreduce, allgather and reduce_scatter from
8 to 64 MiB on ``nodes`` emulated nodes (one gloo rank each): time and CPU per call, and each op's seconds per
byte relative to its own at 16 MiB. commscope's cost models price the reduce-scatter's fresh clone where the
environment carries a measured ``host_fault`` (``costmodels/collectives/host_buffers.py``; ``commscope bench
host-buffers``), not the all-gather's fresh output; a fitted gloo environment warns when it is used at 32 MiB or
more beyond its records (``runners.measure.fit.plausibility.FRESH_MAPPING_BYTES``). ``--json`` prints one JSON object.

Measured on the development VM, five quiet runs, one from a fresh clone (the first four in
``bench/results/bench_fresh_buffers.json``): a fresh buffer 0.46-0.52 ns/B from 32 MiB on against 0.06-0.08
reused, 8-31 MiB fresh 0.04-0.08 (from the heap); at 4 nodes x 2.5 Gbit/s all_gather took 1.14-1.25 times and
reduce_scatter 1.01-1.21 times their 16 MiB seconds per byte at 32-64 MiB, all_reduce 1.01-1.02, and an
all_gather's CPU time went from 8.5-13.4 ms at 16 MiB to 34-44 ms at 32. At 200 Mbit/s between 2 nodes the wire
hides it: 1.01-1.02 for all three (two runs, ``slow_link_run``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from _timing import times_of  # bench/ is on sys.path when a script in it runs

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
OPS = ("allreduce", "allgather", "reduce_scatter")
#: untimed calls per size first: below 32 MiB the heap kept a freed block of the size only after 8-9 calls here
#: (16 MiB, the first size of a process: 9 calls at 8-9 ms, then 0.9-1.3 ms); at 32 MiB, 40 calls of 17-20 ms
WARMUP = 12


def copy_rows(sizes_mib: Sequence[float], repeat: int) -> list[dict[str, float]]:
    """Median seconds of a copy into a fresh buffer and into a reused one, per size (one thread)."""
    import torch

    torch.set_num_threads(1)
    rows = []
    for mib in sizes_mib:
        count = int(mib * MIB) // 4
        src = torch.ones(count)
        dst = torch.empty(count)
        dst.copy_(src)

        def reused() -> None:
            dst.copy_(src)

        def fresh() -> None:
            torch.empty(count).copy_(src)

        row: dict[str, float] = {"mib": float(mib)}
        for name, fn in (("reused_s", reused), ("fresh_s", fresh)):
            row[name] = statistics.median(times_of(fn, repeat, warmup=WARMUP))
        rows.append(row)
    return rows


def summarize_copies(rows: Iterable[Mapping[str, float]]) -> list[dict[str, float]]:
    """Per size: ns per byte of the fresh and the reused copy, and fresh / reused."""
    out = []
    for r in rows:
        nbytes = r["mib"] * MIB
        out.append({"mib": r["mib"], "fresh_ns_per_byte": r["fresh_s"] / nbytes * 1e9,
                    "reused_ns_per_byte": r["reused_s"] / nbytes * 1e9,
                    "fresh_over_reused": r["fresh_s"] / r["reused_s"]})
    return out


def per_byte_ratios(records: Iterable[Mapping[str, Any]], reference_bytes: int = 16 * MIB) -> list[dict[str, Any]]:
    """Per collective record: ms and CPU ms per call, and seconds per byte over the same op's at ``reference_bytes``
    (the chain time where the record has it, else the median)."""
    def seconds(res: Mapping[str, Any]) -> float:
        return float(res.get("time_chain_s") or res["time_s"])

    recs = [r for r in records if r.get("kind") == "collective"]
    ref = {r["config"]["op"]: seconds(r["result"]) / r["config"]["bytes"] for r in recs
           if r["config"]["bytes"] == reference_bytes}
    out = []
    for r in recs:
        op, nbytes, res = r["config"]["op"], r["config"]["bytes"], r["result"]
        per_byte = seconds(res) / nbytes
        out.append({"op": op, "mib": nbytes / MIB, "ms": seconds(res) * 1e3, "cpu_ms": float(res["cpu_s"]) * 1e3,
                    "per_byte_over_16mib": per_byte / ref[op] if op in ref else None})
    return out


def sweep(rate: str, nodes: int) -> list[dict[str, Any]]:
    """One ``commscope bench collectives`` sweep (8-64 MiB) on ``nodes`` emulated nodes; its records."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.jsonl"
        cmd = [sys.executable, "-m", "runners.cli", "emulate", "--nodes", str(nodes), "--rate", rate, "--",
               sys.executable, "-m", "runners.cli", "bench", "collectives", "-o", ",".join(OPS), "-b", "8MiB",
               "-e", "64MiB", "-w", "3", "-n", "10", "--out", str(out)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            tail = " ".join((done.stderr or done.stdout).split()[-40:])
            _fail(f"the emulated sweep failed (exit {done.returncode}): {tail}")
        return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _fail(message: str) -> NoReturn:
    print(f"commscope: error: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,16,24,31,32,48,64", help="MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--emulate", default=None, help="link rate of an emulated gloo sweep (needs root)")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    try:
        sizes = [float(s) for s in args.sizes.split(",") if s]
    except ValueError:
        sizes = []
    if not sizes or not all(0 < s < 1e6 for s in sizes):
        _fail(f"--sizes must be positive MiB numbers below 1e6, comma-separated, got {args.sizes!r}")
    if args.repeat < 1 or args.nodes < 2:
        _fail(f"--repeat must be >= 1 (got {args.repeat}) and --nodes >= 2 (got {args.nodes})")
    out: dict[str, Any] = {"copies": summarize_copies(copy_rows(sizes, args.repeat))}
    if args.emulate:
        out["collectives"] = {"rate": args.emulate, "nodes": args.nodes,
                              "calls": per_byte_ratios(sweep(args.emulate, args.nodes))}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print("copy into a fresh buffer against a reused one (one thread, median):")
    for r in out["copies"]:
        print(f"  {r['mib']:5.0f} MiB  fresh {r['fresh_ns_per_byte']:5.2f} ns/B  reused {r['reused_ns_per_byte']:5.2f} "
              f"ns/B  x{r['fresh_over_reused']:.1f}")
    if "collectives" in out:
        print(f"gloo collectives on {args.nodes} emulated nodes at {args.emulate} (chain time per call):")
        for r in out["collectives"]["calls"]:
            ratio = r["per_byte_over_16mib"]
            print(f"  {r['op']:15s} {r['mib']:5.0f} MiB  {r['ms']:8.1f} ms  CPU {r['cpu_ms']:6.1f} ms  per byte "
                  f"{'x' + format(ratio, '.2f') if ratio else '-'} of 16 MiB's")


if __name__ == "__main__":
    main()
