"""Property tests of the collective cost models (hypothesis).

Every algorithm is checked against the laws that any alpha-beta-gamma model must obey: it never
beats the Chan et al. lower bound of its primitive, it grows with the message size and with the
link costs, allreduce on one rank is free, the elasticities add up to one (Euler), vectorized and
scalar evaluation agree, and bad input is rejected with a :class:`costmodels.CommscopeError` that
names the bad value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import costmodels as cm
from costmodels.symbols import mu, phi

PRESET_NAMES = ("10GbE", "IB-EDR", "NVLink-H100", "8xH100-NVLink+IB-NDR", "4xPCIe3+10GbE")
ENV_KEYS = (*PRESET_NAMES, "custom", "custom-two-level")
BOUNDED_PRIMITIVES = ("allreduce", "reduce_scatter", "allgather", "all_to_all")
POW2_ONLY = (
    "rabenseifner_allreduce",
    "recursive_doubling_allreduce",
    "recursive_halving_reduce_scatter",
    "recursive_doubling_allgather",
)

ALL_ALGORITHMS = cm.collectives()
ALLREDUCE_ALGORITHMS = cm.collectives("allreduce", include_bounds=False)
BOUND_CHECKED = [
    name
    for prim in BOUNDED_PRIMITIVES
    for name in cm.collectives(prim, include_bounds=False)
    if not cm.collective(name).lower_bound_exempt
]

LB_RTOL = 1e-12
MONO_RTOL = 1e-12  # piecewise models switch branch where both are equal; allow a rounding step

# ------------------------------------------------------------------------------- strategies
ALPHAS = st.floats(1e-8, 1e-2)
BETAS = st.floats(1e-13, 1e-7)
GAMMAS = st.floats(1e-14, 1e-8)

CUSTOM_ENV = st.builds(cm.Environment, alpha=ALPHAS, beta=BETAS, gamma=GAMMAS, host_copy=GAMMAS, host_fault=GAMMAS)


@st.composite
def two_level_envs(draw: st.DrawFn) -> cm.Environment:
    """A random two-level environment; the intra-node link may be faster or slower than the NIC."""
    gpus = draw(st.integers(2, 8))
    return cm.Environment(
        alpha=draw(ALPHAS), beta=draw(BETAS), gamma=draw(GAMMAS),
        intra_alpha=draw(ALPHAS), intra_beta=draw(BETAS),
        gpus_per_node=gpus, nics_per_node=draw(st.integers(1, gpus)),
    )


def env_strategy(key: str) -> st.SearchStrategy[cm.Environment]:
    if key == "custom":
        return CUSTOM_ENV
    if key == "custom-two-level":
        return two_level_envs()
    return st.just(cm.environment(key))


ANY_ENV = st.one_of(st.sampled_from([cm.environment(x) for x in PRESET_NAMES]), CUSTOM_ENV)

SIZES = st.one_of(st.integers(1, 2**34), st.floats(1.0, 2.0**34))
RANKS = st.integers(2, 4096)
EXPONENTS = st.integers(1, 12)  # p = 2**e in [2, 4096] for power-of-two-only algorithms


def ranks_for(c: cm.Collective, env: cm.Environment, p_any: int, exponent: int) -> int:
    """A p in the domain of ``c`` derived from the drawn p (or 2**exponent for power-of-two ones)."""
    if c.domain.power_of_two:
        return 2**exponent
    p = max(p_any, c.domain.min_p)
    gp = env.gpus_per_node
    if c.topology == "hierarchical" and p > gp:
        p -= p % gp  # hierarchical algorithms need whole nodes
    return p


def non_powers_of_two() -> st.SearchStrategy[int]:
    return st.integers(1, 11).flatmap(lambda e: st.integers(2**e + 1, 2 ** (e + 1) - 1))


def where(c: cm.Collective, n: Any, p: Any, env: cm.Environment) -> str:
    return f"{c.name} at n={n!r}, p={p!r} on {env!r}"


# ------------------------------------------------------------------------------ sanity of setup
def test_property_lists_are_not_vacuous() -> None:
    """The lists the properties loop over contain the algorithms they are meant to check."""
    assert {"ring_allreduce", "double_binary_tree_allreduce", "hierarchical_allreduce", "bruck_all_to_all",
            "ring_reduce_scatter", "bruck_allgather", *POW2_ONLY} <= set(BOUND_CHECKED)
    assert "parameter_server" not in BOUND_CHECKED  # exempt: extra server nodes
    assert not any(cm.collective(x).is_lower_bound for x in BOUND_CHECKED)
    assert all(cm.collective(x).domain.power_of_two for x in POW2_ONLY)
    assert "parameter_server" in ALLREDUCE_ALGORITHMS


# ------------------------------------------------------------------------------- lower bounds
@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), n=SIZES, p_any=RANKS, exponent=EXPONENTS)
def test_no_algorithm_beats_the_lower_bound(env_key: str, data: st.DataObject, n: float, p_any: int,
                                            exponent: int) -> None:
    """Every algorithm bound by Chan et al. takes at least the lower bound of its primitive."""
    env = data.draw(env_strategy(env_key), label="env")
    for name in BOUND_CHECKED:
        c = cm.collective(name)
        p = ranks_for(c, env, p_any, exponent)
        t = c.time(n, p, env)
        bound = cm.lower_bound(c.primitive).time(n, p, env)
        assert t >= bound * (1 - LB_RTOL), f"{where(c, n, p, env)}: {t!r} < lower bound {bound!r}"


# --------------------------------------------------------------------------------- monotonicity
@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=30, deadline=None)
@given(data=st.data(), n1=SIZES, n2=SIZES, p_any=RANKS, exponent=EXPONENTS)
def test_time_grows_with_message_size(env_key: str, data: st.DataObject, n1: float, n2: float, p_any: int,
                                      exponent: int) -> None:
    """t(n2) >= t(n1) whenever n2 > n1, for every algorithm (lower bounds included)."""
    assume(n1 != n2)
    n1, n2 = sorted((n1, n2))
    env = data.draw(env_strategy(env_key), label="env")
    for name in ALL_ALGORITHMS:
        c = cm.collective(name)
        p = ranks_for(c, env, p_any, exponent)
        t1, t2 = c.time(n1, p, env), c.time(n2, p, env)
        assert t2 >= t1 * (1 - MONO_RTOL), f"{c.name} at p={p} on {env!r}: t({n2!r})={t2!r} < t({n1!r})={t1!r}"


def _scaled(env: cm.Environment, field: str, factor: float) -> cm.Environment:
    return env.with_(**{field: getattr(env, field) * factor})


@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=SIZES, p_any=RANKS, exponent=EXPONENTS, factor=st.floats(1.001, 1e3))
def test_time_grows_with_latency_and_inverse_bandwidth(env_key: str, data: st.DataObject, n: float, p_any: int,
                                                       exponent: int, factor: float) -> None:
    """Raising alpha or beta (and intra_alpha/intra_beta of two-level envs) never makes anything faster."""
    env = data.draw(env_strategy(env_key), label="env")
    fields = ["alpha", "beta"] + (["intra_alpha", "intra_beta"] if env.two_level else [])
    for field in fields:
        slower = _scaled(env, field, factor)
        for name in ALL_ALGORITHMS:
            c = cm.collective(name)
            p = ranks_for(c, env, p_any, exponent)
            t, t_slow = c.time(n, p, env), c.time(n, p, slower)
            assert t_slow >= t * (1 - MONO_RTOL), (
                f"{where(c, n, p, env)}: {field} x {factor} gives {t_slow!r} < {t!r}"
            )


# ----------------------------------------------------------------------------------- one rank
@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), n=st.one_of(st.just(0), SIZES), k=st.integers(1, 64))
def test_allreduce_on_one_rank_is_free(env_key: str, data: st.DataObject, n: float, k: int) -> None:
    """Every allreduce algorithm, parameter_server included (any k), costs exactly 0 at p = 1."""
    env = data.draw(env_strategy(env_key), label="env")
    for name in ALLREDUCE_ALGORITHMS:
        c = cm.collective(name)
        assert c.time(n, 1, env) == 0.0, where(c, n, 1, env)
        assert c.time(np.array([n, 2 * n]), 1, env).tolist() == [0.0, 0.0], where(c, n, 1, env)
    assert cm.collective("parameter_server").time(n, 1, env, k=k) == 0.0
    assert cm.lower_bound("allreduce").time(n, 1, env) == 0.0


# -------------------------------------------------------------------------------- sensitivity
@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=25, deadline=None)
@given(data=st.data(), n=SIZES, p_any=RANKS, exponent=EXPONENTS)
def test_relative_sensitivities_add_up_to_one(env_key: str, data: st.DataObject, n: float, p_any: int,
                                              exponent: int) -> None:
    """The models are homogeneous of degree one in the link costs, so elasticities sum to 1 (Euler)."""
    env = data.draw(env_strategy(env_key), label="env")
    for name in ALL_ALGORITHMS:
        c = cm.collective(name)
        p = ranks_for(c, env, p_any, exponent)
        t = c.time(n, p, env)
        assert t > 0, where(c, n, p, env)
        shares = c.sensitivity(n, p, env, relative=True)
        expected_fields = {"alpha", "beta", "gamma"} | ({"intra_alpha", "intra_beta"} if env.two_level else set())
        expected_fields |= {f for f, sym in (("host_copy", mu), ("host_fault", phi)) if sym in c.host.free_symbols}
        assert set(shares) == expected_fields, where(c, n, p, env)
        assert all(v >= -1e-12 for v in shares.values()), f"{where(c, n, p, env)}: {shares}"
        total = math.fsum(float(v) for v in shares.values())
        assert total == pytest.approx(1.0, abs=1e-9), f"{where(c, n, p, env)}: {shares}"


# --------------------------------------------------------------------------------- vectorized
@pytest.mark.parametrize("env_key", ENV_KEYS)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), ns=st.lists(SIZES, min_size=1, max_size=4),
       p_anys=st.lists(st.integers(1, 4096), min_size=1, max_size=4),
       exponents=st.lists(st.integers(0, 12), min_size=1, max_size=4))
def test_vectorized_evaluation_matches_scalar(env_key: str, data: st.DataObject, ns: list[float],
                                              p_anys: list[int], exponents: list[int]) -> None:
    """time(n[:, None], p[None, :]) equals time(n_i, p_j) at every (i, j)."""
    env = data.draw(env_strategy(env_key), label="env")
    n_col = np.asarray(ns, dtype=np.float64)[:, None]
    for name in ALL_ALGORITHMS:
        c = cm.collective(name)
        ps = sorted({ranks_for(c, env, q, e) for q in p_anys for e in exponents})
        p_row = np.asarray(ps, dtype=np.int64)[None, :]
        grid = np.asarray(c.time(n_col, p_row, env))
        assert grid.shape == (len(ns), len(ps)), f"{c.name}: shape {grid.shape}"
        scalar = np.array([[c.time(x, q, env) for q in ps] for x in ns])
        np.testing.assert_allclose(grid, scalar, rtol=1e-14, atol=0, err_msg=f"{c.name} on {env!r}")


def test_p_independent_formula_broadcasts_over_p() -> None:
    """time(n, p) has the broadcast shape of n and p even when the formula has no p in it."""
    env = cm.environment("10GbE")
    c = cm.collective("gossip_torus")
    assert np.shape(c.time(np.ones((3, 1)), np.array([[9, 16]]), env)) == (3, 2)
    assert np.shape(c.time(1e6, [9, 16, 25], env)) == (3,)


# --------------------------------------------------------------------------------- domain
@pytest.mark.parametrize("name", POW2_ONLY)
@settings(max_examples=25, deadline=None)
@given(p=non_powers_of_two(), env=ANY_ENV, n=SIZES)
def test_power_of_two_algorithms_reject_other_p(name: str, p: int, env: cm.Environment, n: float) -> None:
    """A non-power-of-two p raises a CommscopeError naming p; with out_of_domain='nan' it is NaN."""
    c = cm.collective(name)
    with pytest.raises(cm.CommscopeError) as info:
        c.time(n, p, env)
    msg = str(info.value)
    assert "power of two" in msg and f"p={p}" in msg and name in msg
    ps = np.array([1, 2, p, 4, 2 ** p.bit_length(), p + 1])
    t = c.time(n, ps, env, out_of_domain="nan")
    expect_nan = (ps & (ps - 1)) != 0
    assert np.array_equal(np.isnan(t), expect_nan), (ps, t)
    assert np.all(np.isfinite(t[~expect_nan]))
    assert np.isnan(c.time(n, p, env, out_of_domain="nan"))


def test_hierarchical_allreduce_needs_whole_nodes() -> None:
    """hierarchical_allreduce rejects p that is neither <= gpus_per_node nor a multiple of it."""
    env = cm.environment("8xH100-NVLink+IB-NDR")
    c = cm.collective("hierarchical_allreduce")
    with pytest.raises(cm.CommscopeError, match=r"multiple of gpus_per_node=8.*p=12"):
        c.time(1e6, 12, env)
    t = c.time(1e6, np.array([3, 8, 12, 16]), env, out_of_domain="nan")
    assert np.isnan(t).tolist() == [False, False, True, False]


# ----------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("n", "shown"),
    [(-1, "-1"), (-0.5, "-0.5"), (float("nan"), "nan"), (float("inf"), "inf"), ("1MiB", "'1MiB'"),
     ([1.0, -2.0], "-2")],
    ids=["negative", "negative-float", "nan", "inf", "string", "negative-in-array"],
)
def test_bad_message_size_is_rejected(n: Any, shown: str) -> None:
    """n must be finite and >= 0 bytes; the error names the bad value."""
    with pytest.raises(cm.CommscopeError) as info:
        cm.collective("ring_allreduce").time(n, 4, cm.environment("10GbE"))
    assert f"got {shown}" in str(info.value)


@pytest.mark.parametrize(
    ("p", "shown"),
    [(0, "0"), (-3, "-3"), (2.5, "2.5"), (True, "True"), (float("nan"), "nan"), ([4, 0], "0"), ("4", "'4'")],
    ids=["zero", "negative", "fraction", "bool", "nan", "zero-in-array", "string"],
)
def test_bad_rank_count_is_rejected(p: Any, shown: str) -> None:
    """p must be a positive integer; the error names the bad value."""
    with pytest.raises(cm.CommscopeError) as info:
        cm.collective("ring_allreduce").time(1e6, p, cm.environment("10GbE"))
    assert str(info.value).endswith(f"got {shown}")


def test_unknown_algorithm_parameter_is_rejected() -> None:
    """An unknown keyword is an error naming it and listing the algorithm's parameters."""
    env = cm.environment("10GbE")
    with pytest.raises(cm.CommscopeError, match=r"ring_allreduce has no parameter k; its parameters: none"):
        cm.collective("ring_allreduce").time(1e6, 4, env, k=4)
    with pytest.raises(cm.CommscopeError, match=r"parameter_server has no parameter q; its parameters: k"):
        cm.collective("parameter_server").time(1e6, 4, env, q=4)


