"""Imports of collective logs as results-store records with ``origin: imported``: nccl-tests' ``-J`` JSON (with
``-I`` per-iteration times and their stragglers), NCCL Inspector JSON lines and DeepSpeed's comms_logger summary.
The fixtures follow the formats as their sources write them (the modules' docstrings name them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runners import results
from runners.cli import main
from runners.imports import deepspeed_comms, nccl_inspector, nccl_tests_json
from runners.measure import nccl_tests as nti


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, message: str) -> bool:
    return code == 2 and err.startswith("commscope: error: ") and err.count("\n") == 1 and message in err


# ------------------------------------------------------------------------------------------- nccl-tests -J
def _device(rank: int, host: str, pid: int) -> dict[str, Any]:
    return {"rank": rank, "group": 0, "pid": pid, "hostname": host, "device": 0, "device_hex": "0000:04:00",
            "device_info": "NVIDIA H100 80GB HBM3"}


def _place(time: Any, algbw: float, busbw: float) -> dict[str, Any]:
    return {"time": time, "alg_bw": algbw, "bus_bw": busbw, "nwrong": 0.0}


def _per_iter(times: list[float], per_process: list[list[float]] | None) -> dict[str, Any]:
    block: dict[str, Any] = {"skipped_iterations": 1, "min_us": min(times[1:]), "max_us": max(times[1:]),
                             "avg_us": 0.0, "p50_us": 50.0, "p95_us": 150.0, "p99_us": 150.0, "stdev_us": 0.0,
                             "cv_pct": 10.0, "times_us": times}
    if per_process is not None:
        block["per_process_max_times_us"] = per_process
    return block


def nccl_tests_output() -> dict[str, Any]:
    """all_reduce_perf -b 1M -e 8M -f 2 -g 4 -I 1 -K 1 -J on two processes of 4 GPUs (node-a, node-b): iteration 6
    of 1 MiB takes 3 x the median, process 1 (node-b) being the slowest in it; at 8 MiB process 1 is 2.2 x slower
    throughout; 2 MiB was not run (null) and 4 MiB has "nan" times."""
    times = [500.0, 50, 51, 49, 50, 52, 150, 50, 51, 49]
    procs = [[500.0, 50, 51, 49, 50, 52, 60, 50, 51, 49], [490.0, 49, 50, 48, 49, 51, 150, 49, 50, 48]]
    slow = [[900.0, 100, 101, 99, 100, 100, 101, 99, 100, 100], [950.0, 220, 221, 219, 220, 222, 220, 219, 221, 220]]
    row = {"count": 0, "type": "float", "redop": "sum", "root": "    -1", "actual_iterations": 10,
           "experiment_name": ""}
    return {
        "version": 3, "start_time": "2026-11-20 10:00:00",
        "args": ["./build/all_reduce_perf", "-b", "1M", "-e", "8M", "-f", "2", "-g", "4", "-I", "1", "-K", "1",
                 "-J", "ar.json"],
        "env": ["NCCL_DEBUG=WARN"], "nccl_version": 22105,
        "config": {"nthreads": 1, "ngpus": 4, "minimum_bytes": 1048576, "maximum_bytes": 8388608, "step_factor": 2,
                   "warmup_iters": 5, "iterations": 10, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                   "blocking_collectives": False, "per_iter_timing": True, "per_iter_skip": 1, "parallel_init": False,
                   "devices": [_device(0, "node-a", 1000), _device(4, "node-b", 2000)]},
        "results": [
            {**row, "size": 1048576, "count": 262144, "out_of_place": _place(50.5, 20.76, 36.33),
             "out_of_place_per_iter": _per_iter(times, procs), "in_place": _place(50.1, 20.93, 36.63),
             "in_place_per_iter": _per_iter([400.0] + [50.0] * 9, None)},
            {**row, "size": 2097152, "count": 524288, "out_of_place": None, "in_place": None},
            {**row, "size": 4194304, "count": 1048576, "out_of_place": _place("nan", 0.0, 0.0), "in_place": None},
            {**row, "size": 8388608, "count": 2097152, "out_of_place": _place(390.0, 21.51, 37.64),
             "out_of_place_per_iter": _per_iter([x for x in slow[1]], slow), "in_place": _place(389.0, 21.56, 37.74)},
        ],
        "out_of_bounds": {"count": 0, "okay": True}, "average_bus_bandwidth": {"bandwidth": 36.9, "okay": "unchecked"},
        "errors": [], "end_time": "2026-11-20 10:00:05",
    }


def test_nccl_tests_json_records_and_stragglers(tmp_path: Path) -> None:
    imported = nccl_tests_json.parse(nccl_tests_output(), "ar.json")
    assert imported.ops == ["allreduce"] and imported.world_size == 8
    assert imported.problems == [
        "ar.json: results[1]: skipped: no out_of_place numbers (null)",
        "ar.json: results[2]: skipped: out_of_place time, alg_bw and bus_bw must be numbers (time > 0), got 'nan', "
        "0.0, 0.0"]
    first, last = imported.records
    c, x, run = first["config"], first["result"], first["run"]
    assert (c["op"], c["bytes"], c["count"], c["dtype"], c["redop"], c["root"], c["warmup"], c["iterations"],
            c["nranks"], c["check"], c["timed"]) == ("allreduce", 1048576, 262144, "float32", "sum", -1, 5, 10, 8, True,
                                                     "gpu")
    assert (x["time_s"], x["algbw_GBps"], x["busbw_GBps"], x["wrong"], x["inplace_time_s"]) == (
        pytest.approx(50.5e-6), 20.76, 36.33, 0, pytest.approx(50.1e-6))
    assert (run["world_size"], run["ranks_per_node"], run["nccl"], run["host"]) == (8, 4, "2.21.5", "node-a")
    assert run["devices"] == ["NVIDIA H100 80GB HBM3"] * 8 and run["torch"] is None
    assert first["origin"] == "imported" and first["imported_from"] == {"format": "nccl-tests-json", "file": "ar.json"}
    assert first["source"] == "nccl-tests:ar.json"
    pi = x["per_iteration"]
    assert pi["median_us"] == 50 and pi["skipped"] == 1 and len(pi["times_us"]) == 10
    assert pi["stragglers"] == [{"iteration": 6, "time_us": 150, "x_median": 3.0, "process": 1, "host": "node-b"}]
    assert pi["slow_processes"] == [] and x["inplace_per_iteration"]["stragglers"] == []  # 400 us was skipped (-K 1)
    slow = last["result"]["per_iteration"]["slow_processes"]
    assert [(s["process"], s["host"], s["median_us"]) for s in slow] == [(1, "node-b", 220)]
    assert slow[0]["x_others"] == pytest.approx(2.2)
    assert imported.stragglers == [{"op": "allreduce", "bytes": 1048576, "placement": "out-of-place",
                                    **pi["stragglers"][0]}]
    out = tmp_path / "r.jsonl"
    results.append(out, imported.records)
    assert len(results.load(out).records) == 2


def test_nccl_tests_json_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``import nccl-tests`` reads -J output by its content; stragglers get a table, skipped rows a warning."""
    path, out = tmp_path / "ar.json", tmp_path / "r.jsonl"
    path.write_text(json.dumps(nccl_tests_output(), indent=1))
    code, stdout, err = run_cli(capsys, "import", "nccl-tests", str(path), "--out", str(out))
    assert code == 0
    assert err.count("commscope: warning: ") == 2 and "results[1]: skipped" in err
    assert "36.33" in stdout and "stragglers" in stdout and "node-b (process 1)" in stdout
    assert f"imported 2 record(s) from {path} into {out}, 2 malformed row(s) skipped" in stdout
    assert [r["config"]["bytes"] for r in results.load(out).records] == [1048576, 8388608]


