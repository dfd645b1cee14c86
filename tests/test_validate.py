"""commscope validate: prediction, measurement, tables, bad input, the shipped reference run, and the
gloo-specific cost terms validation found (reduce-scatter as allreduce; one message per ByteScheduler
partition)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scripts import load_script

import costmodels as cm
from costmodels.messages import Comm
from runners import reference, results
from runners import validate as v
from runners.validate import host_cpu

MS = 1e-3
PROF = cm.ModelProfile(
    "toy", (cm.Layer("l0", 250, 1000.0, 1 * MS, 2 * MS), cm.Layer("l1", 500, 2000.0, 2 * MS, 4 * MS)),
    "cpu", "float32", 32, "measured", "hand-written")
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0, metadata={
    "algorithms": {"allreduce": "ring_allreduce", "allgather": "ring_allgather",
                   "reduce_scatter": "allreduce_reduce_scatter"}})


def test_allreduce_reduce_scatter_costs_an_allreduce_by_hand() -> None:
    # p = 4, n = 4000 B: 2(p-1) alpha + 2 (p-1)/p n beta = 6 ms + 6 ms = 12 ms (a ring RS would be 3 + 3 = 6 ms)
    c = cm.collective("allreduce_reduce_scatter")
    assert c.primitive == "reduce_scatter"
    assert float(c.time(4000.0, 4, ENV)) == pytest.approx(12 * MS)
    assert float(cm.collective("ring_reduce_scatter").time(4000.0, 4, ENV)) == pytest.approx(6 * MS)


def test_comm_takes_a_mapping_of_primitives() -> None:
    algos = ENV.metadata["algorithms"]
    assert Comm("reduce_scatter", 4, ENV, algos).candidates == ["allreduce_reduce_scatter"]
    assert Comm("allgather", 4, ENV, algos).candidates == ["ring_allgather"]
    assert len(Comm("broadcast", 4, ENV, algos).candidates) >= 1  # not in the mapping: the cheapest


def test_dear_over_gloo_reduce_scatter_by_hand() -> None:
    # p = 2, one group of 3000 B: RS as allreduce 2 ms + 3 ms = 5 ms, AG 1 ms + 1.5 ms = 2.5 ms.
    # Compute 3 + 6 = 9 ms; RS after backward (9-14), AG before the next forward (14-16.5): period 16.5 ms
    r = cm.simulate(PROF, ENV, 2, "dear", ENV.metadata["algorithms"])
    assert r.iteration_time == pytest.approx(16.5 * MS)
    ring = cm.simulate(PROF, ENV, 2, "dear", "ring_allreduce")
    assert ring.iteration_time == pytest.approx(14.0 * MS)  # RS 1 + 1.5 = 2.5 ms instead of 5


def test_predict_maps_techniques_to_schedules() -> None:
    t, how = v.predict("fusion", {"bucket_cap_mb": 25.0}, PROF, ENV, 2)
    assert t == pytest.approx(cm.simulate(PROF, ENV, 2, "fusion", ENV.metadata["algorithms"],
                                          bucket_bytes=25 * 2**20).iteration_time)
    assert "fusion" in how and "ring_allreduce" in how
    t, _ = v.predict("local_sgd", {"H": 4}, PROF, ENV, 2)
    assert t == pytest.approx(cm.simulate(PROF, ENV, 2, "local_sgd", ENV.metadata["algorithms"], H=4).iteration_time)
    t, how = v.predict("topk", {"density": 0.5}, PROF, ENV, 2)
    assert "topk:0.5" in how and t > PROF.compute_s
    # D-PSGD on a ring of 4: local step, then the 3000 B model to and from both neighbours and averaged:
    # compute 9 ms + 2 x (alpha 1 ms + 3000 B x 1 us/B) = 17 ms; 2 ranks have one neighbour: 9 + 4 = 13 ms;
    # o = 0.5 ms per neighbour posted by the training thread, and the exchange's price, timed blocking, already
    # holds one o (LinkComm): 17 - 0.5 + 2 x 0.5 = 17.5 ms; with one neighbour 13 - 0.5 + 0.5 = 13 ms
    assert v.predict("dpsgd", {}, PROF, ENV, 4)[0] == pytest.approx(17 * MS)
    assert v.predict("dpsgd", {}, PROF, ENV, 2)[0] == pytest.approx(13 * MS)
    assert v.predict("dpsgd", {}, PROF, ENV.with_(host_overhead=0.5 * MS), 4)[0] == pytest.approx(17.5 * MS)
    assert cm.sweep(PROF, [ENV, ENV.with_(host_overhead=0.5 * MS)], [2, 4], "dpsgd").iteration_time == \
        pytest.approx(np.array([[13, 17], [13, 17.5]]) * MS)
    with pytest.raises(cm.CommscopeError, match="topology 'star' has no gossip cost model"):
        v.predict("dpsgd", {"topology": "star"}, PROF, ENV, 4)


def _iteration(algorithm: str, time_s: float, model: str = "toy", **extra: float) -> dict:
    run = results.run_info("gloo", 2, 1, ["cpu", "cpu"], local_world_size=1)
    return results.record("iteration", {"algorithm": algorithm, "model": model, "batch_size": 32, "world_size": 2,
                                        "options": {"H": 4} if algorithm == "local_sgd" else {}},
                          {"time_s": time_s, **extra}, run, "test")


def test_the_calibrated_prediction_shows_its_standard_error() -> None:
    # (b) 110 ms against 100 measured, standard error 5.5 ms: "110.00 (+10.0% ± 5.5%)" in the table, 0.055 in the
    # CSV column; (a) and (c) have none, and a (b) without one shows no "±"
    rec = results.record("validation", {"technique": "wfbp", "options": {}, "environment": "e", "model": "toy",
                                        "world_size": 2, "repeats": 1},
                         {"measured_s": 0.1, "spread": 0.01, "predicted_s": 0.1, "error": 0.0,
                          "predicted_calibrated_s": 0.11, "error_calibrated": 0.1,
                          "predicted_calibrated_stderr_s": 0.0055, "predicted_defaults_s": 0.1,
                          "error_defaults": 0.0}, results.run_info("gloo", 2, 1, ["cpu", "cpu"]), "test")
    row = v.table_rows([rec])[0]
    assert row["error_calibrated_stderr"] == pytest.approx(0.055)
    md = v.markdown([row], "commscope validate ...")
    assert "| 100.00 (+0.0%) | 110.00 (+10.0% ± 5.5%) | 100.00 (+0.0%) |" in md
    del rec["result"]["predicted_calibrated_stderr_s"]
    assert "| 110.00 (+10.0%) |" in v.markdown(v.table_rows([rec]), "commscope validate ...")


def test_measured_time_takes_the_period() -> None:
    # a record with the mean over ranks takes it, whatever the technique; one without it takes the wall-clock mean
    # where the step returns with messages in flight (ByteScheduler, DeAR), else the median of the per-iteration
    # maximum; local SGD always its wall-clock mean over whole periods
    assert v.measured_time(_iteration("bytescheduler", 0.5, time_rank_mean_s=0.43, mean_time_s=0.44)) == 0.43
    assert v.measured_time(_iteration("fusion", 0.5, time_rank_mean_s=0.47, mean_time_s=0.46)) == 0.47
    assert v.measured_time(_iteration("bytescheduler", 0.5, mean_time_s=0.44)) == 0.44
    assert v.measured_time(_iteration("dear", 0.5, mean_time_s=0.44)) == 0.44
    assert v.measured_time(_iteration("fusion", 0.5, mean_time_s=0.55)) == 0.5
    assert v.measured_time(_iteration("bytescheduler", 0.5)) == 0.5
    assert v.measured_time(_iteration("local_sgd", 0.1, time_rank_mean_s=0.09, mean_time_s=0.12)) == 0.12


def test_measured_time_and_compare() -> None:
    recs = [_iteration("bsp", 0.02), _iteration("local_sgd", 0.01, mean_time_s=0.012),
            _iteration("dpsgd", 0.05, model="unprofiled")]
    assert v.measured_time(recs[1]) == 0.012  # periodic: wall-clock mean, not the median iteration
    out = v.compare(recs, {"toy": PROF}, ENV, "host")
    assert [r["config"]["technique"] for r in out] == ["bsp", "local_sgd", "dpsgd"]
    bsp = out[0]["result"]
    assert bsp["predicted_s"] == pytest.approx(cm.simulate(PROF, ENV, 2, "bsp", ENV.metadata["algorithms"])
                                               .iteration_time)
    assert bsp["error"] == pytest.approx(bsp["predicted_s"] / 0.02 - 1)
    assert "predicted_s" not in out[2]["result"] and out[2]["result"]["how"].startswith("not predicted")
    rows = v.table_rows(out)
    s = v.summary(rows)
    assert s["all"]["n"] == 2 and s["all"]["unpredicted"] == 1
    assert s["all"]["max_abs_error"] == pytest.approx(max(abs(rows[0]["error"]), abs(rows[1]["error"])))
    md = v.markdown(rows, "commscope validate ...")
    assert "| dpsgd | host | 2 | unprofiled |" in md and "n/a" in md


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"suite": "huge"}, "unknown suite 'huge'; choose one of: quick, full"),
    ({"ranks": 1}, "--ranks must be an integer >= 2, got 1"),
    ({"emulate": ["fast"]}, "fast"),
    ({"emulate": ["1gbit"], "ranks": 4, "ranks_per_node": 3}, "not a multiple of 3 ranks per node"),
    ({"emulate": ["1gbit:x"], "ranks": 4}, "ranks per node after ':' must be an integer >= 1"),
])
def test_bad_input_fails_before_running(tmp_path, kwargs: dict, message: str) -> None:
    args = {"suite": "quick", "ranks": 2, "out": tmp_path / "o", **kwargs}
    with pytest.raises(cm.CommscopeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        v.validate(**args)
    assert not (tmp_path / "o").exists()


def test_existing_validation_is_not_overwritten(tmp_path) -> None:
    (tmp_path / "validation.jsonl").write_text("keep\n")
    with pytest.raises(v.ValidationError, match="already holds a validation"):
        v.validate("quick", 2, tmp_path)
    assert (tmp_path / "validation.jsonl").read_text() == "keep\n"


@pytest.fixture
def no_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test whose checks must refuse before any job starts: starting one fails it."""
    from runners.validate import convergence_driver, driver

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a validation job was started")

    monkeypatch.setattr(driver, "run_job", started)
    monkeypatch.setattr(convergence_driver, "run_job", started)


