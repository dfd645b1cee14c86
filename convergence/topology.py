"""Mixing matrices of gossip topologies and their spectral gap.

A mixing matrix W is symmetric and doubly stochastic; gossip replaces each worker's model by
``sum_j W_ij x_j``. Its spectral gap ``1 - lambda^2`` (lambda: the second largest eigenvalue in
magnitude, ``||W - 11^T/n||_2``) sets how fast disagreement contracts: one gossip step shrinks
``sum_i ||x_i - xbar||^2`` by at least ``lambda^2`` (Boyd et al., 'Randomized gossip algorithms',
IEEE Trans. Inf. Theory 2006; Lian et al. NeurIPS 2017, Sec. 3; Koloskova et al. ICML 2020,
Assumption 4). Weights are Metropolis-Hastings ``1 / (1 + max degree)`` on each edge, the rest
on the diagonal (uniform for the regular graphs here).
"""

from __future__ import annotations

import math

import numpy as np

from costmodels._inputs import MAX_RANKS
from costmodels.errors import CommscopeError
from costmodels.registry import Registry

MAX_DENSE = 8192
"""Most workers a dense mixing matrix is built for (n x n float64: 512 MiB); gaps of the registered
topologies never need one (:func:`spectral_gap`)."""
MAX_FFT = 2**22
"""Most workers of the exponential graph's spectral gap (its circulant eigenvalues, one FFT over n)."""


def _check_n(n: object, least: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < least:
        raise CommscopeError(f"n (workers) must be an integer >= {least}, got {n!r}")
    if n > MAX_RANKS:
        raise CommscopeError(f"n (workers) must be at most {MAX_RANKS}, got {n!r}")
    return int(n)


def _dense(n: int) -> int:
    if n > MAX_DENSE:
        raise CommscopeError(f"a dense mixing matrix is built for at most {MAX_DENSE} workers, got n = {n}")
    return n


def _from_neighbours(n: int, offsets: list[int]) -> np.ndarray:
    """Circulant W with weight 1/(deg + 1) on each distinct offset and on the diagonal."""
    hops = sorted({o % n for o in offsets} - {0})
    w = np.zeros((n, n))
    share = 1.0 / (len(hops) + 1)
    for i in range(n):
        w[i, i] = share
        for o in hops:
            w[i, (i + o) % n] += share
    return w


def torus_shape(n: int) -> tuple[int, int]:
    """Rows and columns of the torus of n workers: the most square factorisation r x c (r <= c)."""
    r = math.isqrt(n)
    while n % r:
        r -= 1
    return r, n // r


def _exponential_offsets(n: int) -> list[int]:
    k = max(1, math.ceil(math.log2(n))) if n > 1 else 0
    return [2**j for j in range(k)] + [-(2**j) for j in range(k)]


def ring(n: int) -> np.ndarray:
    """Each worker averages with its two ring neighbours (1/3 each; n = 2: 1/2 each)."""
    n = _dense(_check_n(n))
    return _from_neighbours(n, [1, -1]) if n > 1 else np.ones((1, 1))


def torus(n: int) -> np.ndarray:
    """2-D torus of r x c workers (the most square factorisation of n), 1/5 on each neighbour."""
    n = _dense(_check_n(n))
    r, c = torus_shape(n)
    w = np.zeros((n, n))
    for i in range(r):
        for j in range(c):
            me = i * c + j
            nb = {((i + di) % r) * c + (j + dj) % c for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1))} - {me}
            for k in nb:
                w[me, k] = 1.0 / 5.0
            w[me, me] = 1.0 - w[me].sum()
    return w


def exponential(n: int) -> np.ndarray:
    """Exponential graph: neighbours at distance 2^0, 2^1, ... < n both ways (Ying et al., NeurIPS 2021)."""
    n = _dense(_check_n(n))
    return _from_neighbours(n, _exponential_offsets(n)) if n > 1 else np.ones((1, 1))


def complete(n: int) -> np.ndarray:
    """Exact averaging: W = 11^T / n (spectral gap 1)."""
    n = _dense(_check_n(n))
    return np.full((n, n), 1.0 / n)


TOPOLOGIES: Registry = Registry("topology")
for _name, _f in (("ring", ring), ("torus", torus), ("exponential", exponential), ("complete", complete)):
    _f.name = _name  # type: ignore[attr-defined]
    TOPOLOGIES.register(_f)


def mixing_matrix(topology: str, n: int) -> np.ndarray:
    """The mixing matrix of a registered topology (``ring``, ``torus``, ``exponential``, ``complete``)."""
    return TOPOLOGIES.get(topology)(n)


def second_eigenvalue(w: np.ndarray) -> float:
    """lambda = ||W - 11^T/n||_2 (largest |eigenvalue| on the complement of the all-ones vector)."""
    w = np.asarray(w, dtype=float)
    n = w.shape[0]
    if w.shape != (n, n) or not np.allclose(w, w.T) or not np.allclose(w.sum(axis=1), 1.0):
        raise CommscopeError("a mixing matrix must be square, symmetric and doubly stochastic")
    if n == 1:
        return 0.0
    return float(np.max(np.abs(np.linalg.eigvalsh(w - 1.0 / n))))


