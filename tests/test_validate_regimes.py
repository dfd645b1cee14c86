"""Validation across regimes: environments with several ranks per node, several workloads per suite, repetitions,
the three predictions per cell, the communication share of bsp, and the winner figure."""

from __future__ import annotations

import math

import pytest
from scripts import load_script

import costmodels as cm
from runners import results
from runners import validate as v
from runners.validate.driver import environments
from runners.validate.report import regime_name, winners
from runners.validate.suite import profile_file

MS = 1e-3
PROF = cm.ModelProfile(
    "toy", (cm.Layer("l0", 250, 1000.0, 1 * MS, 2 * MS), cm.Layer("l1", 500, 2000.0, 2 * MS, 4 * MS)),
    "cpu", "float32", 32, "measured", "hand-written")
ENV = cm.Environment(alpha=1e-3, beta=1e-6, gamma=0.0, library="gloo", metadata={
    "algorithms": {"allreduce": "ring_allreduce", "allgather": "ring_allgather",
                   "reduce_scatter": "allreduce_reduce_scatter"}})


def test_environments_take_ranks_per_node_per_rate():
    assert environments([], 4, None) == [(None, 4)]
    assert environments(["1gbit", "1gbit:2"], 4, None) == [("1gbit", 1), ("1gbit", 2)]
    assert environments(["100mbit"], 4, 2) == [("100mbit", 2)]
    with pytest.raises(v.ValidationError, match="not a multiple of 3 ranks per node"):
        environments(["1gbit:3"], 4, None)
    with pytest.raises(v.ValidationError, match="must be an integer >= 1"):
        environments(["1gbit:0"], 4, None)
    assert v.env_label("1gbit", 2, 4) == "1gbit-2x2"
    assert v.env_label("1gbit", None, 4) == "1gbit" and v.env_label(None) == "host"


def test_plan_has_every_workload_with_its_own_profile(tmp_path):
    suite = v.SUITES["quick"]
    assert [m for m, _ in suite.workloads] == ["resnet_small", "gpt_wide"]
    plan = v.make_plan(suite, tmp_path / "1gbit", 4, 1, 1, 60.0)
    assert plan["repeats"] == suite.repeats >= 2
    paths = [w["profile_path"] for w in plan["workloads"]]
    assert paths == [str(profile_file((tmp_path / "1gbit").resolve(), i, m)) for i, (m, _) in
                     enumerate(suite.workloads)]
    assert paths[0].endswith("profile.json") and paths[1].endswith("profile-gpt_wide.json")
    for w in plan["workloads"]:  # MG-WFBP merges on its own workload's profile
        assert dict(w["techniques"])["mgwfbp"]["profile"] == w["profile_path"]
    bsp = [opts for name, opts in plan["workloads"][0]["techniques"] if name == "bsp"]
    assert bsp == [{"flatten": True}, {}]  # one message (the regime), and per tensor (o apart from kappa_m)


def _iteration(algorithm: str, time_s: float, model: str = "toy", exposed: float | None = None, **options) -> dict:
    run = results.run_info("gloo", 2, 1, ["cpu", "cpu"], local_world_size=1)
    res = {"time_s": time_s, "time_p10_s": 0.95 * time_s, "time_p90_s": 1.05 * time_s}
    if exposed is not None:
        res["exposed_comm_s"] = exposed
    return results.record("iteration", {"algorithm": algorithm, "model": model, "batch_size": 32, "world_size": 2,
                                        "options": options}, res, run, "test")


