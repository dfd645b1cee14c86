"""``commscope import trace`` and ``commscope compare-trace``: traces torch.profiler makes here on CPU training
runs, and a GPU-format fixture written from the documented Kineto format (tests/data/kineto_gpu_ddp.json: two DDP
steps of a 32-64-10 MLP on rank 0 of 2, NCCL all-reduce kernels with their args; every number below is worked out
by hand from its events)."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import costmodels as cm
from runners import results
from runners.cli import main
from runners.imports import kineto, trace_comms, trace_compare, trace_profile, trace_steps

FIXTURE = Path(__file__).parent / "data" / "kineto_gpu_ddp.json"
B = 1700000000000.0  # the fixture's time origin (us); its steps start at B + 1000 and B + 3500
MLP_PARAMS = [32 * 64 + 64, 64 * 64 + 64, 64 * 10 + 10]


def _train_and_trace(rank: int, world_size: int, path: str, with_stack: bool) -> str:
    """Three SGD steps of a DDP MLP under torch.profiler (1 warm-up + 2 recorded); the trace goes to ``path``."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=True, with_stack=with_stack,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
    return path


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two traces of the same run made here: with module events (with_stack) and without."""
    import torch.distributed as dist

    tmp = tmp_path_factory.mktemp("traces")
    dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=0, world_size=1)
    try:
        return {kind: Path(_train_and_trace(0, 1, str(tmp / f"{kind}.json"), kind == "modules"))
                for kind in ("modules", "ops")}
    finally:
        dist.destroy_process_group()


def analysed(path: Path | str) -> tuple[kineto.Trace, trace_steps.Analysis]:
    t = kineto.load(path)
    return t, trace_steps.analyse(t)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------- CPU traces made here
@pytest.mark.parametrize(("kind", "names"), [("modules", ["Linear_0", "Linear_1", "Linear_2"]),
                                             ("ops", ["aten::linear#0", "aten::linear#1", "aten::linear#2"])])
def test_cpu_trace_profile(cpu_traces: dict[str, Path], kind: str, names: list[str]) -> None:
    """Layers are the module calls (with_stack) or the top-level ops; gradients from AccumulateGrad's shapes;
    forward and backward split their phases exactly; the optimizer step is spread by parameters."""
    _, a = analysed(cpu_traces[kind])
    assert len(a.steps) == 2 and not a.on_device and a.skipped == []
    prof = trace_profile.build(a)
    assert [x.name for x in prof.layers] == names
    assert [x.params for x in prof.layers] == MLP_PARAMS
    assert [x.grad_bytes for x in prof.layers] == [4.0 * n for n in MLP_PARAMS]
    assert prof.dtype == "float32" and prof.batch_size == 16 and prof.origin == "measured"
    assert prof.device.startswith("CPU") and prof.metadata["steps"] == ["1", "2"]
    for s in a.steps:  # each layer's windows tile the step's forward and backward exactly
        assert sum(s.forward_s) == pytest.approx((s.bwd_start - s.fwd_start) / 1e6)
        assert sum(s.backward_s) == pytest.approx((s.bwd_end - s.bwd_start) / 1e6)
        assert all(t > 0 for t in s.forward_s + s.backward_s)
        assert s.optimizer is not None and s.optimizer_s == pytest.approx((s.optimizer[1] - s.optimizer[0]) / 1e6)
    opt = prof.metadata["phases"]["optimizer_s"]
    assert opt > 0 and prof.optimizer_s == pytest.approx(opt)
    assert [x.optimizer_s / opt for x in prof.layers] == pytest.approx([n / sum(MLP_PARAMS) for n in MLP_PARAMS])


def test_cpu_trace_collectives(cpu_traces: dict[str, Path]) -> None:
    """DDP's gloo all-reduce of the one 6922-float bucket, once per recorded step, timed on gloo's thread."""
    t, _ = analysed(cpu_traces["ops"])
    calls, problems = trace_comms.calls(t)
    assert problems == []
    recs = trace_comms.records(t, calls)
    (ar,) = [r for r in recs if r["config"]["op"] == "allreduce"]
    c, x = ar["config"], ar["result"]
    assert (c["bytes"], c["count"], c["dtype"], c["nranks"], c["iterations"], c["timed_on"]) == (
        4 * sum(MLP_PARAMS), sum(MLP_PARAMS), "float32", 1, 2, "host")
    assert x["calls"] == 2 and x["time_s"] > 0 and x["algbw_GBps"] == pytest.approx(c["bytes"] / x["time_s"] / 1e9)
    assert ar["origin"] == "imported" and ar["source"] == f"torch-profiler:{cpu_traces['ops']}"
    assert (ar["run"]["backend"], ar["run"]["world_size"], ar["run"]["devices"]) == ("gloo", 1, ["cpu"])
    assert results.validate(ar) == ar


def test_import_trace_cli_and_compare(capsys: pytest.CaptureFixture[str], cpu_traces: dict[str, Path],
                                      tmp_path: Path) -> None:
    """The command writes a profile cm.load_profile reads and records the store reads; compare-trace writes one
    trace with the measured events and the predicted timeline as two processes."""
    trace = cpu_traces["modules"]
    prof_path, recs_path = tmp_path / "p.json", tmp_path / "r.jsonl"
    code, out, err = run_cli(capsys, "import", "trace", str(trace), "--profile-out", str(prof_path),
                             "--records-out", str(recs_path), "--name", "mlp")
    assert code == 0, err
    recs = results.load(recs_path)
    assert "Linear_2" in out and "wrote the profile" in out and f"imported {len(recs.records)} collective record" in out
    prof = cm.load_profile(prof_path)
    assert prof.name == "mlp" and [x.params for x in prof.layers] == MLP_PARAMS
    assert recs.bad == [] and all(r["origin"] == "imported" for r in recs.records)
    assert [r["config"]["bytes"] for r in recs.records if r["config"]["op"] == "allreduce"] == [4 * sum(MLP_PARAMS)]
    merged = tmp_path / "merged.json"
    code, out, err = run_cli(capsys, "compare-trace", str(trace), "--schedule", "wfbp", "--env", "1GbE", "-p", "2",
                             "--out", str(merged), "--json")
    assert code == 0, err
    table = json.loads(out)
    assert [r["phase"] for r in table["phases"]] == [*trace_compare.PHASES, "other (not modelled)"]
    assert table["p"] == 2 and table["schedule"] == "wfbp"
    forward = table["phases"][0]
    assert forward["measured_s"] == pytest.approx(prof.forward_s)  # the imported profile is the prediction's
    assert forward["predicted_s"] == pytest.approx(prof.forward_s)
    data = json.loads(merged.read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e.get("ph") == "M"
             and e.get("name") == "process_name"}
    predicted = [pid for pid, n in names.items() if n.startswith("commscope prediction: wfbp")]
    assert len(predicted) == 1 and any(n.startswith("measured: ") for n in names.values())
    kinds = {e["cat"] for e in data["traceEvents"] if e.get("pid") == predicted[0] and e.get("ph") == "X"}
    assert {"forward", "backward", "optimizer", "allreduce"} <= kinds
    assert len([e for e in data["traceEvents"] if e.get("pid") != predicted[0]]) >= len(
        json.loads(trace.read_text())["traceEvents"])


def _rank_trace(rank: int, world_size: int, tmp: str) -> str:
    return _train_and_trace(rank, world_size, f"{tmp}/rank{rank}.json", with_stack=False)


@pytest.mark.multiprocess
def test_two_gloo_ranks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A trace of rank 0 of two gloo ranks: the all-reduce's group is 2 (busbw = algbw), compare-trace takes p
    from distributedInfo."""
    from runners.training.launch import run_ranks

    paths = run_ranks(_rank_trace, 2, str(tmp_path), timeout=120)
    t, _ = analysed(paths[0])
    (ar,) = [r for r in trace_comms.records(t, trace_comms.calls(t)[0]) if r["config"]["op"] == "allreduce"]
    assert ar["config"]["nranks"] == 2 and ar["run"]["world_size"] == 2
    assert ar["result"]["busbw_GBps"] == pytest.approx(ar["result"]["algbw_GBps"])
    code, out, err = run_cli(capsys, "compare-trace", paths[0], "--schedule", "wfbp", "--alpha", "1e-4", "--beta",
                             "1e-9", "--out", str(tmp_path / "m.json"), "--json")
    assert code == 0, err
    assert json.loads(out)["p"] == 2


