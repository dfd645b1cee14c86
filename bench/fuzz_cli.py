"""Hostile-input fuzz audit of the ``commscope`` command line (issue 19): every command fed bad arguments and
bad files, each outcome counted.

    python bench/fuzz_cli.py [--json] [--only TEXT] [--timeout S]

Each case is an argv and what it expects: ``error`` (the input must be refused), ``ok`` (a legitimate edge that
must succeed) or ``any`` (either a one-line refusal or a sound answer is right). Cases run one at a time, each in
its own process group with a per-case timeout, from a temporary directory holding the hostile input files (made
here: garbage, empty, binary, invalid UTF-8, deeply nested JSON, environments and profiles with wrong types,
huge, negative and NaN numbers, logs and traces of the importers with bad rows). Outcomes:

- clear error: exit code 2, the last non-empty stderr line starts with ``commscope: error:``, no ``Traceback``;
- ok: exit code 0 on an ``ok`` or ``any`` case, and every number printed is sound;
- traceback: a ``Traceback`` in stdout or stderr, or an exit code other than 0/2 with a Python exception;
- hang: the case ran past the timeout (its process group is killed);
- wrong answer: exit code 0 on an ``error`` case, or output holding nan / inf, or a negative time, bandwidth,
  throughput or fitted parameter (JSON keys, CSV columns and table columns that hold them);
- other: anything else (a clear error on an ``ok`` case, another exit code without the one-line format, a
  signal).

Cases marked ``nopriv`` run without CAP_DAC_OVERRIDE (``setpriv``), so that root obeys file modes and a
read-only file is read-only. The harness prints the counts per class and every case that is not a clear error
or ok as expected; ``--json`` also writes bench/results/fuzz_cli.json with the counts and every case's outcome.
It always exits 0 (it is a report), 2 on its own bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import math
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "fuzz_cli.json"
DATA = ROOT / "tests" / "data"
REFERENCE = ROOT / "runners" / "reference" / "validation" / "200mbit" / "records.jsonl"
TIMEOUT = 60.0
MEMORY_LIMIT = 10 * 2**30  # address space of a case: a runaway read or allocation fails instead of swapping the host
CLASSES = ("clear error", "ok", "traceback", "hang", "wrong answer", "other")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    expect: str  # "error", "ok" or "any"
    nopriv: bool = False  # without CAP_DAC_OVERRIDE: root obeys file modes


def E(*argv: str, nopriv: bool = False) -> Case:
    return Case(tuple(argv), "error", nopriv)


def OK(*argv: str) -> Case:
    return Case(tuple(argv), "ok")


def ANY(*argv: str) -> Case:
    return Case(tuple(argv), "any")


# ------------------------------------------------------------------------------------------------- input files
DEEP = "[" * 100_000 + "]" * 100_000


def _jsonl(rows: list[Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _nccl_tests_text(rows: list[str]) -> str:
    head = ["# Collective test starting: all_reduce_perf",
            "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
            "#", "# Using devices",
            "#  Rank  0 Group  0 Pid 1 on node-a device  0 [0x01] GPU",
            "#  Rank  1 Group  0 Pid 2 on node-a device  1 [0x02] GPU", "#",
            "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
            "  (GB/s)"]
    return "\n".join(head + rows) + "\n# Avg bus bandwidth    : 0.1\n"


def _nccl_row(size: str, time_us: str) -> str:
    count = str(int(size) // 4) if size.lstrip("-").isdigit() else size
    return (f"{size:>12}  {count:>12}     float     sum      -1  {time_us:>7}    0.10    0.10      0  "
            f"{time_us:>7}    0.10    0.10      0")


def _nccl_json(size: Any = 1048576, time_us: Any = 50.5, results: Any = None) -> dict[str, Any]:
    """nccl-tests -J output of all_reduce_perf on 2 processes x 1 GPU, one size."""
    place = {"time": time_us, "alg_bw": 20.76, "bus_bw": 20.76, "nwrong": 0}
    row = {"size": size, "count": 262144, "type": "float", "redop": "sum", "root": "    -1",
           "actual_iterations": 10, "experiment_name": "", "out_of_place": place, "in_place": place}
    dev = [{"rank": r, "group": 0, "pid": 1000 + r, "hostname": "node-a", "device": r, "busid": "0x1",
            "name": "GPU"} for r in (0, 1)]
    return {"version": 3, "args": ["./build/all_reduce_perf", "-b", "1M", "-e", "1M", "-J", "ar.json"],
            "nccl_version": 22105,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1048576, "maximum_bytes": 1048576,
                       "step_factor": 2, "warmup_iters": 5, "iterations": 10, "aggregated_iterations": 1,
                       "validation": 1, "graph": 0, "devices": dev},
            "results": [row] if results is None else results, "errors": []}


def _inspector(exec_us: Any = 100, size: Any = 1048576, n_ranks: Any = 2) -> str:
    header = {"id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "rank": 0, "n_ranks": n_ranks, "nnodes": 1}
    meta = {"inspector_output_format_version": "v4.2", "git_rev": "", "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": 1748030377748202, "hostname": "node-a", "pid": 1}
    lines = []
    for sn in (1, 2, 3):
        lines.append({"header": header, "metadata": meta,
                      "coll_perf": {"coll": "AllReduce", "coll_algo": "RING", "coll_proto": "LL", "coll_sn": sn,
                                    "coll_msg_size_bytes": size, "coll_exec_time_us": exec_us,
                                    "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 1.0,
                                    "coll_busbw_gbs": 1.0}})
    return _jsonl(lines)


def _deepspeed(size: str = "12.5 MB", count: str = "100", total: str = "2500.00", avg: str = "25.00",
               tput: str = "8.39", busbw: str = "7.34") -> str:
    def line(*cells: str) -> str:
        return "".join(f"{c: <20}" for c in cells)
    cols = ("Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
            "busbw_avg (Gbps)")
    return "\n".join(["[2026-11-20 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100", line(*cols),
                      "all_reduce", line(" ", size, count, total, avg, tput, busbw)]) + "\nsome later output\n"


def make_files(tmp: Path) -> None:
    """Every hostile input file the cases name, under ``tmp``."""
    sys.path.insert(0, str(ROOT))
    import costmodels as cm

    def put(name: str, data: str | bytes) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)

    # files of no format at all (shared by every reader)
    put("empty.json", "")
    put("garbage.json", b"\x00\x01\x02garbage{{{\xff\xfe\n\x89PNG\r\n")
    put("utf8.json", b'{"alpha": "\xff\xfe\xfd"}')
    put("deep.json", DEEP)
    put("deepobj.json", '{"a":' * 100_000 + "1" + "}" * 100_000)
    put("list.json", "[1, 2, 3]")
    put("string.json", '"abc"')
    put("null.json", "null")
    put("number.json", "1e308")
    put("empty.jsonl", "")
    put("garbage.jsonl", b"\x00\x01\x02garbage{{{\xff\xfe\n\x89PNG\r\n" * 4)
    put("utf8.jsonl", b'{"kind": "collective", "x": "\xff\xfe"}\n')
    put("deep.jsonl", '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    put("garbage.log", b"\x00\x01\x02garbage\xff\xfe\n" * 8)
    put("utf8.log", b"\xff\xfe\xfd\xfc not text\n")
    put("empty.log", "")
    (tmp / "emptydir").mkdir(exist_ok=True)
    put("regular_file", "a file, not a directory\n")

    # environments: one field at a time made hostile
    base = cm.environment("10GbE").to_dict()
    two = cm.environment("8xH100-NVLink+IB-NDR").to_dict()
    envs: dict[str, dict[str, Any]] = {
        "valid": {}, "alpha_str": {"alpha": "fast"}, "alpha_numstr": {"alpha": "2e-5"}, "alpha_nan_text": {
            "alpha": "NaN"}, "alpha_neg": {"alpha": -1}, "alpha_true": {"alpha": True},
        "alpha_huge_int": {"alpha": 2**62}, "both_1e308": {"alpha": 1e308, "beta": 1e308}, "beta_zero": {"beta": 0},
        "beta_neg": {"beta": -1e-9}, "gamma_neg": {"gamma": -1.0}, "library_bogus": {"library": "bogus"},
        "schema_bogus": {"schema": "commscope.environment/99"}, "gpus_zero": {"gpus_per_node": 0},
        "gpus_neg": {"gpus_per_node": -1}, "gpus_frac": {"gpus_per_node": 2.5}, "gpus_huge": {"gpus_per_node": 2**62},
        "nics_zero": {"nics_per_node": 0}, "oversub_zero": {"oversubscription": 0},
        "oversub_neg": {"oversubscription": -1}, "kappa_neg": {"kappa_c": -1.0}, "kappa_huge": {"kappa_c": 1e30},
        "host_overhead_neg": {"host_overhead": -1.0}, "burst_neg": {"burst_bytes": -1},
        "metadata_list": {"metadata": [1, 2]}, "extra_field": {"colour": "blue"}, "name_int": {"name": 5},
    }
    for name, change in envs.items():
        put(f"env_{name}.json", json.dumps({**base, **change}))
    missing = dict(base)
    del missing["beta"]
    put("env_missing_beta.json", json.dumps(missing))
    text = json.dumps(base)  # tokens json.dumps cannot write: NaN and Infinity as bare words
    put("env_alpha_nan_token.json", text.replace('"alpha": 2e-05', '"alpha": NaN'))
    put("env_alpha_inf_token.json", text.replace('"alpha": 2e-05', '"alpha": Infinity'))
    put("env_host_overhead_nan.json", text.replace('"host_overhead": 0.0', '"host_overhead": NaN'))
    put("env_two_intra_beta_neg.json", json.dumps({**two, "intra_beta": -1e-12}))
    put("env_two_intra_beta_nan.json", json.dumps(two).replace('"intra_beta": 2.6968716289104638e-12',
                                                             '"intra_beta": NaN'))

    # model profiles: three layers, one field at a time made hostile
    layers = [["l0.weight", 1000, 4000.0, 1e-3, 2e-3, [10, 100]], ["l0.bias", 10, 40.0, 0.0, 0.0, [10]],
              ["l1.weight", 100000, 400000.0, 2e-3, 4e-3, [1000, 100]]]
    prof = {"schema": "commscope.model_profile/1", "name": "tiny", "device": "cpu", "dtype": "float32",
            "batch_size": 32, "origin": "measured", "source": "fuzz", "metadata": {},
            "columns": ["name", "params", "grad_bytes", "forward_s", "backward_s", "shape"], "layers": layers}

    def with_layer(col: int, value: Any) -> dict[str, Any]:
        rows = [list(x) for x in layers]
        rows[0][col] = value
        return {**prof, "layers": rows}

    profiles = {"valid": prof, "layers_empty": {**prof, "layers": []}, "forward_neg": with_layer(3, -1e-3),
                "forward_1e308": with_layer(3, 1e308), "params_neg": with_layer(1, -5), "grad_neg": with_layer(2, -4.0),
                "grad_huge": with_layer(2, 1e30), "name_int": with_layer(0, 7), "batch_zero": {**prof, "batch_size": 0},
                "batch_neg": {**prof, "batch_size": -1}, "batch_str": {**prof, "batch_size": "abc"},
                "batch_huge": {**prof, "batch_size": 2**62}, "row_short": {**prof, "layers": [["l0.weight", 1]]},
                "columns_missing": {k: v for k, v in prof.items() if k != "columns"}}
    for name, data in profiles.items():
        put(f"prof_{name}.json", json.dumps(data))
    put("prof_forward_nan_token.json", json.dumps(prof).replace("0.001, 0.002", "NaN, 0.002", 1))

    # results files (fit, calibrate): the reference sweep's allreduce records, one field made hostile
    ref = [json.loads(x) for x in REFERENCE.read_text().splitlines() if x.strip()]
    coll = [r for r in ref if r.get("kind") == "collective" and r["config"].get("op") == "allreduce"]

    def records(change: Any) -> str:
        out = []
        for r in coll:
            r = json.loads(json.dumps(r))
            change(r)
            out.append(r)
        return _jsonl(out)

    put("rec_collectives.jsonl", _jsonl(coll))
    put("rec_time_neg.jsonl", records(lambda r: r["result"].update(time_s=-abs(r["result"]["time_s"]))))
    put("rec_time_zero.jsonl", records(lambda r: r["result"].update(time_s=0.0, times=[0.0] * 4)))
    put("rec_time_nan.jsonl", records(lambda r: r["result"].update(time_s="NaN")).replace('"NaN"', "NaN"))
    put("rec_bytes_neg.jsonl", records(lambda r: r["config"].update(bytes=-r["config"]["bytes"])))
    def ranks(r: dict[str, Any], n: int) -> None:  # every field that says how many ranks ran
        r["config"]["nranks"] = r["result"]["nranks"] = r["run"]["world_size"] = n
        r["run"]["ranks_per_node"] = 1

    put("rec_nranks_zero.jsonl", records(lambda r: ranks(r, 0)))
    put("rec_nranks_huge.jsonl", records(lambda r: ranks(r, 2**62)))
    put("rec_one.jsonl", _jsonl(coll[:1]))
    one_size = [r for r in coll if r["config"]["bytes"] == coll[-1]["config"]["bytes"]]
    put("rec_one_size.jsonl", _jsonl(one_size))

    # nccl-tests: text logs and -J JSON
    put("nccl_valid.log", _nccl_tests_text([_nccl_row("1024", "10.00"), _nccl_row("2048", "12.00")]))
    put("nccl_neg_time.log", _nccl_tests_text([_nccl_row("1024", "-10.00"), _nccl_row("2048", "12.00")]))
    put("nccl_nan_time.log", _nccl_tests_text([_nccl_row("1024", "nan"), _nccl_row("2048", "12.00")]))
    put("nccl_neg_size.log", _nccl_tests_text([_nccl_row("-1024", "10.00"), _nccl_row("2048", "12.00")]))
    put("nccl_huge_size.log", _nccl_tests_text([_nccl_row(str(2**70), "10.00")]))
    put("nccl_norows.log", _nccl_tests_text([]))
    put("nccl_valid.json", json.dumps(_nccl_json()))
    put("nccl_size_neg.json", json.dumps(_nccl_json(size=-1)))
    put("nccl_time_neg.json", json.dumps(_nccl_json(time_us=-50.0)))
    put("nccl_time_str.json", json.dumps(_nccl_json(time_us="abc")))
    put("nccl_results_int.json", json.dumps(_nccl_json(results=5)))
    put("nccl_results_ints.json", json.dumps(_nccl_json(results=[1, 2, 3])))
    put("nccl_obj.json", "{}")

    # NCCL Inspector and DeepSpeed
    put("insp_valid.log", _inspector())
    put("insp_neg_time.log", _inspector(exec_us=-100))
    put("insp_huge_size.log", _inspector(size=2**70))
    put("insp_neg_size.log", _inspector(size=-1))
    put("insp_ranks_zero.log", _inspector(n_ranks=0))
    put("insp_obj.log", "{}\n")
    put("ds_valid.log", _deepspeed())
    put("ds_neg_latency.log", _deepspeed(total="-2500.00", avg="-25.00"))
    put("ds_zero_latency.log", _deepspeed(total="0.00", avg="0.00"))
    put("ds_huge_size.log", _deepspeed(size="1.0 ZB"))
    put("ds_nan.log", _deepspeed(avg="nan", tput="nan", busbw="nan"))
    put("ds_notable.log", "no table here\n")

    # Kineto traces: the shipped fixture, one field made hostile
    trace = json.loads((DATA / "kineto_gpu_ddp.json").read_text())

    def trace_with(change: Any) -> str:
        t = json.loads(json.dumps(trace))
        change(t)
        return json.dumps(t)

    def durations(t: dict[str, Any], value: Any) -> None:
        for e in t["traceEvents"]:
            if "dur" in e:
                e["dur"] = value

    put("trace_valid.json", json.dumps(trace))
    put("trace_dur_neg.json", trace_with(lambda t: durations(t, -100)))
    put("trace_dur_str.json", trace_with(lambda t: durations(t, "abc")))
    put("trace_world_zero.json", trace_with(lambda t: t["distributedInfo"].update(world_size=0)))
    put("trace_world_huge.json", trace_with(lambda t: t["distributedInfo"].update(world_size=2**62)))
    put("trace_events_int.json", json.dumps({**trace, "traceEvents": 5}))
    put("trace_events_ints.json", json.dumps({**trace, "traceEvents": [1, 2, 3]}))
    put("trace_no_events.json", json.dumps({**trace, "traceEvents": []}))
    put("trace_garbage.json.gz", b"not gzip at all\x00\xff")
    put("trace_gzip_garbage.json.gz", gzip.compress(b"\x00\x01garbage{{{"))
    put("trace_gzip_truncated.json.gz", gzip.compress(json.dumps(trace).encode())[:500])

    # validate --out directories that must be refused
    (tmp / "val_done").mkdir(exist_ok=True)
    put("val_done/validation.jsonl", "{}\n")
    (tmp / "val_foreign").mkdir(exist_ok=True)
    put("val_foreign/validation.md", "my own notes, not commscope's\n")

    # outputs that cannot be written: read-only for the cases run without CAP_DAC_OVERRIDE
    put("ro.json", "{}\n")
    put("ro.jsonl", "")
    (tmp / "ro.json").chmod(0o444)
    (tmp / "ro.jsonl").chmod(0o444)
    (tmp / "rodir").mkdir(exist_ok=True)
    (tmp / "rodir").chmod(0o555)


# ----------------------------------------------------------------------------------------------------- cases
T = "{T}"  # the temporary directory of the input files
P62, P30, P41 = str(2**62), str(10**30), str(2**41)


def cases() -> list[Case]:
    out: list[Case] = []
    add = out.append

    # ---- predict collective
    pc = ("predict", "collective", "-a", "ring_allreduce")
    good = ("-s", "1MiB", "--env", "10GbE")
    for p in ("0", "-1", P62, P41, "abc"):
        add(E(*pc, "-p", p, *good))
    add(OK(*pc, "-p", "1", *good, "--json"))
    add(OK(*pc, "-p", "8", "-s", "0", "--env", "10GbE", "--json"))
    add(OK(*pc, "-p", "8", "-b", "1", "-e", "1TiB", "--env", "10GbE", "--csv"))
    for size in ("-1", "1ZB", "abc", "", "nan", "inf", "1.5", "1e308TiB"):
        add(E(*pc, "-p", "8", "-s", size, "--env", "10GbE"))
    add(ANY(*pc, "-p", "8", "-s", "1e30", "--env", "10GbE", "--json"))
    add(ANY(*pc, "-p", "8", "-s", "\uff11MiB", "--env", "10GbE", "--json"))
    for rng in (("-b", "1K", "-e", "1G", "-f", "1.0000001"), ("-b", "1K", "-e", "1G", "-f", "1"),
                ("-b", "1K", "-e", "1G", "-f", "nan"), ("-b", "1K", "-e", "1G", "-f", "-2"), ("-b", "1G", "-e", "1K"),
                ("-b", "1K")):
        add(E(*pc, "-p", "8", *rng, "--env", "10GbE"))
    add(ANY(*pc, "-p", "8", "-b", "1K", "-e", "1G", "-f", "inf", "--env", "10GbE", "--json"))
    for env in (("--alpha", "nan", "--beta", "1e-9"), ("--alpha", "-1", "--beta", "1e-9"),
                ("--alpha", "1e-5", "--beta", "-1e-9"), ("--alpha", "1e308", "--beta", "1e308"), ("--alpha", "1e-5"),
                ("--env", "10GbE", "--gamma", "-1"), ("--env", "bogus-preset"), ("--env", f"{T}/missing.json"),
                ("--env", T), ("--env", "/dev/stdin")):
        add(E(*pc, "-p", "8", "-s", "1MiB", *env, "--json"))
    add(ANY(*pc, "-p", "8", "-s", "1MiB", "--alpha", "0", "--beta", "0", "--json"))
    for name in ("empty", "garbage", "utf8", "deep", "list", "null"):
        add(E(*pc, "-p", "8", "-s", "1MiB", "--env", f"{T}/{name}.json"))
    for name in ("alpha_str", "alpha_nan_text", "alpha_nan_token", "alpha_inf_token", "alpha_neg", "alpha_true",
                 "both_1e308", "beta_neg", "library_bogus", "schema_bogus", "gpus_zero", "gpus_frac", "nics_zero",
                 "missing_beta", "metadata_list"):
        add(E(*pc, "-p", "8", "-s", "1MiB", "--env", f"{T}/env_{name}.json", "--json"))
    for name in ("two_intra_beta_neg", "two_intra_beta_nan"):
        add(E(*pc, "-p", "64", "-s", "1MiB", "--env", f"{T}/env_{name}.json", "--json"))
    for name in ("alpha_numstr", "beta_zero", "extra_field"):
        add(ANY(*pc, "-p", "8", "-s", "1MiB", "--env", f"{T}/env_{name}.json", "--json"))
    add(OK(*pc, "-p", "8", "-s", "1MiB", "--env", f"{T}/env_valid.json", "--json"))
    for alg in (("-a", "bogus"), ("-a", ",")):
        add(E("predict", "collective", *alg, "-p", "8", *good))
    add(E("predict", "collective", "-a", "recursive_doubling_allreduce", "-p", "6", *good))
    for extra in (("--param", "nosuch=1"), ("--library", "nccl"), ("--sort", "bogus"), ("--json", "--csv")):
        add(E(*pc, "-p", "8", *good, *extra))
    ps = ("predict", "collective", "-a", "parameter_server", "-p", "8", *good)
    for k in ("0", "nan", "2.5", "abc"):
        add(E(*ps, "--param", f"k={k}", "--json"))
    add(E("predict", "collective", "-a", "auto", "--primitive", "bogus", "-p", "8", *good))

    # ---- predict iteration
    pi = ("predict", "iteration", "--env", "10GbE", "-p", "8")
    for name in ("bogus", f"{T}/missing.json", f"{T}/garbage.json", f"{T}/utf8.json", f"{T}/deep.json"):
        add(E(*pi, "--model", name))
    for name in ("layers_empty", "forward_neg", "forward_nan_token", "forward_1e308", "params_neg", "grad_neg",
                 "batch_zero", "batch_str", "row_short", "columns_missing"):
        add(E(*pi, "--model", f"{T}/prof_{name}.json", "--json"))
    for name in ("batch_huge", "grad_huge"):
        add(ANY(*pi, "--model", f"{T}/prof_{name}.json", "--json"))
    add(OK(*pi, "--model", f"{T}/prof_valid.json", "--json"))
    add(OK(*pi, "--model", "resnet50", "--schedule", "wfbp,fusion,local_sgd", "--compressor", "topk:0.01,fp16",
           "--csv"))
    pim = ("predict", "iteration", "--env", "10GbE", "--model", "resnet50")
    for p in ("0", P62, "4,,abc"):
        add(E(*pim, "-p", p))
    for extra in (("--schedule", "bogus"), ("--compressor", "topk:0"), ("--compressor", "topk:2"),
                  ("--compressor", "qsgd:0"), ("--compressor", "topk:nan"),
                  ("--schedule", "fusion", "--option", "bucket_bytes=-1"),
                  ("--schedule", "fusion", "--option", "bucket_bytes=0"),
                  ("--schedule", "local_sgd", "--option", "H=0"), ("--schedule", "local_sgd", "--option", "H=nan"),
                  ("--schedule", "ps", "--option", "k=0"), ("--schedule", "dpsgd", "--option", "topology=bogus"),
                  ("--collective", "ring_allgather"), ("--trace", T), ("--trace", "/dev/full")):
        add(E(*pim, "-p", "8", *extra))
    add(E(*pim, "-p", "8", "--trace", f"{T}/ro.json", nopriv=True))
    for name in ("kappa_neg", "oversub_zero", "host_overhead_nan", "burst_neg"):
        add(E("predict", "iteration", "--model", "resnet50", "-p", "8", "--env", f"{T}/env_{name}.json", "--json"))
    add(E("predict", "iteration", "--model", "resnet50", "-p", "8", "--alpha", "1e-5", "--beta", "-1"))

    # ---- predict tta
    pt = ("predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", "8")
    for eps in ("0", "nan", "inf"):
        add(E(*pt, "--eps", eps))
    add(ANY(*pt, "--eps", "1e-300", "--json"))
    for extra in (("-a", "bogus"), ("-a", "topk:abc"), ("-a", "local_sgd:0"), ("-a", "topk:2"), ("--L", "0"),
                  ("--L", "nan"), ("--sigma", "-1"), ("--mu", "-1"), ("--constant", "L=1", "--L", "1"),
                  ("--constants", f"{T}/garbage.jsonl"), ("--constants", f"{T}/empty.jsonl"), ("--constants", T)):
        add(E(*pt, "--eps", "1e-3", *extra))
    add(E("predict", "tta", "--model", "resnet50", "--env", "10GbE", "-p", P62, "--eps", "1e-3"))
    add(OK(*pt, "--eps", "1e-3", "-a", "sgd,local_sgd:16,topk:0.001,dpsgd:torus", "--json"))

    # ---- predict convergence
    pcv = ("predict", "convergence")
    for eps in ("0", "-1", "nan"):
        add(E(*pcv, "--eps", eps))
    for extra in (("--bound", "bogus"), ("--n", "0"), ("--n", "-1"), ("--H", "0"), ("--tau", "-1"),
                  ("--bound", "dpsgd", "--gap", "0"), ("--bound", "dpsgd", "--gap", "2"),
                  ("--bound", "dpsgd", "--gap", "nan"), ("--bound", "dpsgd", "--topology", "bogus"),
                  ("--bound", "choco_sgd", "--delta", "2"), ("--bound", "qsgd", "--omega", "-1"),
                  ("--bound", "sgd_sc", "--mu", "0"), ("--L", "inf"), ("--bound", "sgd", "--H", "8")):
        add(E(*pcv, "--eps", "1e-3", *extra))
    for extra in (("--L", "inf"), ("--zeta", "nan"), ("--constant", "D0=inf")):
        add(E(*pcv, "--eps", "1e-3", *extra, "--json"))
    add(ANY(*pcv, "--eps", "1e-3", "--n", P30, "--json"))
    add(OK(*pcv, "--eps", "1e-3", "--bound", "dpsgd", "--n", str(10**12), "--json"))
    add(OK(*pcv, "--eps", "1e-3", "--csv"))

    # ---- predict llm
    pl = ("predict", "llm", "-m", "llama3-8b", "--gpus", "8")
    add(OK(*pl, "--json"))
    add(E("predict", "llm", "-m", "bogus", "--gpus", "8"))
    for g in ("0", P62):
        add(E("predict", "llm", "-m", "llama3-8b", "--gpus", g))
    for extra in (("--tp", "16"), ("--tp", "3"), ("--dp", "3"), ("--ep", "3"), ("--zero", "4"), ("--v", "0"),
                  ("--micro-batch", str(10**9)), ("--global-batch", "0"), ("--recompute", "bogus"),
                  ("--achieved", "1.5"), ("--achieved", "nan"), ("--achieved", "inf"), ("--achieved", "kernels"),
                  ("--achieved", ""), ("--achieved", "kernel", "--attention", "bogus"),
                  ("--attention", "materialized"), ("--env", f"{T}/garbage.json"),
                  ("--env", f"{T}/env_both_1e308.json"), ("--sp",), ("--trace", "/dev/full"),
                  ("--achieved", "kernel", "--loss", "bogus"), ("--achieved", "kernel", "--loss", ""),
                  ("--loss", "fused")):
        add(E(*pl, *extra))
    add(OK(*pl, "--achieved", "kernel", "--attention", "materialized", "--json"))
    add(OK(*pl, "--achieved", "kernel", "--attention", "materialized", "--loss", "fp16", "--json"))
    add(ANY(*pl, "--achieved", "kernel", "--env", "10GbE", "--json"))  # a V100-less CPU preset: the fraction
    add(ANY(*pl, "--v", "2", "--schedule", "gpipe", "--pp", "2", "--json"))
    add(ANY(*pl, "--env", "10GbE", "--json"))

    # ---- plan llm
    pn = ("plan", "llm", "-m", "llama3-8b", "--gpus", "8", "--no-switch")
    add(OK(*pn, "--top", "1", "--json"))
    for g in ("0", P62):
        add(E("plan", "llm", "-m", "llama3-8b", "--gpus", g, "--no-switch"))
    for extra in (("--device-memory", "0"), ("--device-memory", "abc"), ("--device-memory", "1B"), ("--top", "0"),
                  ("--achieved", "nan"), ("--achieved", "0"), ("--json", "--csv"),
                  ("--env", f"{T}/env_beta_neg.json"), ("--loss", "fused"), ("--achieved", "kernel", "--loss", "x")):
        add(E(*pn, *extra))
    add(OK(*pn, "--achieved", "kernel", "--loss", "fused", "--top", "1", "--json"))
    add(OK(*pn, "--achieved", "kernel", "--top", "2", "--json"))
    add(ANY(*pn, "--device-memory", "1e30", "--top", "1", "--json"))

    # ---- crossover
    cx = ("crossover", "ring_allreduce", "recursive_doubling_allreduce")
    add(OK(*cx, "-p", "8", "--env", "10GbE", "--json"))
    add(ANY("crossover", "ring_allreduce", "ring_allreduce", "-p", "8", "--env", "10GbE", "--json"))
    add(E("crossover", "ring_allreduce", "ring_allgather", "-p", "8", "--env", "10GbE"))
    for p in ("0", P62):
        add(E(*cx, "-p", p, "--env", "10GbE"))
    for extra in (("--min-size", "1TiB", "--max-size", "1"), ("--min-size", "-1"), ("--max-size", "0"),
                  ("--param", "k=abc")):
        add(E(*cx, "-p", "8", "--env", "10GbE", *extra))
    for env in (("--env", f"{T}/garbage.json"), ("--alpha", "nan", "--beta", "1e-9"),
                ("--alpha", "1e308", "--beta", "1e308")):
        add(E(*cx, "-p", "8", *env, "--json"))

    # ---- list / show
    add(E("list", "bogus"))
    add(E("list", "collectives", "--primitive", "bogus"))
    add(OK("list", "collectives", "--primitive", "allreduce", "--json"))
    add(E("show", "bogus"))
    add(OK("show", "10GbE"))

    # ---- fit
    ref = str(REFERENCE)
    for f in (f"{T}/missing.jsonl", T, f"{T}/empty.jsonl", f"{T}/garbage.jsonl", f"{T}/utf8.jsonl", f"{T}/deep.jsonl"):
        add(E("fit", f))
    for extra in (("--primitive", "bogus"), ("-a", "bogus"), ("--min-size", "-1"), ("--min-size", "1TiB"),
                  ("--gamma", "-1"), ("--gamma", "nan"), ("--statistic", "bogus"), ("--out", T),
                  ("--record", "/dev/full")):
        add(E("fit", ref, *extra))
    add(E("fit", ref, "--out", f"{T}/ro.json", nopriv=True))
    for name in ("time_neg", "time_zero", "time_nan", "bytes_neg", "nranks_zero", "nranks_huge"):
        add(E("fit", f"{T}/rec_{name}.jsonl", "--json"))
    for name in ("one", "one_size"):
        add(ANY("fit", f"{T}/rec_{name}.jsonl", "--json"))
    add(OK("fit", f"{T}/rec_collectives.jsonl"))

    # ---- calibrate
    for f in (f"{T}/missing.jsonl", T, f"{T}/empty.jsonl", f"{T}/garbage.jsonl"):
        add(E("calibrate", f))
    for extra in (("--terms", "bogus"), ("--environment", f"{T}/garbage.json"), ("--profile", f"{T}/garbage.json"),
                  ("--out", "/dev/full")):
        add(E("calibrate", ref, *extra))
    add(E("calibrate", f"{T}/rec_collectives.jsonl", "--json"))

    # ---- bench collectives: each must fail before a rank starts (--dry-run where the check is not in the options)
    bc = ("bench", "collectives")
    add(E(*bc, "-b", "1K", "-e", "1G", "-f", "1.0000001"))
    add(E(*bc, "--out", T))
    add(E(*bc, "--out", "/dev/full"))
    add(E(*bc, "--out", f"{T}/ro.jsonl", nopriv=True))
    add(E(*bc, "--out", f"{T}/rodir/new.jsonl", nopriv=True))
    for extra in (("-f", "nan"), ("-b", "abc"), ("-b", "1G", "-e", "1K"), ("-d", "bogus"), ("-n", "0"),
                  ("--timeout", "nan"), ("-r", "5"), ("--nproc", "0"), ("--op", "bogus")):
        add(E(*bc, "--dry-run", *extra))

    # ---- import nccl-tests
    nt = ("import", "nccl-tests")
    for f in (f"{T}/missing.log", f"{T}/emptydir", f"{T}/empty.log", f"{T}/garbage.log", f"{T}/utf8.log",
              f"{T}/deepobj.json", f"{T}/nccl_obj.json", f"{T}/nccl_norows.log", f"{T}/nccl_results_int.json",
              f"{T}/nccl_results_ints.json", f"{T}/nccl_time_str.json"):
        add(E(*nt, f))
    add(OK(*nt, f"{T}/nccl_valid.log"))
    add(OK(*nt, f"{T}/nccl_valid.json"))
    for f in ("nccl_neg_time.log", "nccl_nan_time.log", "nccl_neg_size.log", "nccl_huge_size.log",
              "nccl_size_neg.json", "nccl_time_neg.json"):
        add(ANY(*nt, f"{T}/{f}"))
    for extra in (("--world-size", "0"), ("--op", "bogus"), ("--out", "/dev/full")):
        add(E(*nt, f"{T}/nccl_valid.log", *extra))

    # ---- import trace
    it = ("import", "trace")
    for f in (f"{T}/missing.json", f"{T}/empty.json", f"{T}/garbage.json", f"{T}/deep.json", f"{T}/list.json",
              f"{T}/trace_events_int.json", f"{T}/trace_events_ints.json", f"{T}/trace_no_events.json",
              f"{T}/trace_garbage.json.gz", f"{T}/trace_gzip_garbage.json.gz", f"{T}/trace_gzip_truncated.json.gz",
              f"{T}/trace_dur_str.json"):
        add(E(*it, f))
    add(OK(*it, f"{T}/trace_valid.json"))
    for f in ("trace_dur_neg.json", "trace_world_zero.json", "trace_world_huge.json"):
        add(ANY(*it, f"{T}/{f}"))
    for extra in (("--batch-size", "0"), ("--profile-out", T), ("--records-out", "/dev/full")):
        add(E(*it, f"{T}/trace_valid.json", *extra))

    # ---- import nccl-inspector
    ni = ("import", "nccl-inspector")
    for f in (f"{T}/missing.log", f"{T}/empty.log", f"{T}/garbage.log", f"{T}/utf8.log", f"{T}/deep.jsonl",
              f"{T}/emptydir", f"{T}/insp_obj.log"):
        add(E(*ni, f))
    add(OK(*ni, f"{T}/insp_valid.log"))
    for f in ("insp_neg_time.log", "insp_huge_size.log", "insp_neg_size.log", "insp_ranks_zero.log"):
        add(ANY(*ni, f"{T}/{f}"))
    add(E(*ni, f"{T}/insp_valid.log", "--out", "/dev/full"))

    # ---- import deepspeed
    ds = ("import", "deepspeed")
    for f in (f"{T}/missing.log", f"{T}/empty.log", f"{T}/garbage.log", f"{T}/utf8.log", f"{T}/ds_notable.log", T):
        add(E(*ds, f))
    add(OK(*ds, f"{T}/ds_valid.log"))
    for f in ("ds_neg_latency.log", "ds_zero_latency.log", "ds_huge_size.log", "ds_nan.log"):
        add(ANY(*ds, f"{T}/{f}"))
    for extra in (("--world-size", "0"), ("--world-size", P62), ("--out", T)):
        add(E(*ds, f"{T}/ds_valid.log", *extra))

    # ---- compare-trace
    ct = ("compare-trace", f"{T}/trace_valid.json", "--schedule", "wfbp", "--out", f"{T}/merged.json")
    add(OK(*ct, "--env", "10GbE", "--json"))
    for extra in (("--schedule", "bogus"), ("--out", T), ("--out", "/dev/full"), ("-p", "0"), ("-p", P62),
                  ("--model", f"{T}/prof_forward_neg.json"), ("--option", "bogus=1"), ("--collective", "bogus")):
        add(E(*ct, "--env", "10GbE", *extra))
    add(E(*ct))  # no environment
    for f in ("garbage.json", "trace_no_events.json", "trace_world_zero.json"):
        add(E("compare-trace", f"{T}/{f}", "--schedule", "wfbp", "--out", f"{T}/merged.json", "--env", "10GbE"))

    # ---- profile (imports torch: a few cases)
    pr = ("profile", "--model", "mlp", "--out", f"{T}/prof_out.json")
    for extra in (("--batch-size", "0"), ("--batch-size", "2", "--device", "bogus"),
                  ("--batch-size", "2", "--option", "widths=abc"), ("--batch-size", str(10**20)),
                  ("--batch-size", "2", "--device", "cuda:0")):
        add(E(*pr, *extra))
    add(E("profile", "--model", "mlp", "--batch-size", "2", "--out", T))
    add(OK(*pr, "--batch-size", "2", "--iterations", "1", "--warmup", "0", "--json"))

    # ---- train (--dry-run: nothing may be launched)
    tr = ("train", "-a", "wfbp", "-m", "mlp", "--dry-run")
    add(OK(*tr))
    add(E("train", "-a", "bogus", "-m", "mlp", "--dry-run"))
    for extra in (("-n", "0"), ("--lr", "nan"), ("-O", "k"), ("--nproc", "0"), ("--convergence", "--eval-every", "0"),
                  ("--timeout", "nan"), ("--out", "/dev/full")):
        add(E(*tr, *extra))
    add(E("train", "-a", "topk", "-m", "mlp", "--dry-run", "-O", "density=2"))

    # ---- constants (--dry-run)
    co = ("constants", "-m", "mlp", "--out", f"{T}/const.jsonl", "--dry-run")
    add(OK(*co))
    for extra in (("--ranks", "0"), ("-b", str(10**9)), ("--checkpoints", "0"), ("--compressors", "topk:abc"),
                  ("--lr", "nan"), ("--technique", "bogus"), ("--draws", "0")):
        add(E(*co, *extra))
    add(E("constants", "-m", "mlp", "--out", T, "--dry-run"))

    # ---- validate: only inputs refused before any job (the --emulate ones before any network is made)
    va = ("validate", "--out", f"{T}/val")
    for extra in (("--ranks-per-node", "0"), ("--ranks-per-node", "2"), ("--emulate", "1gbit,1gbit"),
                  ("--emulate", "1gbit,1000mbit"), ("--suite", "bogus"), ("--ranks", "1"), ("--emulate", ""),
                  ("--emulate", "1gbit:x"), ("--emulate", "1gbit:2", "--ranks", "3"), ("--timeout", "nan"),
                  ("--backend", "bogus"), ("--convergence", "--emulate", "1gbit,2gbit")):
        add(E(*va, *extra))
    for outdir in (f"{T}/val_done", f"{T}/val_foreign", f"{T}/regular_file"):
        add(E("validate", "--out", outdir))

    # ---- emulate: three cases refused before any namespace is made
    add(E("emulate", "--nodes", "2", "--rate", "1gbit"))
    add(E("emulate", "--nodes", "2", "--rate", "1gbit", "--", "/nonexistent/command"))
    add(E("emulate", "--nodes", "2", "--rate", "1gbit", "--grace", "-1", "--", "true"))

    # ---- the command line itself
    add(E("bogus"))
    add(E("predict", "collective", "--bogus-option"))
    return out


# ----------------------------------------------------------------------------------------------- classifying
_NONFINITE = re.compile(r"(?<![A-Za-z0-9_])[-+]?(nan|inf|infinity)(?![A-Za-z0-9_])", re.IGNORECASE)
# JSON keys / CSV columns / table headers whose numbers must not be negative
_KEY = re.compile(r"(^|_)(time|times|seconds|busbw|algbw|throughput|tokens|iteration|iterations|queries|bubble|"
                  r"exposed|compute|measured|predicted|forward|backward|optimizer|alpha|beta|gamma|bytes|speedup|"
                  r"efficiency|mfu|memory)(_|$)|_s$|_GBps$", re.IGNORECASE)
_KEY_EXEMPT = re.compile(r"library|error|residual|delta|shares|margin|ratio|vs_best|from|straggler", re.IGNORECASE)
_HEADER = re.compile(r"time|busbw|algbw|iteration|measured|predicted|forward|backward|samples/s|tokens/s|bubble|"
                     r"exposed|GiB/GPU|\((ms|us|s)\)|value", re.IGNORECASE)
_HEADER_EXEMPT = re.compile(r"error|/ SGD|/ best|vs best|seconds", re.IGNORECASE)
_NUMBER = re.compile(r"^[-+]?\d[\d,]*(\.\d*)?([eE][-+]?\d+)?")


def _walk(x: Any, path: str, problems: list[str]) -> None:
    if isinstance(x, dict):
        for k, v in x.items():
            key = str(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 and _KEY.search(key) \
                    and not _KEY_EXEMPT.search(key) and not _KEY_EXEMPT.search(path):
                problems.append(f"negative {path}.{key} = {v!r}")
            _walk(v, f"{path}.{key}", problems)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _walk(v, f"{path}[{i}]", problems)
    elif isinstance(x, float) and not math.isfinite(x):
        problems.append(f"{path} = {x!r}")


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Rich tables of ``text``: (header names, rows of cells); wrapped cells joined."""
    tables, header, rows = [], None, []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("┃"):
            cells = [c.strip() for c in s.strip("┃").split("┃")]
            header = cells if header is None or rows else [f"{a} {b}".strip() for a, b in zip(header, cells,
                                                                                               strict=False)]
            rows = []
        elif s.startswith("│") and header is not None:
            cells = [c.strip() for c in s.strip("│").split("│")]
            if cells and cells[0] == "" and rows:  # a wrapped row: its cells continue the row above
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=False)]
            else:
                rows.append(cells)
        elif s.startswith("└") and header is not None:
            tables.append((header, rows))
            header, rows = None, []
    return tables


