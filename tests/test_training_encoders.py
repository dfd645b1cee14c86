"""The compressed techniques' encoders without processes: QSGD and TernGrad are unbiased (exact binomial tests)
and within their omega bounds, and send nothing for a zero tensor."""

from __future__ import annotations

import math

import numpy as np
import pytest

import costmodels as cm

torch = pytest.importorskip("torch")

from runners.training.compressed import qsgd_encode, terngrad_encode  # noqa: E402

ALPHA = 1e-6  # false-alarm rate of each statistical test below (Bonferroni over its coordinates)


# ------------------------------------------------------------------ quantisers (no processes)
def _binomial_p_values(counts: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    from scipy.stats import binomtest

    return np.array([binomtest(int(c), n, float(min(max(q, 0.0), 1.0))).pvalue for c, q in zip(counts, p,
                                                                                                 strict=True)])


N_SAMPLES = 20_000


@pytest.mark.parametrize("bits", [2, 4, 8, 12])
def test_qsgd_is_unbiased_and_within_omega(bits: int) -> None:
    """Each coordinate rounds to one of its two adjacent levels; unbiasedness means the upper one is taken with
    probability frac(r_i), so the count over N samples is Binomial(N, frac(r_i)): an exact two-sided binomial test
    per coordinate, Bonferroni at ALPHA (false alarm <= 1e-6). The mean squared error is checked against its
    exact value (6 standard errors) and QSGD's omega bound."""
    gen = torch.Generator().manual_seed(bits)
    d = 64
    v = torch.randn(d, generator=gen)
    scale, levels = qsgd_encode(v.expand(N_SAMPLES, d), bits, gen)
    assert levels.dtype == (torch.int8 if bits <= 8 else torch.int32)
    s = 2 ** (bits - 1) - 1
    v64 = v.double().numpy()
    norm = np.linalg.norm(v64)
    r = np.abs(v64) / norm * s
    low = np.floor(r)
    lev = levels.numpy().astype(np.int64)
    assert np.all((lev == 0) | (np.sign(lev) == np.sign(v64)))
    mags = np.abs(lev)
    assert np.all((mags == low) | (mags == low + 1))
    p_values = _binomial_p_values((mags == low + 1).sum(axis=0), N_SAMPLES, r - low)
    assert p_values.min() > ALPHA / d
    q = (scale * levels.float()).double().numpy()
    err = ((q - v64) ** 2).sum(axis=1) / norm**2
    exact = float(((r - low) * (1 - (r - low))).sum() / s**2)
    assert abs(err.mean() - exact) <= 6 * err.std() / math.sqrt(N_SAMPLES) + 1e-9
    assert err.mean() <= cm.compressor("qsgd").omega(d, bits)


def test_terngrad_is_unbiased_and_within_omega() -> None:
    """Each coordinate is 0 or sign(v_i) max|v|, the latter with probability |v_i| / max|v|: the same exact
    binomial test per coordinate (Bonferroni, false alarm <= 1e-6), and the variance against sqrt(d) - 1."""
    gen = torch.Generator().manual_seed(7)
    d = 64
    v = torch.randn(d, generator=gen)
    scale, codes = terngrad_encode(v.expand(N_SAMPLES, d), gen)
    assert codes.dtype == torch.int8
    v64 = v.double().numpy()
    c = codes.numpy().astype(np.int64)
    assert np.all((c == 0) | (c == np.sign(v64)))
    m = np.abs(v64).max()
    p_values = _binomial_p_values((c != 0).sum(axis=0), N_SAMPLES, np.abs(v64) / m)
    assert p_values.min() > ALPHA / d
    q = (scale * codes.float()).double().numpy()
    err = ((q - v64) ** 2).sum(axis=1) / (v64 @ v64)
    exact = float((m * np.abs(v64).sum() - v64 @ v64) / (v64 @ v64))
    assert abs(err.mean() - exact) <= 6 * err.std() / math.sqrt(N_SAMPLES)
    assert err.mean() <= cm.compressor("terngrad").omega(d, None)


def test_quantisers_send_zero_for_a_zero_tensor() -> None:
    z = torch.zeros(5)
    for scale, codes in (qsgd_encode(z, 8), terngrad_encode(z)):
        assert float(scale.abs().sum()) == 0.0 and int(codes.abs().sum()) == 0
