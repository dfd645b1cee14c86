"""Reference measurements shipped with commscope, so the app shows predicted vs measured with no run first.

``validation/`` holds one run of the quick validation suite on a 2-core CPU machine, 4 gloo ranks,
each behind its own emulated link (one network namespace per rank, tc tbf) at 100 Mbit/s (communication
bound), 1 Gbit/s (balanced) and 2.5 Gbit/s (compute bound), made by :data:`COMMAND`. Per link rate
it keeps the sweep, fitted environment, profile and iteration records, the plan and the log; at the
top, the validation records and the CSV / markdown comparison.
"""

from __future__ import annotations

from pathlib import Path

from runners import results

VALIDATION_DIR = Path(__file__).resolve().parent / "validation"
COMMAND = ("commscope validate --suite quick --ranks 4 --emulate 100mbit,1gbit,2500mbit "
           "--out runners/reference/validation")


def validation_records() -> list[dict]:
    """The shipped "validation" records (predicted beside measured, per technique and link rate)."""
    return results.load(VALIDATION_DIR / "validation.jsonl").records


def environments() -> list[str]:
    """The link rates of the shipped run, in the order they ran."""
    return list(dict.fromkeys(r["config"]["environment"] for r in validation_records()))


def records(environment: str) -> list[dict]:
    """Every record (collective sweep, environment, profile, iteration) of one shipped link rate."""
    path = VALIDATION_DIR / environment / "records.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no shipped records for {environment!r}; shipped: {', '.join(environments())}")
    return results.load(path).records
