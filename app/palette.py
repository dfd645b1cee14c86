"""One colour per technique and per collective algorithm, the same on every page (pure, no Streamlit).

Techniques (schedules, convergence algorithms, compressors, validated techniques) share one table, so that
``dear`` or ``topk`` has one colour on the Iteration, Time-to-accuracy, Convergence and Predicted-vs-measured
pages; ``sgd`` (the bound) takes ``bsp``'s (the schedule that prices it). Collective algorithms get theirs in
registry order within their primitive, so that no two algorithms of one plot share a colour. A label such as
``"wfbp + topk:0.01"``, ``"bsp (flatten)"`` or ``"local_sgd:16"`` takes the colour of its first name. Names
nobody registered get a colour from a checksum of the name: stable across pages, runs and processes.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from functools import cache

import costmodels as cm

# distinct colours first (Tableau 10, then the D3 / Plotly extras)
COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D", "#FF9DA6",
          "#BAB0AC", "#1F77B4", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#17BECF", "#BCBD22",
          "#636EFA", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FECB52", "#7F7F7F",
          "#393B79", "#637939", "#8C6D31")
LOWER_BOUND = "#7F7F7F"
TECHNIQUES = ("bsp", "wfbp", "fusion", "dear", "mgwfbp", "bytescheduler", "zero", "fsdp", "ps", "local_sgd",
              "dpsgd", "topk", "qsgd", "powersgd", "randomk", "signsgd", "ef_signsgd", "async_sgd", "ssp",
              "choco_sgd", "fp16", "bf16", "dgc", "terngrad", "arjevani", "sgd_sc", "local_sgd_sc", "ef_topk")
ALIASES = {"sgd": "bsp"}  # the bound of synchronous SGD, priced by the bsp schedule
_BASE = re.compile(r"^(?:[AB]: )?([^ :(]+)")


def base_name(label: str) -> str:
    """The name a label starts with: ``"wfbp + topk:0.01"`` -> ``"wfbp"``, ``"A: dear"`` -> ``"dear"``."""
    m = _BASE.match(str(label).strip())
    return m.group(1) if m else str(label)


@cache
def _algorithms() -> dict[str, str]:
    out = {}
    for primitive in cm.PRIMITIVES:
        for i, name in enumerate(cm.collectives(primitive, include_bounds=False)):
            out[name] = COLORS[i % len(COLORS)]
        for name in cm.collectives(primitive):
            out.setdefault(name, LOWER_BOUND)
    return out


def color(label: str) -> str:
    """The colour of a technique, schedule, compressor or collective algorithm (or of a label that starts with
    one)."""
    name = base_name(label)
    name = ALIASES.get(name, name)
    if name in TECHNIQUES:
        return COLORS[TECHNIQUES.index(name) % len(COLORS)]
    algorithms = _algorithms()
    if name in algorithms:
        return algorithms[name]
    return COLORS[zlib.crc32(name.encode()) % len(COLORS)]


def colors(labels: Iterable[str]) -> dict[str, str]:
    """``{label: color(label)}`` for each distinct label."""
    return {str(k): color(str(k)) for k in dict.fromkeys(labels)}
