"""Collective sweeps (runners.measure.sweep, ``commscope bench collectives``) and ``commscope import nccl-tests``.

The multi-process tests start real gloo jobs with torchrun on small sizes and few iterations; a
killed rank and a stopped rank must end the job within its timeout, keeping what was written.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import costmodels as cm
from runners import results as rs
from runners.cli import main
from runners.measure import nccl_tests as nti
from runners.measure import sweep as bench
from runners.measure.sweep.patterns import _pattern, _summed, _wrong
from runners.torchrun.launcher import launch_args

ROOT = Path(__file__).resolve().parents[1]
OPS = list(bench.OPS)


def commscope(*argv: str) -> list[str]:
    return [sys.executable, "-m", "runners.cli", *argv]


def torchrun(nproc: int, *argv: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node",
            str(nproc), "-m", "runners.measure.sweep", *argv]


def run_job(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def loaded(path: Path) -> list[dict]:
    data = rs.load(path)
    assert not data.bad, [str(b) for b in data.bad]
    return data.records


def check_sweep(records: list[dict], ops: list[str], sizes: list[int], world: int, dtype: str) -> None:
    """Every op x size once, checked with 0 wrong, nccl-tests' bandwidths, the run described."""
    elem = bench.DTYPES[dtype][1]
    assert sorted((r["config"]["op"], r["config"]["bytes"]) for r in records) == sorted(
        (op, s) for op in ops for s in sizes)
    for r in records:
        c, x, run = r["config"], r["result"], r["run"]
        assert r["kind"] == "collective" and r["source"] == "torchrun"
        assert c["bytes"] % (elem * world) == 0 and c["count"] * elem == c["bytes"] and c["dtype"] == dtype
        assert c["check"] and x["checked"] and x["wrong"] == 0, (c["op"], c["bytes"], x["wrong"])
        assert len(x["times"]) == c["iterations"]
        # CPU ranks: each call's CPU seconds (process time, every thread), mean over ranks; a call takes some
        assert 0 < x["cpu_s"] < 60 and 0 < x["cpu_mean_s"] < 60
        assert x["time_min_s"] <= x["time_p10_s"] <= x["time_s"] <= x["time_p90_s"] <= max(x["times"])
        # the chain time, each rank's calls summed (the slowest rank's), never exceeds the mean of the per-iteration
        # maxima over ranks (sum_k max_i d_ik >= max_i sum_k d_ik); sendrecv times rank 0 alone, so they are equal
        mean = sum(x["times"]) / len(x["times"])
        assert 0 < x["time_chain_s"] <= mean * (1 + 1e-12)
        if c["op"] == "sendrecv":
            assert math.isclose(x["time_chain_s"], mean, rel_tol=1e-9)
        assert math.isclose(x["algbw_GBps"], c["bytes"] / x["time_s"] / 1e9)
        assert math.isclose(x["busbw_GBps"], x["algbw_GBps"] * cm.busbw_factor(c["op"], world))
        assert (run["backend"], run["world_size"], run["ranks_per_node"], run["local_world_size"]) == (
            "gloo", world, world, world)
        assert len(run["devices"]) == world and run["torch"]
        assert c["redop"] == ("sum" if c["op"] in bench.REDUCING else "none")
        assert c["root"] == (0 if c["op"] in bench.ROOTED else -1)
    sendrecv = [r for r in records if r["config"]["op"] == "sendrecv"]
    assert bool(sendrecv) == ("sendrecv" in ops) and all(r["config"]["peer"] == world - 1 for r in sendrecv)