# ------------------------------------------------------------------------------------------- the GPU-format fixture
def test_gpu_fixture_profile() -> None:
    """Device time of the kernels launched in each layer's window (worked out from the fixture's events):
    Linear_0 forward 200 us (its gemm), Linear_1 150 us (relu 20 + gemm 100 + loss 30); backward Linear_1 190 us
    (loss 40 + gemm 150), Linear_0 270 us (relu 20 + gemm 250); optimizer 50 us; the memset in zero_grad and
    the NCCL kernels count to no layer."""
    _, a = analysed(FIXTURE)
    assert a.on_device and [s.label for s in a.steps] == ["2", "3"] and a.unlaunched_device_events == 0
    prof = trace_profile.build(a)
    assert [x.name for x in prof.layers] == ["Linear_0", "Linear_1"]
    assert [(x.params, x.grad_bytes) for x in prof.layers] == [(2112, 8448.0), (650, 2600.0)]
    assert [x.forward_s for x in prof.layers] == pytest.approx([200e-6, 150e-6])
    assert [x.backward_s for x in prof.layers] == pytest.approx([270e-6, 190e-6])
    assert [x.optimizer_s for x in prof.layers] == pytest.approx([50e-6 * 2112 / 2762, 50e-6 * 650 / 2762])
    assert (prof.device, prof.batch_size, prof.dtype) == ("NVIDIA H100 80GB HBM3", 16, "float32")
    assert prof.metadata["phases"]["iteration_s"] == pytest.approx(2500e-6)
    s = a.steps[0]
    assert (s.fwd_start - B, s.bwd_start - B, s.bwd_end - B) == pytest.approx((1095, 2000, 2560))
    assert [t - B for w in s.backward_windows for t in w] == pytest.approx([2260, 2560, 2000, 2260])