def test_repetitions_are_one_cell_with_their_spread_and_the_regime():
    recs = [_iteration("bsp", 0.020, exposed=0.013), _iteration("bsp", 0.022, exposed=0.0143),
            _iteration("wfbp", 0.018), _iteration("wfbp", 0.019)]
    out = v.compare(recs, {"toy": PROF}, ENV, "host")
    assert [r["config"]["technique"] for r in out] == ["bsp", "wfbp"]
    bsp = out[0]
    assert bsp["config"]["repeats"] == 2 and len(bsp["config"]["iteration_records"]) == 2
    assert bsp["result"]["measured_s"] == pytest.approx(0.021)  # median of the repetitions
    assert bsp["result"]["spread"] == pytest.approx(0.5 * 0.002 / 0.021)  # half their range
    assert bsp["result"]["comm_share_bsp"] == pytest.approx(0.65)  # 13/20 and 14.3/22
    # all three predictions: (b) from the terms fitted on wfbp's cells alone
    assert math.isfinite(bsp["result"]["predicted_s"]) and math.isfinite(bsp["result"]["predicted_defaults_s"])
    assert math.isfinite(bsp["result"]["predicted_calibrated_s"]) and set(bsp["result"]["calibrated_terms"]) == {
        "kappa_c", "kappa_m", "host_overhead"}
    assert regime_name(0.65) == "communication-bound" and regime_name(0.3) == "mixed"
    assert regime_name(0.1) == "compute-bound" and regime_name(0.22) == "between"


def test_the_regime_is_the_critical_path_share_of_the_flattened_bsp():
    """The share is the last-arriving rank's exposed communication (the minimum over ranks) over the iteration,
    from the flattened bsp when there is one; ranks that computed faster and waited do not count."""
    from runners.validate.prediction import comm_shares

    def rec(t: float, most: float, least: float | None, **options) -> dict:
        r = _iteration("bsp", t, exposed=most, **options)
        if least is not None:
            r["result"]["exposed_comm_min_s"] = least
        return r

    flat = [rec(0.400, 0.150, 0.040, flatten=True), rec(0.420, 0.160, 0.042, flatten=True)]
    per_tensor = [rec(0.500, 0.250, 0.200)]
    assert comm_shares(flat + per_tensor)["toy"] == pytest.approx(0.10)  # 40/400 and 42/420, not 150/400
    assert comm_shares(per_tensor)["toy"] == pytest.approx(0.40)  # no flattened bsp: any bsp
    assert comm_shares([rec(0.400, 0.150, None, flatten=True)])["toy"] == pytest.approx(0.375)  # older records
    rows = v.table_rows(v.compare(flat + per_tensor, {"toy": PROF}, ENV, "host"))
    assert sorted(r["technique"] for r in rows) == ["bsp", "bsp (flatten)"]


def test_winner_counts_a_pick_within_the_measured_spread_as_right():
    def row(tech, measured, predicted, spread=0.02, env="e", model="m"):
        return {"technique": tech, "environment": env, "model": model, "measured_ms": measured, "spread": spread,
                "predicted_ms": predicted}

    rows = [row("bsp", 100, 90), row("wfbp", 80, 85), row("dear", 81, 70),  # dear picked, 1 ms off, spreads 1.6+1.6
            row("bsp", 100, 50, model="m2"), row("wfbp", 60, 70, model="m2"),  # bsp picked: 40 ms off, wrong
            row("local_sgd", 10, 5, model="m2")]  # not in the contest
    w = winners(rows)
    assert w["n"] == 2 and w["right"] == 1
    m, m2 = w["cells"]["e/m"], w["cells"]["e/m2"]
    assert {k: m[k] for k in ("measured", "predicted", "right", "exact")} == {
        "measured": "wfbp", "predicted": "dear", "right": True, "exact": False}
    assert m2["right"] is False and m2["measured"] == "wfbp" and m2["contenders"] == 2  # local SGD left out
    # what running the pick costs: dear measured 81 ms against wfbp's 80 (+1.25%); bsp 100 against 60 (+66.7%)
    assert m["regret"] == pytest.approx(81 / 80 - 1) and m2["regret"] == pytest.approx(100 / 60 - 1)
    assert w["median_regret"] == pytest.approx((81 / 80 - 1 + 100 / 60 - 1) / 2)
    assert w["max_regret"] == pytest.approx(100 / 60 - 1)
    # Kendall's tau-b of the orders. e/m: predicted dear < wfbp < bsp, measured wfbp < dear < bsp: of the 3 pairs,
    # (dear, wfbp) is discordant and the two with bsp concordant, tau = (2 - 1) / 3. e/m2: the one pair reversed, -1
    assert m["tau"] == pytest.approx(1 / 3) and m2["tau"] == pytest.approx(-1.0)
    assert w["median_tau"] == pytest.approx((1 / 3 - 1) / 2)
    exact = winners([row("bsp", 100, 90), row("wfbp", 80, 85)])
    assert exact["cells"]["e/m"]["exact"] and exact["cells"]["e/m"]["regret"] == 0.0 and exact["median_tau"] == 1.0
    md = v.markdown([{**r, "p": 4, "predicted_calibrated_ms": math.nan, "predicted_defaults_ms": math.nan,
                      "error": r["predicted_ms"] / r["measured_ms"] - 1, "error_calibrated": math.nan,
                      "error_defaults": math.nan, "comm_share_bsp": math.nan} for r in rows], "cmd")
    assert "predicted dear (+1.2% measured)" in md and "predicted bsp (+66.7% measured, wrong)" in md
    assert "costs 34.0% at the median cell and 66.7% at worst" in md and "Kendall's tau -0.33" in md


