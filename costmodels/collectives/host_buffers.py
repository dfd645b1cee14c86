"""What a collective library's own host buffers cost: copies into and out of them, and page faults when the
allocator maps them afresh (``Environment.host_copy`` = mu, ``Environment.host_fault`` = phi, s per byte).

PyTorch's gloo backend (torch 2.13, ``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp``) runs

* ``reduce_scatter_tensor`` (``_reduce_scatter_base`` -> ``reduce_scatter_tensor_coalesced``) as a clone of the
  n-byte input, a ring all-reduce of the clone in place, then a copy of the rank's n/p chunk into the output
  (in ``LambdaWork``'s wait): ``(n + n/p) mu`` of copies, before and after the transfer;
* ``all_gather_into_tensor`` (``_allgather_base`` -> ``AsyncAllgatherWork``) into a flat output of its own
  (``newLikeFlat``), then a copy of those n bytes into the caller's output: ``n mu`` after the transfer.

**Fresh buffers (derived here).** glibc's malloc serves an allocation of at least its mmap threshold with a
fresh ``mmap`` and returns it with ``munmap`` on free; the threshold rises to the size of a freed mapped chunk
but never above ``DEFAULT_MMAP_THRESHOLD_MAX``, 4 x 1024 x 1024 x sizeof(long) = 32 MiB on 64-bit hosts
(glibc ``malloc/malloc.c``; ``mallopt(3)``, M_MMAP_THRESHOLD). So a buffer of 32 MiB or more is mapped afresh
on every call, and each of its 4 KiB pages faults when first written: ``n phi`` more for the clone. Below
32 MiB the pages fault on the first calls only, until the threshold has risen past the size (measured here:
a 16 MiB clone faulted on its first 7 calls, a 33 MiB one on every call, 2 us a page on the 2-core host,
``bench/results/gloo_host_buffers``).

The all-gather's fresh output is written by the receives, whose faults overlap the wire: 4 ranks behind
200 Mbit/s and 2 x 2 ranks behind 1 Gbit/s showed none of them (64 MiB: +0.2..+0.4 and -0.1 ns/B over 16 MiB),
4 ranks behind 2.5 Gbit/s all (+1.0..+1.3 ns/B). Which links expose them is not derived: the term is left out
(``tests/test_host_buffers.py`` holds the 2.5 Gbit/s miss as a strict xfail).

These terms are added to the time after the link's token bucket (:mod:`.token_bucket`): the host works
while the link idles, not between the steps of the transfer.
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from ..symbols import mu, n, p, phi

MMAP_THRESHOLD_MAX = 2**25
"""Bytes from which glibc maps every allocation afresh (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit: 32 MiB)."""
NO_HOST = sp.Integer(0)
"""No host buffers: the algorithm works in the caller's memory."""
SYMBOLS = (mu, phi)


def fresh(nbytes: sp.Expr) -> sp.Expr:
    """Bytes of a buffer of ``nbytes`` that glibc maps afresh on every call: all of it from 32 MiB, else 0."""
    return sp.Piecewise((nbytes, nbytes >= MMAP_THRESHOLD_MAX), (0, True))


GLOO_REDUCE_SCATTER = (n + n / p) * mu + fresh(n) * phi
"""gloo's reduce-scatter: the clone of the input (n, mapped afresh from 32 MiB) and the copy of the n/p chunk."""
GLOO_ALLGATHER = n * mu
"""gloo's all-gather: the copy of the n bytes out of its flat output (whose faults overlap the receives)."""


def host_values(env: Any) -> dict[sp.Symbol, Any]:
    """mu and phi of an environment (or an array of them): its ``host_copy`` and ``host_fault`` (0 if absent)."""
    return {mu: getattr(env, "host_copy", 0.0), phi: getattr(env, "host_fault", 0.0)}