def test_gpu_fixture_collectives() -> None:
    """Two all-reduce buckets (650 and 2112 floats) on 2 ranks, 260 and 300 us on the NCCL stream, twice each."""
    t, _ = analysed(FIXTURE)
    calls, problems = trace_comms.calls(t)
    assert problems == [] and len(calls) == 4
    recs = trace_comms.records(t, calls, ranks_per_node=8)
    got = [(r["config"]["bytes"], r["config"]["count"], r["result"]["time_s"], r["result"]["calls"]) for r in recs]
    assert got == [(2600, 650, pytest.approx(260e-6), 2), (8448, 2112, pytest.approx(300e-6), 2)]
    r = recs[1]
    assert (r["config"]["op"], r["config"]["algorithm"], r["config"]["protocol"], r["config"]["nranks"],
            r["config"]["process_group"], r["config"]["timed_on"]) == ("allreduce", "ring", "LL", 2, "default_pg",
                                                                       "device")
    assert r["result"]["busbw_GBps"] == pytest.approx(8448 / 300e-6 / 1e9 * 2 * (2 - 1) / 2)
    assert (r["run"]["backend"], r["run"]["world_size"], r["run"]["ranks_per_node"], r["run"]["rank"],
            r["run"]["devices"]) == ("nccl", 2, 8, 0, ["NVIDIA H100 80GB HBM3"])


