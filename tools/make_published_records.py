"""Turn the transcribed published measurements (runners/reference/published/sources.json) into results-store
records (runners/reference/published/records.jsonl): one "collective" record per published size, with
``origin: published``, the citation, the system and the commscope environment that describes it.

    python tools/make_published_records.py            # rewrites records.jsonl (atomically)

Where a source gives no time (PyTorch benchmarks print bandwidths only), ``time_s`` is derived from the bus
bandwidth with nccl-tests' factor (allreduce 2(p-1)/p, allgather (p-1)/p) and the record says so. Each record's
``config.timing`` names how the source timed its calls (:data:`costmodels.harness.HARNESSES`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import costmodels as cm  # noqa: E402
from runners import results  # noqa: E402

DIR = ROOT / "runners" / "reference" / "published"
ELEMENT_BYTES = 4  # float32 in every transcribed table


def records() -> list[dict]:
    src = json.loads((DIR / "sources.json").read_text())
    out = []
    for system in src["systems"]:
        p, op = system["gpus"], system["op"]
        factor = cm.busbw_factor(op, p)
        run = {"host": system["system"], "backend": "nccl", "world_size": p, "ranks_per_node": system["gpus_per_node"],
               "devices": [system["description"]], "torch": None, "nccl": system.get("nccl_version"), "gloo": None,
               "network": None, "nodes": system["nodes"], "interconnect": system["interconnect"]}
        for point in system["points"]:
            n = int(point["bytes"])
            busbw = float(point["busbw_GBps"] or 0.0)
            derived = point.get("time_us") is None
            time_s = n * factor / (busbw * 1e9) if derived else float(point["time_us"]) * 1e-6
            algbw = point.get("algbw_GBps")
            config = {"op": op, "bytes": n, "count": max(1, n // ELEMENT_BYTES), "dtype": "float32", "warmup": 5,
                      "iterations": 20, "tool": system["tool"], "iterations_note": "not stated; nccl-tests defaults",
                      "timing": system["timing"]}
            result = {"time_s": time_s, "algbw_GBps": float(algbw) if algbw is not None else n / time_s / 1e9,
                      "busbw_GBps": busbw, "wrong": 0}
            if derived:
                result["time_from"] = "busbw (the source prints no time)"
            rec = results.record("collective", config, result, run, source="published")
            rec.update(origin="published", system=system["system"], environment=system["environment"],
                       citation={"source": system["citation"], "url": system["url"], "where": system["where"],
                                 "notes": system["notes"] + (" " + system["timing_note"] if "timing_note" in system
                                                             else "")})
            out.append(results.validate(rec))
    return out


def main() -> int:
    recs = records()
    fd, tmp = tempfile.mkstemp(dir=DIR, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        for r in recs:
            fh.write(json.dumps(r, sort_keys=True, allow_nan=False) + "\n")
    os.replace(tmp, DIR / "records.jsonl")
    print(f"wrote {len(recs)} published records to {DIR / 'records.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
