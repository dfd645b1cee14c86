"""commscope validate --convergence: time to target from hand-made records, censoring, Kendall's tau, ratios,
predictions from a hand-made constants record, the report, bad input, the shipped run, and one multi-process
end-to-end run on a tiny budget."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil

import pytest

from runners.validate import ValidationError
from runners.validate import convergence_measure as m
from runners.validate.convergence_analysis import analyse, load_dir, suite_dict
from runners.validate.convergence_predict import anchor, iterations, predict
from runners.validate.convergence_report import markdown, read, write
from runners.validate.convergence_suite import (
    ALGORITHMS,
    SUITES,
    ConvergenceSuite,
    compressor_labels,
    get_suite,
    make_plan,
)

TARGET = m.Target(loss=0.5, accuracy=0.8)


def _conv(technique: str, seed: int, step: int, t: float, test_loss: float, acc: float) -> dict:
    return {"kind": "convergence", "config": {"algorithm": technique, "model": "mlp", "seed": seed},
            "result": {"step": step, "loss": test_loss + 0.05, "time_s": t, "test_loss": test_loss, "accuracy": acc}}


def _curve(technique: str, seed: int, per_step: float, speed: float, steps: int = 100, every: int = 10) -> list[dict]:
    """A run whose test loss falls as 1.5 exp(-speed step / 50) and accuracy rises accordingly."""
    out = []
    for s in range(0, steps + 1, every):
        loss = 1.5 * math.exp(-speed * s / 50)
        out.append(_conv(technique, seed, s, s * per_step + 0.01, loss, min(0.95, 1 - loss / 2)))
    return out


def _constants_record() -> dict:
    comp = {"topk:0.01": {"constant": "delta", "value": 0.3, "worst_measured": 0.2, "worst_case": 0.01},
            "qsgd:4": {"constant": "omega", "value": 0.5, "worst_measured": 0.6, "worst_case": 16.0},
            "signsgd": {"constant": None, "value": None, "worst_case": None, "note": "sigma1"}}
    return {"kind": "constants", "id": "c0", "config": {"model": "mlp", "dataset": "gaussian_mixture",
                                                        "batch_size": 32, "world_size": 4, "steps": 10},
            "result": {"L": {"value": 4.0, "used": "power iteration", "note": ""},
                       "sigma": {"sigma2": 0.25, "sigma2_max": 0.3, "sigma2_per_sample": 8.0,
                                 "sigma2_per_sample_max": 9.0, "shard_size": 2048},
                       "zeta": {"zeta2": 0.01, "zeta2_max": 0.02}, "Delta": {"value": 2.0},
                       "sigma1": {"value": 10.0}, "compressors": comp}}


SUITE = ConvergenceSuite("unit", "mlp", "gaussian_mixture", 32, 0.1, 100, 10, TARGET.loss, TARGET.accuracy, seeds=3,
                         algorithms=tuple(a for a in ALGORITHMS if a[0] in ("sgd", "qsgd", "topk", "signsgd")))


def _records() -> list[dict]:
    recs = [_constants_record()]
    for seed in range(3):
        recs += _curve("fusion", seed, per_step=0.1, speed=1.0 + 0.1 * seed)
        recs += _curve("qsgd", seed, per_step=0.05, speed=0.9)
        recs += _curve("topk", seed, per_step=0.02, speed=0.7)
        recs += _curve("signsgd", seed, per_step=0.02, speed=0.05 if seed else 0.8)  # two seeds censored
    return recs


# ---------------------------------------------------------------------------------------- time to target
def test_time_to_target_is_the_first_evaluation_meeting_both() -> None:
    pts = [_conv("fusion", 0, s, t, loss, acc)["result"] for s, t, loss, acc in
           [(0, 0.0, 2.0, 0.1), (10, 1.0, 0.45, 0.7), (20, 2.1, 0.6, 0.85), (30, 3.3, 0.4, 0.82), (40, 4.0, 0.3, 0.9)]]
    r = m.reach(pts, TARGET)
    assert r["loss"] == {"step": 10, "time_s": 1.0}
    assert r["accuracy"] == {"step": 20, "time_s": 2.1}
    assert r["both"] == {"step": 30, "time_s": 3.3} and r["reached"]
    assert r["last_step"] == 40 and r["seconds_per_step"] == pytest.approx(0.1)


def test_a_run_that_never_reaches_the_target_is_censored() -> None:
    pts = [_conv("fusion", 0, s, s / 10, 1.0, 0.5)["result"] for s in (0, 10, 20)]
    r = m.reach(pts, TARGET)
    assert r["both"] is None and not r["reached"] and r["last_time_s"] == 2.0
    stats = m.over_seeds([r, r, r])
    assert stats["median"] is None and stats["reached"] == 0 and stats["at_least"] == 2.0
    nan_point = {**pts[-1], "test_loss": float("nan"), "accuracy": float("nan")}
    assert not TARGET.met(nan_point)  # a diverged run never meets the target


def test_a_run_that_diverged_is_censored_where_it_diverged() -> None:
    pts = [_conv("fusion", 0, s, s / 10, loss, acc)["result"] for s, loss, acc in ((0, 2.0, 0.1), (10, 0.6, 0.75))]
    # what the training loop records when the loss stops being finite: the last finite training loss (here below
    # the target's test loss), no test loss or accuracy
    pts.append({"step": 14, "diverged": True, "time_s": 1.5, "loss": TARGET.loss / 2, "loss_step": 10})
    r = m.reach(pts, TARGET)
    assert r["diverged"] and r["both"] is None and r["loss"] is None and not r["reached"]
    assert r["last_step"] == 14 and r["last_time_s"] == 1.5 and r["final_loss"] is None
    recs = [_constants_record(), *_curve("fusion", 0, per_step=0.1, speed=1.0),
            *({"kind": "convergence", "config": {"algorithm": "topk", "model": "mlp", "seed": 0}, "result": p}
              for p in pts)]
    row = {r["label"]: r for r in analyse(recs, suite_dict(SUITE, compressor_labels(SUITE)), 4)["rows"]}["topk"]
    assert row["diverged"] == 1 and row["reached"] == 0 and row["time_median_s"] is None
    assert "1 of 1 seed(s) diverged (censored)" in row["note"]


def test_censored_median_counts_censored_as_infinite() -> None:
    assert m.censored_median([3.0, None, 1.0]) == 3.0
    assert m.censored_median([1.0, None, None]) is None
    assert m.censored_median([1.0, 2.0, 4.0, None]) == 3.0
    assert m.censored_median([1.0, 2.0, None, None]) is None
    assert m.censored_median([]) is None
    stats = m.over_seeds([{"both": {"time_s": t, "step": 1}, "last_time_s": t, "last_step": 1} for t in (2.0, 4.0)]
                         + [{"both": None, "last_time_s": 9.0, "last_step": 9}])
    assert stats["median"] == 4.0 and stats["min"] == 2.0 and stats["max"] == 4.0 and stats["spread"] == 0.5


def test_curves_group_by_label_and_seed() -> None:
    c = m.curves(_records(), {"fusion": "sgd", "topk": "topk"})
    assert sorted(c) == [(lab, s) for lab in ("sgd", "topk") for s in range(3)]
    assert [p["step"] for p in c[("sgd", 0)]] == list(range(0, 101, 10))


# ---------------------------------------------------------------------------------------- ratios and tau
def test_ratios_and_within_two() -> None:
    assert m.ratio(3.0, 2.0) == 1.5 and m.ratio(None, 2.0) is None and m.ratio(1.0, 0.0) is None
    assert m.within(1.9, 1.0) and m.within(0.51, 1.0) and not m.within(2.1, 1.0) and not m.within(0.4, 1.0)
    assert m.within(None, 1.0) is None


def _tau_by_hand(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b from its definition: (concordant - discordant) / sqrt((n0 - n1)(n0 - n2))."""
    n = len(x)
    c = d = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = x[i] - x[j], y[i] - y[j]
            if a == 0 and b == 0:
                continue
            if a == 0:
                tx += 1
            elif b == 0:
                ty += 1
            elif a * b > 0:
                c += 1
            else:
                d += 1
    return (c - d) / math.sqrt((c + d + tx) * (c + d + ty))


