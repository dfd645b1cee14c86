"""The collective-library layer (costmodels.libraries): what NCCL, gloo, MPICH and the ideal library run, and
what it costs, pinned to values worked by hand from NCCL 2.21's tuning model and the libraries' rules; and the
pricer (blocks, options left out by their bounds, formulas evaluated once per run of rows) held to a plain
evaluation of the same formulas on random grids."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels._compile import CompiledExpr
from costmodels.libraries import Pricer, resolve
from costmodels.libraries import nccl_constants as tables
from costmodels.libraries.core import Rows
from costmodels.libraries.runs import Runs

A100 = cm.environment("NVLink-A100")  # 8 GPUs on one NVSwitch node, NCCL, cc 80
DGX2 = cm.environment("8xA100-NVLink+IB-HDR")  # nodes of 8 A100, 8 HDR NICs (24 GB/s each as NCCL models them)
FLAT = cm.Environment(alpha=10e-6, beta=1e-9, gamma=1e-10)  # a custom environment: the ideal library


def test_registry_and_environment_defaults() -> None:
    assert cm.libraries() == ["ideal", "gloo", "mpich", "nccl"]
    assert FLAT.library == "ideal"
    assert cm.environment("10GbE").library == "gloo" and A100.library == "nccl" and A100.link == "nvlink"
    assert cm.environment("NVLink-H100").nvls and cm.environment("IB-NDR").compute_capability == 90
    with pytest.raises(cm.CommscopeError, match="library must be one of ideal, nccl, gloo, mpich, got 'nvshmem'"):
        FLAT.with_(library="nvshmem")
    with pytest.raises(cm.CommscopeError, match="oversubscription must be >= 1"):
        FLAT.with_(oversubscription=0.5)
    assert cm.Environment.from_dict(DGX2.to_dict()) == DGX2


def test_nccl_small_allreduce_on_one_a100_node_by_hand() -> None:
    # ring/LL wins: baseLat 6.6 us + nsteps 2(8-1) = 14 hops x NVLink LL 0.6 us = 15.0 us of latency;
    # LL bus bandwidth min(llMaxBw[Ampere][1 node] = 87.7, 0.5 x 240) = 87.7 GB/s, algBw = 87.7 x 8/14 = 50.114 GB/s
    c = cm.choose("allreduce", [8.0, 2.0**20], 8, A100)
    assert list(c.algorithm) == ["ring", "ring"] and list(c.protocol) == ["LL", "LL"]
    algbw = 87.7e9 * 8 / 14
    assert c.time[0] == pytest.approx(15.0e-6 + 8 / algbw, rel=1e-12)  # 15.00 us (the audit: NCCL's 15 us)
    assert c.time[1] == pytest.approx(15.0e-6 + 2**20 / algbw, rel=1e-12)  # 35.92 us (NCCL's 36 us)
    # LL128 at 1 MiB would cost 14 + 14 x 1.9 = 40.6 us of latency alone: more than LL's whole 35.9 us


def test_nccl_large_allreduce_on_one_a100_node_by_hand() -> None:
    # ring/Simple: 8.4 + 14 x 3.4 = 56.0 us; bus bandwidth 240 GB/s (12 NVLinks x 20), algBw = 240 x 8/14;
    # gamma 3/1555e9 s/B x 7/8 of n reduced = 1.69 ps/B < 1/137.1 GB/s = 7.29 ps/B: the transfer bounds
    n = 2.0**30
    c = cm.choose("allreduce", n, 8, A100)
    assert (c.algorithm, c.protocol, int(c.channels)) == ("ring", "Simple", 12)  # ceil(240 / 20) channels
    assert float(c.time) == pytest.approx(56.0e-6 + n / (240e9 * 8 / 14), rel=1e-12)  # 7.8856 ms
    assert cm.busbw("allreduce", n, float(c.time), 8) / 1e9 == pytest.approx(238.3, abs=0.05)


def test_nccl_tree_across_two_dgx_a100_nodes_by_hand() -> None:
    # 2 nodes x 8: ring bus bandwidth min(240, 8 NICs x 24) = 192 GB/s -> 10 channels; the tree crosses the
    # node boundary once per byte and direction on 2 nodes: min(240, 2 x 192) = 240, x 0.92 = 220.8, under the
    # cap 10 x perChMaxTreeBw[Ampere][2 nodes] 23.6 = 236; algBw = 220.8 / 2 = 110.4 GB/s.
    # Simple tree latency 2 x ((8-1) x 28 + floor(log2 2) x 28) = 448 us; at 2 GiB no tree correction (beyond 256 MiB)
    n = 2.0**31
    c = cm.choose("allreduce", n, 16, DGX2)
    assert (c.algorithm, c.protocol) == ("tree", "Simple")
    assert float(c.time) == pytest.approx(448e-6 + n / 110.4e9, rel=1e-12)
    # ring would be 192 x 16/30 = 102.4 GB/s algBw: slower, as NCCL's own estimate says too
    assert cm.busbw("allreduce", n, float(c.time), 16) / 1e9 == pytest.approx(202.3, abs=0.1)  # vs 23 GB/s flat ring


def test_nccl_chooses_with_its_own_latencies_but_prices_the_real_network() -> None:
    # the same two nodes with a 30 us TCP-like network: NCCL still thinks a NET hop is 2.7 us (ring LL)
    slow = DGX2.with_(alpha=30e-6)
    fast_choice, slow_choice = cm.choose("allreduce", 1024.0, 16, DGX2), cm.choose("allreduce", 1024.0, 16, slow)
    assert (slow_choice.algorithm, slow_choice.protocol) == (fast_choice.algorithm, fast_choice.protocol)
    # tree/LL: 2 x ((8-1) x 0.6 + 1 x 5.0) + 6.8 = 23.2 us in NCCL's model; each NET hop costs 30 - 2.7 us more
    assert (fast_choice.algorithm, fast_choice.protocol) == ("tree", "LL")
    assert float(slow_choice.time - fast_choice.time) == pytest.approx(2 * 27.3e-6, rel=1e-9)


def test_reduction_is_pipelined_with_the_transfer() -> None:
    # gamma so large that reducing 7/8 of n takes longer than moving it: time = latency + n x 7/8 x gamma
    slow_gpu = A100.with_(gamma=1e-10)
    n = 2.0**30
    c = cm.choose("allreduce", n, 8, slow_gpu)
    assert float(c.time) == pytest.approx(56.0e-6 + n * 7 / 8 * 1e-10, rel=1e-12)
    # allgather reduces nothing: gamma does not enter
    assert float(cm.choose("allgather", n, 8, slow_gpu).time) == float(cm.choose("allgather", n, 8, A100).time)


def test_oversubscription_and_rail_optimised_leaves() -> None:
    # 4 nodes under leaves of 2 with a 2:1 fat tree: the ring's inter-node share halves (192 -> 96 GB/s)
    n = 2.0**31
    base = DGX2.with_(library="nccl")
    ring_only = {"sharp": False}
    flat = cm.choose("allgather", n, 32, base.with_(**ring_only))
    over = cm.choose("allgather", n, 32, base.with_(oversubscription=2.0, nodes_per_leaf=2))
    bw_flat, bw_over = n / float(flat.time), n / float(over.time)
    assert bw_over / bw_flat == pytest.approx(0.5, rel=0.01)
    # rail-optimised leaves serve 2 x 8 NICs' nodes: 4 nodes stay below the spine, full bandwidth again
    rail = cm.choose("allgather", n, 32, base.with_(oversubscription=2.0, nodes_per_leaf=2, rail_optimized=True))
    assert float(rail.time) == float(flat.time)
    # and a single leaf of 4 nodes is not oversubscribed at all
    assert float(cm.choose("allgather", n, 32, base.with_(oversubscription=2.0, nodes_per_leaf=4)).time) == \
        float(flat.time)


def test_nics_per_node_set_the_multi_node_ring() -> None:
    n = 2.0**31
    one_nic = cm.choose("allgather", n, 16, DGX2.with_(nics_per_node=1))
    eight = cm.choose("allgather", n, 16, DGX2)
    # ring bus bandwidth min(240, 1 x 24) = 24 vs min(240, 8 x 24) = 192 GB/s: 8 times the time (latency aside)
    assert float(one_nic.time) / float(eight.time) == pytest.approx(8.0, rel=0.01)


def test_in_network_reduction_appears_where_the_switches_have_it() -> None:
    sizes = 2.0 ** np.arange(10, 34)
    plain = cm.choose("allreduce", sizes, 32, DGX2)
    sharp = cm.choose("allreduce", sizes, 32, DGX2.with_(sharp=True))
    assert "collnet_direct" not in set(plain.algorithm) and "collnet_direct" in set(sharp.algorithm)
    # 4 nodes at 1 GiB: CollNet's algBw min(8 NICs x 24 = 192, 1 / (2 x 7/8 / 240)) = 137.1 GB/s beats the ring's
    # 192 x 32/62 = 99.1 and the tree's 0.92 x 192 / 2 = 88.3
    big = sizes == 2.0**30
    assert sharp.algorithm[big][0] == "collnet_direct" and sharp.time[big][0] < plain.time[big][0] / 1.3
    h100 = cm.environment("NVLink-H100")
    assert h100.nvls and cm.choose("allreduce", 2.0**30, 8, h100).algorithm == "nvls"
    # NVLS: NCCL's NVLS graph has 8 channels (one per GPU); each pulls from all 8 GPUs, twice from its own, so a
    # GPU's 370.8 GB/s of NVLink carry 9 x speed: 370.8 / 9 = 41.2 -> 40 GB/s from sm90's speed array (search.cc
    # 855); busBw 8 x 40 = 320, algBw 5/6 x 320 = 266.7 GB/s (tuning.cc 212-219), one NVLink hop of latency
    # (25 us). 1 GiB by NCCL 2.21's estimate, which it chooses by: 25 + 1073741824 / 266.67e3 = 4051.5 us. Priced
    # with NCCL 2.28's NVLS bandwidth, 8 x 40 x 0.85 = 272 GB/s (tuning.cc 2.30.7: 8 channels x 40 x 0.85 x 7/8 x 2
    # = 476 bus, x 8/14), and the kernel's pipeline fill (two steps of 16 channels x 8 heads x 128 KiB = 16 MiB:
    # 2 x 16777216 / 272e3 = 123.4 us): 25 + 1073741824 / 272e3 + 123.4 = 25 + 3947.6 + 123.4 = 4096.0 us
    nvls = Pricer("allreduce", 8, h100).options[-1]
    price, estimate = nvls.prices(np.float64(2.0**30))
    assert nvls.algorithm == "nvls" and float(estimate) == pytest.approx(25e-6 + 2**30 / (320e9 * 5 / 6), rel=1e-12)
    assert float(estimate) == pytest.approx(4051.5e-6, rel=1e-4)
    assert float(cm.choose("allreduce", 2.0**30, 8, h100).time) == float(price) == pytest.approx(4096.0e-6, rel=1e-4)


def test_nvls_graph_channel_speed_follows_nccls_search() -> None:
    from costmodels.libraries.nccl import nvls_channel_speed

    # (ppn + 1) x speed <= the GPU's NVLink bandwidth, the fastest speed of the array that fits (search.cc 850-856):
    # H100 370.8 GB/s: 2 GPUs 123.6 -> 60 (the array's fastest), 5 GPUs 61.8 -> 60, 6 GPUs 53.0 -> 50,
    # 8 GPUs 41.2 -> 40; before sm90 the array starts at 40: 12 x 20 = 240 GB/s on 8 GPUs 26.7 -> 20
    assert list(nvls_channel_speed(np.array([2, 5, 6, 8]), 370.8, 90)) == [60.0, 60.0, 50.0, 40.0]
    assert float(nvls_channel_speed(8, 240.0, 80)) == 20.0
    assert float(nvls_channel_speed(8, 1.0, 90)) == 3.0  # nothing fits: the slowest speed, as the search ends


def test_gloo_runs_one_algorithm_per_primitive() -> None:
    env = cm.environment("10GbE")
    sizes = 2.0 ** np.arange(0, 30)
    for primitive, algorithm in (("allreduce", "gloo_ring_allreduce"), ("reduce_scatter", "allreduce_reduce_scatter"),
                                 ("allgather", "gloo_ring_allgather"), ("broadcast", "binomial_broadcast"),
                                 ("reduce", "ring_reduce")):
        c = cm.choose(primitive, sizes, 6, env)
        assert set(c.algorithm) == {algorithm}, primitive
        assert np.array_equal(c.time, cm.collective(algorithm).time(sizes, 6, env))


def test_gloo_ring_allreduce_halves_the_latency_below_2p_elements() -> None:
    # gloo allreduce.cc: at least 2p segments, two in flight per step, empty ones skipped. At p = 4 a buffer
    # below 2p = 8 float32 elements (32 B) carries one segment per step: alpha = 1 ms, beta = 1 ns/B:
    # 16 B: 6 x 1 ms x 1/2 + 2 x 3/4 x 16 ns = 3.000024 ms; 32 B: 6 ms + 48 ns = 6.000048 ms; at 1 MiB the ring's own
    # 6 ms + 1.5 x 1048576 ns = 7.572864 ms
    env = cm.Environment(alpha=1e-3, beta=1e-9, gamma=0.0)
    g = cm.collective("gloo_ring_allreduce")
    assert g.time(16, 4, env) == pytest.approx(3.000024e-3, rel=1e-12)
    assert g.time(32, 4, env) == pytest.approx(6.000048e-3, rel=1e-12)
    assert g.time(2**20, 4, env) == pytest.approx(7.572864e-3, rel=1e-12)
    n = np.array([16.0, 31.0, 32.0, 4096.0])
    assert np.allclose(g.evaluator(4, env)(n), g.time(n, 4, env), rtol=1e-12)  # a step in n: not affine
    # gloo's reduce-scatter is the same allreduce of the whole buffer, so it halves there too
    assert cm.collective("allreduce_reduce_scatter").time(16, 4, env) == pytest.approx(3.000024e-3, rel=1e-12)
    # at p = 2, 2p elements are 16 B: 16 B is already two segments per step (2 x 1 ms + 16 ns)
    assert g.time(16, 2, env) == pytest.approx(2.000016e-3, rel=1e-12)


def test_gloo_ring_allgather_by_hand() -> None:
    # p >= 3: the ring, (p-1) alpha + (p-1)/p n beta. p = 2, where the ring's two neighbours are one tcp pair:
    # a late rank's recv notices wait behind its own half-blocks of n/4, so alpha + 3/4 n beta, of which n/4
    # is the wait (alpha 1e-4 s, beta 1e-8 s/B, n 4 MB: 1e-4 + 0.75 * 0.04 = 0.0301 s; the ring: 0.0201 s).
    # Measured with gloo on two emulated 200 Mbit/s nodes, 16 MiB back to back: 522-526 ms, 1.49-1.50 times
    # the 351 ms of 8 MiB one way (library_algorithms.py)
    env = cm.Environment(alpha=1e-4, beta=1e-8)
    gloo, ring = cm.collective("gloo_ring_allgather"), cm.collective("ring_allgather")
    assert float(gloo.time(4e6, 2, env)) == pytest.approx(0.0301, rel=1e-12)
    assert float(ring.time(4e6, 2, env)) == pytest.approx(0.0201, rel=1e-12)
    p = np.array([1, 3, 4, 16])
    assert np.array_equal(gloo.time(4e6, p, env), ring.time(4e6, p, env))  # 0 at p = 1; the ring from p = 3
    assert float(cm.choose("allgather", 4e6, 2, env.with_(library="gloo")).time) == pytest.approx(0.0301)
    assert float(cm.choose("allgather", 4e6, 2, env.with_(library="ideal")).time) == pytest.approx(0.0201)


def test_gloo_ring_allgathers_wait_is_hidden_by_a_token_bucket_up_to_its_size() -> None:
    # The wait, n/4 at p = 2, leaves the late rank's idle link on a full bucket B: beta max(0, n/4 - B); the
    # ring's part gets the bucket's usual term T - S min(idle, m beta, B beta) (token_bucket.py). alpha 2e-4 s,
    # beta 4e-8 s/B, B 1e5 B, p = 2 (S = 1 step of m = n/2, idle = alpha):
    #   n 4e6: ring 2e-4 + 0.08 - min(2e-4, 0.08, 4e-3) = 0.08; wait 4e-8 (1e6 - 1e5) = 0.036; 0.116 s
    #   n 2e5: ring 2e-4 + 4e-3 - 2e-4 = 4e-3; wait 4e-8 max(0, 5e4 - 1e5) = 0; 0.004 s (the wait hidden)
    env = cm.Environment(alpha=2e-4, beta=4e-8, burst_bytes=1e5)
    gloo = cm.collective("gloo_ring_allgather")
    assert np.allclose(gloo.time(np.array([4e6, 2e5]), 2, env), [0.116, 0.004], rtol=1e-12)
    assert np.allclose(gloo.evaluator(2, env)(np.array([4e6, 2e5])), [0.116, 0.004], rtol=1e-12)
    # the derivatives the fit uses: at n 4e6 the ring's bucket hides idle = alpha, so d/d beta = n/2 (the ring)
    # + (n/4 - B) (the wait) = 2.9e6 and d/d alpha = 1 - 1 = 0
    sens = gloo.sensitivity(4e6, 2, env)
    assert float(sens["beta"]) == pytest.approx(2e6 + 9e5, rel=1e-12)
    assert float(sens["alpha"]) == pytest.approx(0.0, abs=1e-12)
    h = 1e-13  # and they agree with finite differences
    up = float(gloo.time(4e6, 2, env.with_(beta=4e-8 + h)))
    assert (up - 0.116) / h == pytest.approx(2.9e6, rel=1e-4)


def test_ring_reduce_by_hand() -> None:
    # gloo's reduce: ring reduce-scatter then the blocks to the root: 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma
    env = cm.Environment(alpha=1e-5, beta=1e-9, gamma=1e-10)
    assert cm.collective("ring_reduce").time(4e6, 4, env) == pytest.approx(6e-5 + 1.5 * 4e6 * 1e-9 + 0.75 * 4e5 * 1e-9)


def test_mpich_switches_at_its_documented_thresholds() -> None:
    env = cm.environment("10GbE").with_(library="mpich")

    def algo(primitive: str, n: float, p: int) -> str:
        return str(cm.choose(primitive, n, p, env).algorithm)

    # allreduce.c: recursive doubling up to 2048 B (or fewer elements than p'), Rabenseifner above
    assert algo("allreduce", 2048, 6) == "recursive_doubling_allreduce_general"
    assert algo("allreduce", 2052, 6) == "rabenseifner_allreduce_general"
    assert algo("allreduce", 60, 64) == "recursive_doubling_allreduce_general"  # 15 floats < p' = 64
    # allgather.c: recursive doubling below 512 KiB on p = 2^k; else Bruck below 80 KiB; else ring
    assert algo("allgather", 400_000, 8) == "recursive_doubling_allgather"
    assert algo("allgather", 50_000, 6) == "bruck_allgather"
    assert algo("allgather", 100_000, 6) == "ring_allgather"
    assert algo("allgather", 600_000, 8) == "ring_allgather"
    # bcast.c: binomial below 12 KiB or under 8 ranks, scatter + allgather above
    assert algo("broadcast", 1e6, 4) == "binomial_broadcast"
    assert algo("broadcast", 12_287, 16) == "binomial_broadcast"
    assert algo("broadcast", 12_288, 16) == "scatter_allgather_broadcast"
    # red_scat.c: recursive halving below 512 KiB on p = 2^k, else pairwise (a ring's cost)
    assert algo("reduce_scatter", 100_000, 8) == "recursive_halving_reduce_scatter"
    assert algo("reduce_scatter", 100_000, 6) == "ring_reduce_scatter"


def test_recursive_doubling_allreduce_general_by_hand() -> None:
    env = cm.Environment(alpha=1.0, beta=1e-3, gamma=1e-4)  # n = 1000: n beta = 1, n gamma = 0.1
    c = cm.collective("recursive_doubling_allreduce_general")
    assert c.time(1000, 4, env) == pytest.approx(2 * 2.1)  # lg 4 = 2 steps of (alpha + n beta + n gamma)
    assert c.time(1000, 6, env) == pytest.approx(2 * 2.1 + 4.1)  # + fold-in (1 + 1 + 0.1) + result (1 + 1)


def test_ideal_is_the_cheapest_registered_algorithm() -> None:
    sizes = 2.0 ** np.arange(0, 32)
    for p in (3, 8, 64):
        c = cm.choose("allreduce", sizes, p, FLAT)
        best = cm.cheapest("allreduce", sizes, p, FLAT)
        assert list(c.algorithm) == list(best.algorithm) and np.array_equal(c.time, best.time)


def test_collective_none_means_the_library_choice_in_schedules() -> None:
    prof = cm.profile("resnet50")
    gloo = cm.environment("10GbE")
    ideal = gloo.with_(library="ideal")
    assert cm.simulate(prof, gloo, 32, "bsp").iteration_time == pytest.approx(
        cm.simulate(prof, gloo, 32, "bsp", collective="ring_allreduce").iteration_time, rel=1e-12)
    assert cm.simulate(prof, ideal, 32, "bsp").iteration_time <= cm.simulate(prof, gloo, 32, "bsp").iteration_time


def test_primitives_a_library_has_no_rule_for_fall_back_to_ideal() -> None:
    c = cm.choose("gossip", 1e6, 8, A100)
    assert c.library == "ideal" and str(c.algorithm) in cm.collectives("gossip")


def test_choose_broadcasts_and_bands() -> None:
    sizes = 2.0 ** np.arange(3, 35)
    c = cm.choose("allreduce", sizes, np.array([[8], [16], [64]]), DGX2)
    assert c.time.shape == c.algorithm.shape == c.protocol.shape == c.channels.shape == (3, sizes.size)
    one = cm.choose("allreduce", sizes, 8, A100)
    bands = cm.choice_bands(sizes, one)
    assert [b[2] for b in bands] == ["ring/LL", "ring/LL128", "ring/Simple"]
    assert bands[0][0] == 8 and bands[-1][1] == 2.0**34
    assert float(cm.choose("allreduce", 1e6, 1, A100).time) == 0.0  # one rank sends nothing
    with pytest.raises(cm.CommscopeError, match="message sizes must be finite and >= 0"):
        cm.choose("allreduce", -1.0, 8, A100)


def test_constants_are_nccl_2_21s() -> None:
    assert tables.VERSION == "2.21.5"
    assert tables.BASE_LATENCY["ring"] == (6.6, 14.0, 8.4) and tables.HW_LATENCY["network"]["ring"] == (2.7, 4.0, 14.0)
    assert tables.LL_MAX_BW[1][0] == 87.7 and tables.PER_CHANNEL_TREE_BW[1] == (24.0, 23.6, 17.8)
    assert len(tables.TREE_CORRECTION[2]) == 23  # 64 B .. 256 MiB


def test_mixed_environments_sweep_per_library() -> None:
    prof = cm.profile("resnet50")
    envs = [cm.environment("10GbE"), A100, FLAT]
    s = cm.sweep(prof, envs, [4, 8], "wfbp")
    for i, env in enumerate(envs):
        for j, p in enumerate((4, 8)):
            assert s.iteration_time[i, j] == pytest.approx(cm.simulate(prof, env, p, "wfbp").iteration_time,
                                                           rel=1e-12)


# ------------------------------------------------------------- the pricer against a plain evaluation
def _reference(primitive: str, n: np.ndarray, p: np.ndarray, env: cm.Environment) -> dict:
    """What cm.choose should say, evaluated plainly: every option's formula on the whole grid at once (no
    blocks, no buffers, no runs), the lowest estimate with NaN never winning and the first of equal ones kept
    (or the library's rule), registered algorithms checked against their own Collective.time; ``priced`` is
    the pricer's time (p = 1 priced as 2), ``time`` choose's (p = 1 costs 0)."""
    solo = p == 1
    ranks = np.where(solo, 2, p)
    lib = resolve(primitive, env)
    options = lib.options(primitive, ranks, env, {})
    shape = np.broadcast_shapes(n.shape, p.shape)
    prices = [[np.broadcast_to(np.asarray(x, dtype=np.float64), shape) for x in o.prices(n)] for o in options]
    for o, (t, e) in zip(options, prices, strict=True):
        if lib.name != "nccl":  # a registered algorithm: its formula, the library's estimate the price itself
            np.testing.assert_array_equal(t, e)
            np.testing.assert_allclose(t, cm.collective(o.algorithm).time(n, ranks, env, out_of_domain="nan"),
                                       rtol=1e-12)
    if lib.select is None:
        estimates = np.stack([e for _, e in prices])
        index = np.argmin(np.where(np.isnan(estimates), np.inf, estimates), axis=0)  # the first lowest
    else:
        index = np.broadcast_to(lib.select(primitive, n, ranks, shape), shape)
    priced = np.take_along_axis(np.stack([t for t, _ in prices]), index[None], axis=0)[0]
    return {"library": lib.name, "priced": priced, "time": np.where(solo, 0.0, priced),
            "algorithm": np.array([o.algorithm for o in options], dtype=object)[index],
            "protocol": np.array([o.protocol for o in options], dtype=object)[index],
            "channels": np.broadcast_to(np.asarray(options[0].channels, dtype=np.int64), shape)}


def _grids(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random grids large enough to be priced in several blocks: many p by a few sizes (laid out by columns),
    p in order (its rows in runs for a formula not affine in n), large p (where options are left out as they
    cannot win), many sizes on one p (blocks of rows), and 3-d."""
    sizes = np.concatenate([[0.0, 1.0, 64.0, 2048.0, 2.0**20], 10.0 ** rng.uniform(0, 10, 19)])
    many_sizes = np.concatenate([[0.0], 10.0 ** rng.uniform(0, 10.5, 40_000)])
    return [(sizes, rng.integers(1, 5000, 1600)[:, None]), (sizes, np.arange(1, 1601)[:, None]),
            (sizes, rng.integers(100_000, 300_000, 1400)[:, None]), (many_sizes, np.array(int(rng.integers(2, 600)))),
            (10.0 ** rng.uniform(0, 10, (1, 25, 4)), rng.integers(1, 300, 40)[:, None, None])]


@pytest.mark.parametrize("seed", range(4))
def test_choose_and_the_pricer_equal_a_plain_evaluation_on_random_grids(seed: int) -> None:
    rng = np.random.default_rng(seed)
    presets = [cm.environment(x) for x in cm.environments()]
    picks = rng.choice(len(presets), 6)
    envs = [presets[i].with_(library=lib) for i, lib in zip(picks, ("nccl", "nccl", "ideal", "ideal", "gloo", "mpich"),
                                                             strict=True)]
    allreduce = [A100.with_(gamma=1e-10), DGX2.with_(gamma=1.2e-11, sharp=True),  # reduction-bound NCCL rows
                 cm.environment("NVLink-H100"), DGX2, DGX2.with_(library="ideal")]
    primitives = ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "all_to_all"]
    for env in envs + allreduce:
        for n, p in _grids(rng):
            primitive = "allreduce" if env in allreduce else str(rng.choice(primitives))
            got, want = cm.choose(primitive, n, p, env), _reference(primitive, n, p, env)
            where = f"{primitive} on {env.name} ({env.library}), n {n.shape}, p {p.shape}"
            assert got.library == want["library"], where
            assert np.array_equal(got.algorithm, want["algorithm"]), where
            assert np.array_equal(got.protocol, want["protocol"]), where
            assert np.array_equal(got.channels, want["channels"]), where
            np.testing.assert_allclose(got.time, want["time"], rtol=1e-12, atol=0, err_msg=where)
            pricer = Pricer(primitive, np.where(p == 1, 2, p), env)
            np.testing.assert_allclose(pricer(n), want["priced"], rtol=1e-12, atol=0, err_msg=where)


