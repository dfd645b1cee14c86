"""Registration of the compressed techniques in ``TECHNIQUES``, one per compressor of
:mod:`costmodels.compression`, with the cost model each is priced by.
"""

from __future__ import annotations

from ..base import TECHNIQUES, Technique
from .ddp_hooks import FP16, PowerSGD
from .error_feedback import DGC, EFSignSGD, RandomK, TopK
from .quantizers import QSGD, SignSGD, TernGrad

ONE_MESSAGE = {"bucket_bytes": 2**60, "first_bucket_bytes": 2**60}  # fusion options: every tensor in one bucket
_FUSED: dict = {"schedule": "fusion", "schedule_options": ONE_MESSAGE}

for _t in (
    Technique("fp16", "PyTorch DDP with fp16_compress_hook: gradients cast to fp16 / p and all-reduced in buckets",
              FP16, exact=False, schedule="fusion", compressor="fp16"),
    Technique("powersgd", "PyTorch DDP with powerSGD_hook (PowerSGDState: rank, start_powerSGD_iter, "
              "use_error_feedback, warm_start); plain all-reduce before start_powerSGD_iter", PowerSGD, exact=False,
              schedule="fusion", compressor="powersgd", bound="powersgd",
              options={"rank": 4, "start_powerSGD_iter": 10, "use_error_feedback": True, "warm_start": True}),
    Technique("topk", "Top-k per tensor with error feedback on lr * g; values + indices all-gathered", TopK,
              exact=False, compressor="topk", bound="topk", options={"density": 0.01, "seed": 0}, **_FUSED),
    Technique("randomk", "Random-k per tensor (indices shared by seed and step) with error feedback on lr * g; "
              "values all-reduced", RandomK, exact=False, compressor="randomk", bound="randomk",
              options={"density": 0.01, "seed": 0}, **_FUSED),
    Technique("dgc", "DGC: threshold from a 1% sample, at most k values + indices per tensor, error feedback on "
              "lr * g; variable sizes all-gathered", DGC, exact=False, compressor="dgc",
              options={"density": 0.001, "seed": 0}, **_FUSED),
    Technique("qsgd", "QSGD: unbiased stochastic rounding to 2^(bits-1) - 1 levels of each tensor's norm; "
              "norms + levels all-gathered", QSGD, exact=False, compressor="qsgd", bound="qsgd",
              options={"bits": 8, "seed": 0}, **_FUSED),
    Technique("terngrad", "TernGrad: unbiased stochastic ternary times each tensor's max-abs; scales + int8 codes "
              "all-gathered", TernGrad, exact=False, compressor="terngrad:8", options={"seed": 0}, **_FUSED),
    Technique("signsgd", "signSGD with majority vote: int8 signs all-gathered, step lr * sign(sum of signs)",
              SignSGD, exact=False, compressor="signsgd:8", bound="signsgd", **_FUSED),
    Technique("ef_signsgd", "EF-signSGD: (||p||_1/d) sign(p) per tensor with error feedback on lr * g; scales + "
              "int8 signs all-gathered", EFSignSGD, exact=False, compressor="ef_signsgd:8", bound="ef_signsgd",
              **_FUSED),
):
    TECHNIQUES.register(_t)
