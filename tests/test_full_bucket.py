"""A message that finds the token bucket full (costmodels.collectives.token_bucket, ``full_bucket``) and the
chains of messages the all-reduce schedules price with it (costmodels.schedules.blocks.chain_prices)."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.collectives.token_bucket import full_bucket, token_bucket_time
from costmodels.messages import Comm
from costmodels.schedules import chain_prices

MS = 1e-3
# 200 Mbit/s-like link: alpha 1 ms, beta 40 ns/B, bucket 100 kB (4 ms of the rate); tests/test_token_bucket.py
LINK = cm.Environment(alpha=1e-3, beta=40e-9)
SHAPED = LINK.with_(burst_bytes=100_000)
RING = cm.collective("ring_allreduce")


def test_full_bucket_credit_by_hand() -> None:
    # S = 6 steps, idle 1 ms a step, beta 8 ns/B, B = 500 kB: a step's idle time earns c = min(B, 1 ms / 8 ns)
    # = 125 kB of tokens, so a message that finds the bucket full has a surplus E = B - c = 375 kB
    beta, burst = 8e-9, 500_000.0
    # W = 1.5 MB: m = 250 kB a step, T = 6 ms + 12 ms. Back to back each step hides min(1, 2, 4) = 1 ms: 12 ms.
    # Full: the surplus pays the shortfall d = m - c = 125 kB of the first 3 steps: beta * min(375k, 750k) = 3 ms
    assert token_bucket_time(18 * MS, 6, 1.5e6, beta, burst) == pytest.approx(12 * MS, rel=1e-12)
    with full_bucket():
        assert token_bucket_time(18 * MS, 6, 1.5e6, beta, burst) == pytest.approx(9 * MS, rel=1e-12)
        # W = 900 kB: m = 150 kB, d = 25 kB, S d = 150 kB < E: all of it paid, 7.2 - 1.2 = 6 ms = S * idle, the least
        assert token_bucket_time(13.2 * MS, 6, 9e5, beta, burst) == pytest.approx(6 * MS, rel=1e-12)
        # W = 600 kB: m = 100 kB <= c, latency-bound: nothing to pay, 6 ms either way
        assert token_bucket_time(10.8 * MS, 6, 6e5, beta, burst) == pytest.approx(6 * MS, rel=1e-12)
        assert token_bucket_time(5.0, 3, 10.0, 0.1, 0.0) == 5.0  # no bucket: the alpha-beta time
    assert token_bucket_time(13.2 * MS, 6, 9e5, beta, burst) == pytest.approx(7.2 * MS, rel=1e-12)
    assert token_bucket_time(10.8 * MS, 6, 6e5, beta, burst) == pytest.approx(6 * MS, rel=1e-12)


def test_ring_allreduce_that_finds_the_bucket_full() -> None:
    # p = 4, 256 KiB: m = 65,536 B a step, c = min(100k, 1 ms / 40 ns) = 25 kB; back to back 15.72864 ms
    # (test_token_bucket). Full: E = 75 kB < S d = 6 * 40,536: 40 ns * 75 kB = 3 ms less, 12.72864 ms.
    # 16 KiB (m = 4096 B <= c) is latency-bound: 6 ms either way. Without a bucket nothing changes.
    n = np.array([262144, 16384])
    with full_bucket():
        assert RING.time(n, 4, SHAPED) == pytest.approx([12.72864 * MS, 6 * MS], rel=1e-12)
        assert RING.time(n, 4, LINK) == pytest.approx([21.72864 * MS, 6.98304 * MS], rel=1e-12)
        assert RING.evaluator(4, SHAPED)(n) == pytest.approx([12.72864 * MS, 6 * MS], rel=1e-12)
    assert RING.time(n, 4, SHAPED) == pytest.approx([15.72864 * MS, 6 * MS], rel=1e-12)


def test_a_chain_credits_the_first_message_and_those_after_a_latency_bound_one() -> None:
    comm = Comm("allreduce", 4, SHAPED, "ring_allreduce")
    full, back_to_back, small = 12.72864 * MS, 15.72864 * MS, 6 * MS
    sizes = np.array([262144, 262144, 16384, 262144])
    # the first finds the link idle; the second follows one that emptied the bucket; the fourth follows a
    # latency-bound one, whose steps left the bucket full
    assert chain_prices(comm, sizes) == pytest.approx([full, back_to_back, small, full], rel=1e-12)
    # with the third not sent, the fourth follows the second, which emptied the bucket
    sent = np.array([True, True, False, True])
    assert chain_prices(comm, sizes, sent=sent)[[0, 1, 3]] == pytest.approx([full, back_to_back, back_to_back],
                                                                              rel=1e-12)
    # no bucket: every message at its price
    plain = Comm("allreduce", 4, LINK, "ring_allreduce")
    assert np.array_equal(chain_prices(plain, sizes), plain(sizes))


def _profile() -> cm.ModelProfile:
    # forward order l0 (256 KiB), l1 (16 KiB), l2 (256 KiB); 1 ms forward and 2 ms backward each: compute 9 ms
    return cm.ModelProfile(name="chain", device="hand", dtype="float32", batch_size=4, origin="estimated",
                           source="hand example",
                           layers=tuple(cm.Layer(f"l{i}", 1, float(g), 1 * MS, 2 * MS)
                                        for i, g in enumerate((262144, 16384, 262144))))


def test_bsp_prices_its_chain_by_hand_in_every_path() -> None:
    prof = _profile()
    # per tensor, after backward (9 ms), in backward order: l2 finds the bucket full (12.72864), l1 is
    # latency-bound (6), l0 follows it and finds the bucket full again (12.72864): 9 + 31.45728 ms
    # (back to back, as before: 9 + 15.72864 + 6 + 15.72864 = 46.45728 ms)
    per_tensor = 9 * MS + (2 * 12.72864 + 6) * MS
    # flattened, 540,672 B: m = 135,168 B a step, T = 6 + 40 ns * 811,008 = 38.44032 ms; back to back 32.44032,
    # and as the first message after compute 3 ms less: 9 + 29.44032 ms
    flat = 9 * MS + 29.44032 * MS
    for flatten, want in ((False, per_tensor), (True, flat)):
        r = cm.simulate(prof, SHAPED, 4, "bsp", "ring_allreduce", flatten=flatten)
        assert r.iteration_time == pytest.approx(want, rel=1e-12)
        s = cm.sweep(prof, SHAPED, [4], "bsp", collective="ring_allreduce", flatten=flatten)
        assert float(s.iteration_time.reshape(-1)[0]) == pytest.approx(want, rel=1e-12)
        # the interference path (terms on, all at zero but an optimizer step of 0) gives the same
        t = cm.simulate(prof, SHAPED.with_(kappa_c=1e-12), 4, "bsp", "ring_allreduce", flatten=flatten)
        assert t.iteration_time == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("schedule", ["wfbp", "fusion", "mgwfbp", "local_sgd", "bytescheduler"])
def test_every_path_of_the_all_reduce_schedules_agrees_under_a_bucket(schedule: str) -> None:
    prof = _profile()
    r = cm.simulate(prof, SHAPED, 4, schedule, "ring_allreduce")
    s = cm.sweep(prof, SHAPED, [4], schedule, collective="ring_allreduce")
    t = cm.simulate(prof, SHAPED.with_(kappa_c=1e-12), 4, schedule, "ring_allreduce")
    assert float(s.iteration_time.reshape(-1)[0]) == pytest.approx(r.iteration_time, rel=1e-12)
    assert t.iteration_time == pytest.approx(r.iteration_time, rel=1e-9)


def test_the_librarys_choice_finds_the_bucket_full_as_its_algorithm_does() -> None:
    # collective=None on a gloo environment prices through the library (its Pricer): the same chain as naming
    # gloo's ring all-reduce: the first and the one after the latency-bound 1 KiB find the bucket full, the 4 MiB
    # one follows a 256 KiB one that emptied it
    env = SHAPED.with_(library="gloo")
    sizes = np.array([[262144, 1024, 262144, 4 << 20]])
    by_library = chain_prices(Comm("allreduce", 4, env), sizes)
    named = Comm("allreduce", 4, env, "gloo_ring_allreduce")
    assert by_library == pytest.approx(chain_prices(named, sizes), rel=1e-12)
    assert (by_library[0, [0, 2]] < named(sizes)[0, [0, 2]]).all()
    assert by_library[0, [1, 3]] == pytest.approx(named(sizes)[0, [1, 3]], rel=1e-12)


def test_an_overflowing_price_stays_infinite_not_nan() -> None:
    # 6 alpha = 6e308 overflows: the chain keeps the infinite price (the CLI then says so in one line), never NaN
    comm = Comm("allreduce", 4, SHAPED.with_(alpha=1e308), "ring_allreduce")
    with np.errstate(over="ignore", invalid="ignore"):
        out = chain_prices(comm, np.array([262144.0, 16384.0]))
    assert np.isinf(out).all() and not np.isnan(out).any()