def _edited(tmp_path: Path, edit: Any, name: str = "t.json") -> Path:
    data = json.loads(FIXTURE.read_text())
    for e in data["traceEvents"]:
        edit(e)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_kernel_without_args_takes_its_size_from_record_param_comms(tmp_path: Path) -> None:
    """Older Kineto writes NCCL kernels without the collective args: the size comes from the record_param_comms op
    around the launch; op, dtype, algorithm and protocol from the older kernel name."""
    def old_kernel(e: dict[str, Any]) -> None:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            e["name"] = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
            e["args"] = {k: v for k, v in e["args"].items() if k in ("External id", "device", "stream", "correlation")}
    t = kineto.load(_edited(tmp_path, old_kernel))
    calls, problems = trace_comms.calls(t)
    assert problems == []
    assert sorted({(c.op, c.nbytes, c.dtype, c.nranks, c.algorithm, c.protocol) for c in calls}) == [
        ("allreduce", 2600, "float32", 2, "ring", "LL"), ("allreduce", 8448, "float32", 2, "ring", "LL")]


def test_kernel_whose_size_nothing_gives_is_reported(tmp_path: Path) -> None:
    def strip(e: dict[str, Any]) -> None:
        if e.get("name") == "record_param_comms" or (e.get("cat") == "kernel" and e["name"].startswith("nccl")):
            e["args"] = {k: v for k, v in e["args"].items() if "msg nelems" not in k}
    t = kineto.load(_edited(tmp_path, strip))
    calls, problems = trace_comms.calls(t)
    assert calls == [] and len(problems) == 4
    assert "no message size ('In msg nelems'" in problems[0] and problems[0].endswith("skipped")


def test_kernel_name_parts() -> None:
    assert trace_comms.kernel_name_parts("ncclDevKernel_ReduceScatter_Sum_bf16_TREE_LL128(ncclDevKernelArgs4K)") == {
        "func": "ReduceScatter", "dtype": "bf16", "algorithm": "tree", "protocol": "LL128"}
    assert trace_comms.kernel_name_parts("ncclKernel_AllGather_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == {
        "func": "AllGather", "algorithm": "ring", "protocol": "Simple", "dtype": "int8"}
    assert trace_comms.kernel_name_parts("ncclDevKernel_SendRecv(ncclDevKernelArgs4K const)") == {"func": "SendRecv"}
    assert trace_comms.kernel_name_parts("void at::native::gemm(float*)") == {}


def test_gpu_fixture_compare(tmp_path: Path) -> None:
    """Measured phases by hand: exposed communication is the NCCL kernels outside compute kernels: bucket 1
    [1300, 1560] overlaps Linear_0's backward kernels [1510, 1780] by 50 us (210 us exposed), bucket 2 [1800, 2100]
    none (300 us); other = 2500 - 350 - 460 - 50 - 510 us."""
    t, a = analysed(FIXTURE)
    calls, _ = trace_comms.calls(t)
    env = cm.Environment(alpha=1e-5, beta=1e-9)
    prof = trace_profile.build(a)
    comp = trace_compare.compare(a, calls, prof, env, 2, "wfbp")
    meas = {r.phase: r.measured_s for r in comp.rows}
    assert meas == pytest.approx({"forward": 350e-6, "backward": 460e-6, "optimizer": 50e-6,
                                  "communication (exposed)": 510e-6, "iteration": 2500e-6,
                                  "other (not modelled)": 1130e-6})
    sim = cm.simulate(prof, env, 2, "wfbp")
    pred = {r.phase: r.predicted_s for r in comp.rows}
    assert pred["iteration"] == pytest.approx(sim.iteration_time)
    assert pred["communication (exposed)"] == pytest.approx(sim.iteration_time - sim.compute_time)
    assert (pred["forward"], pred["backward"], pred["optimizer"]) == pytest.approx((350e-6, 460e-6, 50e-6))
    it = next(r for r in comp.rows if r.phase == "iteration")
    assert it.error == pytest.approx((sim.iteration_time - 2500e-6) / 2500e-6)
    path = trace_compare.save(comp, tmp_path / "m.json")
    data = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "process_name"}
    assert names[4242] == "measured: python (CPU)" and names[0] == "measured: python (GPU 0)"
    assert names["Spans"] == "measured: pid Spans"
    assert names[4243] == "commscope prediction: wfbp p=2 on custom (kineto_gpu_ddp)"
    first = min(e["ts"] for e in data["traceEvents"] if e.get("pid") == 4243 and e.get("ph") == "X")
    assert first == pytest.approx(B + 1095)  # the prediction starts where the first step's forward does
    original = json.loads(FIXTURE.read_text())["traceEvents"]
    assert len(data["traceEvents"]) == len(original) + 1 + len(sim.timeline.to_chrome_trace()["traceEvents"]) + 1
    assert data["distributedInfo"]["world_size"] == 2 and data["commscopeComparison"]["p"] == 2


