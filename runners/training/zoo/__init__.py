"""The model zoo: named models with a synthetic example batch and a loss (:mod:`.registry`, :mod:`.networks`),
and small generated data sets for convergence runs (:mod:`.data`). Importing it needs torch.
"""

from __future__ import annotations

from .data import DATASETS, Dataset, DatasetEntry, dataset, datasets, shard
from .networks import MLP, BasicBlock, CausalSelfAttention, DecoderBlock, GPTSmall, ResNetSmall
from .registry import MODELS, SEED, Batch, ModelEntry, classification_loss, model, models

__all__ = [
    "DATASETS", "MLP", "MODELS", "SEED", "BasicBlock", "Batch", "CausalSelfAttention", "Dataset", "DatasetEntry",
    "DecoderBlock", "GPTSmall", "ModelEntry", "ResNetSmall", "classification_loss", "dataset", "datasets", "model",
    "models", "shard",
]
