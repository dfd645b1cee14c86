"""Time to accuracy: training algorithms (bound + cost model), time_to_accuracy, winner_map and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import convergence as cv
import costmodels as cm
from convergence.algorithms import ALGORITHMS, algorithm, available, gaps, parse_algorithm
from convergence.tta import time_to_accuracy, winner_map
from runners.cli import main

PROF = cm.profile("resnet50")
ENV = cm.environment("10GbE")
FEW = ["sgd", "local_sgd", "async_sgd", "dpsgd"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------- hand-checked numbers
def test_sgd_time_is_bound_iterations_times_ddp_iteration_time() -> None:
    """sgd on 10GbE, p = 32, eps = 1e-3, L = sigma = Delta = 1: the balanced step is below 1/L, so the bound
    is 2 sqrt(2 L Delta sigma^2 / (n T)) and T = 8 L Delta sigma^2 / (n eps^2) = 8 / (32 * 1e-6) = 250,000
    iterations, each one iteration of DDP's bucketed all-reduce (schedule fusion)."""
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd"])
    step = cm.simulate(PROF, ENV, 32, "fusion").iteration_time
    assert r.iterations[0, 0] == 250_000
    assert r.seconds_per_iteration[0, 0] == pytest.approx(step, rel=1e-12)
    assert r.seconds[0, 0] == pytest.approx(250_000 * step, rel=1e-12)
    assert r.winner[0] == 0 and np.isinf(r.margin[0])


def test_constants_override_the_defaults() -> None:
    """sigma = 2 quadruples T (T ~ sigma^2 in this regime); L, Delta, zeta are passed through likewise."""
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd"], sigma=2.0)
    assert r.iterations[0, 0] == 1_000_000
    assert dict(r.constants) == {"L": 1.0, "sigma": 2.0, "Delta": 1.0, "zeta": 0.0}


def test_async_sgd_one_update_costs_a_ps_iteration_over_p() -> None:
    r = time_to_accuracy("resnet50", "10GbE", [8, 32], 1e-3, ["async_sgd"])
    for j, q in enumerate((8, 32)):
        ps = cm.simulate(PROF, ENV, q, "ps").iteration_time
        assert r.seconds_per_iteration[0, j] == pytest.approx(ps / q, rel=1e-12)
        t = cv.bound("async_sgd").iterations_to(1e-3, L=1.0, sigma=1.0, Delta=1.0, tau=q - 1)
        assert r.iterations[0, j] == t


@pytest.mark.parametrize("name", ["async_sgd", "ssp"])
def test_stale_algorithms_take_heterogeneity(name: str) -> None:
    """async_sgd draws one worker's gradient per update (zeta is noise); ssp's views may hold part of a clock (zeta
    enters the staleness term): time to accuracy passes zeta to both bounds, and more zeta takes longer."""
    r = [time_to_accuracy("resnet50", "10GbE", [8, 32], 1e-3, [name], zeta=z) for z in (0.0, 0.5, 2.0)]
    assert all("does not take zeta" not in x.notes[0] for x in r)
    assert (r[0].iterations < r[1].iterations).all() and (r[1].iterations < r[2].iterations).all()
    np.testing.assert_array_equal(r[0].seconds_per_iteration, r[2].seconds_per_iteration)
    tau = {"tau": 7.0} if name == "async_sgd" else {"n": 8.0, "s": 1.0}
    assert r[1].iterations[0, 0] == cv.bound(name).iterations_to(1e-3, L=1.0, sigma=1.0, Delta=1.0, zeta=0.5, **tau)


def test_signsgd_is_priced_at_the_batch_its_bound_needs() -> None:
    """Bernstein et al.'s bound needs a per-worker batch K = T: one iteration computes T mini-batches of the profile
    (gradient accumulation) and exchanges signs once, so it costs the profile's iteration plus (T - 1) forward and
    backward passes, and the result says so."""
    c = {"L1": 1.0, "sigma1": 1.0, "Delta": 1.0}
    r = time_to_accuracy("resnet50", "10GbE", [8, 32], 1e-2, ["signsgd"], **c)
    for j, q in enumerate((8, 32)):
        base = cm.simulate(PROF, ENV, q, "fusion", compressor="signsgd").iteration_time
        t = cv.bound("signsgd").iterations_to(1e-2, **c, n=float(q))
        assert r.iterations[0, j] == t and r.batches[0, j] == t
        assert r.seconds_per_iteration[0, j] == pytest.approx(base + (t - 1) * PROF.compute_s, rel=1e-12)
        assert r.seconds[0, j] == pytest.approx(t * (base + (t - 1) * PROF.compute_s), rel=1e-12)
    assert f"per-worker batch its bound needs (T mini-batches of {PROF.batch_size} per iteration" in r.notes[0]
    assert r.rows()[0]["batch"] == r.iterations[0, 0]
    sgd = time_to_accuracy("resnet50", "10GbE", 8, 1e-2, ["sgd"])
    assert sgd.batches.tolist() == [[1.0]] and sgd.notes == ("",)