def test_report_shows_three_predictions_and_regimes():
    recs = [_iteration("bsp", 0.020, exposed=0.005), _iteration("wfbp", 0.018), _iteration("fusion", 0.017)]
    out = v.compare(recs, PROF, ENV, "host")
    rows = v.table_rows(out)
    assert {"predicted_ms", "predicted_calibrated_ms", "predicted_defaults_ms", "error_calibrated",
            "error_defaults", "comm_share_bsp", "spread"} <= set(rows[0])
    assert all(math.isfinite(r["error_calibrated"]) for r in rows)  # bsp + two overlapping techniques
    md = v.markdown(rows, "commscope validate ...")
    assert "(b) calibrated, technique left out" in md and "| host/toy | 25% | mixed |" in md
    s = v.summary(rows, "calibrated")
    assert s["all"]["n"] == 3


def test_attribution_names_the_largest_term_and_the_change_that_closes_the_gap():
    from runners.validate.attribution import attribute, contributions

    c = contributions("bsp", {}, PROF, ENV, 2)
    # bsp on 2 ranks, two tensors of 1000 and 2000 B, ring allreduce: 2 (p-1) alpha + 2 (p-1)/p n beta per tensor
    # latency 2 x 2 ms = 4 ms; bandwidth (1000 + 2000) B x 1 us/B = 3 ms; compute 9 ms; no interference or overhead
    assert c["total"] == pytest.approx(16 * MS)
    assert c["latency"] == pytest.approx(4 * MS) and c["bandwidth"] == pytest.approx(3 * MS, rel=1e-9)
    assert c["interference"] == 0 and c["overhead"] == 0
    a = attribute(17 * MS, c)  # 1 ms slower than predicted: latency, the largest term, 25% more
    assert a["term"] == "latency" and a["change"] == pytest.approx(0.25) and a["gap_s"] == pytest.approx(MS)
    assert attribute(25 * MS, c)["term"] == "missing term"  # 9 ms more than predicted: more than the latency term


