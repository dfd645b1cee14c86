"""Import time of the math layers in fresh interpreters (DESIGN: "well under a second").

    python bench/bench_import.py [--repeat 5]

Prints the median and best wall time of ``import costmodels, convergence`` in new processes, and
of ``import sympy`` alone for scale (most of the cost is sympy's own import).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CODE = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"


def timed(mod: str, repeat: int) -> list[float]:
    return [float(subprocess.check_output([sys.executable, "-c", CODE.format(mod=mod)], text=True))
            for _ in range(repeat)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for mod in ("sympy", "costmodels, convergence"):
        ts = timed(mod, args.repeat)
        print(f"import {mod:24s} median {statistics.median(ts):.3f} s, best {min(ts):.3f} s")


if __name__ == "__main__":
    main()