def test_local_sgd_parameter_reaches_bound_and_schedule() -> None:
    r = time_to_accuracy("resnet50", "10GbE", 16, 1e-2, ["local_sgd", "local_sgd:16"])
    assert r.algorithms == ("local_sgd (H=8)", "local_sgd (H=16)")
    for i, h in enumerate((8, 16)):
        assert r.iterations[i, 0] == cv.bound("local_sgd").iterations_to(1e-2, L=1.0, sigma=1.0, Delta=1.0, n=16, H=h)
        assert r.seconds_per_iteration[i, 0] == pytest.approx(
            cm.simulate(PROF, ENV, 16, "local_sgd", H=h).iteration_time, rel=1e-12)


def test_ssp_clock_hides_communication_behind_compute() -> None:
    """s >= 1: max(compute, C) with C the parameter-server messages of one iteration; s = 0: the ps schedule."""
    r = time_to_accuracy("resnet50", "1GbE", 16, 1e-2, ["ssp", "ssp:0"])
    comm = cm.simulate(PROF, cm.environment("1GbE"), 16, "bsp", "parameter_server").iteration_time - PROF.compute_s
    assert comm > PROF.compute_s  # 1GbE: communication dominates
    assert r.seconds_per_iteration[0, 0] == pytest.approx(comm, rel=1e-12)
    assert r.seconds_per_iteration[1, 0] == pytest.approx(
        cm.simulate(PROF, cm.environment("1GbE"), 16, "ps").iteration_time, rel=1e-12)


def test_dpsgd_gossip_time_and_gap() -> None:
    """Ring: compute + gossip_ring of the model; torus (p >= 9): compute + gossip_torus; gap from the topology."""
    r = time_to_accuracy("resnet50", "10GbE", [16, 32], 1e-2, ["dpsgd", "dpsgd:torus"])
    for j, q in enumerate((16, 32)):
        ring = cm.collective("gossip_ring").time(PROF.grad_bytes, q, ENV)
        torus = cm.collective("gossip_torus").time(PROF.grad_bytes, q, ENV)
        assert r.seconds_per_iteration[0, j] == pytest.approx(PROF.compute_s + ring, rel=1e-12)
        assert r.seconds_per_iteration[1, j] == pytest.approx(PROF.compute_s + torus, rel=1e-12)
        for i, top in enumerate(("ring", "torus")):
            gap = cv.spectral_gap(top, q)
            assert r.iterations[i, j] == cv.bound("dpsgd").iterations_to(1e-2, L=1.0, sigma=1.0, Delta=1.0, n=q,
                                                                         gap=gap)
    assert gaps("ring", np.array([1, 2])).tolist() == [1.0, 1.0]