def test_kendall_tau_matches_its_definition_with_ties_and_censoring() -> None:
    a = {"sgd": 1.0, "topk": 0.4, "qsgd": 0.7, "randomk": 2.0, "dpsgd": 1.2}
    assert m.kendall_tau(a, a)["tau"] == pytest.approx(1.0)
    assert m.kendall_tau(a, {k: -v for k, v in a.items()})["tau"] == pytest.approx(-1.0)
    b = {"sgd": 10.0, "topk": 5.0, "qsgd": 12.0, "randomk": None, "dpsgd": None}  # two censored: tied last
    ra, rb = m.ranking(a), m.ranking(b)
    assert rb["randomk"] == rb["dpsgd"] == 4.5
    k = m.kendall_tau(a, b)
    assert k["n"] == 5 and k["tau"] == pytest.approx(_tau_by_hand([ra[x] for x in a], [rb[x] for x in a]))
    assert m.kendall_tau({"sgd": 1.0}, {"sgd": 2.0})["tau"] is None
    assert m.kendall_tau(a, {"sgd": 1.0, "topk": 2.0})["n"] == 2


# ---------------------------------------------------------------------------------------- predictions
def test_eps_is_anchored_on_sgd_and_bounds_order_the_algorithms() -> None:
    constants = {"problem": {"L": 4.0, "sigma": 0.5, "Delta": 2.0, "zeta": 0.1}}
    eps = anchor(300, constants["problem"], 4)
    assert iterations("sgd", {}, 4, eps, constants["problem"], None) == pytest.approx(300, abs=1)
    topk = {"constant": "delta", "delta": 0.3, "worst_case": 0.01}
    t_measured = iterations("topk", {}, 4, eps, constants["problem"], topk)
    t_worst = iterations("topk", {}, 4, eps, constants["problem"], topk, worst=True)
    assert 300 <= t_measured < t_worst  # a compressor never beats SGD's bound; its worst case is slower still
    with pytest.raises(Exception, match="delta was not measured"):
        iterations("topk", {}, 4, eps, constants["problem"], None)


