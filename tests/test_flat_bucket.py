"""FlatBucket keeps one buffer per use and bucket: a step sends and receives without allocating.

A fresh tensor per step is free on a GPU (PyTorch's caching allocator) but not on a CPU, where
glibc hands large blocks back to the kernel and every step faults their pages in again; the exact
techniques (DeAR, ZeRO, MG-WFBP) must not time that allocator cost as theirs.
"""

from __future__ import annotations

import torch

from runners.training.exact_common import FlatBucket


def _params() -> list[torch.nn.Parameter]:
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    b = torch.nn.Parameter(torch.tensor([[4.0, 5.0]]))
    return [a, b]


def test_flat_grads_reuses_one_buffer_and_zeroes_missing_gradients() -> None:
    a, b = _params()
    bucket = FlatBucket([a, b], world_size=2, rank=0)
    assert (bucket.numel, bucket.shard, bucket.padded) == (5, 3, 6)
    a.grad, b.grad = torch.tensor([0.5, 0.25, 0.125]), torch.tensor([[2.0, 4.0]])
    first = bucket.flat_grads()
    assert first.tolist() == [0.5, 0.25, 0.125, 2.0, 4.0, 0.0]
    b.grad = None  # unused in this step: its slice must read zero, not last step's gradient
    a.grad = torch.tensor([1.0, 1.0, 1.0])
    second = bucket.flat_grads()
    assert second.data_ptr() == first.data_ptr()
    assert second.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_own_shard_reuses_one_buffer_with_zero_padding() -> None:
    a, b = _params()
    bucket = FlatBucket([a, b], world_size=2, rank=1)  # owns elements 3..5: b's two values and one pad
    first = bucket.own_shard()
    assert first.tolist() == [4.0, 5.0, 0.0]
    with torch.no_grad():
        b.mul_(2.0)
    second = bucket.own_shard()
    assert second.data_ptr() == first.data_ptr()
    assert second.tolist() == [8.0, 10.0, 0.0]


def test_named_buffers_are_separate_and_sized_on_demand() -> None:
    bucket = FlatBucket(_params(), world_size=2, rank=0)
    gathered = bucket.buffer("gathered", bucket.padded)
    reduced = bucket.buffer("reduced", bucket.shard)
    assert gathered.data_ptr() != reduced.data_ptr()
    assert bucket.buffer("gathered", bucket.padded).data_ptr() == gathered.data_ptr()
    assert bucket.buffer("gathered", 2 * bucket.padded).numel() == 12  # another size: a new buffer
    assert gathered.dtype == torch.float32 and not gathered.any()