def _number(cell: str) -> float | None:
    m = _NUMBER.match(cell.strip())
    return float(m.group(0).replace(",", "")) if m else None


def bad_numbers(argv: tuple[str, ...], out: str) -> list[str]:
    """What is wrong with the numbers of a successful command's stdout: nan / inf, or a negative time,
    bandwidth, throughput or fitted parameter."""
    problems: list[str] = []
    m = _NONFINITE.search(out)
    if m:
        start = max(0, m.start() - 60)
        problems.append(f"non-finite value printed: ...{out[start:m.end() + 20]!r}")
    body = out.strip()
    if body.startswith(("{", "[")):
        try:
            _walk(json.loads(body), "$", problems)
        except ValueError:
            pass
    if "--csv" in argv and body:
        for i, row in enumerate(csv.DictReader(io.StringIO(body))):
            for k, v in row.items():
                x = _number(v or "")
                if x is not None and x < 0 and k and _KEY.search(k) and not _KEY_EXEMPT.search(k):
                    problems.append(f"negative CSV row {i} {k} = {v}")
    for header, rows in _tables(out):
        for j, name in enumerate(header):
            if not _HEADER.search(name) or _HEADER_EXEMPT.search(name):
                continue
            for row in rows:
                x = _number(row[j]) if j < len(row) else None
                if x is not None and x < 0 and row[0] not in ("library",):
                    problems.append(f"negative {name!r} in row {row[0]!r}: {row[j]}")
    return problems[:5]