def _cycle(m: int) -> tuple[float, float, int]:
    """(smallest nonzero, largest) Laplacian eigenvalue of the cycle on m nodes with distinct neighbours, and
    its degree: 4 sin^2(pi a/m) for a = 1 and a = floor(m/2) when m >= 3; one edge (2, 2) when m = 2; none
    (inf, 0) when m = 1."""
    if m == 1:
        return math.inf, 0.0, 0
    if m == 2:
        return 2.0, 2.0, 1
    return 4 * math.sin(math.pi / m) ** 2, 4 * math.sin(math.pi * (m // 2) / m) ** 2, 2


def _gap_of_sum(weight: float, sizes: tuple[int, ...]) -> float:
    """Spectral gap of ``W = I - weight (L_1 (+) L_2 (+) ...)``, the Kronecker sum of the cycles' Laplacians.

    Derived here. A ring's and a torus's W are this with weight 1/(neighbours + 1) and 1/5: W is circulant
    (block circulant for the torus), so its eigenvalues are 1 - weight (l_1(a_1) + l_2(a_2) + ...) over every
    choice of one Laplacian eigenvalue l_k(a) = 4 sin^2(pi a / m_k) per cycle (circulant eigenvalues: Gray,
    'Toeplitz and circulant matrices: a review', Found. Trends Commun. Inf. Theory 2006, Sec. 3.1; a
    Kronecker sum's are the sums of its terms': Horn and Johnson, 'Topics in matrix analysis', 1991,
    Thm. 4.4.5). The all-zero choice is the eigenvalue 1 of the mean; the others, affine in the sum S,
    reach their largest magnitude at the extremes of S: its smallest nonzero value (the smallest nonzero
    l of one cycle) and its largest (every cycle's largest). lambda is the larger of 1 - weight S_min and
    |1 - weight S_max|, and the gap 1 - lambda^2 is computed as x (2 - x) with x = 1 - lambda, exact to
    rounding even when lambda is within 1e-16 of 1 (rings of 10^8 workers and more)."""
    parts = [_cycle(m) for m in sizes]
    smallest = min(x[0] for x in parts)
    if not math.isfinite(smallest):  # one worker
        return 1.0
    x_top = weight * smallest  # 1 - (the largest eigenvalue below 1)
    bottom = 1.0 - weight * sum(x[1] for x in parts)
    if abs(bottom) > 1.0 - x_top:
        return max(0.0, 1.0 - bottom * bottom)
    return min(1.0, x_top * (2.0 - x_top))


def _exponential_gap(n: int) -> float:
    """The exponential graph's gap from its circulant eigenvalues: the real FFT of W's first row (Gray 2006,
    Sec. 3.1), O(n log n) for n up to :data:`MAX_FFT`."""
    if n > MAX_FFT:
        raise CommscopeError(f"the exponential topology's spectral gap is computed for at most {MAX_FFT:,} workers "
                             f"(one FFT over n), got n = {n:,}")
    hops = sorted({o % n for o in _exponential_offsets(n)} - {0})
    row = np.zeros(n)
    row[0] = 1.0
    row[hops] = 1.0
    eig = np.fft.rfft(row / (len(hops) + 1)).real[1:]
    lam = float(np.max(np.abs(eig))) if eig.size else 0.0
    return max(0.0, 1.0 - lam * lam)


def _registered_gap(topology: str, n: int) -> float | None:
    name = TOPOLOGIES.get(topology).name  # type: ignore[attr-defined]
    if name == "complete" or n == 1:
        return 1.0
    if name == "ring":
        return _gap_of_sum(1.0 / (min(n - 1, 2) + 1), (n,))
    if name == "torus":
        return _gap_of_sum(1.0 / 5.0, torus_shape(n))
    if name == "exponential":
        return _exponential_gap(n)
    return None


def spectral_gap(topology: str | np.ndarray, n: int | None = None) -> float:
    """``1 - lambda^2`` of a topology's mixing matrix for n workers (or of a given matrix).

    Registered topologies are not built: ring and torus in closed form (:func:`_gap_of_sum`, O(1) for any n up
    to ``MAX_RANKS``), the exponential graph by one FFT, the complete graph is 1; a matrix by its eigenvalues.
    """
    if isinstance(topology, str):
        workers = _check_n(n)
        gap = _registered_gap(topology, workers)
        if gap is not None:
            return gap
        w = mixing_matrix(topology, workers)
    else:
        w = topology
    lam = second_eigenvalue(w)
    return max(0.0, 1.0 - lam * lam)


def degree(topology: str, n: int) -> int:
    """Distinct neighbours of a worker in the topology's mixing matrix (every graph here is regular), without
    building it."""
    n = _check_n(n)
    name = TOPOLOGIES.get(topology).name  # type: ignore[attr-defined]
    if name == "ring":
        return _cycle(n)[2]
    if name == "torus":
        return sum(_cycle(m)[2] for m in torus_shape(n))
    if name == "exponential":
        return len({o % n for o in _exponential_offsets(n)} - {0})
    if name == "complete":
        return n - 1
    w = mixing_matrix(topology, n)
    return int(np.count_nonzero(w[0]) - (w[0, 0] != 0))
