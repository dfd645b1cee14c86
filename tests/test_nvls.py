"""NCCL's NVLS collectives: the chunk NCCL takes, the kernel's pipeline fill and NCCL 2.28's NVLS bandwidth
(costmodels/libraries/nccl_nvls.py), each against values worked by hand from NCCL's source."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.libraries import Pricer
from costmodels.libraries.nccl_nvls import nvls_bandwidth, nvls_channel_speed, nvls_chunk, nvls_pipeline_fill

H200 = cm.environment("NVLink-H100")  # 8 GPUs on NVSwitch with NVLS; the H200 tables' preset
OPS = 16 * 8  # 16 NVLS channels x 8 heads


def test_the_chunk_halves_where_enqueue_cc_says() -> None:
    # 128 KiB; 64 KiB below 64 x 128 x 128 KiB = 1 GiB; 32 KiB below 8 x 128 x 64 KiB = 64 MiB; 16 KiB below
    # 2 x 128 x 32 KiB = 8 MiB (each rule strict, on the chunk the rule before left)
    n = np.array([2.0**34, 2.0**30, 2.0**30 - 1, 2.0**26, 2.0**26 - 1, 2.0**23, 2.0**23 - 1, 2.0**21, 1.0])
    assert list(nvls_chunk(n, OPS)) == [131072, 131072, 65536, 65536, 32768, 32768, 16384, 16384, 16384]
    # 4 GPUs (ops 64): 64 KiB below 512 MiB
    assert list(nvls_chunk(np.array([2.0**29, 2.0**29 - 1]), 64)) == [131072, 65536]


def test_the_pipeline_fill_by_hand() -> None:
    inv = 1e-9 / 272.0  # s per byte at 272 GB/s
    # allreduce, three stages: two steps of ops x chunk. 8 MiB: chunk 32 KiB, step 128 x 32 KiB = 4 MiB,
    # 2 x 4194304 / 272e9 = 30.84 us; 1 GiB: step 16 MiB, 2 x 16777216 / 272e9 = 123.36 us
    fill = nvls_pipeline_fill("allreduce", np.array([2.0**23, 2.0**30]), 8, inv)
    np.testing.assert_allclose(fill, [30.84e-6, 123.36e-6], rtol=1e-3)
    # 2 MiB is exactly one step (16 KiB x 128); 1 MiB holds less than one: the step is the whole 1 MiB,
    # 2 x 1048576 / 272e9 = 7.71 us
    np.testing.assert_allclose(nvls_pipeline_fill("allreduce", np.array([2.0**21, 2.0**20]), 8, inv),
                               [15.42e-6, 7.71e-6], rtol=1e-3)
    # allgather and reduce-scatter, two stages: one step. 8 MiB: 4194304 / 272e9 = 15.42 us
    for primitive in ("allgather", "reduce_scatter"):
        assert float(nvls_pipeline_fill(primitive, 2.0**23, 8, inv)) == pytest.approx(15.42e-6, rel=1e-3)


def test_nccl_2_28_nvls_bandwidth_by_hand() -> None:
    # allreduce: 8 channels x 40 x 0.85 x 7/8 x 2 = 476 bus, x 8/14 = 272; allgather 8 x 40 x 0.85 x 7/8 x 7/8
    # = 208.25; 4 GPUs (speed 60: 370.8 / 5 = 74.2 -> 60): 4 x 60 x 0.85 = 204; Blackwell (0.74): 8 x 40 x 0.74
    assert float(nvls_bandwidth("allreduce", 8, 40.0, 90)) == pytest.approx(272.0)
    assert float(nvls_bandwidth("allgather", 8, 40.0, 90)) == pytest.approx(208.25)
    assert float(nvls_bandwidth("reduce_scatter", 8, 40.0, 90)) == pytest.approx(208.25)
    assert float(nvls_bandwidth("allreduce", 4, nvls_channel_speed(4, 370.8, 90), 90)) == pytest.approx(204.0)
    assert float(nvls_bandwidth("allreduce", 8, 40.0, 100)) == pytest.approx(236.8)


def test_the_price_moves_and_ncclss_choice_does_not() -> None:
    # NCCL chooses by its 2.21 estimate, lat + n / 266.7 GB/s; the price is lat + n / 272 GB/s + the fill
    sizes = 2.0 ** np.arange(10, 35)
    option = Pricer("allreduce", 8, H200).options[-1]
    price, estimate = option.prices(sizes)
    np.testing.assert_allclose(estimate, 25e-6 + sizes / (320e9 * 5 / 6), rtol=1e-12)
    np.testing.assert_allclose(price, 25e-6 + sizes / 272e9 + nvls_pipeline_fill("allreduce", sizes, 8, 1e-9 / 272),
                               rtol=1e-12)
    choice = cm.choose("allreduce", sizes, 8, H200)
    # NVLS from 2 MiB, as the estimate says (ring/LL below), and the time is the price where NVLS is chosen
    assert set(choice.algorithm[sizes >= 2**21]) == {"nvls"} and "nvls" not in set(choice.algorithm[sizes < 2**21])
    np.testing.assert_allclose(choice.time[sizes >= 2**21], price[sizes >= 2**21], rtol=1e-12)
    # 8 MiB by hand: 25 + 8388608 / 272e3 + 30.84 = 25 + 30.84 + 30.84 = 86.68 us
    assert float(cm.choose("allreduce", 2.0**23, 8, H200).time) == pytest.approx(86.68e-6, rel=1e-3)


def test_nvls_is_priced_inside_one_node_only() -> None:
    # single-node NVLS: 16 GPUs of 8 x H100 nodes over InfiniBand are two nodes, where NVLS has no price
    # (NVLS across nodes needs CollNet: NVLS-tree, not modelled); 8 of them are one node
    env = cm.environment("8xH100-NVLink+IB-NDR")
    two, one = (Pricer("allreduce", p, env).options[-1] for p in (16, 8))
    assert two.algorithm == one.algorithm == "nvls"
    assert np.isnan(two.prices(np.array([2.0**30]))[0]).all() and np.isfinite(one.prices(np.array([2.0**30]))[0]).all()
    with np.errstate(all="raise"):  # no 0 / 0 for a node of one GPU
        nvls_bandwidth("allgather", np.array([1.0, 8.0]), 40.0, 90)
