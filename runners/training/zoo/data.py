"""Small generated data sets for convergence runs (generated, not downloaded: ``dataset(name, seed, split)``).

* ``gaussian_mixture``: 10 classes in 32 dimensions, each class a mixture of two Gaussian clusters
  (unit covariance; cluster centres drawn once from the seed), so classes are not linearly
  separable; pairs with ``mlp``.
* ``gratings32``: 3x32x32 colour images of 10 classes, class k being a windowed sinusoidal grating
  (Gabor patch) at orientation k x 18 degrees (+-3), with random position, size, spatial
  frequency, phase and colour, plus pixel noise; pairs with ``resnet_small``.
* ``markov_text``: token sequences (vocabulary 256) from a fixed random first-order Markov chain
  with 4 successors per token; targets are the next tokens, and ``info["optimal_loss"]`` is the
  chain's entropy rate in nats (the lowest cross-entropy any model can reach); pairs with ``gpt_small``.

Train and test splits share the structure that ``seed`` draws (centres, chain) and differ in the
samples. ``shard(data, rank, world_size)`` gives every rank the same number of samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from costmodels.errors import CommscopeError
from costmodels.registry import Registry
from runners._extras import require

torch = require("torch", "the model zoo")


@dataclass(frozen=True)
class Dataset:
    """Generated samples: ``inputs`` and ``targets`` tensors (``x, y = data`` unpacks them)."""

    name: str
    split: str
    inputs: Any
    targets: Any
    classes: int
    description: str
    info: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __iter__(self) -> Iterator[Any]:
        return iter((self.inputs, self.targets))


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    description: str
    generate: Callable[[Any, Any, int], tuple[Any, Any, dict[str, Any]]]  # (structure gen, sample gen, n)
    sizes: Mapping[str, int]  # default samples per split
    classes: int


def _gaussian_mixture(structure: Any, sample: Any, n: int) -> tuple[Any, Any, dict[str, Any]]:
    classes, clusters, dim = 10, 2, 32
    centres = 0.5 * torch.randn(classes, clusters, dim, generator=structure)
    y = torch.randint(0, classes, (n,), generator=sample)
    c = torch.randint(0, clusters, (n,), generator=sample)
    x = centres[y, c] + torch.randn(n, dim, generator=sample)
    return x, y, {"features": dim, "clusters_per_class": clusters, "centre_scale": 0.5, "noise": 1.0}


def _gratings32(structure: Any, sample: Any, n: int) -> tuple[Any, Any, dict[str, Any]]:
    classes, size = 10, 32
    del structure  # the classes are the orientations; nothing else is shared between splits

    def u(lo: float, hi: float, *shape: int) -> Any:
        return lo + (hi - lo) * torch.rand(n, *shape, generator=sample)

    y = torch.randint(0, classes, (n,), generator=sample)
    theta = y.float() * (math.pi / classes) + u(-math.pi / 60, math.pi / 60)  # +-3 degrees
    freq = u(0.12, 0.3) * 2 * math.pi  # radians per pixel
    phase = u(0, 2 * math.pi)
    cy, cx, sigma = u(8, 24), u(8, 24), u(5, 10)
    colour = u(0.3, 1.0, 3)
    grid = torch.arange(size, dtype=torch.float32)
    yy, xx = grid.view(1, size, 1), grid.view(1, 1, size)
    along = (xx - cx.view(-1, 1, 1)) * torch.cos(theta).view(-1, 1, 1) + (yy - cy.view(-1, 1, 1)) * torch.sin(
        theta).view(-1, 1, 1)
    wave = torch.cos(freq.view(-1, 1, 1) * along + phase.view(-1, 1, 1))
    dist2 = (xx - cx.view(-1, 1, 1)) ** 2 + (yy - cy.view(-1, 1, 1)) ** 2
    window = torch.exp(-dist2 / (2 * sigma.view(-1, 1, 1) ** 2))
    img = colour.view(n, 3, 1, 1) * (wave * window).unsqueeze(1)
    img = img + 0.3 * torch.randn(n, 3, size, size, generator=sample)
    return img / img.std(), y, {"image": [3, size, size], "orientation_step_deg": 180 / classes, "noise": 0.3}


def _markov_text(structure: Any, sample: Any, n: int) -> tuple[Any, Any, dict[str, Any]]:
    vocab, successors, seq = 256, 4, 64
    nxt = torch.randint(0, vocab, (vocab, successors), generator=structure)
    probs = torch.softmax(1.5 * torch.randn(vocab, successors, generator=structure, dtype=torch.float64), dim=1)
    # transition matrix (repeated successors add up) and its stationary distribution -> entropy rate
    P = torch.zeros(vocab, vocab, dtype=torch.float64).scatter_add_(1, nxt, probs)
    logp = torch.where(P > 0, P.log(), torch.zeros_like(P))
    h = -(P * logp).sum(1)  # entropy of the next token after each token
    pi = torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)
    for _ in range(1000):  # power iteration to the stationary distribution
        pi = pi @ P
    entropy_rate = float(pi @ h)
    tokens = torch.empty(n, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (n,), generator=sample)
    for t in range(seq):
        cur = tokens[:, t]
        pick = torch.multinomial(probs[cur].float(), 1, generator=sample).squeeze(1)
        tokens[:, t + 1] = nxt[cur, pick]
    # the first token is uniform, not stationary: the optimum is the mean conditional entropy along the sequence
    dist, total = torch.full((vocab,), 1.0 / vocab, dtype=torch.float64), 0.0
    for _ in range(seq):
        total += float(dist @ h)
        dist = dist @ P
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous(), {
        "vocab": vocab, "seq": seq, "successors": successors, "entropy_rate": entropy_rate,
        "optimal_loss": total / seq}


DATASETS: Registry[DatasetEntry] = Registry("data set")
for _data in (
    DatasetEntry("gaussian_mixture", "10 classes in 32 dimensions, each a mixture of two unit-variance Gaussian "
                 "clusters (centres ~ N(0, 0.5^2) drawn from the seed)", _gaussian_mixture,
                 {"train": 8192, "test": 2048}, 10),
    DatasetEntry("gratings32", "3x32x32 images of 10 classes: a windowed grating at orientation class x 18 deg "
                 "(+-3), random position, size, frequency, phase and colour, pixel noise 0.3", _gratings32,
                 {"train": 4096, "test": 1024}, 10),
    DatasetEntry("markov_text", "64-token sequences over a vocabulary of 256 from a fixed random Markov chain "
                 "(4 successors per token); targets are the next tokens", _markov_text,
                 {"train": 4096, "test": 512}, 256),
):
    DATASETS.register(_data)

_SPLITS = {"train": 1, "test": 2}


def datasets() -> list[str]:
    return DATASETS.names()


def dataset(name: str, seed: int = 0, split: str = "train", size: int | None = None) -> Dataset:
    """A generated data set: the same tensors for the same (name, seed, split, size) and torch version."""
    entry = DATASETS.get(name)
    if split not in _SPLITS:
        raise CommscopeError(f"split must be one of {', '.join(_SPLITS)}, got {split!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise CommscopeError(f"seed must be an integer >= 0, got {seed!r}")
    n = entry.sizes[split] if size is None else size
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise CommscopeError(f"size must be a positive integer, got {size!r}")
    structure = torch.Generator().manual_seed(seed)
    sample = torch.Generator().manual_seed(seed * 1_000_003 + _SPLITS[split])
    x, y, info = entry.generate(structure, sample, n)
    return Dataset(entry.name, split, x, y, entry.classes, entry.description, {"seed": seed, **info})


def shard(data: Any, rank: int, world_size: int) -> Any:
    """Rank ``rank``'s shard of ``data`` (a :class:`Dataset` or a tuple of tensors with equal first
    dimensions): samples rank, rank + world_size, ... of the first ``world_size x (n // world_size)``,
    so every rank gets ``n // world_size`` samples and the last ``n % world_size`` are left out."""
    for what, v in (("world_size", world_size), ("rank", rank)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise CommscopeError(f"{what} must be an integer, got {v!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise CommscopeError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
    tensors = (data.inputs, data.targets) if isinstance(data, Dataset) else tuple(data)
    n = {int(t.shape[0]) for t in tensors}
    if len(n) != 1:
        raise CommscopeError(f"tensors to shard must have the same number of samples, got {sorted(n)}")
    per = n.pop() // world_size
    if per < 1:
        raise CommscopeError(f"cannot shard {len(tensors[0])} samples over {world_size} ranks")
    idx = torch.arange(per) * world_size + rank
    parts = tuple(t[idx] for t in tensors)
    if isinstance(data, Dataset):
        return replace(data, inputs=parts[0], targets=parts[1],
                       info={**data.info, "shard": {"rank": rank, "world_size": world_size, "of": per * world_size}})
    return parts if isinstance(data, tuple) else list(parts)
