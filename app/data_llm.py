"""Data of the Large models page (pure: no Streamlit): ranked plans, one plan's communication, memory,
pipeline timeline and attribution, where the best plan changes, and Narayanan et al. 2021's Table 1 predicted.

Every function takes names and numbers (hashable, so the page can cache them) and returns tables or dicts.
"""

from __future__ import annotations

import json
import math
from statistics import median
from typing import Any

import pandas as pd

import costmodels as cm
from costmodels.llm import Plan, attribute, llms, result_of, search, switch_points
from costmodels.llm import published as llm_published
from costmodels.llm.iteration import evaluate
from costmodels.llm.plan import PlanArray

GIB = 2**30
DEFAULT_MODEL = "gpt3-175b"
DEFAULT_ENV = "8xH100-NVLink+IB-NDR"
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations")
# how compute is priced: the label shown -> evaluate()'s options (costmodels.llm.iteration)
COMPUTE = {"0.48 of peak": {}, "kernel model": {"achieved": None}}
DEFAULT_COMPUTE = "0.48 of peak"


def compute_options(compute: str) -> dict[str, Any]:
    """evaluate()'s options for a :data:`COMPUTE` label."""
    return dict(COMPUTE[compute])


def model_choices() -> list[str]:
    """The shipped transformer specs."""
    return llms()


def env_choices() -> list[str]:
    """The presets with nodes of several GPUs (two-level: NVLink inside, a network between)."""
    return [n for n in cm.environments() if cm.environment(n).two_level]


def ranked_plans(model: str, gpus: int, env: str, device_memory_gib: float | None = None,
                 top: int = 10, compute: str = DEFAULT_COMPUTE) -> dict[str, Any]:
    """The ``top`` fastest plans that fit: a table (rank, plan, times, vs best, MFU, ...), the plans as dicts,
    and the counts (valid, fitting) and the memory limit in bytes; ``compute`` a :data:`COMPUTE` label."""
    limit = None if device_memory_gib is None else device_memory_gib * GIB
    found = search(cm.llm(model), gpus, cm.environment(env), device_memory=limit, **compute_options(compute))
    best = found.best(top)
    rows = []
    for i, r in enumerate(best):
        rows.append({"rank": i + 1, "plan": r.plan.label(), "iteration_s": r.iteration_time,
                     "vs_best": r.iteration_time / best[0].iteration_time - 1 if best else 0.0, "mfu": r.mfu,
                     "tokens_per_s": r.tokens_per_s, "memory_gib": r.memory["total"] / GIB,
                     "bubble_s": r.bubble, "exposed_comm_s": r.exposed_comm})
    return {"table": pd.DataFrame(rows), "plans": [r.plan.to_dict() for r in best], "valid": found.count,
            "fitting": len(found.order), "device_memory": found.device_memory,
            "memory": memory_table(best)}


def plan_result(model: str, env: str, plan: dict[str, Any], compute: str = DEFAULT_COMPUTE) -> Any:
    """One plan's :class:`~costmodels.llm.PlanResult`."""
    e = cm.environment(env)
    return result_of(evaluate(cm.llm(model), PlanArray.of([Plan(**plan)]), e, **compute_options(compute)), 0, e)


def memory_table(results: list[Any]) -> pd.DataFrame:
    """GiB per GPU of each plan's weights, gradients, optimizer states and activations (long form), with its
    total, the device's memory and whether it runs out."""
    rows = []
    for r in results:
        for part in MEMORY_PARTS:
            rows.append({"plan": r.plan.label(), "part": part, "gib": r.memory[part] / GIB,
                         "total_gib": r.memory["total"] / GIB, "device_gib": r.device_memory / GIB, "oom": r.oom})
    return pd.DataFrame(rows)


def group_table(r: Any) -> pd.DataFrame:
    """Each collective of each group: bytes, calls, per, the library's algorithm/protocol, time per call,
    busy time per iteration (on the busiest stage) and the group's exposed time."""
    m = r.plan.micro_batches
    rows = []
    for g in r.groups:
        busy = g.total * (m if g.per == "micro-batch" else 1.0)
        rows.append({"group": g.group, "collective": g.primitive, "ranks": g.ranks, "bytes": g.nbytes,
                     "size": cm.format_size(round(g.nbytes)), "calls": g.calls, "per": g.per,
                     "algorithm": f"{g.algorithm}/{g.protocol}", "time_s": g.time, "busy_s": busy,
                     "exposed_s": r.exposed.get(g.group, 0.0)})
    return pd.DataFrame(rows, columns=["group", "collective", "ranks", "bytes", "size", "calls", "per", "algorithm",
                                       "time_s", "busy_s", "exposed_s"])