# ------------------------------------------------------------------------------ without processes
def test_options_round_trip_and_defaults() -> None:
    """Options survive the trip through the worker's command line; nccl-tests' short flags are accepted."""
    opts = bench.make_options(op="allreduce,sendrecv", min_size="4K", max_size="1MiB", factor=4, dtype="half",
                              warmup=1, iters=3, check=True, timeout=7.5, backend="gloo", use_equivalent="all")
    assert opts.dtype == "float16" and opts.sizes == [4096, 16384, 65536, 262144, 1048576]
    assert opts.use_equivalent == tuple(bench.EQUIVALENTS)
    assert bench.parse_args(["collectives", *opts.argv()]) == opts
    short = bench.parse_args(["collectives", "-b", "8", "-e", "128M", "-f", "2", "-w", "5", "-n", "20", "-c", "1",
                              "-d", "float", "-o", "allreduce"])
    assert (short.min_size, short.max_size, short.check, short.dtype, short.ops) == (
        8, 128 * 2**20, True, "float32", ("allreduce",))
    assert bench.make_options().ops == tuple(OPS)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"op": "allreduce,gossip"}, "unknown op 'gossip'"),
    ({"min_size": "12XB"}, "unknown size unit"),
    ({"factor": 1.0}, "--factor must be a number > 1"),
    ({"min_size": "4MiB", "max_size": "1MiB"}, "smaller than min size"),
    ({"dtype": "complex64"}, "unknown --dtype"),
    ({"iters": 0}, "--iters must be >= 1"),
    ({"timeout": 0}, "--timeout must be"),
    ({"resume": True}, "--resume needs --out"),
    ({"out": "/no/such/dir/r.jsonl"}, "does not exist"),
])
def test_bad_options_name_the_problem(kwargs: dict, message: str) -> None:
    with pytest.raises(cm.CommscopeError, match=message):
        bench.make_options(**kwargs)


def test_sizes_round_like_nccl_tests() -> None:
    """Down to a multiple of element size x world size, never below one such multiple."""
    assert bench.round_size(1000, "float32", 8) == 992
    assert bench.round_size(1024, "float32", 8) == 1024
    assert bench.round_size(3, "bfloat16", 4) == 8
    assert bench.round_size(4096, "float64", 3) == 4080


def test_measurement_summary_and_wrong_count() -> None:
    """Median / p10 / p90 / min of per-iteration times; the checker counts differing elements only."""
    m = bench.Measurement([5.0, 1.0, 3.0, 2.0, 4.0], wrong=0, checked=True)
    assert (m.median, m.min, m.p10, m.p90) == (3.0, 1.0, 1.4, 4.6)
    torch = pytest.importorskip("torch")
    ctx = SimpleNamespace(torch=torch, world=4, device=torch.device("cpu"))
    x = _pattern(ctx, 100, 2, "bfloat16")
    assert x.min().item() >= 1 and x.max().item() <= 7  # never zeros
    expected = _summed(ctx, 100)
    got = expected.to(torch.bfloat16)
    assert _wrong(ctx, got, expected, "bfloat16") == 0
    got[[3, 50]] += 1
    assert _wrong(ctx, got, expected, "bfloat16") == 2


