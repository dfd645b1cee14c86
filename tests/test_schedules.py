"""Iteration schedules: hand-worked three-layer examples, bounds, limits and conservation laws.

The hand examples use p = 2 and ring_allreduce on alpha = 1 ms, beta = 1 us/B, gamma = 0, so a
message of m bytes costs c(m) = 2 (p-1) alpha + 2 (p-1)/p m beta = 2 ms + m us.
Three layers (forward order 0, 1, 2) with gradients of 1000, 2000, 3000 B (c = 3, 4, 5 ms),
forward 1, 2, 3 ms and backward 2, 4, 6 ms: F = 6 ms, and backward runs 2, 1, 0 so the gradients
are ready at 12 ms (layer 2), 16 ms (layer 1) and 18 ms (layer 0).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import costmodels as cm
from costmodels.schedules import B, C, Comm, F, greedy_buckets, mgwfbp_groups

MS = 1e-3
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)
PROF = cm.ModelProfile(
    name="three", device="hand", dtype="float32", batch_size=4, origin="estimated", source="hand example",
    layers=(cm.Layer("l0", 250, 1000.0, 1 * MS, 2 * MS), cm.Layer("l1", 500, 2000.0, 2 * MS, 4 * MS),
            cm.Layer("l2", 750, 3000.0, 3 * MS, 6 * MS)),
)


def sim(schedule: str, **kw) -> cm.IterationResult:
    return cm.simulate(PROF, ENV, 2, schedule, collective="ring_allreduce", **kw)


def comm_spans(r: cm.IterationResult) -> list[tuple[float, float]]:
    return [(round(e.start / MS, 9), round(e.end / MS, 9)) for e in r.timeline.on("comm")]


def test_bsp_by_hand() -> None:
    # all messages after backward (18 ms): 5 + 4 + 3 ms -> 30 ms
    r = sim("bsp")
    assert comm_spans(r) == [(18, 23), (23, 27), (27, 30)]
    assert r.iteration_time == pytest.approx(30 * MS)


def test_wfbp_by_hand() -> None:
    # layer 2 at 12 -> 17; layer 1 ready 16, link free 17 -> 21; layer 0 ready 18, link free 21 -> 24
    r = sim("wfbp")
    assert comm_spans(r) == [(12, 17), (17, 21), (21, 24)]
    assert r.iteration_time == pytest.approx(24 * MS)


def test_fusion_by_hand() -> None:
    # first bucket cap 2500 B: layer 2 (3000 B) closes it; then 2000 + 1000 = 3000 < 4000 stays open
    # bucket 1: ready 12, 12 -> 17; bucket 2 (3000 B, c = 5 ms): ready 18 -> 23
    r = sim("fusion", bucket_bytes=4000, first_bucket_bytes=2500)
    assert comm_spans(r) == [(12, 17), (18, 23)]
    assert r.iteration_time == pytest.approx(23 * MS) and r.details["buckets"] == 2


def test_ddp_bucket_rule() -> None:
    """DDP closes a bucket once it reaches the cap; the first bucket has its own cap."""
    assert greedy_buckets(np.array([1, 1, 3, 2, 2, 5]), cap=4, first_cap=2) == [[0, 1], [2, 3], [4, 5]]
    assert greedy_buckets(np.array([10, 1]), cap=4) == [[0], [1]]


def test_mgwfbp_merge_decisions_by_hand() -> None:
    # a = c(0) = 2 ms. Group [2] would start at 12; layer 1 is ready at 16, not before 12 + 2: layer 2 goes
    # alone (link busy until 17). Group [1] starts at max(17, 16) = 17; layer 0 is ready at 18 < 17 + 2: merge.
    ready = np.array([18, 16, 12]) * MS
    comm = Comm("allreduce", 2, ENV, "ring_allreduce")
    assert comm.latency() == pytest.approx(2 * MS)
    assert mgwfbp_groups(ready, np.array([1000.0, 2000.0, 3000.0]), comm) == [[2], [1, 0]]
    r = sim("mgwfbp")
    assert comm_spans(r) == [(12, 17), (18, 23)]  # one message fewer than WFBP: 23 ms instead of 24
    assert r.iteration_time == pytest.approx(23 * MS)


def test_ps_by_hand() -> None:
    # One server: the collective prices push + pull as c(m) = 2 alpha + 2 max(p/k, 1) m beta = 2 ms + 4 m us;
    # BytePS pipelines them, each stage taking c(m)/2 = 1 ms + 2 m us on its own direction of the link.
    # Default partitions (4,096,000 B) hold whole tensors: l2 (3000 B, 7 ms), l1 (2000 B, 5 ms), l0 (1000 B, 3 ms).
    # Pushes: l2 ready 12 -> 12-19, l1 (ready 16) 19-24, l0 (ready 18) 24-27; pulls: 19-26, 26-31, 31-34 -> 34 ms.
    # (Until the audit of issue 15 push and pull were serial, 14 + 10 + 6 ms from 12 ms: 42 ms.)
    r = cm.simulate(PROF, ENV, 2, "ps", k=1)
    assert comm_spans(r) == [(12, 19), (19, 24), (24, 27)]  # the pushes
    assert [(round(e.start / MS, 9), round(e.end / MS, 9)) for e in r.timeline.on("pull")] == [(19, 26), (26, 31),
                                                                                             (31, 34)]
    assert r.iteration_time == pytest.approx(34 * MS)
    assert r.details["servers"] == 1 and r.details["partitions"] == 3


def test_local_sgd_by_hand() -> None:
    # averaging the whole model (6000 B): 2 + 6 = 8 ms every H = 4 steps: 18 + 8/4 = 20 ms per step
    r = sim("local_sgd", H=4)
    assert r.iteration_time == pytest.approx(20 * MS)
    assert r.details["averaging_time"] == pytest.approx(8 * MS)


def test_rates() -> None:
    r = sim("wfbp")
    assert r.throughput == pytest.approx(2 * 4 / (24 * MS))
    assert r.scaling_efficiency == pytest.approx(18 / 24) and r.speedup == pytest.approx(2 * 18 / 24)


ALL = cm.schedules()


@pytest.mark.parametrize("schedule", ALL)
def test_one_worker_is_forward_plus_backward(schedule: str) -> None:
    prof = cm.profile("resnet50")
    r = cm.simulate(prof, cm.environment("10GbE"), 1, schedule)
    assert r.iteration_time == pytest.approx(prof.compute_s) and r.timeline.on("comm") == []


@pytest.mark.parametrize("schedule", ["wfbp", "fusion", "mgwfbp"])
def test_free_network_hides_all_communication(schedule: str) -> None:
    """alpha = 0 and (nearly) infinite bandwidth: every overlapping schedule takes the compute time."""
    env = cm.Environment(alpha=0.0, beta=1e-30, gamma=0.0)
    prof = cm.profile("bert-base")
    assert cm.simulate(prof, env, 64, schedule).iteration_time == pytest.approx(prof.compute_s, rel=1e-9)


@pytest.mark.parametrize("schedule", ["bsp", "wfbp", "fusion", "mgwfbp", "ps"])
@pytest.mark.parametrize("model", ["resnet50", "bert-base", "vgg16"])
def test_between_closed_form_bounds_and_bytes_conserved(schedule: str, model: str) -> None:
    prof, env = cm.profile(model), cm.environment("25GbE")
    r = cm.simulate(prof, env, 16, schedule)
    comm = r.timeline.on("comm")
    values = {F: prof.forward_s, B: prof.backward_s, C: sum(e.duration for e in comm)}
    entry = cm.schedule(schedule)
    lo, hi = entry.bounds(values)
    assert lo * (1 - 1e-12) <= r.iteration_time <= hi * (1 + 1e-12)
    assert r.timeline.bytes_sent() == pytest.approx(prof.grad_bytes)  # every gradient byte sent exactly once
    for a, b in itertools.pairwise(comm):
        assert b.start >= a.end - 1e-15  # one message at a time on the link


@pytest.mark.parametrize("schedule", ALL)
def test_monotone_in_alpha_beta_and_p(schedule: str) -> None:
    prof, env = cm.profile("resnet50"), cm.environment("10GbE")
    t = cm.simulate(prof, env, 16, schedule).iteration_time
    assert cm.simulate(prof, env.with_(alpha=env.alpha * 4), 16, schedule).iteration_time >= t
    assert cm.simulate(prof, env.with_(beta=env.beta * 4), 16, schedule).iteration_time >= t
    times = [cm.simulate(prof, env, p, schedule, collective="ring_allreduce" if schedule != "ps" else None)
             .iteration_time for p in (2, 4, 8, 16, 32)]
    assert times == sorted(times)


def test_bad_input() -> None:
    prof = cm.profile("resnet50")
    with pytest.raises(cm.UnknownNameError, match="wfbp"):
        cm.simulate(prof, ENV, 4, "wfbq")
    with pytest.raises(cm.CommscopeError, match="needs a allreduce algorithm, but ring_allgather implements"):
        cm.simulate(prof, ENV, 4, "wfbp", collective="ring_allgather")
    with pytest.raises(cm.CommscopeError, match="p must be a positive integer number of workers, got 0"):
        cm.simulate(prof, ENV, 0, "wfbp")
    with pytest.raises(cm.CommscopeError, match="bucket_bytes must be a positive number of bytes"):
        cm.simulate(prof, ENV, 4, "fusion", bucket_bytes=-1)
    with pytest.raises(cm.CommscopeError, match=r"H .* must be a positive integer, got 0"):
        cm.simulate(prof, ENV, 4, "local_sgd", H=0)
    with pytest.raises(cm.CommscopeError, match="always uses the parameter_server"):
        cm.simulate(prof, ENV, 4, "ps", collective="ring_allreduce")
    assert cm.simulate(prof, ENV, 4, "fusion", bucket_bytes="25MiB").details["buckets"] >= 1


def test_chrome_trace_export(tmp_path) -> None:
    import json

    r = sim("wfbp")
    path = r.timeline.save_chrome_trace(tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 3 + 3 + 3  # forward, backward, messages
    first_comm = next(e for e in xs if e["cat"] == "allreduce")
    assert first_comm["ts"] == pytest.approx(12_000) and first_comm["dur"] == pytest.approx(5_000)  # microseconds
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"} == {"compute", "comm"}


# ------------------------------------------------------------------ overlap with the next forward
def test_dear_by_hand() -> None:
    # Ring RS and AG on p = 2: 1 ms + m/2 us each. DeAR forms groups in forward order while the sum stays
    # below 2500 B: l0 (1000) alone, since 1000 + 2000 >= 2500; l1 (2000) alone; l2 (3000) alone. RS/AG take
    # 1.5, 2 and 2.5 ms. Steady state, times from the forward start of group 0 (its AG just ended): AG of l1
    # issued from l0's pre-hook at 0 (0-2); l0 forward 0-1; l1 waits for its AG (2-4); AG of l2 issued at
    # 2 (2-4.5); l2 forward 4.5-7.5; backward 7.5-19.5 (l2 ready 13.5, l1 17.5, l0 19.5); RS l2 13.5-16,
    # l1 17.5-19.5, l0 19.5-21; step: AG of l0 21-22.5; next forward at 22.5: period 22.5 ms.
    # (Until the audit of issue 15 the groups were DDP-like in backward order, [l2] and [l1, l0], and all
    # all-gathers went back to back after the step: 23 ms.)
    r = sim("dear", buffer_bytes=2500)
    assert r.iteration_time == pytest.approx(22.5 * MS) and r.details["groups"] == 3
    assert [(e.kind, s) for e, s in zip(r.timeline.on("comm"), comm_spans(r), strict=True)] == [
        ("allgather", (0, 2)), ("allgather", (2, 4.5)), ("reduce_scatter", (13.5, 16)),
        ("reduce_scatter", (17.5, 19.5)), ("reduce_scatter", (19.5, 21)), ("allgather", (21, 22.5)),
    ]
    assert r.timeline.bytes_sent("reduce_scatter") == r.timeline.bytes_sent("allgather") == PROF.grad_bytes


def test_bytescheduler_by_hand() -> None:
    # Partitions of 1000 B (l0: 1, l1: 2, l2: 3), credit 2000 B, each partition its own all-reduce of
    # c(1000 B) = 2 ms + 1 ms = 3 ms (a batch of two takes 6 ms), priority l0 > l1 > l2.
    # Iteration 2 ends its backward at 47 (l2 ready 41, l1 45, l0 47); link: l2p0+l2p1 41-47,
    # [l0p0, l1p0] 47-53, [l1p1, l2p2] 53-59. Iteration 3 starts at 53 (l0 done): l0 53-54, l1 waits
    # for 59 (59-61), l2 61-64, backward 64-76; link 70-76, 76-82, 82-88; iteration 4 starts at 82.
    # Period 82 - 53 = 29 ms, window [53, 82).
    r = sim("bytescheduler", partition_bytes=1000, credit_bytes=2000)
    assert r.iteration_time == pytest.approx(29 * MS)
    assert comm_spans(r) == [(0, 6), (17, 23), (23, 29)]
    assert r.timeline.bytes_sent() == PROF.grad_bytes and r.details["partitions"] == 6


def test_dear_moves_exactly_the_bytes_of_an_allreduce() -> None:
    """RS + AG of each group costs what an allreduce of it costs (ring: (p-1)/p n each way)."""
    prof, env, p = cm.profile("resnet50"), cm.environment("IB-EDR"), 16
    r = cm.simulate(prof, env, p, "dear", collective="ring_allreduce")
    from costmodels.schedules import dear_groups

    sizes = [float(np.array(prof.column("grad_bytes"))[g].sum()) for g in dear_groups(
        np.array(prof.column("grad_bytes")), r.details["buffer_bytes"])]
    ring = cm.collective("ring_allreduce").time(np.array(sizes), p, env)
    assert sum(e.duration for e in r.timeline.on("comm")) == pytest.approx(float(np.sum(ring)), rel=1e-12)
    assert r.timeline.bytes_sent("reduce_scatter") == pytest.approx(prof.grad_bytes)


@pytest.mark.parametrize("schedule", ["dear", "bytescheduler"])
@pytest.mark.parametrize("model", ["resnet50", "bert-base"])
def test_overlapping_schedules_between_bounds(schedule: str, model: str) -> None:
    prof, env = cm.profile(model), cm.environment("10GbE")
    r = cm.simulate(prof, env, 16, schedule)
    comm = r.timeline.on("comm")
    values = {F: prof.forward_s, B: prof.backward_s, C: sum(e.duration for e in comm)}
    entry = cm.schedule(schedule)
    lo, hi = entry.bounds(values)
    assert lo * (1 - 1e-9) <= r.iteration_time <= hi * (1 + 1e-9)
    assert all(b.start >= a.end - 1e-12 for a, b in itertools.pairwise(comm))


def test_best_dear_buffer_is_no_worse_than_other_sizes() -> None:
    from costmodels.schedules import best_dear_buffer

    prof, env = cm.profile("vgg16"), cm.environment("10GbE")
    cap, best = best_dear_buffer(prof, env, 8, "ring_allreduce")
    for size in ("1MiB", "4MiB", "25MiB", "64MiB", "256MiB"):
        other = cm.simulate(prof, env, 8, "dear", collective="ring_allreduce", buffer_bytes=size)
        assert best.iteration_time <= other.iteration_time * (1 + 1e-12)
    assert cm.simulate(prof, env, 8, "dear", collective="ring_allreduce", buffer_bytes=cap).iteration_time == \
        pytest.approx(best.iteration_time)


def test_dear_and_bytescheduler_bad_options() -> None:
    with pytest.raises(cm.CommscopeError, match="dear decouples an allreduce"):
        cm.simulate(PROF, ENV, 2, "dear", collective="parameter_server")
    with pytest.raises(cm.CommscopeError, match="credit_bytes"):
        sim("bytescheduler", partition_bytes=4000, credit_bytes=1000)


# ------------------------------------------------------------------------------------ sharded
def test_zero_by_hand() -> None:
    # DeepSpeed's buckets, in bytes here (2500 B): backward order l2 (3000 B) alone (over the cap on its own);
    # l1 would take it over: [l2] is reduced from l1's hook at 16 ms, on the compute stream (overlap_comm is
    # False by default): 16-18.5, and l0's backward waits (18.5-20.5); [l1] (2000 B) reduced from l0's hook
    # at 20.5: 20.5-22.5; [l0] after backward: 22.5-24. All-gathers of 2500 B cut the 6000 B model into
    # floor(6000 / 2500) = 2 messages of 3000 B: 24-26.5, 26.5-29 -> 29 ms.
    # (Until the audit of issue 15: DDP buckets sent as ready, overlapping backward, and AG buckets: 25.5 ms.)
    r = sim("zero", bucket_bytes=2500, allgather_bucket_bytes=2500)
    assert comm_spans(r) == [(16, 18.5), (20.5, 22.5), (22.5, 24), (24, 26.5), (26.5, 29)]
    assert r.iteration_time == pytest.approx(29 * MS)
    assert r.timeline.bytes_sent("reduce_scatter") == r.timeline.bytes_sent("allgather") == PROF.grad_bytes


def test_fsdp_by_hand() -> None:
    # Units (forward order, 2500 B): U0 = [0, 1], U1 = [2]; every AG and RS takes 2.5 ms.
    # AG U0 0-2.5; forward U0 2.5-5.5 with AG U1 prefetched 2.5-5; forward U1 5.5-8.5.
    # AG U1 again 8.5-11; backward U1 11-17 with AG U0 prefetched 11-13.5; RS U1 17-19.5;
    # backward U0 17-23; RS U0 23-25.5 -> 25.5 ms, 3 Psi bytes (AG twice, RS once).
    r = sim("fsdp", unit_bytes=2500)
    assert comm_spans(r) == [(0, 2.5), (2.5, 5), (8.5, 11), (11, 13.5), (17, 19.5), (23, 25.5)]
    assert r.iteration_time == pytest.approx(25.5 * MS)
    assert r.timeline.bytes_sent("allgather") == 2 * PROF.grad_bytes
    assert r.timeline.bytes_sent("reduce_scatter") == PROF.grad_bytes


@pytest.mark.parametrize("schedule", ["zero", "fsdp"])
@pytest.mark.parametrize("model", ["gpt2", "resnet50"])
def test_sharded_between_bounds_and_limits(schedule: str, model: str) -> None:
    prof, env = cm.profile(model), cm.environment("25GbE")
    r = cm.simulate(prof, env, 16, schedule)
    values = {F: prof.forward_s, B: prof.backward_s, C: sum(e.duration for e in r.timeline.on("comm"))}
    entry = cm.schedule(schedule)
    lo, hi = entry.bounds(values)
    assert lo * (1 - 1e-12) <= r.iteration_time <= hi * (1 + 1e-12)
    assert cm.simulate(prof, env, 1, schedule).iteration_time == pytest.approx(prof.compute_s)
    free = cm.Environment(alpha=0.0, beta=1e-30)
    assert cm.simulate(prof, free, 16, schedule).iteration_time == pytest.approx(prof.compute_s, rel=1e-9)
    with pytest.raises(cm.CommscopeError, match="sharded schedules use reduce-scatter and allgather"):
        cm.simulate(prof, env, 16, schedule, collective="parameter_server")


# -------------------------------------------------------------------------------- compression
def test_fp16_wfbp_by_hand() -> None:
    # fp16 halves the bytes: 500, 1000, 1500 B -> c = 2.5, 3, 3.5 ms (plus encode/decode of a few ns).
    # layer 2 ready 12 -> 15.5; layer 1 ready 16 -> 19; layer 0 ready 18, link free 19 -> 21.5 ms
    r = sim("wfbp", compressor="fp16")
    assert [(pytest.approx(a, abs=1e-3), pytest.approx(b, abs=1e-3)) for a, b in comm_spans(r)] == \
        [(12, 15.5), (16, 19), (19, 21.5)]
    assert r.iteration_time == pytest.approx(21.5 * MS, abs=1e-6)
    assert r.timeline.bytes_sent() == PROF.grad_bytes / 2 and r.details["primitive"] == "allreduce"


def test_sparse_compressor_is_an_allgather_whose_volume_grows_with_p() -> None:
    from costmodels.compression import parse_compressor

    prof, env, p = cm.profile("vgg16"), cm.environment("10GbE"), 4
    r = cm.simulate(prof, env, p, "bsp", collective="ring_allgather", compressor="topk:0.01")
    entry, q = parse_compressor("topk:0.01")
    wire = [entry.wire_bytes(round(x.grad_bytes / 4), q) for x in prof.layers]
    assert r.timeline.bytes_sent() == pytest.approx(sum(wire))
    # each message: ring allgather of p x wire bytes (plus decoding of the p received messages)
    msg = r.timeline.on("comm")[0]
    ag = cm.collective("ring_allgather").time(p * msg.nbytes, p, env)
    assert ag <= msg.duration <= ag * 1.01
    more = cm.simulate(prof, env, 16, "bsp", collective="ring_allgather", compressor="topk:0.01")
    assert more.iteration_time > r.iteration_time


@pytest.mark.parametrize("spec", ["fp16", "topk:0.01", "randomk:0.01", "dgc:0.001", "qsgd:4", "terngrad",
                                  "signsgd", "ef_signsgd", "powersgd:2"])
@pytest.mark.parametrize("schedule", ["wfbp", "fusion", "mgwfbp", "bytescheduler"])
def test_compressed_schedules_between_bounds(spec: str, schedule: str) -> None:
    prof, env = cm.profile("resnet50"), cm.environment("25GbE")
    r = cm.simulate(prof, env, 8, schedule, compressor=spec)
    encode = sum(e.duration for e in r.timeline.on("compute")) - prof.compute_s
    values = {F: prof.forward_s, B: prof.backward_s + encode, C: sum(e.duration for e in r.timeline.on("comm"))}
    entry = cm.schedule(schedule)
    lo, hi = entry.bounds(values)
    assert lo * (1 - 1e-9) <= r.iteration_time <= hi * (1 + 1e-9)
    assert r.timeline.bytes_sent() == pytest.approx(r.details["wire_bytes"])
    assert r.details["wire_bytes"] < prof.grad_bytes


def test_compression_errors() -> None:
    with pytest.raises(cm.CommscopeError, match="compression runs on top of the schedules"):
        cm.simulate(PROF, ENV, 2, "dear", compressor="fp16")
    with pytest.raises(cm.CommscopeError, match="needs a allgather algorithm, but ring_allreduce implements"):
        cm.simulate(PROF, ENV, 2, "wfbp", collective="ring_allreduce", compressor="topk:0.1")
    with pytest.raises(cm.UnknownNameError, match="topk"):
        cm.simulate(PROF, ENV, 2, "wfbp", compressor="top:0.1")
