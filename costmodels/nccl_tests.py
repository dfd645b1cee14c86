"""nccl-tests' bandwidth conventions (NVIDIA/nccl-tests, doc/PERFORMANCE.md).

``algbw = S / t`` for S the bytes of the buffer as nccl-tests counts them (see
:data:`costmodels.collectives.PRIMITIVES`), and ``busbw = algbw * factor`` with a factor that
makes busbw comparable with the link's bandwidth whatever p is: 2(p-1)/p for allreduce,
(p-1)/p for reduce-scatter, allgather and all-to-all, 1 for broadcast, reduce and send/receive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._inputs import as_bytes, as_ranks, as_scalar_or_array
from .errors import CommscopeError, UnknownNameError

_FACTORS = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "broadcast": lambda p: np.ones_like(p, dtype=np.float64),
    "reduce": lambda p: np.ones_like(p, dtype=np.float64),
    "sendrecv": lambda p: np.ones_like(p, dtype=np.float64),
}


def busbw_factor(primitive: str, p: Any) -> Any:
    """nccl-tests' bus-bandwidth factor of ``primitive`` on ``p`` ranks."""
    if primitive not in _FACTORS:
        raise UnknownNameError("primitive with a bus-bandwidth factor", primitive, _FACTORS)
    return as_scalar_or_array(np.asarray(_FACTORS[primitive](as_ranks(p)), dtype=np.float64))


def algbw(nbytes: Any, seconds: Any) -> Any:
    """Algorithm bandwidth in bytes/s: ``nbytes / seconds``."""
    n = as_bytes(nbytes, "nbytes")
    t = np.asarray(seconds, dtype=np.float64)
    if t.size and not (t.min() > 0 and np.isfinite(t.max())):
        raise CommscopeError(f"seconds must be finite and > 0, got {t[~((t > 0) & np.isfinite(t))].flat[0]!r}")
    return as_scalar_or_array(n / t)


def busbw(primitive: str, nbytes: Any, seconds: Any, p: Any) -> Any:
    """Bus bandwidth in bytes/s: ``algbw * busbw_factor(primitive, p)``."""
    return as_scalar_or_array(np.asarray(algbw(nbytes, seconds)) * busbw_factor(primitive, p))