@pytest.mark.parametrize("k", [0, 2.5, -1, float("nan"), "x"])
def test_bad_parameter_value_is_rejected(k: Any) -> None:
    """parameter_server's k must be an integer >= 1; the error names the bad value."""
    with pytest.raises(cm.CommscopeError, match=r"k must be an integer >= 1, got") as info:
        cm.collective("parameter_server").time(1e6, 4, cm.environment("10GbE"), k=k)
    assert repr(float(k) if not isinstance(k, str) else k) in str(info.value)


@pytest.mark.parametrize("env", [None, "10GbE", {"alpha": 1e-6, "beta": 1e-9}], ids=["none", "name", "dict"])
def test_env_must_be_an_environment(env: Any) -> None:
    """Passing anything but an Environment (even a preset's name) is an error naming its type."""
    expected = rf"env must be a costmodels.Environment or EnvironmentArray, got {type(env).__name__}"
    with pytest.raises(cm.CommscopeError, match=expected):
        cm.collective("ring_allreduce").time(1e6, 4, env)


def test_unknown_collective_lists_valid_names() -> None:
    """An unknown name raises UnknownNameError (a CommscopeError) listing every registered name."""
    with pytest.raises(cm.UnknownNameError) as info:
        cm.collective("ring_allreduse")
    msg = str(info.value)
    assert isinstance(info.value, cm.CommscopeError)
    assert "'ring_allreduse'" in msg and "ring_allreduce" in msg
    assert all(name in msg for name in ALL_ALGORITHMS)
    assert cm.collective("RING_AllReduce").name == "ring_allreduce"  # lookup is case-insensitive