def test_the_pricer_leaves_out_options_that_cannot_win() -> None:
    # on 100 000 ranks NCCL's rings carry 200 000 hops of latency (0.2 s and more): each of the trees, at 4 GiB,
    # costs less than any ring at 8 B, so a pricer prices only the trees
    p = np.arange(100_000, 102_048)[:, None]
    sizes = 2.0 ** np.arange(3, 33)
    pricer = Pricer("allreduce", p, DGX2)
    live = pricer._live(Rows(0, p.shape[0], 2, sizes))
    assert [(pricer.options[k].algorithm, pricer.options[k].protocol) for k in live] == \
        [("tree", "LL"), ("tree", "LL128"), ("tree", "Simple")]
    want = _reference("allreduce", sizes, p, DGX2)
    got = cm.choose("allreduce", sizes, p, DGX2)
    assert np.array_equal(got.algorithm, want["algorithm"]) and np.array_equal(got.time, want["time"])


@pytest.mark.parametrize("seed", range(3))
def test_option_bounds_hold_every_estimate_in_their_range(seed: int) -> None:
    # the contract that lets a pricer leave an option out: for sizes in [low, high] an estimate is NaN on a
    # row where both bounds are, and otherwise lies between them (a NaN bound bounds nothing)
    rng = np.random.default_rng(seed)
    envs = [DGX2, A100, A100.with_(gamma=1e-10), DGX2.with_(gamma=1.2e-11, sharp=True), cm.environment("NVLink-H100"),
            DGX2.with_(library="ideal"), cm.environment("10GbE").with_(library="ideal"), FLAT]
    p = np.concatenate([[1, 2, 8, 64, 1024], rng.integers(1, 300_000, 300)])[:, None]
    for env in envs:
        for primitive in ("allreduce", "allgather", "reduce_scatter", "broadcast", "all_to_all"):
            pricer = Pricer(primitive, np.where(p == 1, 2, p), env)
            low, high = np.sort(10.0 ** rng.uniform(0, 10.5, 2))
            sizes = np.concatenate([[low, high], rng.uniform(low, high, 20), 10.0 ** rng.uniform(np.log10(low),
                                                                                                np.log10(high), 20)])
            rows = Rows(0, p.shape[0], 2, sizes)
            for o in pricer.options:
                if o.bounds is None:
                    continue
                least, greatest = (np.broadcast_to(b, (p.shape[0], 1)) for b in o.bounds(rows, low, high))
                n = np.broadcast_to(sizes, (p.shape[0], sizes.size))
                e = o.prices(n, (np.empty(n.shape), np.empty(n.shape)), rows)[1]
                where = f"{o.algorithm}/{o.protocol} {primitive} on {env.name}"
                priced = ~np.isnan(e)
                assert not np.any(priced & np.isnan(least) & np.isnan(greatest)), where
                assert np.all(~priced | np.isnan(least) | (least <= e)), where
                assert np.all(~priced | np.isnan(greatest) | (e <= greatest)), where