def test_compressor_constants_come_from_costmodels() -> None:
    """Per tensor: delta is the worst tensor's, omega the worst tensor's (errors add over tensors)."""
    sizes = [layer.params for layer in PROF.layers]
    big = max(sizes)
    p = np.array([4, 16])
    assert algorithm("qsgd").bound_constants(p, PROF)["omega"].tolist() == [cm.compressor("qsgd").omega(big, 8)] * 2
    assert algorithm("qsgd").bound_constants(p, PROF, 4)["omega"][0] == pytest.approx(
        min(big / 49, math.sqrt(big) / 7))  # 4 bits: s = 2^3 - 1 = 7 levels, largest on the largest tensor
    assert algorithm("topk").bound_constants(p, PROF, 0.001)["delta"][0] == min(math.ceil(0.001 * d) / d for d in sizes)
    assert algorithm("randomk").bound_constants(p, PROF)["delta"][0] == min(math.ceil(0.01 * d) / d for d in sizes)
    assert algorithm("ef_signsgd").bound_constants(p, PROF)["delta"][0] == 1 / big
    ranks = [2 / min(layer.shape[0], layer.params // layer.shape[0]) for layer in PROF.layers if len(layer.shape) > 1]
    assert algorithm("powersgd").bound_constants(p, PROF, 2)["delta"][0] == pytest.approx(min(1.0, *ranks))
    assert algorithm("async_sgd").bound_constants(p, PROF) == {"tau": pytest.approx([3.0, 15.0])}


@pytest.mark.parametrize("name, schedule, spec", [("topk", "fusion", "topk:0.001"), ("qsgd", "fusion", "qsgd:4"),
                                                  ("powersgd", "fusion", "powersgd:2")])
def test_compressed_algorithms_price_their_wire_bytes(name: str, schedule: str, spec: str) -> None:
    if name not in cv.BOUNDS:
        pytest.skip(f"bound {name} not registered")
    r = time_to_accuracy(PROF, ENV, 32, 1e-2, [spec])
    assert r.seconds_per_iteration[0, 0] == pytest.approx(
        cm.simulate(PROF, ENV, 32, schedule, compressor=spec).iteration_time, rel=1e-12)


def test_choco_sgd_when_its_bound_is_registered() -> None:
    if "choco_sgd" not in cv.BOUNDS:
        with pytest.raises(cm.CommscopeError, match="needs the bound 'choco_sgd', which is not registered"):
            time_to_accuracy(PROF, ENV, 16, 1e-2, ["choco_sgd"])
        return
    r = time_to_accuracy(PROF, ENV, 16, 1e-2, ["choco_sgd"])
    assert np.isfinite(r.seconds_per_iteration).all() and r.seconds_per_iteration[0, 0] > PROF.compute_s


# ---------------------------------------------------------------------------------- results
def test_winner_margin_and_summary() -> None:
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, FEW)
    t = r.seconds[:, 0]
    order = np.argsort(t)
    assert r.winner[0] == order[0]
    assert r.margin[0] == pytest.approx(t[order[1]] / t[order[0]])
    line = r.summary()
    assert line.startswith(f"on 10GbE with 32 workers and resnet50, {r.algorithms[order[0]]} reaches eps = 0.001 first")
    assert f"{r.margin[0]:.3g}x faster than the runner-up {r.algorithms[order[1]]}" in line
    rows = r.rows()
    assert len(rows) == len(FEW)
    assert [x["algorithm"] for x in rows] == list(r.algorithms)
    assert min(x["ratio_to_best"] for x in rows) == 1.0 and sum(x["winner"] for x in rows) == 1


def test_unreachable_eps_is_inf_and_never_wins() -> None:
    """ef_signsgd's step limit is about delta/(4L) with delta = 1/d_max, so T >= 8 d_max/eps > 1e18 at eps = 1e-12;
    with sigma = 1e-6 SGD gets there in about 2/eps + 8 sigma^2/(n eps^2) = 2.3e12 iterations."""
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-12, ["sgd", "ef_signsgd"], sigma=1e-6)
    assert np.isinf(r.iterations[1, 0]) and np.isinf(r.seconds[1, 0]) and np.isfinite(r.seconds_per_iteration[1, 0])
    assert r.winner[0] == 0 and np.isinf(r.margin[0])
    nobody = time_to_accuracy("resnet50", "10GbE", 32, 1e-12, ["ef_signsgd"], sigma=1e-6)
    assert nobody.winner[0] == -1 and np.isnan(nobody.margin[0])
    assert "no algorithm's bound reaches eps" in nobody.summary()


def test_defaults_leave_out_other_metrics() -> None:
    """signSGD's bound is on (E mean ||grad||_1)^2: never in the default set, reported but not ranked when asked."""
    names = available()
    assert "sgd" in names and "signsgd" not in names and "sgd_sc" not in names
    r = time_to_accuracy("resnet50", "10GbE", 8, 1e-2)
    assert r.names == tuple(names)
    if "signsgd" in cv.BOUNDS:
        both = time_to_accuracy("resnet50", "10GbE", 8, 1e-2, ["signsgd", "sgd"],
                                **{x.name: 1.0 for x in cv.bound("signsgd").assumptions if x.name not in ("n",)})
        assert both.comparable.tolist() == [False, True] and both.winner[0] == 1
        assert "not ranked" in both.notes[0]


