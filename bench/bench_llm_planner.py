"""Plans per second of the large-model planner (issue 18, item 3: goal >= 10,000 plans/s).

    python bench/bench_llm_planner.py [--repeat 3] [--write]

For each case (a model, a GPU count, an environment): the number of valid plans, the time to enumerate
them, the time to evaluate all of them in one vectorized pass (``evaluate``: communication through the
library layer, memory, bubble, iteration time), plans/s = plans / (enumeration + evaluation), best of
``repeat``. ``--write`` stores the result in bench/results/bench_llm_planner.json. Times are wall-clock: on a
shared machine another process's load lowers the rate.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from _timing import best_of  # bench/ is on sys.path when a script in it runs

import costmodels as cm
from costmodels.llm import enumerate_plans, evaluate

GOAL = 10_000
CASES = [("gpt3-175b", 1024, "8xH100-NVLink+IB-NDR"), ("llama3-70b", 512, "8xA100-NVLink+IB-HDR"),
         ("mixtral-8x7b", 256, "8xH100-NVLink+IB-NDR"), ("llama3-8b", 64, "8xA100-NVLink+IB-HDR")]
OUT = Path(__file__).parent / "results" / "bench_llm_planner.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(OUT.parent.parent.parent)}")
    args = ap.parse_args()
    rows = []
    for name, gpus, env_name in CASES:
        spec, env = cm.llm(name), cm.environment(env_name)
        plans = enumerate_plans(spec, gpus, env)
        t_enum = best_of(lambda spec=spec, gpus=gpus, env=env: enumerate_plans(spec, gpus, env), args.repeat)
        t_eval = best_of(lambda spec=spec, plans=plans, env=env: evaluate(spec, plans, env), args.repeat)
        rate = len(plans) / (t_enum + t_eval)
        rows.append({"model": name, "gpus": gpus, "environment": env_name, "plans": len(plans),
                     "enumerate_s": t_enum, "evaluate_s": t_eval, "plans_per_s": rate, "meets_goal": rate >= GOAL})
        print(f"{name:14s} {gpus:5d} GPUs {env_name:22s} {len(plans):7d} plans  enumerate {t_enum * 1e3:7.1f} ms  "
              f"evaluate {t_eval * 1e3:7.1f} ms  {rate:>10,.0f} plans/s")
    if args.write:
        OUT.write_text(json.dumps({"goal_plans_per_s": GOAL, "repeat": args.repeat, "machine": platform.processor()
                                   or platform.machine(), "date": time.strftime("%Y-%m-%d"), "cases": rows},
                                  indent=2) + "\n")


if __name__ == "__main__":
    main()