def test_predict_says_why_a_bound_does_not_apply() -> None:
    from runners.validate.convergence_predict import problem_constants

    constants = problem_constants([_constants_record()])
    algos = [(a[0], a[1], a[2], a[3]) for a in SUITE.algorithms]
    comp = {"qsgd": "qsgd:4", "topk": "topk:0.01"}
    t = {"sgd": 0.1, "qsgd": 0.05, "topk": 0.02, "signsgd": 0.02}
    p = predict(algos, 4, constants, comp, 40, t, {"sgd": 0.2, "topk": 0.01})
    rows = p["rows"]
    assert p["eps"] > 0 and rows["sgd"]["predicted_ratio"] == pytest.approx(1.0)
    assert not rows["signsgd"]["applies"] and "growing as T" in rows["signsgd"]["note"]
    assert rows["topk"]["predicted_ratio"] == pytest.approx(rows["topk"]["iterations_ratio"] * 0.2)
    assert rows["topk"]["predicted_ratio_cost_model"] == pytest.approx(rows["topk"]["iterations_ratio"] * 0.05)
    assert "predicted_ratio_cost_model" not in rows["qsgd"]  # no cost-model price for it
    assert rows["topk"]["predicted_ratio_worst_case"] > rows["topk"]["predicted_ratio"]
    assert predict(algos, 4, constants, comp, None, t)["rows"] == {}  # SGD censored: nothing to anchor


# ---------------------------------------------------------------------------------------- analysis and report
def test_analysis_and_report(tmp_path) -> None:
    meta = suite_dict(SUITE, {"qsgd": "qsgd:4", "topk": "topk:0.01", "signsgd": "signsgd"})
    s = analyse(_records(), meta, 4)
    rows = {r["label"]: r for r in s["rows"]}
    assert rows["sgd"]["reached"] == 3 and rows["sgd"]["measured_ratio"] == 1.0
    assert rows["signsgd"]["reached"] == 1 and rows["signsgd"]["time_median_s"] is None
    assert rows["signsgd"]["measured_ratio_at_least"] is not None and rows["signsgd"]["measured_rank"] == 4
    assert rows["topk"]["constant"] == "delta" and rows["topk"]["measured_constant"] == 0.3
    assert rows["topk"]["worst_case_constant"] == 0.01
    assert rows["qsgd"]["constant"] == "omega" and rows["qsgd"]["worst_case_constant"] == 16.0
    assert not rows["signsgd"]["applies"] and "predicted_rank" not in rows["signsgd"]
    assert s["kendall"]["n"] == 3 and s["goals"]["algorithms_ranked"] == 3 and not s["goals"]["tau_goal_met"]
    assert s["goals"]["compressors_reported"] and set(s["goals"]["within_2x"]) == {"sgd", "qsgd", "topk"}
    write(tmp_path, s, "commscope validate --convergence ...", ["a note"])
    md = (tmp_path / "convergence.md").read_text()
    assert "Command: `commscope validate --convergence ...`" in md and "- a note" in md
    assert "| signsgd |" in md and "(censored)" in md and "not run: asynchronous SGD" in md
    assert "Kendall tau" in md and "NOT met" in md
    table = list(csv.DictReader(open(tmp_path / "convergence.csv")))
    assert [r["label"] for r in table] == ["sgd", "qsgd", "topk", "signsgd"]
    got, summary = read(tmp_path / "convergence.jsonl")
    assert [r["label"] for r in got] == ["sgd", "qsgd", "topk", "signsgd"]
    assert summary["goals"] == json.loads(json.dumps(s["goals"])) and summary["run_notes"] == ["a note"]
    assert markdown(s, "x").count("\n| ") >= 6