def test_environment_arrays_and_lists() -> None:
    envs = [cm.environment("1GbE"), cm.environment("IB-EDR")]
    r = time_to_accuracy("resnet50", envs, [4, 16], 1e-2, FEW)
    assert r.seconds.shape == (len(FEW), 2, 2) and r.winner.shape == (2, 2)
    one = time_to_accuracy("resnet50", "IB-EDR", 16, 1e-2, FEW)
    np.testing.assert_allclose(r.seconds[:, 1, 1], one.seconds[:, 0], rtol=1e-12)
    assert "on IB-EDR with 16 workers" in r.summary((1, 1))
    with pytest.raises(cm.CommscopeError, match="give the index of one"):
        r.summary()


def test_winner_map_equals_time_to_accuracy_point_by_point() -> None:
    bw, lat, p = [1e8, 1e9, 1e10], [1e-6, 1e-4], [8, 32]
    algos = [*FEW, "ssp"]
    m = winner_map("resnet50", "10GbE", bw, lat, p, 1e-3, algos)
    assert m.time.shape == (len(algos), 3, 2, 2)
    assert m.winner.shape == m.margin.shape == (3, 2, 2)
    for i, b in enumerate(bw):
        for j, a in enumerate(lat):
            env = m.environment(i, j)
            assert env.beta == pytest.approx(1 / b) and env.alpha == a
            one = time_to_accuracy("resnet50", ENV.with_(alpha=a, beta=1 / b), p, 1e-3, algos)
            np.testing.assert_allclose(m.time[:, i, j, :], one.seconds, rtol=1e-12)
            np.testing.assert_array_equal(m.winner[i, j], one.winner)
            np.testing.assert_allclose(m.margin[i, j], one.margin, rtol=1e-12)
    assert sum(m.counts().values()) == m.winner.size
    assert set(m.winner_names().flat) <= {*m.algorithms, "-"}


@pytest.mark.parametrize("name", cm.profiles())
def test_every_shipped_profile(name: str) -> None:
    r = time_to_accuracy(name, "25GbE", 16, 1e-2)
    assert r.model == name
    assert (r.seconds_per_iteration > 0).all() and np.isfinite(r.seconds_per_iteration).all()
    assert r.winner[0] >= 0 and name in r.summary()


# -------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, fragment", [
    ({"algorithms": ["sgdd"]}, "unknown algorithm 'sgdd'; valid names: "),
    ({"algorithms": ["sgd:2"]}, "algorithm sgd takes no parameter"),
    ({"algorithms": ["local_sgd:0"]}, "H must be an integer >= 1, got '0'"),
    ({"algorithms": ["topk:2"]}, "density must be a density in (0, 1]"),
    ({"algorithms": ["dpsgd:star"]}, "topology must be one of ring, torus, exponential, complete, got 'star'"),
    ({"algorithms": ["sgd", "sgd"]}, "listed twice"),
    ({"algorithms": []}, "give at least one algorithm"),
    ({"eps": 0.0}, "eps must be a finite number > 0"),
    ({"eps": float("nan")}, "eps must be a finite number > 0"),
    ({"eps": "1e-3"}, "eps must be a finite number > 0"),
    ({"p": 0}, "p must be >= 1 rank, got 0"),
    ({"p": 2.5}, "p must be an integer number of ranks, got 2.5"),
    ({"p": "8"}, "p must be a positive integer"),
    ({"p": []}, "p must name at least one worker count"),
    ({"n": 4}, "n is set by each algorithm"),
    ({"H": 4}, "H is local_sgd's parameter"),
    ({"Lipschitz": 4}, "unknown constant 'Lipschitz'; the chosen bounds take Delta, L, sigma, zeta"),
    ({"sigma": float("inf")}, "constant sigma must be a finite number"),
    ({"sigma": -1.0}, "sigma must be finite and > 0, got -1.0"),
    ({"model": "resnet5"}, "unknown model profile 'resnet5'"),
    ({"env": "11GbE"}, "unknown environment preset '11GbE'"),
])
def test_bad_input_names_the_bad_value(kwargs: dict, fragment: str) -> None:
    args = {"model": "resnet50", "env": "10GbE", "p": 8, "eps": 1e-2, "algorithms": ["sgd", "local_sgd"]}
    args.update(kwargs)
    constants = {k: v for k, v in args.items() if k not in ("model", "env", "p", "eps", "algorithms")}
    with pytest.raises(cm.CommscopeError) as info:
        time_to_accuracy(args["model"], args["env"], args["p"], args["eps"], args["algorithms"], **constants)
    assert fragment in str(info.value)


