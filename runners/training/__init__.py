"""Real data-parallel training with every technique commscope models (see :mod:`.base`), and what runs it: the
model zoo and generated data sets (:mod:`.zoo`), the layer-wise profiler (:mod:`.profiler`) and the torchrun
training runner (:mod:`.runner`); import those three on their own (the zoo needs torch)."""

from __future__ import annotations

from . import compressed, decentralized  # noqa: F401 (register their techniques)
from . import exact as _exact  # noqa: F401 (registers the exact techniques)
from .base import TECHNIQUES, StepResult, Technique, Trainer, technique, techniques

__all__ = ["TECHNIQUES", "StepResult", "Technique", "Trainer", "technique", "techniques"]