def test_plan_rotates_the_algorithms_per_seed(tmp_path) -> None:
    plan = make_plan(SUITES["quick"], tmp_path, 4, 1, 3, 1, 60.0)
    labels = [r["label"] for r in plan["runs"]]
    n = len(SUITES["quick"].algorithms)
    assert len(labels) == 3 * n and labels[n] == labels[1] and labels[2 * n] == labels[2]
    assert {r["lr"] for r in plan["runs"] if r["label"] == "signsgd"} == {SUITES["quick"].lr_of("signsgd")}
    assert set(plan["constants"]["compressors"].split(",")) == set(compressor_labels(SUITES["quick"]).values())
    assert compressor_labels(SUITES["quick"])["topk"] == "topk:0.01"


# ---------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"suite": "huge"}, "unknown convergence suite 'huge'; with --convergence choose --suite quick or smoke"),
    ({"ranks": 1}, "--ranks must be an integer >= 2, got 1"),
    ({"seeds": 0}, "--seeds must be an integer >= 1, got 0"),
    ({"emulate": ["100mbit", "1gbit"]}, "one --emulate rate, got 100mbit,1gbit"),
    ({"emulate": ["fast"]}, "fast"),
    ({"ranks": 4096}, "smaller than the batch"),
])
def test_bad_input_fails_before_running(tmp_path, kwargs: dict, message: str) -> None:
    from runners.validate.convergence_driver import validate_convergence

    with pytest.raises(Exception, match=__import__("re").escape(message)):
        validate_convergence(out=tmp_path / "o", **kwargs)
    assert not (tmp_path / "o").exists()


def test_an_existing_run_is_not_overwritten(tmp_path) -> None:
    from runners.validate.convergence_driver import validate_convergence

    (tmp_path / "convergence.jsonl").write_text("{}\n")
    with pytest.raises(ValidationError, match="already holds a convergence validation"):
        validate_convergence("smoke", 2, tmp_path)
    assert (tmp_path / "convergence.jsonl").read_text() == "{}\n"