def test_repredict_replaces_the_tables_and_keeps_the_measurements(tmp_path):
    """A finished run predicted again with today's models: the same cells and measurements, the command and notes
    kept; a directory without a finished run is refused and left as it was."""
    import json
    import shutil

    from runners import reference
    from runners.validate.driver import repredict

    run = tmp_path / "run"
    run.mkdir()
    # one environment and one model of the shipped run, without (b): calibrating the whole run takes two minutes
    keep, model = "2500mbit", "resnet_small"
    shutil.copytree(reference.VALIDATION_DIR / keep, run / keep)
    for name in ("validation.md", "validation.csv", "host_network_cpu.json"):
        shutil.copy2(reference.VALIDATION_DIR / name, run / name)
    measured = results.load(run / keep / "records.jsonl").records
    (run / keep / "records.jsonl").unlink()
    results.append(run / keep / "records.jsonl", [r for r in measured if r["kind"] != "iteration"
                                                  or r["config"]["model"] == model])
    shipped = results.load(reference.VALIDATION_DIR / "validation.jsonl").records
    results.append(run / "validation.jsonl", [r for r in shipped if r["config"]["environment"] == keep
                                              and r["config"]["model"] == model])
    before = {(r["config"]["technique"], json.dumps(r["config"]["options"], sort_keys=True), r["config"]["model"],
               r["config"]["environment"]): r["result"]["measured_s"]
              for r in results.load(run / "validation.jsonl").records}
    records_before = {d.name: (d / "records.jsonl").read_bytes() for d in run.iterdir() if d.is_dir()}
    envs_before = {d.name: (d / "environment.json").read_bytes() for d in run.iterdir() if d.is_dir()}
    out = repredict(run, calibrate=False)  # (b)'s fits are tested on their own (test_calibrate.py)
    assert out and all("predicted_calibrated_s" not in r["result"] and "predicted_s" in r["result"] for r in out)
    # the shipped fits are today's: fitting their sweeps again moves numbers by ~1e-10 of themselves, and the
    # files are left byte for byte (they once churned with that noise on every prediction)
    assert {d.name: (d / "environment.json").read_bytes() for d in run.iterdir() if d.is_dir()} == envs_before
    after = {(r["config"]["technique"], json.dumps(r["config"]["options"], sort_keys=True), r["config"]["model"],
              r["config"]["environment"]): r["result"]["measured_s"] for r in out}
    assert after == before
    assert len(results.load(run / "validation.jsonl").records) == len(out) == 9  # the quick suite's techniques
    assert {d.name: (d / "records.jsonl").read_bytes() for d in run.iterdir() if d.is_dir()} == records_before
    md = (run / "validation.md").read_text()
    assert md.startswith("# commscope validate") and "Command: `commscope validate --suite quick" in md
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(v.ValidationError, match="no finished validation"):
        repredict(empty)
    assert list(empty.iterdir()) == []


def test_same_fit_tells_float_noise_from_a_change():
    """Two fits are the same when every number agrees to a millionth of itself (0 only with 0)."""
    import costmodels as cm
    from runners.validate.driver import same_fit

    env = cm.environment("10GbE")
    d = env.to_dict()
    assert same_fit(env, cm.Environment.from_dict({**d, "alpha": env.alpha * (1 + 1e-10)}))
    assert not same_fit(env, cm.Environment.from_dict({**d, "alpha": env.alpha * (1 + 1e-3)}))
    assert not same_fit(env, cm.Environment.from_dict({**d, "kappa_c": 1e-12}))  # 0 against anything else
    assert not same_fit(env, cm.Environment.from_dict({**d, "name": "other"}))
    assert same_fit(env, cm.Environment.from_dict({**d, "source": "the same fit of a copied run"}))
    files = {**d, "metadata": {**d["metadata"], "files": [{"path": "/a/records.jsonl", "records_in_file": 33}]}}
    later = {**d, "metadata": {**d["metadata"], "files": [{"path": "/b/records.jsonl", "records_in_file": 74}]}}
    assert same_fit(cm.Environment.from_dict(files), cm.Environment.from_dict(later))


def test_repredict_tool_refuses_unknown_terms_in_one_line(tmp_path, capsys):
    """``tools/repredict_validation.py DIR --terms ...``: an unknown term is refused before anything is read."""
    tool = load_script("tools/repredict_validation.py")
    assert tool.main([str(tmp_path), "--terms", "kappa_c,kappa_x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: unknown term(s) kappa_x; allowed:") and "contended_step" in err
    assert err.count("\n") == 1 and list(tmp_path.iterdir()) == []
    assert tool.main([str(tmp_path), "--terms", "contended_step"]) == 2  # no finished run there
    assert "no finished validation" in capsys.readouterr().err
    assert tool.main(["--help"]) == 0  # the usage, not a directory called --help
    assert capsys.readouterr().out.startswith("Predict a finished ``commscope validate`` run again")