def test_nccl_tests_json_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"version": 3}')
    assert one_line_error(*run_cli(capsys, "import", "nccl-tests", str(path))[::2], "not nccl-tests JSON output")
    data = nccl_tests_output()
    data["args"] = ["./a.out"]
    path.write_text(json.dumps(data))
    assert one_line_error(*run_cli(capsys, "import", "nccl-tests", str(path))[::2], "give --op")
    code, out, _ = run_cli(capsys, "import", "nccl-tests", str(path), "--op", "allgather")
    assert code == 0 and "allgather" in out
    data = nccl_tests_output()
    path.write_text(json.dumps(data))
    assert one_line_error(*run_cli(capsys, "import", "nccl-tests", str(path), "--op", "allgather")[::2],
                          "the run is allreduce")
    assert one_line_error(*run_cli(capsys, "import", "nccl-tests", str(path), "--world-size", "4")[::2],
                          "lists 8 ranks (2 processes x 4) but --world-size is 4")
    path.write_text("{ not json")
    assert one_line_error(*run_cli(capsys, "import", "nccl-tests", str(path))[::2], "is not JSON")


def test_nccl_tests_text_records_say_they_were_imported(tmp_path: Path) -> None:
    text = ("# Collective test starting: all_gather_perf\n#  Rank  0 Group  0 Pid 1 on node-a device  0 [0x1] GPU\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "        1024           256     float    none      -1    10.00    0.10    0.00      0\n")
    rec = nti.parse(text, "ag.log").records[0]
    assert rec["origin"] == "imported" and rec["imported_from"] == {"format": "nccl-tests", "file": "ag.log"}


# ------------------------------------------------------------------------------------------- NCCL Inspector
HEADER0 = {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": 0, "n_ranks": 2, "nnodes": 1}
META = {"git_rev": "", "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1748030377748202,
        "hostname": "node-a", "pid": 1639453}


def _coll(coll: str, sn: int, size: int, us: int, algo: str = "RING", proto: str = "LL") -> dict[str, Any]:
    return {"coll_perf": {"coll": coll, "coll_algo": algo, "coll_proto": proto, "coll_sn": sn,
                          "coll_msg_size_bytes": size, "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu",
                          "coll_algobw_gbs": 1.0, "coll_busbw_gbs": 1.0}}


def inspector_files(tmp: Path) -> list[Path]:
    """Rank 0 in format v4.3 (a dump_stats marker, then its records), rank 1 in v4.2 (each line self-contained):
    AllReduce of 1 MiB sn 1-4 (sn 4 straggles on rank 1), an AllGather of 64 KiB per rank, a Send; plus a proxy
    record, a line that is not JSON, one with a 0 us time and an orphan payload."""
    marker = {"header": HEADER0, "metadata": {"inspector_output_format_version": "v4.3", **META},
              "dump_stats": {"coll_records": 5, "coll_dropped_total": 0, "coll_dropped_since_last_dump": 0,
                             "p2p_records": 1, "p2p_dropped_total": 0, "p2p_dropped_since_last_dump": 0,
                             "proxy_records": 1}}
    rank0 = [marker] + [_coll("AllReduce", sn, 1048576, us) for sn, us in ((1, 100), (2, 102), (3, 98), (4, 400))]
    rank0 += [_coll("AllGather", 5, 65536, 20),
              {"p2p_perf": {"p2p": "Send", "p2p_sn": 1, "p2p_peer": 1, "p2p_msg_size_bytes": 4096,
                            "p2p_exec_time_us": 7, "p2p_timing_source": "kernel_gpu", "p2p_algobw_gbs": 0.5,
                            "p2p_busbw_gbs": 0.5}},
              {"proxy_trace": {"record_type": "proxy_op", "record_sn": 1, "parent_type": "coll", "parent_sn": 1}}]
    ctx = {"header": {**HEADER0, "rank": 1}, "metadata": {"inspector_output_format_version": "v4.2", **META}}
    rank1 = [{**ctx, **_coll("AllReduce", sn, 1048576, us)} for sn, us in ((1, 110), (2, 95), (3, 99), (4, 420))]
    rank1 += [{**ctx, **_coll("AllGather", 5, 65536, 18)}, {**ctx, **_coll("AllReduce", 6, 8192, 0)}]
    files = []
    for rank, lines in ((0, rank0), (1, rank1)):
        path = tmp / f"node-a-pid{rank}.log"
        text = "\n".join(json.dumps(x) for x in lines) + "\n"
        if rank == 1:
            text += "{truncated\n" + json.dumps(_coll("AllReduce", 7, 1048576, 100)) + "\n"
        path.write_text(text)
        files.append(path)
    return files


def test_nccl_inspector_records(tmp_path: Path) -> None:
    files = inspector_files(tmp_path)
    imported = nccl_inspector.parse(files)
    f1 = files[1]
    assert imported.problems == [
        f"{f1}:6: skipped: exec time 0 us (below the inspector's resolution)",
        f"{f1}:7: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); skipped",
        f"{f1}:8: no communicator header (neither on the line nor a dump_stats marker before it); skipped"]
    by_op = {r["config"]["op"]: r for r in imported.records}
    assert sorted(by_op) == ["allgather", "allreduce", "sendrecv"]
    ar = by_op["allreduce"]
    # per sequence number the slowest rank: 110, 102, 99, 420 us; median 106 us
    assert ar["result"]["time_s"] == pytest.approx(106e-6) and ar["result"]["calls"] == 4
    assert ar["result"]["time_max_s"] == pytest.approx(420e-6)
    assert ar["result"]["stragglers"] == [{"sn": 4, "time_us": 420, "x_median": pytest.approx(420 / 106), "rank": 1,
                                           "host": "node-a"}]
    assert ar["result"]["busbw_GBps"] == pytest.approx(1048576 / 106e-6 / 1e9)  # 2 (p-1) / p = 1 on 2 ranks
    assert (ar["config"]["algorithm"], ar["config"]["protocol"], ar["config"]["timing_source"], ar["config"]["dtype"],
            ar["config"]["nranks"]) == ("ring", "LL", "kernel_gpu", "unknown", 2)
    assert (ar["run"]["world_size"], ar["run"]["ranks_per_node"], ar["run"]["communicator"], ar["run"]["ranks_seen"],
            ar["run"]["backend"]) == (2, 2, "DP Group 0", [0, 1], "nccl")
    ag = by_op["allgather"]
    assert (ag["config"]["bytes"], ag["config"]["count"], ag["result"]["time_s"]) == (131072, 65536,
                                                                                     pytest.approx(20e-6))
    sr = by_op["sendrecv"]
    assert (sr["config"]["bytes"], sr["config"]["peer"], sr["config"]["nccl_op"]) == (4096, 1, "Send")
    assert all(r["origin"] == "imported" and r["imported_from"]["format"] == "nccl-inspector" for r in imported.records)
    assert imported.communicators == ["DP Group 0"] and imported.operations == 11


def test_nccl_inspector_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    inspector_files(tmp_path)
    out = tmp_path / "out" / "r.jsonl"
    assert one_line_error(*run_cli(capsys, "import", "nccl-inspector", str(tmp_path), "--out", str(out))[::2],
                          "does not exist")
    out.parent.mkdir()
    code, stdout, err = run_cli(capsys, "import", "nccl-inspector", str(tmp_path), "--out", str(out))
    assert code == 0 and err.count("commscope: warning:") == 3
    assert "stragglers" in stdout and "node-a (rank 1)" in stdout and f"imported 3 record(s) into {out}" in stdout
    assert len(results.load(out).records) == 3
    empty = tmp_path / "empty.log"
    empty.write_text("{}\n")
    assert one_line_error(*run_cli(capsys, "import", "nccl-inspector", str(empty))[::2],
                          "no collective records (coll_perf / p2p_perf)")
    assert one_line_error(*run_cli(capsys, "import", "nccl-inspector", str(tmp_path / "nope.log"))[::2],
                          "no NCCL Inspector log")


# ------------------------------------------------------------------------------------------- DeepSpeed comms_logger
COLUMNS = ("Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
           "busbw_avg (Gbps)")
STRAGGLER_COLUMNS = ("Comm. Op", "Message Size", "Count", "Total comm lat(ms)", "Total straggler(ms)",
                     "Avg comm lat(ms)", "Avg straggler(ms)")


def _line(*cells: Any) -> str:
    return "".join(f"{c: <20}" if isinstance(c, str) else f"{c: <20.2f}" for c in cells)


def deepspeed_log(prefix: str = "[rank0]: ", ops: tuple[str, ...] = ("all_reduce", "all_gather_into_tensor",
                                                                      "broadcast", "barrier", "my_step")) -> str:
    """log_summary(show_straggler=True) on 8 ranks, as comms_logging.py prints it: all_reduce of 12.5 MB in 25 ms
    (DeepSpeed's tput 2 x size / time = 8.39 Gbps, busbw 7/8 of that), all_gather_into_tensor of 1.0 MB per rank
    in 2 ms, broadcast of 512 KB in 1 ms, a barrier and a custom log name; then the straggler breakdown."""
    rows = {"all_reduce": ("12.5 MB", 100, 2500.0, 25.0, 8.39, 7.34),
            "all_gather_into_tensor": ("1.0 MB", 50, 100.0, 2.0, 33.55, 29.36),
            "broadcast": ("512.0 KB", 4, 4.0, 1.0, 4.19, 4.19), "barrier": ("0B", 10, 1.0, 0.1, 0.0, 0.0),
            "my_step": ("1.0 KB", 1, 1.0, 1.0, 0.01, 0.01)}
    lines = ["[2026-11-20 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100", _line(*COLUMNS)]
    for op in ops:
        size, *vals = rows[op]
        lines += [op, _line(" ", size, *[int(vals[0])] and [str(vals[0])], *vals[1:])]
    lines += ["_______________________________", "Breakdown with straggler effect", "-------------------------------",
              _line(*STRAGGLER_COLUMNS), "all_reduce", _line(" ", "12.5 MB", "100", 2000.0, 500.0, 20.0, 5.0)]
    return "\n".join(prefix + x for x in lines) + "\nsome later output\n"


def test_deepspeed_summary_records(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text(deepspeed_log())
    imported = deepspeed_comms.import_file(str(path))
    assert (imported.world_size, imported.world_size_from) == (8, "busbw / tput of the table, (n-1)/n")
    assert [p.split(": ", 1)[1] for p in imported.problems] == [
        "barrier is not a collective commscope models; skipped",
        "my_step is not a collective commscope models; skipped"]
    ar, ag, bc = imported.records
    assert (ar["config"]["op"], ar["config"]["bytes"], ar["config"]["iterations"], ar["config"]["nranks"]) == (
        "allreduce", 13107200, 100, 8)
    assert ar["result"]["time_s"] == pytest.approx(25e-3) and ar["result"]["calls"] == 100
    assert ar["result"]["busbw_GBps"] == pytest.approx(13107200 / 25e-3 / 1e9 * 2 * 7 / 8)
    assert (ar["result"]["straggler_avg_ms"], ar["result"]["comm_lat_avg_ms"]) == (5.0, 20.0)
    assert ar["result"]["deepspeed_tput_avg_Gbps"] == 8.39 and ar["config"]["bytes_rounded"] is True
    assert (ag["config"]["op"], ag["config"]["bytes"], ag["config"]["count"]) == ("allgather", 8 * 1048576, 1048576)
    assert (bc["config"]["op"], bc["config"]["bytes"], bc["result"]["time_s"]) == ("broadcast", 524288,
                                                                                   pytest.approx(1e-3))
    assert "straggler_avg_ms" not in bc["result"]
    assert all(r["origin"] == "imported" and r["source"] == f"deepspeed-comms:{path}" for r in imported.records)
    four = deepspeed_comms.import_file(str(path), world_size=4)
    assert four.world_size_from == "given" and four.records[1]["config"]["bytes"] == 4 * 1048576


def test_deepspeed_cli_and_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, out = tmp_path / "train.log", tmp_path / "r.jsonl"
    path.write_text(deepspeed_log(prefix=""))
    code, stdout, err = run_cli(capsys, "import", "deepspeed", str(path), "--out", str(out))
    assert code == 0 and err.count("commscope: warning:") == 2
    assert "DeepSpeed comms on 8 ranks" in stdout and f"imported 3 record(s) from {path} into {out}" in stdout
    assert len(results.load(out).records) == 3
    path.write_text("no table here\n")
    assert one_line_error(*run_cli(capsys, "import", "deepspeed", str(path))[::2], "no DeepSpeed comms summary found")
    path.write_text(deepspeed_log(ops=("broadcast",)))
    assert one_line_error(*run_cli(capsys, "import", "deepspeed", str(path))[::2], "give --world-size N")
    code, stdout, _ = run_cli(capsys, "import", "deepspeed", str(path), "--world-size", "2")
    assert code == 0 and "imported 1 record(s)" in stdout and "not written: give --out FILE" in stdout
    assert one_line_error(*run_cli(capsys, "import", "deepspeed", str(path), "--world-size", "0")[::2],
                          "--world-size must be >= 1")
