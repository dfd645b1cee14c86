"""Turn the transcribed large-model tables (costmodels/llm/data: Narayanan et al. 2021 Table 1, Dubey et al. 2024
Table 4) into results-store records (runners/reference/published/llm_records.jsonl): one "llm" record per row,
``origin: published``, with the citation, the system, the commscope environment that describes it, the plan
(the table's settings plus the assumptions its data file names) and the published TFLOP/s per GPU.

    python tools/make_published_llm_records.py            # rewrites llm_records.jsonl (atomically)
    python tools/make_published_llm_records.py --check    # exit 1 if the file differs from what the tables give

Ids are derived from the table and row (uuid5), and the time is the table's publication date, so the file is
the same whenever it is made again.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from costmodels._io import atomic_write_text  # noqa: E402
from costmodels.llm import published, published_llama3  # noqa: E402
from runners import results  # noqa: E402

OUT = ROOT / "runners" / "reference" / "published" / "llm_records.jsonl"
PUBLISHED = {"narayanan2021-table1": "2021-11-14T00:00:00.000000Z",  # SC'21
             "dubey2024-llama3-table4": "2024-07-23T00:00:00.000000Z"}  # arXiv v1


def _record(table: dict[str, Any], index: int, model: str, plan: dict[str, Any], extra: dict[str, Any],
            row: dict[str, Any]) -> dict[str, Any]:
    run = {"host": table["system"], "backend": "nccl", "world_size": int(plan["tp"] * plan["pp"] * plan["dp"]
                                                                          * plan.get("cp", 1)),
           "ranks_per_node": 8, "devices": [table["system"]], "torch": None, "nccl": None, "gloo": None,
           "network": None}
    config = {"model": model, "gpus": run["world_size"], "plan": plan, **extra}
    result = {"tflops_per_gpu": float(row["tflops_per_gpu"]), "row": row}
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"{table['name']}/{index}").hex
    rec = {"schema": results.SCHEMA, "kind": "llm", "id": key,
           "time": PUBLISHED[table["name"]], "run": run, "config": config, "result": result, "source": "published",
           "origin": "published", "table": table["name"], "environment": table["environment"],
           "citation": {"source": table["citation"], "url": table["url"], "transcribed_from": table["transcribed_from"],
                        "assumptions": table["common"]}}
    return results.validate(rec)


def records() -> list[dict[str, Any]]:
    out = []
    t1 = published.table()
    for i, row in enumerate(t1["rows"]):
        spec, plan = published.row_spec(row), published.row_plan(row)
        out.append(_record(t1, i, spec.name, plan.to_dict(), {"seq_len": spec.seq_len, "ddp": row["ddp"]}, row))
    t4 = published_llama3.table()
    for i, row in enumerate(t4["rows"]):
        spec, plan = published_llama3.row_spec(row), published_llama3.row_plan(row)
        out.append(_record(t4, i, t4["common"]["model"], plan.to_dict(),
                           {"seq_len": spec.seq_len, "virtual_stages_assumed": published_llama3.HEADLINE_V}, row))
    return out


def text() -> str:
    return "".join(json.dumps(r, allow_nan=False, separators=(",", ":"), sort_keys=True) + "\n" for r in records())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        same = OUT.is_file() and OUT.read_text() == text()
        print(f"{OUT}: {'up to date' if same else 'differs from the tables: run tools/make_published_llm_records.py'}")
        return 0 if same else 1
    if args:
        print(f"commscope: error: unknown argument(s) {' '.join(args)}; allowed: --check", file=sys.stderr)
        return 2
    atomic_write_text(OUT, text())
    print(f"wrote {len(records())} records to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