def test_a_formula_not_affine_in_n_is_evaluated_once_per_run_of_equal_rows() -> None:
    # the double binary tree looks at p only through ceil(lg p) (and the link it runs on): 13 runs of rows for
    # p = 2 .. 4999 on DGX A100 nodes, and the same values, bit for bit, as Collective.time
    c = cm.collective("double_binary_tree_allreduce")
    p = np.arange(2, 5000)[:, None]
    sizes = np.concatenate([[0.0], 10.0 ** np.linspace(0, 10, 32)])
    evaluate = c.evaluator(p, DGX2, out_of_domain="nan")
    runs = Runs.of(evaluate.compiled, evaluate.args, 2)
    assert runs is not None and list(runs.first) == [0, 1, 3, 7, 15, 31, 63, 127, 255, 511, 1023, 2047, 4095]
    assert np.array_equal(runs(0, p.shape[0], sizes), c.time(sizes, p, DGX2))
    assert np.array_equal(runs(100, 900, sizes), c.time(sizes, p[100:900], DGX2))
    # a formula that calls what a trace cannot follow (a reduction over n) is evaluated whole
    summed = CompiledExpr(c.expr, evaluate.compiled.args, evaluate.compiled.size, False,
                          lambda n, p, *rest: np.sum(n) * p)
    assert Runs.of(summed, evaluate.args, 2) is None