def test_launch_one_node_or_the_emulated_nodes() -> None:
    """One node by default; COMMSCOPE_* and MASTER_* (set by `commscope emulate`) give a static rendezvous."""
    assert launch_args(3, {}) == (["--standalone", "--nnodes", "1", "--nproc_per_node", "3"], 3)
    env = {"COMMSCOPE_NNODES": "2", "COMMSCOPE_NODE_RANK": "1", "COMMSCOPE_NPROC_PER_NODE": "4",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29511"}
    args, world = launch_args(None, env)
    assert world == 8 and args == ["--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "4",
                                   "--master_addr", "10.0.0.1", "--master_port", "29511"]
    with pytest.raises(cm.CommscopeError, match="MASTER_ADDR"):
        launch_args(None, {k: v for k, v in env.items() if k != "MASTER_ADDR"})


def test_cli_dry_run_forwards_every_option(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("COMMSCOPE_NNODES", "2")
    monkeypatch.setenv("COMMSCOPE_NODE_RANK", "0")
    monkeypatch.setenv("COMMSCOPE_NPROC_PER_NODE", "2")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    code = main(["bench", "collectives", "-b", "1K", "-e", "8K", "-o", "allgather", "--check", "--out",
                 str(tmp_path / "r.jsonl"), "--root", "3", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "torch.distributed.run --nnodes 2 --node_rank 0 --nproc_per_node 2 --master_addr 10.0.0.1" in out
    assert "-m runners.measure.sweep collectives --op allgather --min-size 1024 --max-size 8192" in out
    assert "--check" in out and "--root 3" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["-b", "1MB/s"], "cannot read size"),
    (["--op", "allreduce,broadcastt"], "unknown op 'broadcastt'"),
    (["-f", "1"], "--factor must be a number > 1"),
    (["-f", "0.5"], "--factor must be a number > 1"),
    (["--nproc", "2", "--root", "2"], "--root 2 is not a rank of this 2-rank job"),
    (["--iters", "many"], "--iters"),
    (["--backend", "mpi"], "unknown --backend"),
])
def test_cli_errors_are_one_line_with_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                             message: str) -> None:
    code = main(["bench", "collectives", "--dry-run", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and message in err


# ------------------------------------------------------------------------------ nccl-tests import
def _ranks() -> str:
    lines = []
    for r in range(8):
        host = "node-a" if r < 4 else "node-b"
        lines.append(f"#  Rank {r:2d} Group  0 Pid {41000 + r:6d} on {host:>10} device {r % 4:2d} "
                     f"[0x{0x18 + r:02x}] NVIDIA H100 80GB HBM3")
    return "\n".join(lines)


HEADER = """\
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"""

ROWS = """\
           8             2     float     sum      -1    28.41    0.00    0.00      0    27.95    0.00    0.00      0
          32             8     float     sum      -1    28.77    0.00    0.00      0    28.20    0.00    0.00      0
         128            32     float     sum      -1    29.10    0.00    0.01      0    28.66    0.00    0.01      0
         512           128     float     sum      -1    29.52    0.02    0.03      0    29.01    0.02    0.03      0
        2048           512     float     sum      -1    30.84    0.07    0.12      0    30.12    0.07    0.12      0
        8192          2048     float     sum      -1    33.90    0.24    0.42      0    33.15    0.25    0.43      0
       32768          8192     float     sum      -1    41.02    0.80    1.40      0    40.11    0.82    1.43      0
      131072         32768     float     sum      -1    52.33    2.50    4.38      0    51.87    2.53    4.42      0
      524288        131072     float     sum      -1    64.8x    8.09   14.16      0    64.12    8.18   14.31      0
     1048576        262144     float     sum      -1   101.20   10.36   18.13      0   100.54   10.43   18.25      0"""

LOG = f"""\
$ mpirun -np 1 ./build/all_reduce_perf -b 8 -e 1M -f 4 -g 8 -c 1
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
# Using devices
{_ranks()}
node-a:41000:41000 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
#
{HEADER}
{ROWS}
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 3.8650
#
# Collective test concluded: all_reduce_perf
"""
MALFORMED_LINE = LOG.splitlines().index(ROWS.splitlines()[8]) + 1


def test_import_nccl_tests_log(tmp_path: Path) -> None:
    """One record per row with the out-of-place numbers, in-place kept; the malformed row named by its line."""
    log = tmp_path / "all_reduce_8gpu.log"
    log.write_text(LOG)
    out = tmp_path / "r.jsonl"
    imported = nti.import_log(log, out)
    assert imported.ops == ["allreduce"] and imported.world_size == 8
    assert imported.problems == [f"{log}:{MALFORMED_LINE}: malformed row skipped: out-of-place time, algbw and "
                                 "busbw must be numbers (could not convert string to float: '64.8x')"]
    recs = loaded(out)
    assert [r["config"]["bytes"] for r in recs] == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 1048576]
    last = recs[-1]
    c, x, run = last["config"], last["result"], last["run"]
    assert last["source"] == f"nccl-tests:{log}"
    assert (c["op"], c["count"], c["dtype"], c["redop"], c["root"], c["warmup"], c["iterations"], c["check"]) == (
        "allreduce", 262144, "float32", "sum", -1, 5, 20, True)
    assert (x["time_s"], x["algbw_GBps"], x["busbw_GBps"], x["wrong"]) == (pytest.approx(101.20e-6), 10.36, 18.13, 0)
    assert (x["inplace_time_s"], x["inplace_busbw_GBps"], x["inplace_wrong"]) == (pytest.approx(100.54e-6), 18.25, 0)
    assert (run["backend"], run["world_size"], run["ranks_per_node"], run["nccl"], run["host"]) == (
        "nccl", 8, 4, "2.21.5+cuda12.4", "node-a")
    assert run["devices"] == ["NVIDIA H100 80GB HBM3"] * 8 and run["network"] is None


def test_import_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The command prints the table, warns about the malformed row on stderr and appends the records."""
    log = tmp_path / "ar.log"
    log.write_text(LOG)
    out = tmp_path / "r.jsonl"
    code = main(["import", "nccl-tests", str(log), "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0
    assert err == f"commscope: warning: {log}:{MALFORMED_LINE}: malformed row skipped: out-of-place time, algbw " \
                  "and busbw must be numbers (could not convert string to float: '64.8x')\n"
    assert "1048576" in stdout and "18.13" in stdout and "imported 9 record(s)" in stdout
    assert len(loaded(out)) == 9


def test_import_needs_op_and_world_size_where_the_log_lacks_them(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    """A bare table (no binary name, no rank lines) needs --op and --world-size; errors are one line, exit 2."""
    log = tmp_path / "bare.log"
    log.write_text(HEADER + "\n" + ROWS.splitlines()[-1] + "\n# Avg bus bandwidth    : 18.13\n")
    assert main(["import", "nccl-tests", str(log)]) == 2
    assert "give --world-size N" in capsys.readouterr().err
    assert main(["import", "nccl-tests", str(log), "--world-size", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: ") and err.count("\n") == 1 and "give --op" in err
    out = tmp_path / "r.jsonl"
    assert main(["import", "nccl-tests", str(log), "--world-size", "16", "--op", "allgather", "--out", str(out)]) == 0
    (rec,) = loaded(out)
    assert (rec["config"]["op"], rec["run"]["world_size"], rec["config"]["warmup"]) == ("allgather", 16, 5)
    assert main(["import", "nccl-tests", str(tmp_path / "missing.log")]) == 2
    assert "no nccl-tests log" in capsys.readouterr().err


# ------------------------------------------------------------------------------ real gloo jobs
@pytest.mark.multiprocess
def test_two_rank_sweep_is_complete_correct_and_resumes(tmp_path: Path) -> None:
    """Every op x size, 0 wrong, nccl-tests' table; --resume skips what is there and measures what changed."""
    out = tmp_path / "r.jsonl"
    argv = ["bench", "collectives", "--nproc", "2", "--backend", "gloo", "-b", "4K", "-e", "64K", "-f", "16",
            "-w", "1", "-n", "3", "--check", "--out", str(out), "--timeout", "30"]
    job = run_job(commscope(*argv))
    assert job.returncode == 0, job.stderr[-3000:]
    for col in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"):
        assert col in job.stdout
    assert "[14/14]" in job.stdout and "# Out of bounds values : 0 OK" in job.stdout
    first = loaded(out)
    check_sweep(first, OPS, [4096, 65536], 2, "float32")
    assert all(r["config"]["equivalent"] is None for r in first)

    job = run_job(commscope(*argv, "--resume", "--use-equivalent", "reduce_scatter,all_to_all"))
    assert job.returncode == 0, job.stderr[-3000:]
    assert "resume: 10 of 14 measurement(s) already in" in job.stdout
    assert "reduce_scatter is measured as all_reduce, each rank keeps its own shard" in job.stdout
    again = loaded(out)[len(first):]
    check_sweep(again, ["reduce_scatter", "all_to_all"], [4096, 65536], 2, "float32")
    assert {r["config"]["equivalent"] for r in again} == {bench.EQUIVALENTS["reduce_scatter"],
                                                          bench.EQUIVALENTS["all_to_all"]}


@pytest.mark.multiprocess
def test_four_rank_sweep_with_torchrun(tmp_path: Path) -> None:
    """Four ranks started by torchrun itself, bfloat16, sizes rounded to multiples of 2 B x 4 ranks."""
    out = tmp_path / "r.jsonl"
    job = run_job(torchrun(4, "collectives", "--backend", "gloo", "-b", "1003", "-e", "8100", "-f", "8", "-d",
                           "bfloat16", "-w", "1", "-n", "2", "-c", "1", "--out", str(out)))
    assert job.returncode == 0, job.stderr[-3000:]
    assert "[14/14]" in job.stdout and "bfloat16" in job.stdout
    check_sweep(loaded(out), OPS, [1000, 8024], 4, "bfloat16")


def _children(pid: int) -> Iterator[int]:
    """Every descendant of ``pid``, read from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    todo = list(parents.get(pid, []))
    while todo:
        p = todo.pop()
        yield p
        todo.extend(parents.get(p, []))


def _rank_pid(job: subprocess.Popen[str], rank: int) -> int:
    """The pid of the process of ``rank`` among the job's descendants (its environment says RANK=...)."""
    for pid in _children(job.pid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and any(b"runners.measure.sweep" in a for a in
                                                  Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")):
            return pid
    raise AssertionError(f"no process of rank {rank} under {job.pid}")


def _start_and_wait_for_records(out: Path, timeout: float) -> subprocess.Popen[str]:
    argv = commscope("bench", "collectives", "--nproc", "2", "--backend", "gloo", "-b", "4K", "-e", "64MiB",
                     "-w", "2", "-n", "50", "--out", str(out), "--timeout", str(timeout))
    job = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not (out.exists() and out.stat().st_size) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.poll() is None, job.communicate()[1][-3000:]
    assert out.exists(), "no record within 90 s"
    return job


def _end(job: subprocess.Popen[str]) -> None:
    """Leave nothing behind: continue and kill what is left of the job."""
    for pid in [*_children(job.pid), job.pid]:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    job.communicate()


@pytest.mark.multiprocess
def test_killed_rank_ends_the_job_and_keeps_the_records(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    timeout = 20.0
    job = _start_and_wait_for_records(out, timeout)
    try:
        os.kill(_rank_pid(job, 1), signal.SIGKILL)
        killed = time.monotonic()
        _, err = job.communicate(timeout=timeout + 15)
        assert time.monotonic() - killed < timeout
        assert job.returncode != 0
        assert "commscope: error: the sweep ended with exit code" in err
    finally:
        _end(job)
    recs = loaded(out)  # every line whole and valid
    assert recs and all(r["config"]["op"] == "allreduce" for r in recs)
    assert [r["config"]["bytes"] for r in recs] == [4096 * 2**k for k in range(len(recs))]


@pytest.mark.multiprocess
def test_stopped_rank_times_out_with_a_clear_message(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    job = _start_and_wait_for_records(out, 3.0)
    try:
        os.kill(_rank_pid(job, 1), signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = job.communicate(timeout=40)
        assert time.monotonic() - stopped < 15
        assert job.returncode != 0
    finally:
        _end(job)
    line = next(x for x in err.splitlines() if "did not finish within --timeout 3 s" in x)
    assert line.startswith("commscope: error: allreduce of ") and " B) did not finish" in line
    assert loaded(out)


# ------------------------------------------------------------------------------ GPUs
def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.multiprocess
@pytest.mark.skipif(_gpus() == 0, reason="needs a CUDA device (NCCL backend, CUDA-event timing)")
def test_nccl_sweep_on_gpus(tmp_path: Path) -> None:
    """One rank per GPU on NCCL: complete and correct, timed with CUDA events, devices named."""
    n = _gpus()
    out = tmp_path / "r.jsonl"
    ops = OPS if n > 1 else [op for op in OPS if op != "sendrecv"]
    job = run_job(commscope("bench", "collectives", "--nproc", str(n), "--backend", "nccl", "-o", ",".join(ops),
                            "-b", "64K", "-e", "4MiB", "-f", "8", "-w", "2", "-n", "5", "--check", "--out", str(out)))
    assert job.returncode == 0, job.stderr[-3000:]
    recs = loaded(out)
    assert {(r["config"]["op"]) for r in recs} == set(ops)
    assert all(r["result"]["wrong"] == 0 and r["run"]["backend"] == "nccl" for r in recs)
    assert all(r["run"]["timing"] == "cuda events per iteration" and r["run"]["device_type"] == "cuda" for r in recs)
    assert all(len(r["run"]["devices"]) == n and r["run"]["nccl"] for r in recs)
