"""Llama 3 405B pre-training (Dubey et al. 2024, Table 4), predicted: each row's TFLOPs per GPU beside the model's.

The rows (``data/dubey2024_llama3_table4.json``, with their citation) give GPUs, TP, CP, PP, DP, the sequence
length and the batch; Section 3.3.2 gives what the table does not print and the data file names every
assumption: ZeRO-2-like FSDP, Megatron tensor parallelism with sequence parallelism, an interleaved pipeline
whose virtual stages are not printed (predicted for v = 1, 2 and 4), micro-batch 1, and FlashAttention, which
has the memory and FLOPs of selective recomputation (no s x s scores kept; the attention core recomputed). The
prediction runs on the ``8xH100-NVLink+IB-NDR`` preset (the paper's fabric is RoCE at the same 400 Gb/s per
GPU) and converts its iteration time to TFLOPs per GPU with model FLOPs (:func:`.flops.model_flops_per_token`;
the table's MFU is TFLOPs / 989). Nothing is fitted to the table; like Narayanan et al.'s (:mod:`.published`),
it checks the model on a system and a code base it was not built from (H100, Meta's 2024 stack).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from ..environment import Environment
from ..presets import PRESETS
from . import published
from .flops import model_flops_per_token
from .iteration import ACHIEVED, evaluate
from .plan import Plan, PlanArray
from .result import PlanResult, result_of
from .specs import LLM_SPECS, TransformerSpec

DATA = Path(__file__).parent / "data" / "dubey2024_llama3_table4.json"
VIRTUAL_STAGES = (1, 2, 4)  # not printed in Table 4: the prediction's range over them
HEADLINE_V = 2


@cache
def table() -> dict[str, Any]:
    """The transcribed table with its citation and the assumptions for what it does not print."""
    return json.loads(DATA.read_text())


def row_spec(row: dict[str, Any]) -> TransformerSpec:
    """Llama 3 405B at the row's sequence length and batch (tokens per batch / sequence length sequences)."""
    base = LLM_SPECS.get(table()["common"]["model"])
    seq = int(row["seq_len"])
    return replace(base, seq_len=seq, global_batch=int(row["dp"]) * int(row["batch_per_dp"]))


def row_plan(row: dict[str, Any], v: int = HEADLINE_V) -> Plan:
    """The row's plan with the data file's assumptions (module docstring)."""
    tp, cp, pp, dp = (int(row[k]) for k in ("tp", "cp", "pp", "dp"))
    return Plan(tp=tp, cp=cp, pp=pp, dp=dp, sp=tp > 1, zero=2, schedule="interleaved" if v > 1 else "1f1b", v=v,
                micro_batch=1, global_batch=dp * int(row["batch_per_dp"]), recompute="selective")


@dataclass(frozen=True)
class Comparison(published.Comparison):
    """One row (:class:`.published.Comparison`, at v = :data:`HEADLINE_V`), with the prediction's range over v."""

    low: float = float("nan")
    high: float = float("nan")


def compare(env: Environment | None = None, *, achieved: float | None = ACHIEVED) -> list[Comparison]:
    """Every row of Table 4 predicted (on the H100 preset unless ``env`` is given)."""
    e = env if env is not None else PRESETS.get(table()["environment"])
    out = []
    for row in table()["rows"]:
        spec = row_spec(row)
        tflops: dict[int, float] = {}
        results: dict[int, PlanResult] = {}
        for v in VIRTUAL_STAGES:
            plan = row_plan(row, v)
            result = result_of(evaluate(spec, PlanArray.of([plan]), e, achieved=achieved), 0, e)
            tokens = plan.global_batch * spec.seq_len
            tflops[v] = model_flops_per_token(spec) * tokens / (result.iteration_time * plan.gpus) / 1e12
            results[v] = result
        out.append(Comparison(row, float(row["tflops_per_gpu"]), tflops[HEADLINE_V], results[HEADLINE_V],
                              low=min(tflops.values()), high=max(tflops.values())))
    return out