def _last_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""


def classify(case: Case, rc: int | None, out: str, err: str) -> tuple[str, str]:
    """(class, why) of one outcome."""
    if rc is None:
        return "hang", "no exit within the timeout; the process group was killed"
    text = out + err
    last = _last_line(err)
    if "Traceback" in text:
        return "traceback", "a Python traceback"
    if rc not in (0, 2) and re.match(r"^[A-Za-z_.]*(Error|Exception)\b", last):
        return "traceback", f"exit {rc} with a Python exception"
    if rc == 0:
        if case.expect == "error":
            return "wrong answer", "exit 0 on input that must be refused"
        problems = bad_numbers(case.argv, out)
        if problems:
            return "wrong answer", "; ".join(problems)
        return "ok", ""
    if rc == 2 and last.startswith("commscope: error:"):
        if case.expect == "ok":
            return "other", "a legitimate edge refused"
        return "clear error", ""
    if rc < 0:
        return "other", f"killed by signal {-rc}"
    return "other", f"exit {rc} without the one-line error format"


# ----------------------------------------------------------------------------------------------------- running
def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_case(case: Case, tmp: Path, timeout: float) -> dict[str, Any]:
    argv = [a.replace(T, str(tmp)) for a in case.argv]
    cmd = [sys.executable, "-m", "runners.cli", *argv]
    if case.nopriv:
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "NO_COLOR": "1"}
    for k in ("COMMSCOPE_NPROC_PER_NODE", "COMMSCOPE_NNODES", "COMMSCOPE_NODE_RANK", "COMMSCOPE_NETWORK"):
        env.pop(k, None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp, env=env, start_new_session=True, preexec_fn=_limits)
    try:
        out_b, err_b = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group, started here
        out_b, err_b = proc.communicate()
        rc = None
    seconds = time.perf_counter() - t0
    out, err = out_b.decode(errors="replace"), err_b.decode(errors="replace")
    cls, why = classify(case, rc, out, err)
    shown = [a.replace(str(tmp), "$TMP").replace(str(ROOT), "$ROOT") for a in argv]
    return {"argv": ["commscope", *shown], "expect": case.expect, "nopriv": case.nopriv, "class": cls,
            "as_expected": cls in ("clear error", "ok"), "exit_code": rc, "seconds": round(seconds, 2),
            "stderr_last": _last_line(err).replace(str(tmp), "$TMP")[:400], "why": why.replace(str(tmp), "$TMP")[:600],
            "stderr_tail": "" if cls in ("clear error", "ok") else
            "\n".join(err.replace(str(tmp), "$TMP").strip().splitlines()[-6:])[-1500:]}