def test_exposed_is_communication_outside_compute() -> None:
    assert trace_compare.exposed([(0, 10), (5, 15)], [(2, 4), (12, 20)]) == pytest.approx(15 - 2 - 3)
    assert trace_compare.exposed([], [(0, 1)]) == 0 and trace_compare.exposed([(0, 3)], []) == 3


def test_gzipped_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    prof = trace_profile.build(trace_steps.analyse(kineto.load(path)))
    assert prof.compute_s == pytest.approx(810e-6) and prof.name == "t"


# ------------------------------------------------------------------------------------------- bad input
def _forward_only(e: dict[str, Any]) -> None:
    if str(e.get("name", "")).startswith("autograd::engine::evaluate_function"):
        e["name"] = "something_else"


def _no_shapes(e: dict[str, Any]) -> None:
    if isinstance(e.get("args"), dict):
        e["args"].pop("Input Dims", None)


@pytest.mark.parametrize(("content", "message"), [
    ("not json at all", "trace is not JSON (Expecting value at line 1 column 1)"),
    ('{"schemaVersion": 1}', "not a Chrome trace: no 'traceEvents' list"),
    ('{"traceEvents": [{"ph": "M", "name": "process_name"}]}', "no complete ('ph': 'X') events"),
    ('{"traceEvents": [{"ph": "X", "name": "x", "cat": "cpu_op", "ts": 1, "dur": 2}]}', "no training loop found"),
    (_forward_only, "no training step with a forward and backward pass (step 2: no backward pass"),
    (_no_shapes, "gradients have no shapes"),
])
def test_bad_traces_are_one_line_errors_and_leave_outputs_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               content: Any, message: str) -> None:
    if isinstance(content, str):
        trace = tmp_path / "bad.json"
        trace.write_text(content)
    else:
        trace = _edited(tmp_path, content, "bad.json")
    prof, recs = tmp_path / "p.json", tmp_path / "r.jsonl"
    prof.write_text("old profile\n")
    recs.write_text("old records\n")
    code, out, err = run_cli(capsys, "import", "trace", str(trace), "--profile-out", str(prof), "--records-out",
                             str(recs))
    assert code == 2 and out == ""
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and message in err
    assert prof.read_text() == "old profile\n" and recs.read_text() == "old records\n"
    code, _, err = run_cli(capsys, "compare-trace", str(trace), "--schedule", "wfbp", "--env", "1GbE", "-p", "2",
                           "--out", str(prof))
    assert code == 2 and message in err and prof.read_text() == "old profile\n"


def test_outputs_are_checked_before_anything_is_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prof = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "import", "trace", str(FIXTURE), "--profile-out", str(prof), "--records-out",
                           str(tmp_path / "missing" / "r.jsonl"))
    assert code == 2 and "directory" in err and "does not exist" in err and not prof.exists()
    code, _, err = run_cli(capsys, "import", "trace", str(tmp_path / "nothing.json"))
    assert code == 2 and "no trace" in err


def test_compare_trace_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """p defaults to the trace's world size; the table shows each phase with its error."""
    code, out, err = run_cli(capsys, "compare-trace", str(FIXTURE), "--schedule", "wfbp", "--alpha", "1e-5",
                             "--beta", "1e-9", "--out", str(tmp_path / "m.json"))
    assert code == 0 and err == ""
    assert "against wfbp p=2" in out and "communication (exposed)" in out and "0.510" in out and "+0.0%" in out
    assert "wrote the measured trace and the prediction to" in out and (tmp_path / "m.json").is_file()