def test_winner_map_bad_grid() -> None:
    with pytest.raises(cm.CommscopeError, match=r"bandwidths must be finite and > 0 bytes/s, got 0.0"):
        winner_map("resnet50", "10GbE", [1e9, 0], [1e-5], 8, 1e-2, ["sgd"])
    with pytest.raises(cm.CommscopeError, match=r"latencies must be finite and >= 0 s, got -1.0"):
        winner_map("resnet50", "10GbE", [1e9], [-1.0], 8, 1e-2, ["sgd"])


def test_registry_names_and_specs() -> None:
    assert {"sgd", "local_sgd", "async_sgd", "ssp", "dpsgd", "choco_sgd", "qsgd", "topk", "randomk", "powersgd",
            "ef_signsgd"} <= set(ALGORITHMS.names())
    for a in ALGORITHMS:  # every entry documents its mapping and names a real schedule and compressor
        assert a.description and (a.schedule is None or a.schedule in cm.SCHEDULES)
        assert a.compressor is None or cm.parse_compressor(a.compressor)
        assert a.label() == parse_algorithm(a.name)[0].label()
    entry, value = parse_algorithm("topk:0.001")
    assert entry.compressor_spec(value) == "topk:0.001" and entry.label(value) == "topk (density=0.001)"
    assert parse_algorithm("dpsgd:Torus")[1] == "torus"
    assert algorithm("local_sgd").schedule_options(16) == {"H": 16}


# ------------------------------------------------------------------------------------------ CLI
def test_cli_tta_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", "32", "--eps", "1e-3",
            "--algorithms", ",".join(FEW)]
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, FEW)
    assert "time to eps = 0.001: resnet50 on 10GbE, p = 32" in out
    for label in r.algorithms:
        assert label in out
    assert " ".join(r.summary().split()) in " ".join(out.split())
    code, out, err = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert [x["algorithm"] for x in data["results"]] == list(r.algorithms)
    assert [x["seconds"] for x in data["results"]] == pytest.approx(r.seconds[:, 0].tolist(), rel=1e-12)
    assert data["winners"] == [{"p": 32, "winner": r.algorithms[r.winner[0]], "margin": pytest.approx(r.margin[0]),
                                "summary": r.summary()}]


def test_cli_tta_unreachable_is_null_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", "8", "--eps", "1e-12",
                       "--sigma", "1e-6", "-a", "sgd,ef_signsgd", "--json")
    rows = json.loads(out)["results"]
    assert code == 0 and rows[1]["iterations"] is None and rows[1]["seconds"] is None


@pytest.mark.parametrize("args, fragment", [
    (["-a", "nope"], "unknown algorithm 'nope'"),
    (["--eps", "0"], "eps must be a finite number > 0"),
    (["-p", "0"], "--p must be positive integers"),
    (["--constant", "L=x"], "--constant L: value must be a number"),
    (["--constant", "L=2", "--L", "3"], "L is given twice"),
    (["--constant", "Lip=2"], "unknown constant 'Lip'"),
])
def test_cli_tta_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    base = {"--model": "resnet50", "--env": "10GbE", "-p": "8", "--eps": "1e-2", "-a": "sgd"}
    for k in [a for a in args if a in base]:
        base.pop(k)
    argv = ["predict", "tta", *[x for kv in base.items() for x in kv], *args]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commscope: error:")
    assert fragment in err


def test_cli_convergence_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "predict", "convergence", "--eps", "1e-3", "--bound", "sgd,local_sgd,dpsgd",
                         "--n", "8", "--H", "4", "--topology", "torus", "--json")
    assert code == 0 and err == ""
    rows = {x["bound"]: x for x in json.loads(out)["results"]}
    sgd = cv.bound("sgd")
    assert rows["sgd"]["iterations"] == sgd.iterations_to(1e-3, L=1, sigma=1, Delta=1, n=8)
    assert rows["sgd"]["queries"] == 8 * rows["sgd"]["iterations"]
    assert rows["sgd"]["step_size"] == pytest.approx(float(sgd.step_size(rows["sgd"]["iterations"], L=1, sigma=1,
                                                                          Delta=1, n=8)))
    assert rows["local_sgd"]["constants"]["H"] == 4
    assert rows["dpsgd"]["constants"]["gap"] == pytest.approx(cv.spectral_gap("torus", 8))
    code, out, err = run(capsys, "predict", "convergence", "--eps", "1e-3")
    assert code == 0 and "convergence bounds at eps = 0.001" in out
    for name in cv.bounds():
        assert name in out
    assert "500,000" in out  # sgd with n = 16: T = 8 / (16 eps^2)


