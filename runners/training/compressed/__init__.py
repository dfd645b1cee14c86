"""Compressed data-parallel training: one registered technique per compressor of :mod:`costmodels.compression`.
Encoders in :mod:`.encoders`, what the techniques share in :mod:`.shared`, the techniques in :mod:`.error_feedback`,
:mod:`.quantizers` and :mod:`.ddp_hooks`; they register in ``TECHNIQUES`` in :mod:`.registration` (on import).
"""

from __future__ import annotations

from .ddp_hooks import FP16, PowerSGD
from .encoders import decode, qsgd_encode, qsgd_quantize, scaled_sign, terngrad_encode, terngrad_quantize
from .error_feedback import DGC, DGC_MIN_SAMPLE, DGC_SAMPLE_FRACTION, EFSignSGD, RandomK, TopK
from .quantizers import QSGD, SignSGD, TernGrad
from .registration import ONE_MESSAGE
from .shared import broadcast_from_first

__all__ = [
    "DGC", "DGC_MIN_SAMPLE", "DGC_SAMPLE_FRACTION", "FP16", "ONE_MESSAGE", "QSGD", "EFSignSGD", "PowerSGD", "RandomK",
    "SignSGD", "TernGrad", "TopK", "broadcast_from_first", "decode", "qsgd_encode", "qsgd_quantize", "scaled_sign",
    "terngrad_encode", "terngrad_quantize",
]