def timeline_table(r: Any) -> pd.DataFrame:
    """The pipeline timeline of one iteration: stream (stage), kind, micro-batch label, start, end, duration."""
    ev = r.timeline().events
    return pd.DataFrame({"stream": [e.stream for e in ev], "kind": [e.kind for e in ev],
                         "name": [e.label for e in ev], "start_s": [e.start for e in ev],
                         "end_s": [e.end for e in ev], "duration_s": [e.end - e.start for e in ev]})


def chrome_trace(r: Any) -> str:
    """The pipeline timeline as Chrome/Perfetto trace JSON."""
    return json.dumps(r.timeline().to_chrome_trace(process=f"commscope {r.spec.name} {r.plan.label()}"))


def attribution_table(r: Any, compute: str = DEFAULT_COMPUTE) -> pd.DataFrame:
    """Seconds and share of the iteration per layer (compute, strategy, library, network)."""
    options = compute_options(compute)
    a = attribute(r, **options)
    shares = a.shares()
    meaning = {"compute": "FLOPs at the achieved rate" if "achieved" not in options else "kernels by shape",
               "strategy": "exposed communication + pipeline bubble",
               "library": "the library's algorithm/protocol vs the cheapest registered one (negative: it wins)",
               "network": f"vs a network {a.faster:g}x faster"}
    return pd.DataFrame([{"layer": k, "seconds": getattr(a, k), "share": shares[k], "meaning": meaning[k]}
                         for k in ("compute", "strategy", "library", "network")])


def best_plan_switches(model: str, gpus: int, env: str, device_memory: float,
                       compute: str = DEFAULT_COMPUTE) -> list[dict[str, Any]]:
    """Where the best plan changes as the inter-node bandwidth per NIC is scaled 1/16x..16x."""
    sw = switch_points(cm.llm(model), gpus, cm.environment(env), device_memory=device_memory,
                       **compute_options(compute))
    return [{"bandwidth_Bps": bw, "from": a, "to": b} for bw, a, b in sw.switches]


def answer(model: str, gpus: int, env: str, table: pd.DataFrame, switches: list[dict[str, Any]] | None) -> str:
    """The page's answer in words: the best plan, its time and MFU, and the nearest bandwidth where it changes
    (``switches`` None: not scanned)."""
    if table.empty:
        return f"no plan of {model} on {gpus} GPUs fits"
    best = table.iloc[0]
    text = (f"best plan for {model} on {gpus:,} GPUs on {env}: {best['plan']}, {best['iteration_s']:.3g} s/iteration, "
            f"MFU {best['mfu']:.1%}, {best['memory_gib']:.1f} GiB per GPU")
    if switches is None:
        return text + "."
    if not switches:
        return text + "; the best plan stays the same from 1/16x to 16x this inter-node bandwidth."
    now = 1 / cm.environment(env).beta
    nearest = min(switches, key=lambda s: abs(math.log(s["bandwidth_Bps"] / now)))
    where = ("below" if nearest["bandwidth_Bps"] <= now else "from")
    plan = nearest["from"] if nearest["bandwidth_Bps"] <= now else nearest["to"]
    return (text + f"; the best plan changes at {nearest['bandwidth_Bps'] / 1e9:.3g} GB/s per NIC "
            f"(now {now / 1e9:.3g} GB/s): {where} it, {plan}.")


def published_table(compute: str = DEFAULT_COMPUTE) -> tuple[pd.DataFrame, str]:
    """Narayanan et al. 2021 Table 1: each row's published and predicted TFLOP/s per GPU, and a sentence."""
    rows = []
    for c in llm_published.compare(**compute_options(compute)):
        r = c.row
        rows.append({"model": f"GPT {r['params_B']}B", "gpus": int(r["gpus"]), "tp": int(r["tp"]),
                     "pp": int(r["pp"]), "global_batch": int(r["global_batch"]), "published_tflops": c.published,
                     "predicted_tflops": c.predicted, "error": c.error})
    df = pd.DataFrame(rows)
    med = median(abs(e) for e in df["error"])
    t = llm_published.table()
    words = (f"{len(df)} rows of Narayanan et al. 2021 (Megatron-LM on up to {df['gpus'].max():,} A100s) predicted "
             f"on {t['environment']}, compute priced as {compute}: median absolute error {med:.1%} on achieved "
             "TFLOP/s per GPU (issue 18's goal: 10%).")
    return df, words
