"""Vectorized sweeps: many environments and worker counts in one call, equal to one-at-a-time.

The kernels unroll the event simulation's recurrences; every test here compares them with
:func:`costmodels.simulate` configuration by configuration (relative 1e-12), so a kernel that
drifts from its schedule fails.
"""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.schedules import best_dear_buffer, serial_ends

ENVS = [cm.environment(x) for x in ("1GbE", "10GbE", "IB-EDR", "8xV100-NVLink+IB-EDR", "4xPCIe3+10GbE")]
PS = [1, 2, 3, 8, 16, 24]


def one_at_a_time(prof: cm.ModelProfile, envs, ps, schedule: str, *args, **kw) -> np.ndarray:
    return np.array([[cm.simulate(prof, e, q, schedule, *args, **kw).iteration_time for q in ps] for e in envs])


def test_environment_array_fields_and_round_trip() -> None:
    arr = cm.EnvironmentArray.of(ENVS)
    assert arr.shape == (5,)
    for i in (1, 3):  # names and every model field come back (descriptions are not carried)
        assert arr[i] == ENVS[i].with_(description="", source="")
    flat = arr[0]
    assert not flat.two_level and arr.intra_alpha[0] == flat.alpha  # one level: intra link = the link


def test_environment_grid_is_an_outer_product() -> None:
    base = cm.environment("10GbE")
    grid = cm.EnvironmentArray.grid(base, alpha=[1e-6, 1e-5], beta=[1e-10, 1e-9, 1e-8])
    assert grid.shape == (2, 3)
    assert grid[1, 2].alpha == 1e-5 and grid[1, 2].beta == 1e-8 and grid[1, 2].gamma == base.gamma
    two = cm.environment("8xA100-NVLink+IB-HDR")
    g2 = cm.EnvironmentArray.grid(two, beta=[1e-9, 2e-9])
    assert g2.shape == (1, 2) and all(g2[0, j].intra_beta == two.intra_beta for j in range(2))


@pytest.mark.parametrize(("kw", "message"), [
    ({"alpha": [-1e-6]}, "alpha must be finite and >= 0, got -1e-06"),
    ({"beta": [0.0]}, "beta must be finite and > 0, got 0.0"),
    ({"beta": ["fast"]}, "beta must be a number or an array of numbers"),
])
def test_environment_grid_rejects_bad_values(kw: dict, message: str) -> None:
    with pytest.raises(cm.CommscopeError, match=message):
        cm.EnvironmentArray.grid(cm.environment("10GbE"), **kw)