def test_compare_trace_argument_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = str(tmp_path / "m.json")
    code, _, err = run_cli(capsys, "compare-trace", str(FIXTURE), "--schedule", "nope", "--env", "1GbE", "--out", out)
    assert code == 2 and "nope" in err
    code, _, err = run_cli(capsys, "compare-trace", str(FIXTURE), "--schedule", "wfbp", "--out", out)
    assert code == 2 and "give --env" in err
    code, _, err = run_cli(capsys, "compare-trace", str(FIXTURE), "--schedule", "wfbp", "--env", "1GbE",
                           "--option", "H=4", "--out", out)
    assert code == 2 and "--option H" in err
    data = json.loads(FIXTURE.read_text())
    del data["distributedInfo"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "compare-trace", str(bare), "--schedule", "wfbp", "--env", "1GbE", "--out", out)
    assert code == 2 and "give -p N" in err and not Path(out).exists()


def test_unit_names_drop_the_shared_prefix() -> None:
    names = trace_profile.unit_names([("DDP_0", "Seq_0", "Linear_0"), ("DDP_0", "Seq_0", "Block_0", "Linear_1")])
    assert list(names.values()) == ["Linear_0", "Block_0.Linear_1"]
    assert list(trace_profile.unit_names([("DDP_0", "Linear_0")]).values()) == ["Linear_0"]


def test_fixture_is_kineto_shaped() -> None:
    """The fixture keeps to the format the importer documents (so it tests the format, not itself)."""
    data = json.loads(FIXTURE.read_text())
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if e["name"].startswith("ncclDevKernel_AllReduce_Sum_f32_RING_LL(")]
    assert len(nccl) == 4 and all({"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                                   "Process Group Name", "correlation", "stream"} <= set(e["args"]) for e in nccl)
    flows = {(e["ph"], e["id"]) for e in data["traceEvents"] if e.get("cat") == "ac2g"}
    assert all(("s", e["args"]["correlation"]) in flows and ("f", e["args"]["correlation"]) in flows for e in kernels)


def test_steps_without_profiler_step_scopes_split_at_the_optimizer_step(tmp_path: Path) -> None:
    """A trace recorded without a schedule (no ProfilerStep#) is cut after each Optimizer.step#, so two training
    iterations stay two steps (not one with a backward spanning both)."""
    def unmark(e: dict[str, Any]) -> None:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = "some annotation"
    _, a = analysed(_edited(tmp_path, unmark))
    assert len(a.steps) == 2
    s = a.steps[1]
    assert (s.fwd_start - B, s.bwd_start - B, s.bwd_end - B) == pytest.approx((3595, 4500, 5060))
    assert s.iteration_s == pytest.approx((5900 - 3595) / 1e6)  # forward start to the optimizer step's end
    assert trace_profile.build(a).compute_s == pytest.approx(810e-6)


def test_the_optimizer_is_named_from_its_step_scope() -> None:
    """The class in ``Optimizer.step#<Class>.step`` names the step whose memory streams price the gradient passes
    (costmodels.profiles.OPTIMIZER_STREAMS); an unknown class names nothing (SGD's 3 streams are assumed)."""
    from types import SimpleNamespace

    _, a = analysed(FIXTURE)
    prof = trace_profile.build(a)
    assert prof.metadata["optimizer"] == "sgd"
    assert prof.pass_s_per_byte == pytest.approx(2 * prof.optimizer_s / (3 * prof.grad_bytes))

    def trace(*names: str) -> SimpleNamespace:
        return SimpleNamespace(events=[SimpleNamespace(name=n) for n in names])

    assert trace_profile.optimizer_of(trace("aten::mm", "Optimizer.step#AdamW.step")) == {"optimizer": "adamw"}
    assert trace_profile.optimizer_of(trace("Optimizer.step#Lamb.step")) == {}
    assert trace_profile.optimizer_of(trace("aten::mm")) == {}