def test_unknown_primitive_of_lower_bound_lists_valid_names() -> None:
    """lower_bound() of a primitive without one names the primitives that have one."""
    with pytest.raises(cm.UnknownNameError, match="allreduce"):
        cm.lower_bound("broadcast")


# ------------------------------------------------------------------------------------ cheapest
@pytest.mark.parametrize("primitive", list(cm.PRIMITIVES))
@settings(max_examples=15, deadline=None)
@given(env=st.one_of(ANY_ENV, two_level_envs()), ns=st.lists(SIZES, min_size=1, max_size=4),
       ps=st.lists(st.integers(1, 4096), min_size=1, max_size=4))
def test_cheapest_is_the_minimum_of_the_candidates(primitive: str, env: cm.Environment, ns: list[float],
                                                   ps: list[int]) -> None:
    """cheapest() returns the minimum candidate time at every point, and the algorithm that takes it."""
    if primitive == "gossip":
        ps = [max(q, 9) for q in ps]  # gossip_torus needs p >= 9; gossip_ring runs anywhere
    n_col, p_row = np.asarray(ns, dtype=np.float64)[:, None], np.asarray(ps)[None, :]
    best = cm.cheapest(primitive, n_col, p_row, env)
    candidates = [x for x in cm.collectives(primitive, include_bounds=False)
                  if not cm.collective(x).extra_resources]
    assert sorted(best.times) == sorted(candidates)
    times = np.stack([np.broadcast_to(cm.collective(x).time(n_col, p_row, env, out_of_domain="nan"),
                                      (len(ns), len(ps))) for x in candidates])
    np.testing.assert_array_equal(best.time, np.nanmin(times, axis=0))
    labels = np.asarray(best.algorithm)
    assert labels.shape == (len(ns), len(ps))
    for i, x in enumerate(ns):
        for j, q in enumerate(ps):
            chosen = cm.collective(str(labels[i, j]))
            assert chosen.primitive == primitive
            assert chosen.time(x, q, env) == pytest.approx(best.time[i, j], rel=1e-14)