def test_cli_refuses_bad_input_with_one_line_and_exit_2(tmp_path, capsys) -> None:
    from runners.cli import main

    for argv, message in (
            (["--convergence", "--seeds", "0"], "--seeds must be an integer >= 1, got 0"),
            (["--convergence", "--suite", "full"], "unknown convergence suite 'full'"),
            (["--convergence", "--backend", "nccl"], "--backend must be auto or gloo, got 'nccl'"),
            (["--seeds", "2"], "--seeds is for convergence runs; add --convergence")):
        assert main(["validate", *argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("commscope: error: ") and message in err[0]
    assert not (tmp_path / "o").exists()


def test_get_suite() -> None:
    assert get_suite("quick") is SUITES["quick"] and get_suite(SUITE) is SUITE


# ---------------------------------------------------------------------------------------- shipped run
def test_shipped_reference_run() -> None:
    from pathlib import Path

    import runners.reference

    directory = Path(runners.reference.__file__).resolve().parent / "convergence"
    if not (directory / "convergence.jsonl").exists():
        pytest.skip("no shipped convergence run")
    rows, summary = read(directory / "convergence.jsonl")
    again = load_dir(directory)
    assert [r["label"] for r in again["rows"]] == [r["label"] for r in rows]
    for r, a in zip(rows, again["rows"], strict=True):
        # measured values only: the predictions follow the bounds of this checkout, which may have improved since
        for key in ("time_median_s", "steps_median", "measured_ratio", "measured_constant", "worst_case_constant"):
            assert (r.get(key) is None) == (a.get(key) is None)
            if r.get(key) is not None:
                assert a[key] == pytest.approx(r[key], rel=1e-9)
    assert summary["command"] in (directory / "convergence.md").read_text()
    assert sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) < 2 * 2**20
    labels = {r["label"] for r in rows}
    assert {"sgd", "local_sgd", "dpsgd", "qsgd", "topk", "randomk", "powersgd", "signsgd", "ef_signsgd"} <= labels
    assert summary["goals"]["compressors_reported"]


# ---------------------------------------------------------------------------------------- end to end
@pytest.mark.multiprocess
def test_convergence_validation_end_to_end_on_the_host(tmp_path) -> None:
    """A tiny suite through the real pipeline: torchrun job, constants, every run, analysis, report."""
    if shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(os.sys.executable),
                                                                              "torchrun")):
        pytest.skip("torchrun is not installed")
    from runners import results
    from runners.validate.convergence_driver import validate_convergence

    tiny = ConvergenceSuite("tiny", "mlp", "gaussian_mixture", 16, 0.1, 20, 10, target_loss=2.25,
                            target_accuracy=0.15, seeds=2, lr_scale={"signsgd": 0.02},
                            algorithms=tuple(a for a in ALGORITHMS if a[0] in ("sgd", "topk", "signsgd")),
                            constants={"steps": 2, "checkpoints": 2, "noise_samples": 32, "hvp_samples": 16,
                                       "power_iterations": 2, "draws": 2}, cost_model=False)
    summary, failures = validate_convergence(tiny, 2, tmp_path, seeds=1, timeout=120.0, command="test")
    assert failures == []
    recs = results.load(tmp_path / "host" / "records.jsonl").records
    kinds = [r["kind"] for r in recs]
    assert kinds.count("constants") == 1 and kinds.count("iteration") == 3
    assert kinds.count("convergence") == 3 * 3  # steps 0, 10, 20 of each run
    rows = {r["label"]: r for r in summary["rows"]}
    assert set(rows) == {"sgd", "topk", "signsgd"} and all(r["seeds"] == 1 for r in rows.values())
    assert rows["topk"]["measured_constant"] is not None and rows["topk"]["worst_case_constant"] is not None
    assert not rows["signsgd"]["applies"]
    assert (tmp_path / "convergence.md").exists() and (tmp_path / "convergence.csv").exists()
    again = load_dir(tmp_path)
    assert [r.get("time_median_s") for r in again["rows"]] == [r.get("time_median_s") for r in summary["rows"]]


@pytest.mark.multiprocess
def test_a_diverging_algorithm_is_a_censored_row_not_a_hang(tmp_path) -> None:
    """Local SGD at a learning rate 10^5 times the suite's: its loss overflows within a few steps, every rank stops at
    the same evaluation, the divergence is recorded and the run is censored; the job goes on to the next run."""
    import time

    from runners import results
    from runners.validate.convergence_driver import validate_convergence

    tiny = ConvergenceSuite("tiny", "mlp", "gaussian_mixture", 16, 0.1, 20, 5, target_loss=2.25,
                            target_accuracy=0.15, seeds=1, lr_scale={"local_sgd": 1e5},
                            algorithms=tuple(a for a in ALGORITHMS if a[0] in ("sgd", "local_sgd")),
                            constants={"steps": 2, "checkpoints": 2, "noise_samples": 32, "hvp_samples": 16,
                                       "power_iterations": 2, "draws": 2}, cost_model=False)
    start = time.monotonic()
    summary, failures = validate_convergence(tiny, 2, tmp_path, seeds=1, timeout=60.0, command="test")
    assert failures == [] and time.monotonic() - start < 60
    recs = results.load(tmp_path / "host" / "records.jsonl").records
    (div,) = [r for r in recs if r["result"].get("diverged") and r["kind"] == "convergence"]
    assert div["config"]["algorithm"] == "local_sgd" and 0 < div["result"]["step"] <= 20
    (it,) = [r for r in recs if r["kind"] == "iteration" and r["config"]["algorithm"] == "local_sgd"]
    assert it["result"]["diverged"] and it["result"]["diverged_step"] == div["result"]["step"]
    rows = {r["label"]: r for r in summary["rows"]}
    assert rows["local_sgd"]["diverged"] == 1 and rows["local_sgd"]["reached"] == 0
    assert rows["local_sgd"]["time_median_s"] is None and "diverged (censored)" in rows["local_sgd"]["note"]
    assert rows["sgd"]["diverged"] == 0
