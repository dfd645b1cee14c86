"""Memory passes over the gradients in every schedule (issue 16): the copies into and out of flat buffers and the
averaging division that the techniques run around their messages, worked by hand.

The hand examples use p = 2 and ring_allreduce on alpha = 1 ms, beta = 1 us/B, gamma = 0 (tests/test_schedules.py):
an all-reduce of m bytes costs 2 ms + m us, a reduce-scatter or all-gather 1 ms + m/2 us. THREE has layers of 1000,
2000 and 3000 B (forward 1, 2, 3 ms; backward 2, 4, 6 ms): backward ends at 18 ms, gradients ready at 18, 16, 12 ms.
With an SGD step of U = 3 ms over N = 6000 B, one pass costs q = 2 U / (3 N) = 1/3 us per byte (the step streams
3 bytes per gradient byte, a pass 2): 2 ms over all the gradients.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import costmodels as cm
from costmodels.errors import CommscopeError

MS = 1e-3
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0)


def profile(name: str, *layers: tuple[float, float, float]) -> cm.ModelProfile:
    """Layers (grad bytes, forward ms, backward ms) in forward order, named l0, l1, ..."""
    return cm.ModelProfile(name=name, device="hand", dtype="float32", batch_size=4, origin="estimated",
                           source="hand example", layers=tuple(cm.Layer(f"l{i}", 1, g, f * MS, b * MS)
                                                               for i, (g, f, b) in enumerate(layers)))


THREE = profile("three", (1000.0, 1, 2), (2000.0, 2, 4), (3000.0, 3, 6)).with_optimizer(3 * MS)


def hand(schedule: str, prof: cm.ModelProfile = THREE, **options) -> cm.IterationResult:
    return cm.simulate(prof, ENV, 2, schedule, collective="ring_allreduce", **options)


def marks(r: cm.IterationResult, kinds: tuple[str, ...] = ("copy", "optimizer")) -> list[tuple[str, str, float, float]]:
    return [(e.kind, e.label, round(e.start / MS, 9), round(e.end / MS, 9)) for e in r.timeline.events
            if e.kind in kinds]


def test_pass_cost_derived_from_the_step_or_measured() -> None:
    assert THREE.pass_s_per_byte == pytest.approx(2 * 3e-3 / (3 * 6000))  # 1/3 us per byte
    adam = replace(THREE, metadata={"optimizer": "adam"})  # Adam streams 7 bytes per gradient byte
    assert adam.pass_s_per_byte == pytest.approx(2 * 3e-3 / (7 * 6000))
    measured = replace(THREE, metadata={"pass_s_per_byte": 5e-10})
    assert measured.pass_s_per_byte == 5e-10
    assert replace(THREE, layers=tuple(replace(x, optimizer_s=0.0) for x in THREE.layers)).pass_s_per_byte == 0.0


def test_bsp_averages_after_its_messages() -> None:
    # messages l2 18-23, l1 23-27, l0 27-30; the averaging division (2 ms) 30-32; the step 32-35.
    r = hand("bsp")
    assert marks(r) == [("copy", "gradients averaged", 30, 32), ("optimizer", "step", 32, 35)]
    assert r.iteration_time == pytest.approx(35 * MS, rel=1e-12)


def test_bsp_flatten_copies_in_and_out() -> None:
    # torch.cat of 6000 B (2 ms) at the issue, 18-20; the message (2 + 6 = 8 ms) 20-28; the copy back and the
    # averaging (4 ms) 28-32; the step 32-35.
    r = hand("bsp", flatten=True)
    assert marks(r, ("issue", "copy", "optimizer")) == [
        ("issue", "l0..l2 (3)", 18, 20), ("copy", "flat buffer to gradients, averaged", 28, 32),
        ("optimizer", "step", 32, 35)]
    assert r.iteration_time == pytest.approx(35 * MS, rel=1e-12)


def test_wfbp_averages_after_the_last_message() -> None:
    # messages l2 12-17, l1 17-21, l0 21-24; averaging 24-26; step 26-29.
    assert hand("wfbp").iteration_time == pytest.approx(29 * MS, rel=1e-12)


def test_fusion_copies_each_bucket_in_and_out() -> None:
    # one bucket of all three: DDP copies (and scales) the gradients into it, 2 ms, 18-20 on the backward thread;
    # the all-reduce 20-28; the bucket copied back into the gradients 28-30; the step 30-33.
    r = hand("fusion", bucket_bytes=10**6, first_bucket_bytes=10**6)
    assert marks(r, ("issue", "copy", "optimizer")) == [
        ("issue", "l0..l2 (3)", 18, 20), ("copy", "buckets to gradients", 28, 30), ("optimizer", "step", 30, 33)]
    assert r.iteration_time == pytest.approx(33 * MS, rel=1e-12)


def test_mgwfbp_copies_only_merged_groups() -> None:
    # l2 alone (no copy) 12-17; l0 and l1 merged (3000 B): copied at the issue, 1 ms, 18-19; the message (2 + 3 ms)
    # 19-24; averaging 24-26; step 26-29.
    r = hand("mgwfbp")
    assert [(e.label, round(e.start / MS, 9), round(e.end / MS, 9)) for e in r.timeline.on("comm")] == [
        ("l2", 12, 17), ("l0..l1 (2)", 19, 24)]
    assert r.iteration_time == pytest.approx(29 * MS, rel=1e-12)


def test_zero_copies_its_buckets_and_the_gathered_parameters() -> None:
    # one bucket: flattened at the issue (2 ms) 18-20; reduce-scatter (1 + 3 ms) 20-24; the shard averaged (1/2 of
    # a pass: 1 ms) 24-25; the shard's step (3/2 ms) 25-26.5; all-gather (4 ms) 26.5-30.5; the gathered 6000 B
    # copied into the parameters (2 ms) 30.5-32.5.
    r = hand("zero")
    assert marks(r) == [("copy", "shard averaged", 24, 25), ("optimizer", "step (shard)", 25, 26.5),
                        ("copy", "parameters 1/1", 30.5, 32.5)]
    assert r.iteration_time == pytest.approx(32.5 * MS, rel=1e-12)


def test_dear_copies_groups_in_and_out() -> None:
    # Two layers of 2000 B (forward 2, backward 4 ms), step 1 ms each, buffer 3000 B: groups [l0], [l1]; RS = AG =
    # 2 ms; q = 2 x 2 ms / (3 x 4000 B) = 1/3 us/B, so a group's pass is 2/3 ms. From the end of l0's all-gather:
    # l0's gathered parameters copied 0-2/3 (AG l1 0-2 beside it); l0's step and forward to 3 2/3; l1's copy,
    # step and forward to 7 1/3; l1's backward to 11 1/3; l1 flattened for its reduce-scatter to 12, RS l1 12-14
    # beside l0's backward 12-16; l0 flattened 16-16 2/3; RS l0 to 18 2/3; AG l0 to 20 2/3.
    two = profile("two", (2000.0, 2, 4), (2000.0, 2, 4)).with_optimizer(2 * MS)
    r = hand("dear", two, buffer_bytes=3000)
    assert r.iteration_time == pytest.approx(62 / 3 * MS, rel=1e-12)
    assert [(e.label, round(e.start / MS, 6)) for e in r.timeline.events if e.kind == "copy"] == [
        ("l0", 0.0), ("l1", round(11 / 3, 6))]


def test_passes_vanish_where_nothing_is_sent_or_measured_zero() -> None:
    for schedule in ("bsp", "wfbp", "fusion", "mgwfbp", "zero", "dear", "bytescheduler"):
        alone = cm.simulate(THREE, ENV, 1, schedule)
        assert alone.iteration_time == pytest.approx(THREE.compute_s + THREE.optimizer_s, rel=1e-12), schedule
    free = replace(THREE, metadata={"pass_s_per_byte": 0.0})
    assert hand("wfbp", free).iteration_time == pytest.approx(27 * MS, rel=1e-12)  # 24 + the 3 ms step


def test_bytescheduler_averages_each_layer_before_its_step() -> None:
    # each layer's update is its averaging pass plus its share of the step: 3 ms + 2 ms over the iteration
    r = hand("bytescheduler")
    assert r.details["optimizer_s"] == pytest.approx(5 * MS)
    free = hand("bytescheduler", replace(THREE, metadata={"pass_s_per_byte": 0.0}))
    assert free.details["optimizer_s"] == pytest.approx(3 * MS)
    assert r.iteration_time >= free.iteration_time


def test_measured_pass_cost_must_be_a_number() -> None:
    for bad in ("fast", -1.0, float("nan"), True):
        with pytest.raises(CommscopeError, match="pass_s_per_byte must be a finite number >= 0"):
            replace(THREE, metadata={"pass_s_per_byte": bad})


def test_a_measured_pass_cost_counts_without_an_optimizer_step() -> None:
    # No optimizer step, pass cost measured at 1/3 us/B, no interference or overhead: the terms path still runs, so
    # wfbp averages its 6000 B (2 ms) after its last message (24 ms): 26 ms, in simulate and in sweep alike.
    prof = replace(THREE, layers=tuple(replace(x, optimizer_s=0.0) for x in THREE.layers),
                   metadata={"pass_s_per_byte": 1e-3 / 3000})
    assert hand("wfbp", prof).iteration_time == pytest.approx(26 * MS, rel=1e-12)
    swept = cm.sweep(prof, ENV, [2], "wfbp", collective="ring_allreduce").iteration_time[0, 0]
    assert swept == pytest.approx(26 * MS, rel=1e-12)