@pytest.mark.parametrize("args, fragment", [
    (["--bound", "sgd", "--H", "4"], "--H: no chosen bound takes it"),
    (["--bound", "dpsgd", "--gap", "0.5", "--topology", "ring"], "give --gap or --topology, not both"),
    (["--bound", "sgdx"], "unknown bound 'sgdx'"),
    (["--bound", "sgd", "--eps", "-1"], "--eps must be a finite number > 0"),
    (["--bound", "sgd", "--L", "0"], "--L: L must be finite and > 0, got 0.0"),
    (["--bound", "dpsgd", "--topology", "star"], "unknown topology 'star'"),
])
def test_cli_convergence_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], fragment: str) -> None:
    argv = ["predict", "convergence", *args] + ([] if "--eps" in args else ["--eps", "1e-3"])
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("commscope: error:")
    assert fragment in err


def test_cli_convergence_missing_constant(capsys: pytest.CaptureFixture[str]) -> None:
    if "topk" not in cv.BOUNDS:
        pytest.skip("bound topk not registered")
    code, _, err = run(capsys, "predict", "convergence", "--eps", "1e-3", "--bound", "topk")
    assert code == 2 and "bound topk needs --delta" in err


def test_readme_time_to_accuracy_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## Time to accuracy\n\n```python\n(.*?)```", text, re.S)
    assert block, "README has a time-to-accuracy example"
    assert len(block.group(1).strip().splitlines()) <= 12
    scope: dict = {}
    exec(block.group(1), scope)  # the README's own code
    assert "reaches eps = 0.001 first" in capsys.readouterr().out
    assert scope["m"].time.shape == (len(available()), 100, 100, 1)
    assert scope["r"].seconds.shape == (4, 2)


def test_docstring_example() -> None:
    import doctest

    import convergence.tta

    result = doctest.testmod(convergence.tta, verbose=False)
    assert result.attempted >= 2 and result.failed == 0


# ------------------------------------------------------------------- measured constants (constants=records)
def constants_record(model: str = "mlp", L: float = 3.0, per_sample: float = 7.0, shard: int = 101,
                     Delta: float = 2.3, zeta2: float = 0.25) -> dict:
    """A hand-made "constants" record (the fields convergence.measured_constants reads), measured at batch 8."""
    s2 = per_sample / 8 * (shard - 8) / (shard - 1)
    return {"schema": "commscope.result/1", "kind": "constants", "config": {"model": model, "dataset": "hand",
                                                                             "batch_size": 8},
            "result": {"L": {"value": L}, "Delta": {"value": Delta},
                       "sigma": {"sigma2": s2, "sigma2_max": s2, "batch_size": 8, "shard_size": shard,
                                 "sigma2_per_sample": per_sample, "sigma2_per_sample_max": per_sample},
                       "zeta": {"zeta2": zeta2, "zeta2_max": zeta2},
                       "compressors": {"topk:0.5": {"constant": "delta", "value": 0.7, "worst_measured": 0.6,
                                                    "worst_case": 0.5},
                                       "qsgd:4": {"constant": "omega", "value": 0.05, "worst_measured": 0.08,
                                                  "worst_case": 3.0},
                                       "signsgd": {"constant": None, "value": None, "worst_case": None}}}}


def test_measured_constants_change_the_iterations_as_the_formula_says() -> None:
    """sgd, T = 8 L Delta sigma^2 / (n eps^2) in the balanced regime, with L = 3, Delta = 2.3 and sigma^2 the
    per-sample 7 rescaled to resnet50's per-worker batch of 64 from a shard of 101: 7 / 64 x 37 / 100."""
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "local_sgd"], constants=[constants_record()])
    sigma2 = 7.0 / PROF.batch_size * (101 - PROF.batch_size) / 100
    assert dict(r.constants) == pytest.approx({"L": 3.0, "sigma": math.sqrt(sigma2), "Delta": 2.3, "zeta": 0.5})
    assert r.iterations[0, 0] == math.ceil(8 * 3.0 * 2.3 * sigma2 / (32 * 1e-6))
    assert r.iterations[1, 0] == cv.bound("local_sgd").iterations_to(1e-3, n=32, H=8, **r.constants)
    assert "measured on mlp" in r.constants_source and "batch 8 to resnet50's 64" in r.constants_source
    unit = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd"])
    assert unit.constants_source.startswith("unit constants") and r.iterations[0, 0] != unit.iterations[0, 0]


