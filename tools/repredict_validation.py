"""Predict a finished ``commscope validate`` run again with today's models (the measurements are kept).

    python tools/repredict_validation.py DIR [--terms kappa_c,kappa_m,host_overhead,contended_step] [--probes]
                                             [--one-link]

Replaces DIR's validation.jsonl, .csv and .md (each staged and renamed over the old one); exit 2 with one
line when DIR holds no finished validation or a term is unknown. ``--terms``: what prediction (b) calibrates
(default: ``commscope calibrate``'s, kappa_c, kappa_m and host_overhead); ``--probes``: every cell at the
latency its runs' probes measured (runs that kept ``latency_probes.jsonl``); ``--one-link``: each link fitted with
one alpha and beta for every primitive, as before ``primitive_factors`` (``runners/measure/fit/per_primitive.py``).
Run it on a copy to compare.
"""

from __future__ import annotations

import sys

from costmodels.errors import CommscopeError


def main(argv: list[str]) -> int:
    from runners.calibrate.solve import TERMS
    from runners.validate.driver import repredict

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    probes = "--probes" in argv[1:]
    one_link = "--one-link" in argv[1:]
    argv = [a for i, a in enumerate(argv) if not (i and a in ("--probes", "--one-link"))]
    terms = None
    if len(argv) == 3 and argv[1] == "--terms":
        terms = [t for t in argv[2].split(",") if t]
        bad = [t for t in terms if t not in TERMS]
        if bad or not terms:
            print(f"commscope: error: unknown term(s) {', '.join(bad) or '(none)'}; allowed: {', '.join(TERMS)}",
                  file=sys.stderr)
            return 2
    elif len(argv) != 1:
        print("commscope: error: give one validation directory, e.g. runners/reference/validation "
              "[--terms T1,T2,...] [--probes] [--one-link]", file=sys.stderr)
        return 2
    try:
        records = repredict(argv[0], terms, probes, per_primitive=not one_link)
    except CommscopeError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    print(f"predicted {len(records)} cell(s) again in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
