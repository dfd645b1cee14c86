"""Narayanan et al. 2021 (SC'21) Table 1, predicted: each row's achieved TFLOP/s per GPU beside the model's.

The rows (``data/narayanan2021_table1.json``, with their citation) give the GPT shape, tp, pp, GPUs and global
batch; the authors' script (``examples/sc21/run_table_1.sh`` of NVIDIA/Megatron-LM) gives the micro-batch,
the virtual stages of the interleaved schedule, full recomputation and the DDP implementation (PyTorch's,
which overlaps the gradient all-reduce with the backward, or Megatron's 2021 'local' one, which does not); its
``CONFIG.sh`` passes ``--fp16`` without ``--fp16-lm-cross-entropy``, so the loss runs on logits cast to fp32
(the kernel model's default ``loss='fp32'``, :data:`.kernels.LOSS_BYTES`).
The prediction runs the plan on the ``8xA100-NVLink+IB-HDR`` preset (Selene's DGX A100 nodes) and converts
its iteration time to TFLOP/s per GPU with the paper's own eq. (3) (:func:`.flops.narayanan_eq3`), as the
table does. Nothing here is fitted to the table: the achieved fraction of peak is the default
(:data:`.iteration.ACHIEVED`, from an independent source); ``compare(achieved=None)`` prices compute with the
kernel model (:mod:`.kernels`) and the attention of the 2021 code (scores materialized in HBM: Megatron's
baddbmm and fused scale-mask-softmax).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..environment import Environment
from ..presets import PRESETS
from .flops import narayanan_eq3
from .iteration import ACHIEVED, evaluate
from .plan import Plan, PlanArray
from .result import PlanResult, result_of
from .specs import TransformerSpec

DATA = Path(__file__).parent / "data" / "narayanan2021_table1.json"


@cache
def table() -> dict[str, Any]:
    """The transcribed table with its citation."""
    return json.loads(DATA.read_text())


def row_spec(row: dict[str, Any]) -> TransformerSpec:
    """The GPT of one row (vocabulary 51,200, sequence 2,048, 16-bit)."""
    common = table()["common"]
    h = int(row["hidden"])
    return TransformerSpec(name=f"gpt-{row['params_B']}b", layers=int(row["layers"]), hidden=h, heads=int(row["heads"]),
                           kv_heads=int(row["heads"]), ffn=4 * h, gated=False, seq_len=int(common["seq_len"]),
                           vocab=int(common["vocab"]), global_batch=int(row["global_batch"]), dtype="fp16",
                           tied_embeddings=True, source=table()["citation"])


def row_plan(row: dict[str, Any]) -> Plan:
    """The authors' plan for one row (module docstring)."""
    tp, pp, gpus, v = int(row["tp"]), int(row["pp"]), int(row["gpus"]), int(row["v"])
    return Plan(tp=tp, pp=pp, dp=gpus // (tp * pp), schedule="interleaved" if v > 1 else "1f1b", v=v,
                micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]), recompute="full")


@dataclass(frozen=True)
class Comparison:
    """One row: the published and the predicted TFLOP/s per GPU, and the prediction behind it."""

    row: dict[str, Any]
    published: float
    predicted: float
    result: PlanResult

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return (self.predicted - self.published) / self.published


def compare(env: Environment | None = None, *, achieved: float | None = ACHIEVED, **options: Any) -> list[Comparison]:
    """Every row of the table predicted (on Selene's preset unless ``env`` is given)."""
    e = env if env is not None else PRESETS.get(table()["environment"])
    out = []
    for row in table()["rows"]:
        spec, plan = row_spec(row), row_plan(row)
        ev = evaluate(spec, PlanArray.of([plan]), e, achieved=achieved, overlap_grad_reduce=row["ddp"] == "torch",
                      attention="materialized", **options)
        result = result_of(ev, 0, e)
        flops = narayanan_eq3(plan.global_batch, spec.seq_len, spec.layers, spec.hidden, spec.vocab)
        predicted = flops / (result.iteration_time * plan.gpus) / 1e12
        out.append(Comparison(row, float(row["tflops_per_gpu"]), predicted, result))
    return out
