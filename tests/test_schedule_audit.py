"""The cost-model audit of issue 15, item 4: each fix pinned to a value worked by hand.

Hand examples use ring algorithms on alpha = 1 ms, beta = 1 us/B, gamma = 0 and p = 2, so an allreduce
of m bytes costs 2 ms + m us, a reduce-scatter or an allgather (n = the whole buffer) 1 ms + m/2 us, and
the three-layer profile of ``test_schedules`` (forward order l0, l1, l2: 1000, 2000, 3000 B; forward 1,
2, 3 ms; backward 2, 4, 6 ms; gradients ready at 18, 16 and 12 ms). Memory passes are priced at the
reference device's 630e9 B/s (``MEM``).
"""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.compression import compressor
from costmodels.schedules import compressed_profile, dear_groups, zero_buckets

MS = 1e-3
MEM = 630e9
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)


def profile(sizes: list[float], dtype: str = "float32", shapes: list | None = None, fwd=(1, 2, 3), bwd=(2, 4, 6)
            ) -> cm.ModelProfile:
    vb = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    return cm.ModelProfile(
        name="hand", device="hand", dtype=dtype, batch_size=4, origin="estimated", source="hand example",
        layers=tuple(cm.Layer(f"l{i}", int(b // vb), float(b), f * MS, g * MS, None if shapes is None else shapes[i])
                     for i, (b, f, g) in enumerate(zip(sizes, fwd, bwd, strict=False))))


PROF = profile([1000, 2000, 3000])


def spans(r: cm.IterationResult, stream: str = "comm") -> list[tuple[float, float]]:
    return [(round(e.start / MS, 6), round(e.end / MS, 6)) for e in r.timeline.on(stream)]


# ------------------------------------------------------------------ 1. sparse decode is a scatter-add
def test_topk_decode_reads_the_received_pairs_and_writes_the_destination_once() -> None:
    # d = 1e6 fp32, density 0.01: k = 10,000 pairs of 4 + 4 B = 80,000 B per worker. Four received messages are
    # read once (320,000 B) and the dense destination written once (4e6 B): 4.32e6 B / 630e9 = 6.857 us
    # (it was priced as 4 x 10 dense passes: 4 x 10 x 4e6 / 630e9 = 254 us).
    assert compressor("topk").decode_time(1_000_000, 0.01, fan_in=4) == pytest.approx(4.32e6 / MEM)
    # dense formats are unchanged: each received message is decoded like one encode
    qsgd = compressor("qsgd")
    assert qsgd.decode_time(1_000_000, 8, fan_in=4) == pytest.approx(4 * qsgd.encode_time(1_000_000, 8))


def test_sparse_decode_per_received_byte_depends_on_p() -> None:
    # topk:0.1 on 250, 500, 750 elements: k = 25, 50, 75, wire 8k = 200, 400, 600 B (W = 1200), dense 6000 B.
    # A message of w bytes from each of p = 2 workers decodes in (2 w + 5 w) / MEM (5 = 6000 / 1200): per
    # received byte (1 + 5/2) / MEM = 3.5 / MEM; at p = 16, (1 + 5/16) / MEM.
    _, wire = compressed_profile(PROF, "topk:0.1", p=2)
    assert wire.primitive == "allgather" and wire.decode_per_byte == pytest.approx(3.5 / MEM)
    assert compressed_profile(PROF, "topk:0.1", p=16)[1].decode_per_byte == pytest.approx((1 + 5 / 16) / MEM)


def test_topk_fusion_one_bucket_by_hand() -> None:
    # Encode: 10 passes over each fp32 gradient, 10 x 6000 B in all: the bucket is ready at 18 ms + 60,000/MEM.
    # One ring allgather of 2 x 1200 B: 1 ms + 1200 us = 2.2 ms, decoded in 2400 x 3.5 / MEM = 8400 / MEM.
    r = cm.simulate(PROF, ENV, 2, "fusion", "ring_allgather", "topk:0.1", bucket_bytes=1e9, first_bucket_bytes=1e9)
    assert r.iteration_time == pytest.approx(20.2 * MS + (60_000 + 8_400) / MEM, rel=1e-12)


# -------------------------------------------------------------------------------- 2. DeAR's groups
def test_dear_groups_are_formed_forward_and_stay_below_the_threshold() -> None:
    sizes = np.array([1000.0, 2000.0, 3000.0])
    # 3000 B: l0 (1000) opens a group; 1000 + 2000 = 3000 is not below 3000: l1 opens the next; so does l2
    assert dear_groups(sizes, 3000) == [[2], [1], [0]]  # backward order, the order of the reduce-scatters
    # 3001 B: l0 + l1 = 3000 < 3001 share a group; 3000 + 3000 does not: [l0, l1], [l2]
    assert dear_groups(sizes, 3001) == [[2], [1, 0]]
    # DDP's rule (close a bucket once it reaches the cap, backward order), used before: [l2], [l1, l0] at 3000 B


def test_dear_all_gathers_are_paced_by_the_forward() -> None:
    # Groups at 3001 B: G0 = [l0, l1] (3000 B, RS/AG 2.5 ms, forward 3 ms), G1 = [l2] (3000 B, 2.5 ms, 3 ms).
    # From G0's forward start (its AG just ended): G1's AG from G0's pre-hook, 0-2.5, hidden by G0's forward
    # (0-3); G1 forward 3-6; backward 6-18 (l2 ready 12, l0 18); RS G1 12-14.5, RS G0 18-20.5; AG G0 20.5-23.
    # period = ag_0 + max(f_0, ag_1) + f_1 + tail = 2.5 + max(3, 2.5) + 3 + 14.5 = 23 ms.
    r = cm.simulate(PROF, ENV, 2, "dear", "ring_allreduce", buffer_bytes=3001)
    assert r.iteration_time == pytest.approx(23 * MS)
    assert spans(r) == [(0, 2.5), (12, 14.5), (18, 20.5), (20.5, 23)]
    # a slow link: beta = 2 us/B makes every AG/RS 1 ms + 3 ms = 4 ms, longer than G0's 3 ms forward:
    # period = 4 + max(3, 4) + 3 + tail, tail = RS G1 at 6 (6-10), RS G0 at 12 (12-16) = 16: 27 ms
    slow = cm.simulate(PROF, ENV.with_(beta=2e-6), 2, "dear", "ring_allreduce", buffer_bytes=3001)
    assert slow.iteration_time == pytest.approx(27 * MS)


# ------------------------------------------------------------------------------ 3. pipelined PS
def test_ps_partitions_pipeline_push_and_pull() -> None:
    # PROF, one server, partitions of 1000 B: each stage of a partition takes c(1000)/2 = (2 + 4) / 2 = 3 ms.
    # Pushes: l2's three 12-21, l1's two 21-27, l0's 27-30; each pull follows its push: the last 30-33 -> 33 ms.
    r = cm.simulate(PROF, ENV, 2, "ps", k=1, partition_bytes=1000)
    assert r.iteration_time == pytest.approx(33 * MS) and r.details["partitions"] == 6
    assert spans(r)[-1] == (27, 30) and spans(r, "pull")[-1] == (30, 33)


def test_ps_one_tensor_closed_form() -> None:
    # One 4000 B tensor ready at 3 ms, in P = 4 partitions of s = 1000 B: (P + 1) c(s)/2 = 5 x 3 = 15 ms -> 18 ms.
    # Whole (one partition): push c(4000)/2 = 9 ms, then pull 9 ms -> 21 ms, the serial 2 alpha + 2 n beta.
    one = profile([4000], fwd=(1,), bwd=(2,))
    assert cm.simulate(one, ENV, 2, "ps", k=1, partition_bytes=1000).iteration_time == pytest.approx(18 * MS)
    assert cm.simulate(one, ENV, 2, "ps", k=1).iteration_time == pytest.approx(21 * MS)


# ------------------------------------------------------------------------------------- 4. PowerSGD
def test_powersgd_splits_a_bucket_into_three_allreduces() -> None:
    c = compressor("powersgd")
    # 100 x 50 at rank 2: (100 + 50) 2 * 2 = 600 < 5000: compressed, P = 100 x 2 x 4 B, Q = 50 x 2 x 4 B
    assert c.messages(5000, 2, (100, 50)) == (0.0, 800.0, 400.0)
    assert c.messages(100, 2, (100,)) == (400.0, 0.0, 0.0)  # a vector: (100 + 1) * 2 >= 100, uncompressed
    # 10 x 10 at rank 4: (10 + 10) 4 * 2 = 160 >= 100: the hook sends it uncompressed (delta 1)
    assert c.messages(100, 4, (10, 10)) == (400.0, 0.0, 0.0)
    assert c.model_constants([(100, (10, 10))], 4)["delta"] == 1.0


def test_powersgd_fusion_bucket_by_hand() -> None:
    # w (100 x 50, 20,000 B) then b (100, 400 B); forward 1 ms each, backward 2 ms each; one DDP bucket.
    # Encode (memory passes): w 6 x 20,000 B, b 7 x 400 B: the bucket is ready at 6 ms + 122,800 / MEM.
    # Three allreduces, 2 ms + m us each: uncompressed 400 B (2.4 ms), Ps 800 B (2.8 ms), Qs 400 B (2.4 ms) =
    # 7.6 ms, plus decode: w 5 x 20,000 B, b 7 x 400 B = 102,800 / MEM -> 13.6 ms + 225,600 / MEM.
    # (Before: one message of the 1600 wire bytes, 3.6 ms, and FLOP-priced encode: about 9.6 ms.)
    prof = profile([20_000, 400], shapes=[(100, 50), (100,)], fwd=(1, 1), bwd=(2, 2))
    r = cm.simulate(prof, ENV, 2, "fusion", "ring_allreduce", "powersgd:2", bucket_bytes=1e9, first_bucket_bytes=1e9)
    assert r.iteration_time == pytest.approx(13.6 * MS + 225_600 / MEM, rel=1e-12)
    assert r.timeline.bytes_sent() == 1600


# -------------------------------------------------------------------------------- 5. FSDP and ZeRO
def test_fsdp_default_is_one_root_unit() -> None:
    # No auto-wrap policy: AG of all 6000 B (1 + 3 = 4 ms), forward 4-10, backward 10-22 with nothing
    # re-gathered (the root keeps its parameters), RS of all 6000 B 22-26 -> 26 ms.
    r = cm.simulate(PROF, ENV, 2, "fsdp", "ring_allreduce")
    assert spans(r) == [(0, 4), (22, 26)] and r.iteration_time == pytest.approx(26 * MS)


def test_fsdp_wrapped_units_and_a_root_remainder_by_hand() -> None:
    # 2000, 2000, 1000 B, unit_bytes 2000: units U0 = [l0], U1 = [l1]; l2 (1000 B < 2000) stays in the root.
    # AG 2 ms for a unit, 1.5 ms for the root. Forward: AG root 0-1.5, AG U0 1.5-3.5, U0 3.5-4.5 with AG U1
    # prefetched 3.5-5.5, U1 5.5-7.5, root 7.5-10.5. Backward: the root needs no AG; U1's AG prefetched
    # 10.5-12.5; root 10.5-16.5, its RS 16.5-18; U1 16.5-20.5 with U0's AG 18-20; RS U1 20.5-22.5; U0 20.5-22.5,
    # RS U0 22.5-24.5 -> 24.5 ms.
    r = cm.simulate(profile([2000, 2000, 1000]), ENV, 2, "fsdp", "ring_allreduce", unit_bytes=2000)
    assert spans(r) == [(0, 1.5), (1.5, 3.5), (3.5, 5.5), (10.5, 12.5), (16.5, 18), (18, 20), (20.5, 22.5),
                        (22.5, 24.5)]
    assert r.iteration_time == pytest.approx(24.5 * MS) and r.details["root_unit"]


def test_zero_buckets_follow_deepspeed() -> None:
    # elements 250, 500, 750 (fp32). Default 5e8 elements: one bucket, reduced after backward (18 ms): RS of
    # 6000 B 1 + 3 = 4 ms, 18-22; one AG of 6000 B 22-26 -> 26 ms.
    r = cm.simulate(PROF, ENV, 2, "zero", "ring_allreduce")
    assert spans(r) == [(18, 22), (22, 26)]
    # reduce_bucket_size 800 elements: [l2] (750); l1 would make 1250 > 800: [l2] reduced from l1's hook at
    # 16 ms; [l1, l0] = 750 <= 800 reduced after backward.
    assert zero_buckets(np.array([1000.0, 2000.0, 3000.0]), 800 * 4) == [[2], [1, 0]]
    # overlap_comm False: on the compute stream, 16-18.5; l0's backward 18.5-20.5; [l1, l0] 20.5-23; AG 23-27.
    r = cm.simulate(PROF, ENV, 2, "zero", "ring_allreduce", reduce_bucket_size=800)
    assert spans(r) == [(16, 18.5), (20.5, 23), (23, 27)] and r.iteration_time == pytest.approx(27 * MS)
    # overlap_comm True: side stream 16-18.5 while l0's backward runs 16-18; [l1, l0] waits for the link:
    # 18.5-21; AG 21-25 -> 25 ms.
    r = cm.simulate(PROF, ENV, 2, "zero", "ring_allreduce", reduce_bucket_size=800, overlap_comm=True)
    assert spans(r) == [(16, 18.5), (18.5, 21), (21, 25)] and r.iteration_time == pytest.approx(25 * MS)
    # allgather_bucket_size 700 elements: floor(1500 / 700) = 2 messages of 3000 B (2.5 ms each)
    r = cm.simulate(PROF, ENV, 2, "zero", "ring_allreduce", allgather_bucket_size=700)
    assert spans(r) == [(18, 22), (22, 24.5), (24.5, 27)]
    with pytest.raises(cm.CommscopeError, match="reduce_bucket_size must be a positive number of elements"):
        cm.simulate(PROF, ENV, 2, "zero", reduce_bucket_size=0)
    with pytest.raises(cm.CommscopeError, match="overlap_comm must be True or False"):
        cm.simulate(PROF, ENV, 2, "zero", overlap_comm="yes")


# ------------------------------------------------------------------- 6. DDP buckets by dense bytes
def test_compressed_fusion_buckets_by_dense_bytes() -> None:
    # fp16, caps 4000 B (first 2500 B) on the dense bytes: [l2] (3000 >= 2500), then [l1, l0] (3000 B).
    # Cast: read 4 + write 2 B per element (6 B) to encode and to decode. Wire 1500 and 1500 B: 2 + 1.5 ms each.
    # [l2] ready 12 ms + 4500 / MEM: 12-15.5; [l1, l0] ready 18 ms + 9000 / MEM (all encodes), 3.5 ms + its
    # decode 4500 / MEM -> 21.5 ms + 13,500 / MEM.
    # (Bucketing the compressed bytes gave [l2, l1] (2500 B, ready 16) and [l0]: 16-20.5, 20.5-23 -> 23 ms.)
    r = cm.simulate(PROF, ENV, 2, "fusion", "ring_allreduce", "fp16", bucket_bytes=4000, first_bucket_bytes=2500)
    assert r.details["buckets"] == 2
    assert r.iteration_time == pytest.approx(21.5 * MS + 13_500 / MEM, rel=1e-12)


# ---------------------------------------------------------------------------- 7. the profile's dtype
def test_compressors_use_the_profile_dtype() -> None:
    half = profile([500, 1000, 1500], dtype="float16")  # 250, 500, 750 fp16 values
    # fp16 on fp16 gradients: nothing to cast, nothing saved: the same iteration as without a compressor
    # (wfbp: l2 1500 B 3.5 ms 12-15.5, l1 1000 B 16-19, l0 500 B 19-21.5 -> 21.5 ms)
    plain = cm.simulate(half, ENV, 2, "wfbp", "ring_allreduce")
    cast = cm.simulate(half, ENV, 2, "wfbp", "ring_allreduce", "fp16")
    assert cast.iteration_time == plain.iteration_time == pytest.approx(21.5 * MS)
    # top-k values are 2 B: k = 25, 50, 75 pairs of 2 + 4 B = 150, 300, 450 B (fp32: 8 B a pair)
    assert [x.grad_bytes for x in compressed_profile(half, "topk:0.1")[0].layers] == [150, 300, 450]
    assert compressor("topk").wire_bytes(1000, 0.01, dtype="bfloat16") == 10 * 6
    # bf16 on fp16 gradients still casts: read 2 + write 2 B per element
    assert compressor("bf16").encode_time(750, dtype="float16") == pytest.approx(750 * 4 / MEM)
    assert compressor("fp16").encode_time(750, dtype="float16") == 0.0