def test_explicit_constants_override_the_records() -> None:
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd"], constants=[constants_record()], sigma=2.0, L=1.0)
    assert dict(r.constants) == pytest.approx({"L": 1.0, "sigma": 2.0, "Delta": 2.3, "zeta": 0.5})
    assert r.iterations[0, 0] == math.ceil(8 * 2.3 * 4 / (32 * 1e-6))


def test_measured_delta_and_omega_replace_the_worst_case_where_measured() -> None:
    rec = constants_record()
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "topk:0.5", "topk", "qsgd:4", "qsgd"],
                         constants=[rec])
    c = dict(r.constants)
    assert r.iterations[1, 0] == cv.bound("topk").iterations_to(1e-3, n=32, delta=0.7, **c)
    assert r.iterations[3, 0] == cv.bound("qsgd").iterations_to(1e-3, n=32, omega=0.05, **c)
    assert "delta = 0.7 measured on mlp's gradients (topk:0.5" in r.notes[1]
    assert "omega = 0.05 measured" in r.notes[3]
    worst = algorithm("topk").bound_constants([32], PROF, 0.01)["delta"][0]
    assert r.iterations[2, 0] == cv.bound("topk").iterations_to(1e-3, n=32, delta=worst, **c)
    assert "the worst case on resnet50" in r.notes[2] and "no topk:0.01" in r.notes[2]
    assert "worst case" in r.notes[4] and r.notes[0] == ""
    unit = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["topk:0.5"])
    assert "measured" not in unit.notes[0]


def test_result_names_the_schedule_priced_and_the_ratio_to_sgd() -> None:
    r = time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd", "local_sgd", "topk", "async_sgd", "dpsgd:torus"])
    assert r.schedules == ("fusion", "local_sgd (H=8)", "fusion + topk:0.01",
                           "ps / p (parameter_server, one worker's update)", "gossip on a torus (neighbour exchange)")
    rows = {x["algorithm"]: x for x in r.rows()}
    assert rows["sgd"]["ratio_to_sgd"] == 1.0 and rows["topk (density=0.01)"]["schedule"] == "fusion + topk:0.01"
    assert rows["local_sgd (H=8)"]["ratio_to_sgd"] == pytest.approx(r.seconds[1, 0] / r.seconds[0, 0])
    assert np.isnan(time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["local_sgd"]).ratio_to("sgd")).all()


def _broken() -> dict:
    rec = constants_record()
    del rec["result"]["sigma"]
    return rec


@pytest.mark.parametrize(("records", "fragment"), [
    ("constants.jsonl", "not a path"),
    (constants_record(), "not one dict: wrap it in a list"),
    ([42], "constants= record 0 is not a record dict"),
    ([{"kind": "iteration"}], "holds no 'constants' records"),
    ([{"kind": "constants", "config": {"model": "mlp"}}], "constants= record 0 is not a usable 'constants' record"),
    ([constants_record(), _broken()], "constants= record 1 is not a usable 'constants' record (bad or missing "
                                      "field 'sigma')"),
    ([constants_record(L=-1.0)], "constants= record 0: a constants record has no usable L"),
    ([constants_record("mlp"), constants_record("cnn")], "several models (cnn, mlp) and none is resnet50"),
])
def test_bad_records_give_one_clear_error(records: object, fragment: str) -> None:
    with pytest.raises(cm.CommscopeError) as err:
        time_to_accuracy("resnet50", "10GbE", 32, 1e-3, ["sgd"], constants=records)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_records_of_several_models_use_the_profiles() -> None:
    r = time_to_accuracy("resnet50", "10GbE", 8, 1e-3, ["sgd"],
                         constants=[constants_record("mlp"), constants_record("resnet50", L=5.0)])
    assert r.constants["L"] == 5.0 and "measured on resnet50" in r.constants_source
    m = winner_map("resnet50", "10GbE", [1e9, 1e10], [1e-5], [8], 1e-3, ["sgd"], constants=[constants_record()])
    assert dict(m.result.constants) == pytest.approx(dict(r.constants) | {"L": 3.0})
