"""Freeze every schedule's iteration times as a fixture (tests/data/schedule_baseline.json).

    python tools/make_schedule_baseline.py           # writes the fixture
    python tools/make_schedule_baseline.py --check   # compares the current code with it (max relative error)
    python tools/make_schedule_baseline.py --reprice # after an intended model change: the same cases on the
                                                     # stored environments, priced again; lists what moved

The fixture was written from the schedules as they were before interference, host overhead and the
optimizer step existed (issue 16); ``tests/test_interference.py`` checks that with kappa_c = kappa_m =
host_overhead = 0 and no optimizer time every schedule still gives these times, through ``cm.simulate``
and through ``cm.sweep``. Cases: every schedule x every shipped profile x ENVS x P (library's choice of
collective), and the compressible schedules with COMPRESSORS on resnet50. The environments are stored
with the times (``environments``: each preset's JSON as it was), so that later changes to the presets
do not move the fixture.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import costmodels as cm
from costmodels.schedules import COMPRESSIBLE

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "schedule_baseline.json"
ENVS = ("10GbE", "8xV100-NVLink+IB-EDR")
P = (2, 16)
COMPRESSORS = ("fp16", "topk:0.01", "powersgd:2")
TERMS = ("kappa_c", "kappa_m", "host_overhead")


def environment(name: str) -> cm.Environment:
    """The preset with interference and host overhead off (fields that did not exist yet are skipped)."""
    env = cm.environment(name)
    return env.with_(**{k: 0.0 for k in TERMS if hasattr(env, k)})


def cases() -> list[dict]:
    out = [{"schedule": s, "profile": m, "env": e, "p": p, "compressor": None}
           for s in cm.schedules() for m in cm.profiles() for e in ENVS for p in P]
    out += [{"schedule": s, "profile": "resnet50", "env": e, "p": p, "compressor": c}
            for s in cm.schedules() if s in COMPRESSIBLE for c in COMPRESSORS for e in ENVS for p in P]
    return out


def compute(case: dict) -> float:
    return cm.simulate(cm.profile(case["profile"]), environment(case["env"]), case["p"], case["schedule"],
                       compressor=case["compressor"]).iteration_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--reprice", action="store_true")
    args = ap.parse_args()
    if args.reprice:
        fixture = json.loads(OUT.read_text())
        envs = {e: cm.Environment.from_dict(d) for e, d in fixture["environments"].items()}
        for c in fixture["cases"]:
            t = cm.simulate(cm.profile(c["profile"]), envs[c["env"]], c["p"], c["schedule"],
                            compressor=c["compressor"]).iteration_time
            if t != c["iteration_time"]:
                print(f"{c['schedule']} {c['profile']} {c['env']} p={c['p']} {c['compressor']}: "
                      f"{c['iteration_time']:.6g} -> {t:.6g} ({t / c['iteration_time'] - 1:+.2%})")
            c["iteration_time"] = t
        OUT.write_text(json.dumps(fixture, indent=1) + "\n")
        return
    if args.check:
        frozen = json.loads(OUT.read_text())["cases"]
        worst = max(abs(compute(c) - c["iteration_time"]) / c["iteration_time"] for c in frozen)
        print(f"{len(frozen)} cases, max relative difference {worst:.3g}")
        return
    rows = [{**c, "iteration_time": compute(c)} for c in cases()]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    envs = {e: environment(e).to_dict() for e in ENVS}
    OUT.write_text(json.dumps({"written_by": "tools/make_schedule_baseline.py", "envs": ENVS, "p": P,
                               "environments": envs, "cases": rows}, indent=1) + "\n")
    print(f"wrote {len(rows)} cases to {OUT}")


if __name__ == "__main__":
    main()