def test_every_collective_over_an_environment_array_matches_each_environment() -> None:
    presets = [cm.environment(x) for x in cm.environments()]
    arr = cm.EnvironmentArray.of(presets).reshape(-1, 1)
    ps = np.array([[2, 3, 4, 8, 16, 24, 64]])
    for name in cm.collectives(include_bounds=False):
        c = cm.collective(name)
        batch = c.time(3e6, ps, arr, out_of_domain="nan")
        fast = c.evaluator(ps, arr, out_of_domain="nan")(3e6)
        each = np.array([[c.time(3e6, int(q), e, out_of_domain="nan") for q in ps[0]] for e in presets])
        np.testing.assert_allclose(batch, each, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(fast, each, rtol=1e-12, err_msg=name)


def test_serial_ends_is_the_send_loop() -> None:
    rng = np.random.default_rng(7)
    ready, dt = np.sort(rng.uniform(0, 1, 50)), rng.uniform(0, 0.05, (3, 50))
    for c in range(3):
        link, want = 0.2, []
        for r, d in zip(ready, dt[c], strict=True):
            link = max(link, r) + d
            want.append(link)
        np.testing.assert_allclose(serial_ends(ready, dt, np.full(3, 0.2))[c], want, rtol=1e-13)


@pytest.mark.parametrize("schedule", [s for s in cm.schedules() if cm.schedule(s).vectorized is not None])
def test_sweep_equals_simulate_for_every_vectorized_schedule(schedule: str) -> None:
    prof = cm.profile("resnet50")
    r = cm.sweep(prof, ENVS, PS, schedule)
    assert r.method == "vectorized" and r.iteration_time.shape == (len(ENVS), len(PS))
    np.testing.assert_allclose(r.iteration_time, one_at_a_time(prof, ENVS, PS, schedule), rtol=1e-12)


@pytest.mark.parametrize(("schedule", "collective", "options"), [
    ("wfbp", "hierarchical_allreduce", {}),
    ("fusion", "double_binary_tree_allreduce", {"bucket_bytes": "4MiB", "first_bucket_bytes": "64KiB"}),
    ("mgwfbp", "ring_allreduce", {}),
    ("dear", "ring_allreduce", {"buffer_bytes": "2MiB"}),
    ("dear", None, {"buffer_bytes": 1}),  # every layer its own group
    ("ps", None, {"k": 2}),
    ("ps", None, {"partition_bytes": "512KiB"}),
    ("local_sgd", None, {"H": 4}),
    ("zero", "ring_allreduce", {"bucket_bytes": "8MiB", "allgather_bucket_bytes": "16MiB"}),
    ("zero", None, {"reduce_bucket_size": 3e6, "allgather_bucket_size": 2e7}),
    ("zero", None, {"reduce_bucket_size": 3e6, "overlap_comm": True}),
    ("fsdp", None, {"unit_bytes": "10MiB"}),
    ("fsdp", None, {"unit_bytes": "30MiB"}),  # leaves a root unit at the end
])
def test_sweep_passes_collective_and_options(schedule: str, collective: str | None, options: dict) -> None:
    prof = cm.profile("bert-base")
    ps = [1, 2, 8, 16]
    r = cm.sweep(prof, ENVS, ps, schedule, collective, **options)
    np.testing.assert_allclose(r.iteration_time, one_at_a_time(prof, ENVS, ps, schedule, collective, **options),
                               rtol=1e-12)


@pytest.mark.parametrize("compressor", ["topk:0.01", "qsgd:8", "powersgd:4", "fp16", "randomk:0.01"])
@pytest.mark.parametrize("schedule", ["bsp", "wfbp", "fusion", "mgwfbp", "local_sgd"])
def test_sweep_with_compression_equals_simulate(schedule: str, compressor: str) -> None:
    prof = cm.profile("resnet50")
    ps = [1, 4, 32]
    r = cm.sweep(prof, ENVS[:3], ps, schedule, compressor=compressor)
    want = one_at_a_time(prof, ENVS[:3], ps, schedule, compressor=compressor)
    np.testing.assert_allclose(r.iteration_time, want, rtol=1e-12)


def test_sweep_over_an_alpha_beta_grid() -> None:
    prof = cm.profile("vgg16")
    grid = cm.EnvironmentArray.grid(cm.environment("10GbE"), alpha=np.geomspace(1e-6, 1e-3, 4),
                                    beta=np.geomspace(1e-11, 1e-8, 5))
    r = cm.sweep(prof, grid, [2, 8, 32], "dear")
    assert r.iteration_time.shape == (4, 5, 3)
    for i, j, k in [(0, 0, 0), (3, 4, 2), (1, 2, 1)]:
        want = cm.simulate(prof, grid[i, j], [2, 8, 32][k], "dear").iteration_time
        assert r.iteration_time[i, j, k] == pytest.approx(want, rel=1e-12)
    # more latency or less bandwidth never helps
    assert (np.diff(r.iteration_time, axis=0) >= -1e-15).all() and (np.diff(r.iteration_time, axis=1) >= -1e-15).all()


def test_sweep_rates_and_rows() -> None:
    prof = cm.profile("resnet50")
    r = cm.sweep(prof, cm.environment("10GbE"), [1, 4], "wfbp")
    assert r.scaling_efficiency[0, 0] == pytest.approx(1.0)  # one worker: compute only
    assert r.throughput[0, 1] == pytest.approx(4 * prof.batch_size / r.iteration_time[0, 1])
    rows = r.rows()
    assert [row["p"] for row in rows] == [1, 4] and rows[1]["environment"] == "10GbE"


def test_schedule_without_kernel_loops_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from costmodels.schedules import SCHEDULES

    plain = replace(cm.schedule("bytescheduler"), vectorized=None)
    monkeypatch.setitem(SCHEDULES._entries, "bytescheduler", plain)
    prof = cm.profile("resnet50")
    r = cm.sweep(prof, ENVS[:2], [2, 8], "bytescheduler")
    assert r.method == "per-configuration loop"
    np.testing.assert_allclose(r.iteration_time, one_at_a_time(prof, ENVS[:2], [2, 8], "bytescheduler"))


@pytest.mark.parametrize("options", [{"partition_bytes": "1MiB", "credit_bytes": "1MiB"},
                                     {"partition_bytes": "8MiB", "credit_bytes": "40MiB"}])
def test_bytescheduler_kernel_with_other_partitions_and_credit(options: dict) -> None:
    prof = cm.profile("bert-base")
    ps = [1, 2, 16]
    r = cm.sweep(prof, ENVS, ps, "bytescheduler", **options)
    np.testing.assert_allclose(r.iteration_time, one_at_a_time(prof, ENVS, ps, "bytescheduler", **options),
                               rtol=1e-12)


def test_sweep_chunks_large_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from costmodels.schedules import vectorized as sw

    prof = cm.profile("resnet50")
    whole = cm.sweep(prof, ENVS, PS, "dear").iteration_time
    monkeypatch.setattr(sw, "CHUNK", 7)  # 30 configurations in 5 chunks, the last one short
    np.testing.assert_array_equal(cm.sweep(prof, ENVS, PS, "dear").iteration_time, whole)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"envs": "10GbE"}, "envs must be an Environment, a list of them or an EnvironmentArray, got str"),
    ({"p": []}, "p must name at least one worker count"),
    ({"p": [4, 0]}, "p must be >= 1 rank, got 0"),
    ({"schedule": "gossip"}, "unknown schedule 'gossip'"),
    ({"schedule": "dear", "compressor": "topk:0.01"}, "dear communicates shards"),
    ({"schedule": "dear", "collective": "bruck_allgather"}, "dear decouples an allreduce"),
    ({"schedule": "dear", "collective": "rabenseifner_allreduce", "p": [6]}, "power of two"),
    ({"schedule": "fusion", "bucket_bytes": -1}, "bucket_bytes must be a positive number of bytes"),
    ({"schedule": "bytescheduler", "credit_bytes": "1MiB"}, "credit_bytes .* must be at least one partition"),
])
def test_sweep_errors_name_the_bad_value(kwargs: dict, message: str) -> None:
    args = {"profile": cm.profile("resnet50"), "envs": ENVS[:2], "p": [2, 4], **kwargs}
    with pytest.raises(cm.CommscopeError, match=message):
        cm.sweep(**args)


