"""Predict a finished ``commscope validate`` run again with today's models (the measurements are kept).

    python tools/repredict_validation.py DIR      # e.g. runners/reference/validation

Replaces DIR's validation.jsonl, .csv and .md (each staged and renamed over the old one); exit 2 with one
line when DIR holds no finished validation.
"""

from __future__ import annotations

import sys

from costmodels.errors import CommscopeError


def main(argv: list[str]) -> int:
    from runners.validate.driver import repredict

    if len(argv) != 1:
        print("commscope: error: give one validation directory, e.g. runners/reference/validation", file=sys.stderr)
        return 2
    try:
        records = repredict(argv[0])
    except CommscopeError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    print(f"predicted {len(records)} cell(s) again in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
