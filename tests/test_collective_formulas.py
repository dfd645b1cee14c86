"""Every collective formula pinned at one point to a value worked out by hand.

Environment used unless said otherwise: alpha = 1e-5 s, beta = 1e-9 s/B, gamma = 1e-10 s/B,
n = 2**20 = 1048576 bytes. Handy products: n*beta = 1.048576e-3, n*gamma = 1.048576e-4,
(7/8) n = 917504, (5/6) n = 873813.33...
"""

from __future__ import annotations

import math

import pytest
import sympy as sp

import costmodels as cm

A, B, G = 1e-5, 1e-9, 1e-10
N = 2**20
ENV = cm.Environment(alpha=A, beta=B, gamma=G)


def t(name: str, p: int, n: float = N, env: cm.Environment = ENV, **kw: float) -> float:
    return cm.collective(name).time(n, p, env, **kw)


@pytest.mark.parametrize(
    ("name", "p", "expected"),
    [
        # 7a + (7/8) n (b + g) = 7e-5 + 917504 * 1.1e-9 = 7e-5 + 1.0092544e-3
        ("ring_reduce_scatter", 8, 1.0792544e-3),
        # 7a + (7/8) n b = 7e-5 + 9.17504e-4
        ("ring_allgather", 8, 9.87504e-4),
        # 14a + 2 (7/8) n b + (7/8) n g = 1.4e-4 + 1.835008e-3 + 9.17504e-5
        ("ring_allreduce", 8, 2.0667584e-3),
        # 3 (a + n b + n g) = 3 (1e-5 + 1.048576e-3 + 1.048576e-4) = 3 * 1.1634336e-3
        ("recursive_doubling_allreduce", 8, 3.4903008e-3),
        # 2*3 a + 2 (7/8) n b + (7/8) n g = 6e-5 + 1.835008e-3 + 9.17504e-5
        ("rabenseifner_allreduce", 8, 1.9867584e-3),
        ("rabenseifner_allreduce_general", 8, 1.9867584e-3),
        # MPICH, p = 6 (not a power of two): (2*2+2) a + (2*5/6 + 2) n b + (1 + 5/6) n g
        #   = 6e-5 + (11/3) 1.048576e-3 + (11/6) 1.048576e-4 = 6e-5 + 3.84477867e-3 + 1.92238933e-4
        ("rabenseifner_allreduce_general", 6, 4.0970176e-3),
        # 3a + (7/8) n (b + g) = 3e-5 + 1.0092544e-3
        ("recursive_halving_reduce_scatter", 8, 1.0392544e-3),
        # 3a + (7/8) n b = 3e-5 + 9.17504e-4
        ("recursive_doubling_allgather", 8, 9.47504e-4),
        # p = 6: ceil(lg 6) = 3: 3a + (5/6) n b = 3e-5 + 8.7381333e-4
        ("bruck_allgather", 6, 9.0381333e-4),
        # p = 6: 3 (a + n b) = 3 * 1.058576e-3
        ("binomial_broadcast", 6, 3.175728e-3),
        # p = 6: (3 + 5) a + 2 (5/6) n b = 8e-5 + 1.74762667e-3
        ("scatter_allgather_broadcast", 6, 1.82762667e-3),
        # 3 (a + n b + n g)
        ("binomial_reduce", 8, 3.4903008e-3),
        # 2*3 a + 2*3 n b + 3 n g = 6e-5 + 6.291456e-3 + 3.145728e-4
        ("binary_tree_allreduce", 8, 6.6660288e-3),
        # 7a + (7/8) n b = 7e-5 + 9.17504e-4
        ("pairwise_all_to_all", 8, 9.87504e-4),
        # 3a + (n/2) 3 b = 3e-5 + 1.572864e-3
        ("bruck_all_to_all", 8, 1.602864e-3),
        # 2 (a + n b + n g) = 2 * 1.1634336e-3; p = 2 has one neighbour
        ("gossip_ring", 8, 2.3268672e-3),
        ("gossip_ring", 2, 1.1634336e-3),
        # 4 (a + n b + n g)
        ("gossip_torus", 16, 4.6537344e-3),
        # lower bounds, p = 8: ceil(lg 8) = 3
        ("lower_bound_allreduce", 8, 1.9567584e-3),  # 3e-5 + 1.835008e-3 + 9.17504e-5
        ("lower_bound_reduce_scatter", 8, 1.0392544e-3),  # 3e-5 + 1.0092544e-3
        ("lower_bound_allgather", 8, 9.47504e-4),  # 3e-5 + 9.17504e-4
        ("lower_bound_all_to_all", 8, 9.47504e-4),
    ],
)
def test_formula_pinned_by_hand(name: str, p: int, expected: float) -> None:
    assert t(name, p) == pytest.approx(expected, rel=1e-7)