def test_best_dear_buffer_is_exhaustive_on_a_small_model() -> None:
    """Four layers: every threshold between 1 B and the model size gives one of the 2^3 groupings
    the greedy rule can produce; the search must match the best of a dense scan of thresholds."""
    ms = 1e-3
    prof = cm.ModelProfile(
        name="four", device="hand", dtype="float32", batch_size=1, origin="estimated", source="hand",
        layers=tuple(cm.Layer(f"l{i}", b // 4, float(b), f * ms, 2 * f * ms)
                     for i, (b, f) in enumerate([(4000, 1), (400000, 3), (40000, 2), (4000000, 4)])),
    )
    env = cm.Environment(alpha=2e-3, beta=1e-9)
    cap, best = best_dear_buffer(prof, env, 8, "ring_allreduce")
    # DeAR's rule is strict (a group stays below the threshold), so every run sum is scanned too: the
    # thresholds in (S_i, S_{i+1}] between consecutive run sums give one grouping, reached at S_{i+1}
    sizes = [4000, 400000, 40000, 4000000]
    runs = [sum(sizes[a:b]) for a in range(4) for b in range(a + 1, 5)]
    scan = [cm.simulate(prof, env, 8, "dear", "ring_allreduce", buffer_bytes=float(c)).iteration_time
            for c in np.unique(np.concatenate([np.geomspace(1, 5e6, 400), runs]))]
    assert best.iteration_time == pytest.approx(min(scan), rel=1e-12)
    assert best.details["buffer_bytes"] == cap


@pytest.mark.parametrize("options", [{}, {"partition_bytes": 2**20, "credit_bytes": 2**20},
                                     {"partition_bytes": 2**24, "credit_bytes": 2**26}])
def test_bytescheduler_kernel_three_iterations_equal_the_simulation(options: dict) -> None:
    """The kernel stops after three iterations (overlap.KERNEL_ITERATIONS), the event simulation after four: the
    period is the same on every shipped profile. With partitions (up to 1,278 of them per iteration, which the
    event simulation takes one by one) on two environments and three p; without, on all."""
    envs, ps = (ENVS, PS) if not options else (ENVS[1::3], [2, 8, 24])
    for name in cm.profiles():
        prof = cm.profile(name)
        r = cm.sweep(prof, envs, ps, "bytescheduler", **options)
        np.testing.assert_allclose(r.iteration_time, one_at_a_time(prof, envs, ps, "bytescheduler", **options),
                                   rtol=1e-12)