def test_cheapest_of_a_single_point() -> None:
    """cheapest() at a scalar (n, p) gives one name and one time."""
    best = cm.cheapest("allreduce", 1e6, 64, cm.environment("10GbE"))
    assert best.algorithm == "rabenseifner_allreduce"
    assert best.time == cm.collective(best.algorithm).time(1e6, 64, cm.environment("10GbE"))


# ----------------------------------------------------------------------------------- crossover
@settings(max_examples=20, deadline=None)
@given(env=ANY_ENV, exponent=EXPONENTS)
def test_affine_crossover_equalizes_times(env: cm.Environment, exponent: int) -> None:
    """At the symbolic crossover of ring and recursive doubling both take the same time."""
    p = 2**exponent
    result = cm.crossover("ring_allreduce", "recursive_doubling_allreduce", p=p, env=env)
    assert result.method == "symbolic" and len(result.sizes) <= 1
    assume(result.sizes)
    (size,) = result.sizes
    ta = cm.collective("ring_allreduce").time(size, p, env)
    tb = cm.collective("recursive_doubling_allreduce").time(size, p, env)
    assert ta == pytest.approx(tb, rel=1e-9)
    assert result.cheaper_below == "recursive_doubling_allreduce"  # fewer latency terms wins small
    below = cm.collective("recursive_doubling_allreduce").time(size / 2, p, env)
    assert below <= cm.collective("ring_allreduce").time(size / 2, p, env)


@settings(max_examples=20, deadline=None)
@given(env=ANY_ENV, p=st.integers(4, 4096))
def test_numeric_crossover_equalizes_times(env: cm.Environment, p: int) -> None:
    """At every numeric crossover of the pipelined double binary tree and the ring both take the same time."""
    result = cm.crossover("double_binary_tree_allreduce", "ring_allreduce", p=p, env=env)
    assert result.method == "numeric" and result.expr is None
    assume(result.sizes)
    assert result.sizes == sorted(result.sizes)
    for size in result.sizes:
        assert 1.0 <= size <= 2.0**40
        ta = cm.collective("double_binary_tree_allreduce").time(size, p, env)
        tb = cm.collective("ring_allreduce").time(size, p, env)
        assert ta == pytest.approx(tb, rel=1e-9), f"p={p} on {env!r} at {size!r}"
