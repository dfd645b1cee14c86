"""Benchmark of the app: how long a page rerun takes (Streamlit's AppTest, the page's whole script).

    python bench/bench_app.py [--reruns 10] [--json]

For every page, with default inputs and with large inputs (p up to 4096, 200 message sizes, the
widest map), the page is opened, run once (the first run fills the caches), then rerun ``--reruns``
times; the median and max rerun are reported. Goal: every rerun after the first < 300 ms. ``--json``
writes bench/results/bench_app.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MAIN = str(ROOT / "app" / "main.py")


def _large_collectives(at) -> None:
    at.number_input(key="coll_p").set_value(4096)
    at.select_slider(key="coll_range").set_value((7, 32))  # 8 * 25 + 1 = 201 sizes


def _nccl_collectives(at) -> None:
    at.selectbox(key="coll_library").set_value("nccl")


def _published_collectives(at) -> None:
    at.radio(key="coll_measured").set_value("published").run()  # sets the page to the system's environment and p
    at.selectbox(key="coll_published_system").set_value("2x8 H100 (A3 Mega)")


def _published_measured(at) -> None:
    at.radio(key="meas_source").set_value("published")


def _large_iteration(at) -> None:
    at.select_slider(key="iter_range").set_value((1, 12))  # p = 2 ... 4096
    at.number_input(key="iter_p").set_value(4096)


def _large_llm(at) -> None:
    at.number_input(key="llm_gpus").set_value(768)  # 87,831 valid plans, the most of the GPU counts up to 8192


def _large_tta(at) -> None:
    at.number_input(key="tta_p").set_value(4096)
    at.select_slider(key="tta_p_range").set_value((2, 2048))


CASES: list[tuple[str, str, Callable | None]] = [
    ("collectives", "views/collectives.py", None),
    ("collectives, p = 4096, 201 sizes", "views/collectives.py", _large_collectives),
    ("collectives, nccl's bands", "views/collectives.py", _nccl_collectives),
    ("collectives, published overlay", "views/collectives.py", _published_collectives),
    ("iteration", "views/iteration.py", None),
    ("iteration, p = 2..4096, timeline at 4096", "views/iteration.py", _large_iteration),
    ("convergence", "views/convergence.py", None),
    ("time to accuracy", "views/time_to_accuracy.py", None),
    ("time to accuracy, p = 4096, map to 2048", "views/time_to_accuracy.py", _large_tta),
    ("large models", "views/large_models.py", None),
    ("large models, 768 GPUs (87,831 plans)", "views/large_models.py", _large_llm),
    ("predicted vs measured", "views/measured.py", None),
    ("predicted vs measured, published", "views/measured.py", _published_measured),
    ("environments", "views/environments.py", None),
]


def measure(page: str, setup: Callable | None, reruns: int) -> dict:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=300).run()
    at.switch_page(page).run()
    if setup is not None:
        setup(at)
    t0 = time.perf_counter()
    at.run()
    first = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception}")
    times = []
    for _ in range(reruns):
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
    return {"first_s": first, "median_s": statistics.median(times), "max_s": max(times), "reruns": reruns}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reruns", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {}
    for name, page, setup in CASES:
        r = measure(page, setup, args.reruns)
        out[name] = r
        print(f"{name:>42}: first {r['first_s'] * 1e3:7.0f} ms, rerun median {r['median_s'] * 1e3:5.0f} ms, "
              f"max {r['max_s'] * 1e3:5.0f} ms")
    slowest = max(out, key=lambda k: out[k]["max_s"])
    print(f"slowest rerun: {slowest}, {out[slowest]['max_s'] * 1e3:.0f} ms (goal < 300 ms)")
    if args.json:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "bench_app.json").write_text(json.dumps({"cases": out, "slowest": slowest}, indent=2) + "\n")
        print(f"wrote {RESULTS / 'bench_app.json'}")


if __name__ == "__main__":
    main()