def test_double_binary_tree_pipelined_branch() -> None:
    # p = 8: depth D = 2*3 - 1 = 5, V = 2 n b = 2.097152e-3; D V >> a, so the optimal chunk count
    # c* = sqrt(D V / a) = 32.4 > 1 and T = D a + V + 2 sqrt(D a V) + n g
    #   = 5e-5 + 2.097152e-3 + 2 sqrt(1.048576e-7) + 1.048576e-4
    #   (2 sqrt(1.048576e-7) = 2 * 1.024 * 3.16227766e-4 = 6.47634464e-4)
    #   = 5e-5 + 2.097152e-3 + 6.47634464e-4 + 1.048576e-4 = 2.899644064e-3
    assert t("double_binary_tree_allreduce", 8) == pytest.approx(2.899644064e-3, rel=1e-8)


def test_double_binary_tree_one_chunk_branch() -> None:
    # n = 1 byte: D V = 5 * 2e-9 = 1e-8 < a, so one chunk: (D + 1)(a + V) + n g = 6 (1e-5 + 2e-9) + 1e-10
    assert t("double_binary_tree_allreduce", 8, n=1) == pytest.approx(6.00121e-5, rel=1e-9)


def test_double_binary_tree_branches_meet() -> None:
    """The two branches agree where c* = 1, i.e. D V = a: the model is continuous in n."""
    c = cm.collective("double_binary_tree_allreduce")
    n_star = A / (5 * 2 * B)  # D V = a with D = 5 at p = 8
    below, above = c.time(n_star * (1 - 1e-9), 8, ENV), c.time(n_star * (1 + 1e-9), 8, ENV)
    assert below == pytest.approx(above, rel=1e-7)


def test_hierarchical_allreduce_two_level() -> None:
    # 16 ranks = 4 nodes x 4 GPUs, one NIC: intra a_i = 1e-6, b_i = 1e-10; inter a = 1e-5, b = 1e-9
    # 2 (g-1) a_i + 2 (g-1)/g n b_i + (g-1)/g n g_ + 2 (m-1) a + 2 (m-1)/m (n/r) b + (m-1)/m (n/g) g_
    # = 6e-6 + 1.572864e-4 + 7.86432e-5 + 6e-5 + 1.572864e-3 + 1.96608e-5 = 1.8944544e-3
    env = cm.Environment(alpha=A, beta=B, gamma=G, intra_alpha=1e-6, intra_beta=1e-10, gpus_per_node=4)
    assert t("hierarchical_allreduce", 16, env=env) == pytest.approx(1.8944544e-3, rel=1e-9)
    # with 4 NICs the inter-node bandwidth term is divided by 4: 1.572864e-3 -> 3.93216e-4
    env4 = env.with_(nics_per_node=4)
    assert t("hierarchical_allreduce", 16, env=env4) == pytest.approx(1.8944544e-3 - 1.572864e-3 + 3.93216e-4)


def test_hierarchical_on_one_level_is_ring() -> None:
    """With one GPU per node the hierarchical algorithm is the ring across nodes."""
    assert t("hierarchical_allreduce", 8) == pytest.approx(t("ring_allreduce", 8), rel=1e-12)


def test_parameter_server() -> None:
    # k = 2 servers, p = 8: 2a + 2 max(8/2, 1) n b + (7/2) n g = 2e-5 + 8.388608e-3 + 3.670016e-4
    assert t("parameter_server", 8, k=2) == pytest.approx(8.7756096e-3, rel=1e-9)
    # default k = p: 2a + 2 n b + (7/8) n g = 2e-5 + 2.097152e-3 + 9.17504e-5
    assert t("parameter_server", 8) == pytest.approx(2.2089024e-3, rel=1e-9)


def test_topk_sparse_allgather() -> None:
    # rho = 0.01, iota = 1 (int32 indices): 7a + 7 * 0.01 * 2 * n b = 7e-5 + 1.4680064e-4
    assert t("topk_sparse_allgather", 8, rho=0.01) == pytest.approx(2.1680064e-4, rel=1e-9)


def test_ring_allreduce_is_reduce_scatter_plus_allgather() -> None:
    total = cm.collective("ring_reduce_scatter").expr + cm.collective("ring_allgather").expr
    assert sp.simplify(cm.collective("ring_allreduce").expr - total) == 0


def test_rabenseifner_is_halving_plus_doubling() -> None:
    total = cm.collective("recursive_halving_reduce_scatter").expr + cm.collective("recursive_doubling_allgather").expr
    assert sp.simplify(cm.collective("rabenseifner_allreduce").expr - total) == 0


def test_general_rabenseifner_equals_power_of_two_variant_at_powers_of_two() -> None:
    for p in (1, 2, 4, 64, 1024):
        assert t("rabenseifner_allreduce_general", p) == pytest.approx(t("rabenseifner_allreduce", p), rel=1e-12)