def _key(case: Case) -> tuple[str, ...]:
    return ("commscope", *(a.replace(T, "$TMP").replace(str(ROOT), "$ROOT") for a in case.argv))


def _merge(outcomes: list[dict[str, Any]], everything: list[Case]) -> tuple[list[dict[str, Any]], list[str]]:
    """This run's outcomes over those of the results file (``--only`` runs): every case of :func:`cases` in its
    order, the new outcome where there is one; and the runs that made them."""
    old = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    known = {tuple(r["argv"]): r for r in old.get("outcomes", [])}
    known.update({tuple(r["argv"]): r for r in outcomes})
    merged = [known[_key(c)] for c in everything if _key(c) in known]
    runs = old.get("runs") or ([{k: old.get(k) for k in ("command", "date", "cases", "total_s")}] if old else [])
    return merged, list(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hostile-input fuzz audit of the commscope command line.")
    parser.add_argument("--json", action="store_true",
                        help=f"also write {RESULTS.relative_to(ROOT)} (with --only: update those cases' outcomes)")
    parser.add_argument("--only", action="append", default=[],
                        help="run only the cases whose command line contains this text (repeatable)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds a case may take (else: hang)")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout must be > 0")
    everything = cases()
    todo = [c for c in everything if not args.only or any(x in " ".join(c.argv) for x in args.only)]
    tmp = Path(tempfile.mkdtemp(prefix="commscope-fuzz-cli-"))
    t0 = time.perf_counter()
    try:
        make_files(tmp)
        outcomes = []
        for i, case in enumerate(todo, start=1):
            r = run_case(case, tmp, args.timeout)
            outcomes.append(r)
            mark = "" if r["as_expected"] else f"  <-- {r['class']}"
            print(f"[{i:3d}/{len(todo)}] {r['seconds']:6.2f} s  {r['class']:<12} {' '.join(r['argv'][1:])[:110]}"
                  f"{mark}", flush=True)
    finally:
        for p in (tmp / "rodir",):
            if p.exists():
                p.chmod(0o755)
        shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - t0
    command = "python bench/fuzz_cli.py --json" + "".join(f" --only {x!r}" for x in args.only)
    runs = [{"command": command, "date": date.today().isoformat(), "cases": len(outcomes), "total_s": round(total, 1)}]
    if args.json and args.only:
        outcomes, earlier = _merge(outcomes, everything)
        runs = earlier + runs
    counts = Counter(r["class"] for r in outcomes)
    print(f"\n{len(outcomes)} cases ({total:.0f} s this run): "
          + ", ".join(f"{counts.get(c, 0)} {c}" for c in CLASSES))
    bad = [r for r in outcomes if not r["as_expected"]]
    for r in bad:
        print(f"\n{r['class']} (expects {r['expect']}, exit {r['exit_code']}, {r['seconds']} s): "
              f"{' '.join(r['argv'])}\n  {r['why']}\n  stderr: {r['stderr_last']}")
    if args.json:
        RESULTS.parent.mkdir(exist_ok=True)
        data = {"command": "python bench/fuzz_cli.py --json", "runs": runs,
                "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
                "timeout_s": args.timeout,
                "classes": {"clear error": "exit 2, last stderr line 'commscope: error: ...', no traceback",
                            "ok": "exit 0 on a legitimate edge, every number printed sound",
                            "traceback": "a Traceback, or exit other than 0/2 with a Python exception",
                            "hang": f"no exit within {args.timeout:g} s",
                            "wrong answer": "exit 0 on input that must be refused, or nan/inf/negative times, "
                                            "bandwidths or fitted parameters printed",
                            "other": "anything else (a legitimate edge refused, another exit code, a signal)"},
                "cases": len(outcomes), "of_cases_defined": len(everything),
                "counts": {c: counts.get(c, 0) for c in CLASSES},
                "expected": dict(Counter(r["expect"] for r in outcomes)),
                "not_as_expected": len(bad), "outcomes": outcomes}
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
