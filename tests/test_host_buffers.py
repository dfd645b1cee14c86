"""gloo's own host buffers (costmodels.collectives.host_buffers): the formulas by hand, the environment fields, the fit
that takes them as given, the probe that measures them, and the shipped measurements they explain."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scripts import load_script

import costmodels as cm
from costmodels.collectives.host_buffers import MMAP_THRESHOLD_MAX
from runners import results as rs
from runners.cli import main
from runners.measure import fit as fitting
from runners.measure import host_buffers as probe

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "results" / "gloo_host_buffers"
MiB = 2**20
# a gloo link with its host buffers: 0.2 ns/B copied, 0.8 ns/B more for a buffer mapped afresh
LINK = cm.Environment(alpha=1e-3, beta=3.2e-9, gamma=1e-9, library="gloo")
HOST = LINK.with_(host_copy=2e-10, host_fault=8e-10)


def extra(primitive: str, n: float, p: int, env: cm.Environment = HOST) -> float:
    """What the host buffers add to one call of ``primitive`` (the same call priced without them subtracted)."""
    bare = env.with_(host_copy=0.0, host_fault=0.0)
    return float(cm.choose(primitive, n, p, env).time - cm.choose(primitive, n, p, bare).time)


# ------------------------------------------------------------------------------------------- the formulas by hand
def test_reduce_scatter_pays_the_clone_and_the_shard_copy_by_hand() -> None:
    # 4 MiB on 4 ranks, below glibc's 32 MiB: copies only, (n + n/p) mu = (4194304 + 1048576) x 2e-10 = 1.048576 ms
    assert extra("reduce_scatter", 4 * MiB, 4) == pytest.approx(1.048576e-3, rel=1e-12)
    # 64 MiB: the copies, (67108864 + 16777216) x 2e-10 = 16.777216 ms, and the clone mapped afresh,
    # 67108864 x 8e-10 = 53.6870912 ms: 70.4643072 ms
    assert extra("reduce_scatter", 64 * MiB, 4) == pytest.approx(70.4643072e-3, rel=1e-12)
    # exactly 32 MiB is mapped afresh (glibc: a request >= the threshold is mmapped); 4 bytes fewer is not
    at = 41943040 * 2e-10 + 33554432 * 8e-10  # 8.388608 + 26.8435456 ms
    assert extra("reduce_scatter", 32 * MiB, 4) == pytest.approx(at, rel=1e-12)
    below = (32 * MiB - 4) * 1.25 * 2e-10
    assert extra("reduce_scatter", 32 * MiB - 4, 4) == pytest.approx(below, rel=1e-12)


def test_allgather_pays_the_copy_out_and_allreduce_nothing() -> None:
    # the copy of the n gathered bytes out of gloo's flat buffer: 64 MiB x 2e-10 = 13.4217728 ms, no fault term
    assert extra("allgather", 64 * MiB, 4) == pytest.approx(13.4217728e-3, rel=1e-12)
    assert extra("allgather", 64 * MiB, 2) == pytest.approx(13.4217728e-3, rel=1e-12)  # p = 2's own formula too
    assert extra("allreduce", 64 * MiB, 4) == 0.0  # in place in the caller's tensor


def test_without_host_buffers_every_price_is_what_it_was() -> None:
    n = np.array([16.0, 4 * MiB, 64 * MiB])
    for q in ("allreduce", "allgather", "reduce_scatter"):
        assert np.array_equal(cm.choose(q, n, 4, LINK).time, cm.choose(q, n, 4, HOST.with_(host_copy=0.0,
                                                                                            host_fault=0.0)).time)
    # gloo's reduce-scatter is its all-reduce, as before
    assert np.array_equal(cm.choose("reduce_scatter", n, 4, LINK).time, cm.choose("allreduce", n, 4, LINK).time)


def test_the_host_buffers_come_after_the_token_bucket() -> None:
    # the bucket hides latency between the transfer's steps; the clone is before them: the same extra either way
    shaped = HOST.with_(burst_bytes=1.25e6)
    for n in (256 * 1024, 4 * MiB, 64 * MiB):
        assert extra("reduce_scatter", n, 4, shaped) == pytest.approx(extra("reduce_scatter", n, 4), rel=1e-12)


def test_arrays_of_environments_price_as_each_one_does() -> None:
    envs = [HOST, LINK, HOST.with_(host_fault=0.0)]
    arr = cm.EnvironmentArray.of(envs)
    n = np.array([[4 * MiB], [64 * MiB]])
    for q in ("reduce_scatter", "allgather"):
        got = cm.choose(q, n, 4, arr).time
        want = np.column_stack([cm.choose(q, n[:, 0], 4, e).time for e in envs])
        assert np.allclose(got, want, rtol=1e-12, atol=0)


def test_sensitivities_of_the_host_buffers_by_hand() -> None:
    c = cm.collective("allreduce_reduce_scatter")
    s = c.sensitivity(np.array([4 * MiB, 64 * MiB]), 4, HOST)
    assert s["host_copy"].tolist() == [4 * MiB * 1.25, 64 * MiB * 1.25]  # n + n/p
    assert s["host_fault"].tolist() == [0.0, 64 * MiB]  # the clone, mapped afresh from 32 MiB
    shares = c.sensitivity(64 * MiB, 4, HOST, relative=True)
    assert math.fsum(float(v) for v in shares.values()) == pytest.approx(1.0, rel=1e-12)  # Euler, with mu and phi


def test_the_formula_shows_the_host_buffers() -> None:
    latex = cm.collective("allreduce_reduce_scatter").latex()
    assert r"\mu" in latex and r"\phi" in latex and "33554432" in latex
    assert MMAP_THRESHOLD_MAX == 32 * MiB


# ------------------------------------------------------------------------------------------------ the environment
def test_environment_fields_are_checked_and_written_only_when_set(tmp_path: Path) -> None:
    assert "host_copy" not in LINK.to_dict() and "host_fault" not in LINK.to_dict()  # older files read the same
    path = HOST.save(tmp_path / "env.json")
    assert cm.Environment.load(path) == HOST
    assert "host buffers 0.2 ns/B copied, 0.8 ns/B mapped" in HOST.summary()
    with pytest.raises(cm.CommscopeError, match=r"host_fault .*must be >= 0"):
        LINK.with_(host_fault=-1e-10)
    with pytest.raises(cm.CommscopeError, match=r"host_copy .*must be a number"):
        LINK.with_(host_copy="fast")


# ------------------------------------------------------------------------------------------------------- the fit
def _records(env: cm.Environment, sizes: list[int]) -> list[dict]:
    run = {"host": "node0", "backend": "gloo", "world_size": 4, "ranks_per_node": 1, "devices": ["cpu"],
           "torch": None, "nccl": None, "gloo": None, "network": None}
    out = []
    for q in ("allreduce", "reduce_scatter"):
        for nbytes, t in zip(sizes, np.atleast_1d(cm.choose(q, np.array(sizes, float), 4, env).time), strict=True):
            config = {"op": q, "bytes": nbytes, "count": nbytes // 4, "dtype": "float32", "warmup": 2,
                      "iterations": 10}
            out.append(rs.record("collective", config, {"time_s": float(t), "algbw_GBps": 0.0, "busbw_GBps": 0.0,
                                                         "wrong": 0}, run))
    return out


def test_the_fit_takes_the_host_buffers_as_given_and_recovers_the_link() -> None:
    truth = HOST.with_(gamma=0.0)
    recs = _records(truth, [2**k for k in range(10, 27)])  # 1 KiB .. 64 MiB, noise free
    res = fitting.fit(recs, "allreduce,reduce_scatter", "gloo_ring_allreduce,allreduce_reduce_scatter", gamma=0.0,
                      host=(2e-10, 8e-10))
    env = res.environment
    assert env.alpha == pytest.approx(1e-3, rel=1e-6) and env.beta == pytest.approx(3.2e-9, rel=1e-6)
    assert (env.host_copy, env.host_fault) == (2e-10, 8e-10)
    assert res.max_rel_error < 1e-6
    assert any("host buffers are priced as measured" in note for note in res.notes)
    # without them the link absorbs what it cannot explain
    blind = fitting.fit(recs, "allreduce,reduce_scatter", "gloo_ring_allreduce,allreduce_reduce_scatter", gamma=0.0)
    assert blind.max_rel_error > 0.05
    with pytest.raises(cm.CommscopeError, match="host buffers must be"):
        fitting.fit(recs, "allreduce", gamma=0.0, host=(1e-10, -1.0))


# ----------------------------------------------------------------------------------------------------- the probe
@pytest.mark.multiprocess
def test_the_probe_measures_copies_and_fresh_mappings(tmp_path: Path) -> None:
    res = probe.measure(2, repeats=1)
    assert res["schema"] == probe.SCHEMA and res["ranks"] == 2 and res["bytes"] == 64 * MiB
    assert 1e-12 < res["host_copy"] < 1e-8  # between 100 GB/s and 0.1 GB/s per rank
    # glibc on Linux maps a 64 MiB clone afresh: every 4 KiB page faults once
    assert res["fresh_pages_faulted"] == pytest.approx(1.0, abs=0.01)
    assert res["host_fault"] > 0
    path = probe.save(res, tmp_path / "hb.json")
    assert probe.load(path) == (res["host_copy"], res["host_fault"])


def test_a_file_that_is_not_a_probe_result_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    bad = tmp_path / "env.json"
    LINK.save(bad)
    with pytest.raises(cm.CommscopeError, match="not a host buffer file"):
        probe.load(bad)
    recs = tmp_path / "r.jsonl"
    rs.append(recs, _records(LINK, [2**k for k in range(10, 20)]))
    code = main(["fit", str(recs), "--host-buffers", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not a host buffer file" in err
    with pytest.raises(cm.CommscopeError, match="nbytes must be an integer >= 33554432"):
        probe.measure(1, nbytes=MiB)


# ------------------------------------------------------------------------------------- the shipped measurements
def _times(path: Path) -> dict[tuple[str, int], float]:
    out = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out[(r["config"]["op"], r["config"]["bytes"])] = r["result"]["time_s"]
    return out


SWEEPS = [DATA / f"{x}.jsonl" for x in ("2500mbit-4ranks", "200mbit-4ranks", "1gbit-2x2")] + \
    [DATA / "heldout" / f"{x}.jsonl" for x in ("2500mbit", "200mbit", "1gbit-2x2")]


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_clone_mapped_afresh_is_what_reduce_scatter_pays_beyond_allreduce(sweep: Path) -> None:
    """4 emulated ranks on 2 cores, 64 MiB: reduce-scatter minus all-reduce per byte, measured 1.16, 1.20 and 1.06
    ns/B (2.5 Gbit/s, 200 Mbit/s, 2 x 2 behind 1 Gbit/s) and 1.08, 1.05 and 0.89 on the held-out sweeps, against
    (1 + 1/p) host_copy + host_fault = 1.25 x 0.189 + 0.750 = 0.986 ns/B from the probe of the same host
    (heldout/host_buffers.json): within 25% of the term at every link speed, where the link's own time per byte
    differs 12-fold."""
    t = _times(sweep)
    hb = json.loads((DATA / "heldout" / "host_buffers.json").read_text())
    n = 64 * MiB
    measured = (t[("reduce_scatter", n)] - t[("allreduce", n)]) / n
    assert measured == pytest.approx(1.25 * hb["host_copy"] + hb["host_fault"], rel=0.25)


def test_with_the_allocator_keeping_its_memory_the_difference_falls_to_a_third() -> None:
    # MALLOC_MMAP_THRESHOLD_ = 2e9 on every rank: 64 MiB comes from the heap, no fresh mapping: 0.36 ns/B left
    # (the copies) against 1.16 with glibc's default, at 2.5 Gbit/s
    heap, default = (_times(DATA / f"2500mbit-4ranks{x}.jsonl") for x in ("-heap-only", ""))
    n = 64 * MiB
    assert (heap[("reduce_scatter", n)] - heap[("allreduce", n)]) / n < 0.4 * (
        (default[("reduce_scatter", n)] - default[("allreduce", n)]) / n)


def test_held_out_64_mib_reduce_scatter_is_predicted_with_the_probe_and_missed_without() -> None:
    """Pre-registered (bench/results/gloo_host_buffers/README.md): each link fitted as validate fits it, to its
    sweep up to 16 MiB, with the probe's host buffers given and without; at 64 MiB, never seen by the fit, the
    reduce-scatter's median error over the three links must be <= 5% with them and below the median without.
    Measured: +1.7 / -0.1 / -2.5% with, -5.1 / -1.5 / -17.4% without (1 Gbit/s 2 x 2, 200 Mbit/s, 2.5 Gbit/s)."""
    bench = load_script("bench/bench_host_buffers.py")
    res = bench.measure(DATA / "heldout")
    rows = [r["reduce_scatter"] for r in res["links"].values()]
    with_, without = (np.median([abs(r[f"error_{k}"]) for r in rows]) for k in ("with", "without"))
    assert with_ <= 0.05 and with_ < without
    assert max(abs(r["error_with"]) for r in rows) < 0.03
    assert all(abs(r["allreduce"]["error_with"]) < 0.02 for r in res["links"].values())  # in place: unchanged


@pytest.mark.xfail(strict=True, reason="gloo's all-gather writes its flat output, mapped afresh from 32 MiB, in "
                   "its receives: at 2.5 Gbit/s on 2 cores the faults add 1.0-1.3 ns/B, at 200 Mbit/s and 1 Gbit/s "
                   "they hide behind the wire; which links expose them is not modelled (host_buffers.py)")
def test_allgather_above_32_mib_at_2500_mbit_costs_what_below_it_does() -> None:
    t = _times(DATA / "2500mbit-4ranks.jsonl")
    per_byte = {n: t[("allgather", n)] / n for n in (8 * MiB, 64 * MiB)}
    assert per_byte[64 * MiB] == pytest.approx(per_byte[8 * MiB], rel=0.10)


@pytest.mark.multiprocess
def test_bench_host_buffers_writes_what_fit_and_calibrate_read(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hb.json"
    assert main(["bench", "host-buffers", "--ranks", "2", "--repeats", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "host_copy" in text and "host_fault" in text and f"wrote {out}" in text
    host = probe.load(out)
    recs = tmp_path / "r.jsonl"
    truth = HOST.with_(gamma=0.0, host_copy=host[0], host_fault=host[1])
    rs.append(recs, _records(truth, [2**k for k in range(10, 27)]))
    env_out = tmp_path / "env.json"
    assert main(["fit", str(recs), "--primitive", "allreduce,reduce_scatter", "--algorithm",
                 "gloo_ring_allreduce,allreduce_reduce_scatter", "--gamma", "0", "--host-buffers", str(out),
                 "--out", str(env_out)]) == 0
    env = cm.Environment.load(env_out)
    assert (env.host_copy, env.host_fault) == host and env.beta == pytest.approx(3.2e-9, rel=1e-6)
    capsys.readouterr()
    assert main(["calibrate", str(recs), "--host-buffers", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.json" in err


def test_a_messages_latency_steps_leave_its_host_buffers_out() -> None:
    # the contended floor counts S latency steps: a 64 MiB gloo reduce-scatter on 4 ranks is the ring's 2 (p - 1) = 6,
    # with or without the host buffers (which are host work, not steps)
    from costmodels.messages import Comm
    from costmodels.schedules.contended import latency_steps

    p = np.array([4])
    for env in (LINK, HOST):
        arr = cm.EnvironmentArray.of([env])
        steps = latency_steps(Comm("reduce_scatter", p, arr), p, arr, np.array([[64.0 * MiB]]))
        assert np.asarray(steps).ravel().tolist() == [6.0]


@pytest.mark.multiprocess
def test_a_rank_that_fails_is_one_line_at_once(capfd: pytest.CaptureFixture[str]) -> None:
    # 1 TiB cannot be allocated: the ranks say why, the parent says it in one line and exits 2, no rank left behind
    # (capfd: the ranks' own stderr is captured too)
    assert main(["bench", "host-buffers", "--ranks", "2", "--size", "1TiB"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "host buffer probe: rank" in err and "can't allocate memory" in err
    assert "Traceback" not in err


def test_the_symbolic_crossover_sees_the_host_buffers_as_the_numeric_one_does() -> None:
    # the fresh clone is piecewise in n (from 32 MiB): gloo's reduce-scatter has no one closed-form crossover
    assert cm.crossover_expr("allreduce_reduce_scatter", "ring_reduce_scatter") is None
    # and the numeric crossover prices it: on 4 ranks, with the host buffers, gloo's reduce-scatter never wins
    x = cm.crossover("allreduce_reduce_scatter", "ring_reduce_scatter", p=4, env=HOST)
    assert x.sizes == [] and x.cheaper_below == "ring_reduce_scatter"