def test_flat_algorithm_uses_the_slowest_link_of_a_two_level_environment() -> None:
    env = cm.environment("4xPCIe3+10GbE")
    ring = cm.collective("ring_allreduce")
    intra = cm.Environment(alpha=env.intra_alpha, beta=env.intra_beta, gamma=env.gamma)
    inter = cm.Environment(alpha=env.alpha, beta=env.beta, gamma=env.gamma)
    assert ring.time(N, 4, env) == pytest.approx(ring.time(N, 4, intra), rel=1e-12)  # one node
    assert ring.time(N, 8, env) == pytest.approx(ring.time(N, 8, inter), rel=1e-12)  # two nodes


def test_lg_is_exact_at_powers_of_two() -> None:
    """ceil(log(8)/log(2)) is 4 in floating point; the cost models must say 3."""
    assert math.ceil(math.log(2**29) / math.log(2)) == 30  # the trap the lg function avoids
    assert t("bruck_allgather", 2**29, n=0) == pytest.approx(29 * A)


def test_latex_and_sources() -> None:
    for c in cm.COLLECTIVES:
        assert c.latex().startswith("T = ")
        assert len(c.source) > 20, c.name
    assert r"\log_{2} p" in cm.collective("rabenseifner_allreduce").latex()


def test_sensitivity_pinned() -> None:
    # ring allreduce, p = 8: dT/dalpha = 2 (p-1) = 14, dT/dbeta = 2 (7/8) n = 1835008, dT/dgamma = 917504
    s = cm.collective("ring_allreduce").sensitivity(N, 8, ENV)
    assert s == pytest.approx({"alpha": 14.0, "beta": 1835008.0, "gamma": 917504.0})
    rel = cm.collective("ring_allreduce").sensitivity(N, 8, ENV, relative=True)
    # latency share = 14 * 1e-5 / 2.0667584e-3 = 0.067740...
    assert rel["alpha"] == pytest.approx(1.4e-4 / 2.0667584e-3)


def test_sensitivity_two_level_attributes_to_the_link_used() -> None:
    env = cm.environment("4xPCIe3+10GbE")
    s4 = cm.collective("ring_allreduce").sensitivity(N, 4, env)
    assert s4["alpha"] == 0 and s4["intra_alpha"] == 6.0  # 2 (p - 1) on the intra-node link
    s8 = cm.collective("ring_allreduce").sensitivity(N, 8, env)
    assert s8["intra_alpha"] == 0 and s8["alpha"] == 14.0


def test_crossover_pinned() -> None:
    # ring vs recursive doubling allreduce at p = 8 on ENV:
    # ring: 14a + n (2*7/8 b + 7/8 g) = 1.4e-4 + n * 1.8375e-9
    # rd:   3a + n (3 b + 3 g)        = 3e-5 + n * 3.3e-9
    # equal at n = (1.4e-4 - 3e-5) / (3.3e-9 - 1.8375e-9) = 1.1e-4 / 1.4625e-9 = 75213.675...
    x = cm.crossover("ring_allreduce", "recursive_doubling_allreduce", p=8, env=ENV)
    assert x.method == "symbolic"
    assert x.sizes == [pytest.approx(75213.675, rel=1e-6)]
    assert x.cheaper_below == "recursive_doubling_allreduce"
    assert x.expr is not None


def test_nccl_tests_conventions() -> None:
    # 1 GiB allreduce in 10 ms on 8 ranks: algbw = 107.37 GB/s, busbw = algbw * 2*7/8 = 187.90 GB/s
    assert cm.algbw(2**30, 0.01) == pytest.approx(1.073741824e11)
    assert cm.busbw("allreduce", 2**30, 0.01, 8) == pytest.approx(1.879048192e11)
    assert cm.busbw_factor("allgather", 4) == 0.75
    assert cm.busbw_factor("broadcast", 64) == 1.0
    with pytest.raises(cm.UnknownNameError, match="allreduce"):
        cm.busbw_factor("allreduse", 8)
    with pytest.raises(cm.CommscopeError, match="seconds"):
        cm.algbw(1, 0.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.time(1e6, 1e30, ENV), "p must be at most 1099511627776 ranks, got 1e+30"),
        (lambda c: c.time(None, 4, ENV), "n must be a number of bytes, got None"),
        (lambda c: cm.collective("parameter_server").time(1e6, 8, ENV, k=True), "k must be an integer >= 1, got True"),
        (lambda c: cm.collective(3), "collective algorithm name must be a string, got 3"),
    ],
)
def test_odd_inputs_get_clear_errors(call, message: str) -> None:
    with pytest.raises(cm.CommscopeError) as err:
        call(cm.collective("ring_allreduce"))
    assert message in str(err.value)


def test_domain_violations_are_domain_errors() -> None:
    with pytest.raises(cm.DomainError, match="power of two"):
        t("rabenseifner_allreduce", 6)
    with pytest.raises(cm.DomainError, match="p >= 9"):
        t("gossip_torus", 4)
    two = cm.environment("8xH100-NVLink+IB-NDR")
    with pytest.raises(cm.DomainError, match="multiple of gpus_per_node=8"):
        t("hierarchical_allreduce", 12, env=two)