@pytest.mark.parametrize(("argv", "message"), [
    (["--emulate", "1gbit", "--ranks-per-node", "0"], "--ranks-per-node must be an integer >= 1, got 0"),
    (["--ranks-per-node", "2"], "--ranks-per-node 2 is for emulated clusters: add --emulate RATE"),
    (["--emulate", "1gbit,100mbit,1gbit"], "--emulate gives the same environment twice: '1gbit' and '1gbit'"),
    (["--emulate", "1gbit:2,1000mbit:2"], "same environment twice: '1gbit:2' and '1000mbit:2'"),
    (["--emulate", "1gbit,1gbit:2", "--ranks-per-node", "2", "--ranks", "4"], "'1gbit' and '1gbit:2'"),
    (["--convergence", "--ranks-per-node", "2"], "--ranks-per-node 2 is for emulated clusters"),
])
def test_cli_checks_the_layout_before_any_job(tmp_path, capsys, no_job, argv: list[str], message: str) -> None:
    from runners.cli import main

    assert main(["validate", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("commscope: error: ") and message in err[0], err
    assert not (tmp_path / "o").exists()


def test_different_layouts_of_one_rate_are_two_environments() -> None:
    from runners.validate.driver import environments

    assert environments(["1gbit", "1gbit:2"], 4, None) == [("1gbit", 1), ("1gbit", 2)]


@pytest.mark.parametrize(("name", "text"), [
    ("validation.md", "# My notes\n"), ("validation.csv", "a,b\n1,2\n"), ("validation.md", ""),
])
def test_a_users_report_in_out_is_refused_before_any_job(tmp_path, no_job, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(v.ValidationError, match=re.escape(name) + " was not written by commscope"):
        v.validate("quick", 2, tmp_path)
    assert (tmp_path / name).read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_users_convergence_report_is_refused(tmp_path, no_job) -> None:
    from runners.validate.convergence_driver import check_inputs

    (tmp_path / "convergence.csv").write_text("mine\n")
    with pytest.raises(v.ValidationError, match=r"convergence\.csv was not written by commscope"):
        check_inputs("quick", 4, tmp_path, [], None, 1, 60.0, None)


def test_commscopes_own_reports_may_be_replaced(tmp_path) -> None:
    from runners.validate.driver import check_out

    v.write_tables(tmp_path, [], "commscope validate ...")
    check_out(tmp_path)  # an earlier run's tables, without records: nothing refused


def test_every_environment_is_checked_before_the_first_job(tmp_path, no_job) -> None:
    (tmp_path / "1gbit").mkdir()
    (tmp_path / "1gbit" / "mine.txt").write_text("keep")
    with pytest.raises(v.ValidationError, match="1gbit is not empty"):
        v.validate("quick", 2, tmp_path, ["100mbit", "1gbit"])
    assert not (tmp_path / "100mbit").exists()


def test_plan_profiles_mgwfbp_from_this_run(tmp_path) -> None:
    plan = v.make_plan(v.SUITES["quick"], tmp_path / "1gbit", 4, 1, 1, 60.0)
    mg = dict(plan["techniques"])["mgwfbp"]
    assert mg["profile"] == plan["profile_path"] and mg["env"] == plan["environment"]
    assert plan["sweep"]["ops"] == ["allreduce", "allgather", "reduce_scatter"]
    # the link is fitted as an iteration sends its messages: back to back, each rank's calls summed
    assert (plan["fit_method"], plan["fit_statistic"]) == ("two_regimes", "chain")
    # alpha from the sizes below 64 KiB; 100 timed iterations for every size below 4 MiB (4 B .. 1 MiB by 4x:
    # 64 KiB, 256 KiB and 1 MiB scatter 2-5x between iterations on shared cores), 10 for 4 and 16 MiB
    sw = plan["sweep"]
    assert (sw["latency_bytes"], sw["latency_iters_below"], sw["latency_iters"], sw["iters"]) == \
        (65536, 4 * 2**20, 100, 10)
    from runners.validate.rank import sweep_parts

    small = [4 * 4**k for k in range(10)]  # 4 B .. 1 MiB
    assert sweep_parts(sw) == [(small, 100), ([4 * 2**20, 16 * 2**20], 10)]
    # a plan written before latency_iters_below: the 100 iterations stop at latency_bytes, as they did
    old = {k: v for k, v in sw.items() if k != "latency_iters_below"}
    assert sweep_parts(old) == [(small[:7], 100), ([*small[7:], 4 * 2**20, 16 * 2**20], 10)]  # 4 B .. 16 KiB
    json.dumps(plan)  # what the rank side reads


@pytest.mark.parametrize("run", list(reference.RUNS))
def test_shipped_reference_run(run) -> None:
    directory = reference.run_dir(run)
    recs = reference.validation_records(run)
    envs = reference.environments(run)
    assert envs == ["200mbit", "1gbit-2x2", "2500mbit"]
    suite = v.SUITES["quick"]
    techniques = {t for t, _ in suite.techniques}
    for env in envs:
        for model, _ in suite.workloads:
            mine = [r for r in recs if r["config"]["environment"] == env and r["config"]["model"] == model]
            assert {r["config"]["technique"] for r in mine} == techniques
            assert all(r["config"]["world_size"] == 4 and r["config"]["repeats"] == suite.repeats for r in mine)
        kinds = {r["kind"] for r in reference.records(env, run)}
        assert kinds == {"collective", "environment", "profile", "iteration"}
        assert (directory / env / "environment.json").exists()
        assert set(reference.profiles(env, run)) == {m for m, _ in suite.workloads}
    # communication-bound and mixed cells (no compute-bound one: on 4 ranks sharing 2 cores the bsp iteration
    # waits 30% of its time for the slowest rank's compute even on the fastest link; see the closing note)
    shares = v.regimes(v.table_rows(recs))
    names = {v.regime_name(x) for x in shares.values()}
    assert {"communication-bound", "mixed"} <= names, shares
    # the comparison is reproducible from the shipped records with today's models
    for env in envs:
        e = cm.Environment.load(directory / env / "environment.json")
        profs = {m: cm.load_profile(p) for m, p in reference.profiles(env, run).items()}
        host = host_cpu.shared_host(host_cpu.load(directory), reference.records(env, run), 1, e)
        again = v.compare(reference.records(env, run), profs, e, env, host=host, calibrate=False)  # (b): calibrate
        shipped = [r for r in recs if r["config"]["environment"] == env]
        for key in ("predicted_s", "predicted_defaults_s"):
            np.testing.assert_allclose([r["result"][key] for r in again], [r["result"][key] for r in shipped],
                                       rtol=1e-9)
    assert reference.COMMAND in (directory / "validation.md").read_text()


def test_shipped_runs_are_named() -> None:
    assert reference.run_dir() == reference.VALIDATION_DIR
    assert reference.run_dir("validation-rerun") == reference.VALIDATION_DIR.parent / "validation-rerun"
    with pytest.raises(KeyError, match="no shipped validation run 'nope'; shipped: validation, validation-rerun, "
                                       "validation-run3, validation-run4, validation-run5, validation-run6"):
        reference.run_dir("nope")


@pytest.mark.multiprocess
def test_validate_end_to_end_on_the_host(tmp_path) -> None:
    """A tiny suite through the real pipeline: torchrun job, sweep, fit, profile, train, predict, tables."""
    if shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(os.sys.executable),
                                                                              "torchrun")):
        pytest.skip("torchrun is not installed")
    suite = v.Suite("tiny", "mlp", 16, (("bsp", {"flatten": True}), ("fusion", {}), ("local_sgd", {"H": 2})),
                    iterations=4, warmup=1, sweep_sizes=("4", "64KiB", 16.0), sweep_iters=(1, 3), profile_iters=(1, 3),
                    extra_models=(("gpt_small", 4),), repeats=2)
    recs, failures = v.validate(suite, 2, tmp_path, timeout=60.0, command="test")
    assert failures == []
    assert [(r["config"]["technique"], r["config"]["model"]) for r in recs] == [
        (t, m) for m in ("mlp", "gpt_small") for t in ("bsp", "fusion", "local_sgd")]
    assert all(r["config"]["repeats"] == 2 for r in recs)
    assert all(math.isfinite(r["result"]["predicted_s"]) and r["result"]["measured_s"] > 0 for r in recs)
    assert all(math.isfinite(r["result"]["predicted_calibrated_s"]) for r in recs)  # bsp beside fusion
    assert all(r["result"]["comm_share_bsp"] is not None for r in recs)
    assert (tmp_path / "host" / "profile-gpt_small.json").exists()
    assert (tmp_path / "validation.csv").read_text().startswith("technique,environment,p,model")
    # the notes name the statistic the plan fitted the link to (calibrate's SWEEP_STATISTIC, the chain time)
    plan = json.loads((tmp_path / "host" / "plan.json").read_text())
    assert plan["fit_statistic"] == "chain" and "fitted to the chain times (the slowest rank's timed calls summed" \
        in (tmp_path / "validation.md").read_text()
    assert (tmp_path / "host" / "environment.json").exists() and (tmp_path / "host" / "profile.json").exists()
    # gloo's host buffers, measured once with the run's ranks, are given to the link's fit (host_buffers.py)
    probe = json.loads((tmp_path / "host_buffers.json").read_text())
    assert probe["ranks"] == 2 and plan["host_buffers"] == str((tmp_path / "host_buffers.json").resolve())
    fitted = cm.Environment.load(tmp_path / "host" / "environment.json")
    assert (fitted.host_copy, fitted.host_fault) == (probe["host_copy"], probe["host_fault"])
    prof = cm.load_profile(tmp_path / "host" / "profile.json")
    assert "synchronised_forward_s" in prof.metadata and prof.metadata["concurrent_ranks"] == 2
    # the SGD update, timed with the ranks in step, is the profile's optimizer step (U), spread by parameters
    assert prof.optimizer_s == pytest.approx(prof.metadata["synchronised_optimizer_s"]) and prof.optimizer_s > 0
    big = max(prof.layers, key=lambda x: x.params)
    assert big.optimizer_s == pytest.approx(prof.optimizer_s * big.params / prof.params)
    # the averaging division, timed the same way, measures one memory pass over the gradients
    assert prof.metadata["optimizer"] == "sgd" and prof.metadata["pass_s_per_byte"] > 0
    assert prof.pass_s_per_byte == prof.metadata["pass_s_per_byte"]
    kinds = [r["kind"] for r in results.load(tmp_path / "host" / "records.jsonl").records]
    # each model's profile, then the same rescaled to the median of it and a probe before each of the 6 runs
    assert kinds.count("iteration") == 12 and "environment" in kinds and kinds.count("profile") == 4
    probes = prof.metadata["compute_probes_s"]
    assert len(probes) == 7 and prof.metadata["compute_probe_spread"] >= 0
    # the median of the probes' forward + backward, split by the shares of their own medians
    f_med, b_med = (float(np.median([x[k] for x in probes])) for k in (0, 1))
    total = float(np.median([f + b for f, b, _, _ in probes]))
    assert prof.forward_s + prof.backward_s == pytest.approx(total)
    assert prof.forward_s == pytest.approx(total * f_med / (f_med + b_med))
    # a latency probe after the sweep and before each of the 12 runs, beside the records, never in them
    lat = results.load(tmp_path / "host" / "latency_probes.jsonl").records
    assert len(lat) == 13 and lat[0]["config"]["probe"] == {"after": "sweep"}
    assert all(r["kind"] == "collective" and r["config"]["bytes"] == 1024 and r["result"]["time_s"] > 0 for r in lat)
    assert lat[1]["config"]["probe"]["repetition"] == 1 and lat[-1]["config"]["probe"]["repetition"] == 2
    assert not any("probe" in r["config"] for r in results.load(tmp_path / "host" / "records.jsonl").records)
    # the predictions take the sweep's latency unless asked (repredict --probes): none says a scale
    from runners.validate.driver import repredict

    assert not any("latency_scale" in r["result"] for r in recs)
    again = {(r["config"]["technique"], r["config"]["model"], json.dumps(r["config"]["options"], sort_keys=True)): r
             for r in repredict(tmp_path, probes=True)}
    assert any("latency_scale" in r["result"] for r in again.values())
    for r in recs:  # (a) with the probes' latency: the same cell priced on the environment scaled by its factor
        a = again[(r["config"]["technique"], r["config"]["model"], json.dumps(r["config"]["options"], sort_keys=True))]
        assert a["result"].get("latency_scale", 1.0) > 0 and math.isfinite(a["result"]["predicted_s"])


def test_fused_compressed_techniques_are_one_message_after_backward() -> None:
    # topk sends one allgather of every tensor's values + indices once backward is done: the fusion
    # schedule with one bucket, i.e. compute + one compressed message, nothing overlapped
    t, _ = v.predict("topk", {"density": 0.5}, PROF, ENV, 2)
    one = cm.simulate(PROF, ENV, 2, "fusion", ENV.metadata["algorithms"], "topk:0.5", bucket_bytes=2**60,
                      first_bucket_bytes=2**60)
    assert t == pytest.approx(one.iteration_time)
    assert len(one.timeline.on("comm")) == 1 and one.timeline.on("comm")[0].start >= PROF.compute_s - 1e-12


def test_gloo_with_cuda_tensors_needs_a_gpu(monkeypatch) -> None:
    """--backend gloo-cuda (several ranks on one GPU) is accepted everywhere and refused clearly without CUDA."""
    from runners.measure import sweep as bench
    from runners.training import runner as rt

    torch = pytest.importorskip("torch")
    assert "gloo-cuda" in bench.BACKENDS and "gloo-cuda" in rt.BACKENDS
    bench.make_options(op="allreduce", backend="gloo-cuda")
    with pytest.raises(cm.CommscopeError, match="unknown --backend 'cuda'"):
        v.validate("quick", 2, "/nonexistent/never-written", backend="cuda")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(bench.BenchError, match="gloo-cuda needs a CUDA device, and this machine has none"):
        bench.setup("gloo-cuda")
    opts = rt.make_options("bsp", "mlp", 2, backend="gloo-cuda")
    with pytest.raises(rt.TrainError, match="gloo-cuda needs a CUDA device"):
        rt.setup(opts)


@pytest.mark.multiprocess
def test_a_failing_technique_is_named_and_the_rest_goes_on(tmp_path) -> None:
    suite = v.Suite("tiny", "mlp", 16, (("fusion", {"no_such_option": 1}), ("bsp", {})), iterations=2, warmup=1,
                    sweep_sizes=("4", "4KiB", 16.0), sweep_iters=(1, 2), latency_iters=2, profile_iters=(1, 2))
    recs, failures = v.validate(suite, 2, tmp_path, timeout=60.0, command="test")
    assert len(failures) == 1 and failures[0].startswith("host: fusion (rank 0: technique fusion takes")
    assert "no_such_option" in failures[0]
    assert [r["config"]["technique"] for r in recs] == ["bsp"]


def test_cli_refuses_bad_input_with_exit_2(tmp_path) -> None:
    from runners.cli import main

    assert main(["validate", "--suite", "huge", "--out", str(tmp_path / "o")]) == 2
    assert main(["validate", "--emulate", ",", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


@pytest.mark.multiprocess
def test_a_failed_job_is_reported_with_its_error_line(tmp_path) -> None:
    suite = v.Suite("broken", "no_such_model", 16, (("bsp", {}),), iterations=2, warmup=1,
                    sweep_sizes=("4", "64", 16.0), sweep_iters=(1, 2), latency_iters=2, profile_iters=(1, 2))
    recs, failures = v.validate(suite, 2, tmp_path, timeout=60.0, command="test")
    assert recs == [] and len(failures) == 1
    assert failures[0].startswith("host: the job exited with code ")
    assert "commscope: error:" in failures[0] and "no_such_model" in failures[0]
    assert (tmp_path / "validation.csv").exists()  # the tables are written (empty) even so


def test_bench_validation_summarises_every_shipped_run() -> None:
    bench = load_script("bench/bench_validation.py")
    runs = [bench.analyse(reference.run_dir(run)) for run in reference.RUNS]
    rows = bench.summary(runs)
    assert [(r["run"], r["prediction"]) for r in rows] == [
        (run, key) for run in reference.RUNS for key in ("sweep", "calibrated", "defaults")]
    for r in rows:
        table = v.table_rows(reference.validation_records(r["run"]))
        p2 = v.summary(table, r["prediction"])["all"]
        won = v.winners(table, r["prediction"])
        assert (r["cells"], r["median_abs_error"], r["max_abs_error"]) == (p2["n"], p2["median_abs_error"],
                                                                          p2["max_abs_error"])
        assert (r["winner_right"], r["winner_cells"]) == (won["right"], won["n"]) and r["cells"] == 54
    for res in runs:  # per (environment, model): the cells of each add up to the run's 54, its max to the run's max
        for pred in res["predictions"].values():
            cells = pred["per_environment_model"]
            assert len(cells) == 6 and sum(c["n"] for c in cells.values()) == 54
            assert max(c["max_abs_error"] for c in cells.values()) == pred["p2"]["all"]["max_abs_error"]
            assert set(cells) == set(pred["winner"]["cells"])
        # (b)'s own uncertainty: the counts are those of the table's errors and standard errors
        u = res["predictions"]["calibrated"]["uncertainty"]
        table = v.table_rows(reference.validation_records(Path(res["directory"]).name))
        errors = [abs(r["error_calibrated"]) for r in table]
        assert u["over_15_percent"] == sum(e > 0.15 for e in errors if math.isfinite(e))
        assert 0 <= u["over_15_percent_within_2_stderr"] <= u["over_15_percent"]
        assert u["within_2_stderr"] == sum(abs(r["error_calibrated"]) <= 2 * r["error_calibrated_stderr"]
                                           for r in table if math.isfinite(r["error_calibrated_stderr"]))


def test_latency_scale_by_hand() -> None:
    # gloo's ring all-reduce of 1 KiB on 4 ranks, alpha 1 ms, 1 Gbit/s: 6 alpha + 2 (3/4) 1024 B x 8 ns/B
    # = 6 ms + 12.288 us = 6.012288 ms; with no latency 12.288 us. bsp per tensor's probes: 4.0 and 4.4 ms, median
    # 4.2 ms -> s = (4.2 ms - 12.288 us) / 6 ms = 0.697952, and the scaled environment prices 1 KiB at 4.2 ms
    from runners.calibrate.cells import scale_latency
    from runners.validate.latency import latency_scale, probes_path

    env = cm.Environment(name="t", alpha=1e-3, beta=8e-9, library="gloo")

    def probe(t: float, **when: Any) -> dict[str, Any]:
        return {"config": {"bytes": 1024, "probe": when}, "result": {"time_s": t}}

    probes = [probe(5.0e-3, after="sweep"), probe(4.0e-3, technique="bsp", options={"flatten": False},
                                                   model="resnet_small", repetition=1),
              probe(4.4e-3, technique="bsp", options={"flatten": False}, model="resnet_small", repetition=2),
              probe(9.9e-3, technique="bsp", options={"flatten": True}, model="resnet_small", repetition=1)]
    s = latency_scale(env, 4, probes, "bsp", {"flatten": False}, "resnet_small")
    assert s == pytest.approx(0.697952)
    assert float(cm.choose("allreduce", 1024.0, 4, scale_latency(env, s)).time) == pytest.approx(4.2e-3)
    # a plan's options match the record's defaults-filled ones (bsp's flatten is False unless set; MG-WFBP's paths
    # are not options of the cell)
    assert latency_scale(env, 4, probes, "bsp", {}, "resnet_small") == pytest.approx(0.697952)
    mg = [probe(6.0123e-3, technique="mgwfbp", options={"env": "/r/environment.json", "profile": "/r/p.json"},
                model="resnet_small", repetition=1)]
    assert latency_scale(env, 4, mg, "mgwfbp", {"collective": None}, "resnet_small") == pytest.approx(1.0, abs=1e-4)
    assert latency_scale(env, 4, probes, "bsp", {"flatten": False}, "gpt_wide") is None  # no probe of its own
    assert latency_scale(env, 4, [probe(10e-6, technique="bsp", options={}, model="m")], "bsp", {}, "m") is None
    assert scale_latency(env, 1.0) is env and scale_latency(env, 0.5).alpha == 0.5e-3
    assert probes_path("/x/2500mbit/records.jsonl") == Path("/x/2500mbit/latency_probes.jsonl")


def test_bench_latency_probes_on_the_kept_run(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    bench = load_script("bench/bench_latency_probes.py")
    res = bench.measure(root / "bench" / "results" / "validation_4ranks_latency")
    assert len(res["rows"]) == 54 and res["sweep"]["cells"] == 6
    scales = sorted(r["latency_scale"] for r in res["rows"])
    assert 0.5 < scales[0] and scales[-1] < 1.1 and 0.7 < scales[27] < 0.9  # the sweep's alpha prices 1 KB high
    per_tensor = [r for r in res["rows"] if r["technique"] == "bsp" and not r["options"].get("flatten")]
    before = sum(abs(r["error_sweep"]) for r in per_tensor) / len(per_tensor)
    after = sum(abs(r["error_probed"]) for r in per_tensor) / len(per_tensor)
    # 0.0767 and 0.0493 before the chains priced a message that finds the link's token bucket full
    # (costmodels.schedules.chain_prices), which took a third of the sweep's over-pricing of per-tensor bsp away
    assert before == pytest.approx(0.0600, abs=0.002) and after == pytest.approx(0.0505, abs=0.002)
    assert bench.main([str(root / "bench" / "results" / "validation_4ranks_b2b")]) == 2  # no probes kept there
    err = capsys.readouterr().err
    assert err.startswith("commscope: error:") and "latency_probes.jsonl" in err
