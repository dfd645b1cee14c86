"""Collective records from a Kineto trace: NCCL kernels with their sizes, or gloo ops on the host.

- **GPU** (NCCL / RCCL): device events named ``ncclDevKernel_<Func>_<RedOp>_<type>_<ALGO>_<PROTO>(...)`` (NCCL
  2.19 and later, e.g. ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) or ``ncclKernel_<Func>_<ALGO>_<PROTO>_<RedOp>_
  <type>(...)`` (earlier, e.g. ``ncclKernel_AllReduce_RING_LL_Sum_float``), timed on the device. Their size comes
  from the kernel's args as recent Kineto writes them (``Collective name``, ``In msg nelems``, ``Out msg
  nelems``, ``dtype``, ``Group size``, ``Process Group Name`` / ``Description``), else from the
  ``record_param_comms`` host op around the launch (same args); op and element type fall back to the kernel
  name, algorithm and protocol come from it. A kernel whose size nothing gives is skipped and reported.
- **CPU** (gloo): ``gloo:<op>`` scopes (``gloo:all_reduce`` on gloo's own threads), timed on the host, their size
  from ``Input Dims`` and ``Input type`` (``record_shapes``): the tensors the op was given, times the ranks for
  allgather (its input is one rank's share).

Bytes follow nccl-tests: allreduce, broadcast and reduce the input, allgather the output (``Out msg nelems``),
reduce-scatter the input, all-to-all what each rank sends. The group is ``Group size``, else the process group's
size from ``distributedInfo``, else its ``world_size``. Calls of one (op, bytes, dtype, group, algorithm,
protocol) become one record: the median time, the spread, and the calls slower than 1.5 x the median.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .common import FormatError, collective_record, dtype_of, imported_run, op_name, stragglers
from .kineto import Ev, Trace
from .trace_steps import is_comm_kernel

FORMAT = "torch-profiler"
_ALGOS = {"RING": "ring", "TREE": "tree", "COLLNET": "collnet", "NVLS": "nvls", "PAT": "pat"}
_PROTOS = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}
_REDOPS = {"Sum", "Prod", "Min", "Max", "Avg", "PreMulSum", "SumPostDiv"}
_KERNEL = re.compile(r"^[nr]ccl(?:Dev)?Kernel_([A-Za-z0-9_]+)")


@dataclass(frozen=True)
class Call:
    """One collective call: op, bytes (nccl-tests' convention), dtype, group size, its interval on the device or
    host (us), when the host launched it (us), where it came from."""

    op: str
    nbytes: int
    dtype: str
    element_bytes: int
    nranks: int
    start: float
    end: float
    launched: float
    group: str
    timed_on: str
    algorithm: str | None = None
    protocol: str | None = None

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / 1e6


def kernel_name_parts(name: str) -> dict[str, str]:
    """What an NCCL kernel's name says: ``func`` (AllReduce), ``dtype`` (f32), ``algorithm``, ``protocol``."""
    m = _KERNEL.match(name)
    if not m:
        return {}
    parts = m.group(1).split("_")
    out = {"func": parts[0]}
    for p in parts[1:]:
        if p.upper() in _ALGOS and "algorithm" not in out:
            out["algorithm"] = _ALGOS[p.upper()]
        elif p.upper() in _PROTOS:
            out["protocol"] = _PROTOS[p.upper()]
        elif p not in _REDOPS and dtype_of(p) is not None and "dtype" not in out:
            out["dtype"] = p
    return out


def _comm_args(trace: Trace, kernel: Ev) -> dict[str, Any]:
    if "In msg nelems" in kernel.args or "Out msg nelems" in kernel.args:
        return kernel.args
    launch = trace.launch_of(kernel)
    for a in launch.ancestors() if launch is not None else ():
        if "In msg nelems" in a.args or "Out msg nelems" in a.args:
            return a.args
    return kernel.args


def _group_size(trace: Trace, args: dict[str, Any]) -> int:
    size = args.get("Group size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    info = trace.distributed
    name = args.get("Process Group Name")
    for pg in info.get("pg_config") or []:
        if isinstance(pg, dict) and name is not None and str(pg.get("pg_name")) == str(name):
            if isinstance(pg.get("pg_size"), int) and pg["pg_size"] > 0:
                return int(pg["pg_size"])
    ws = info.get("world_size")
    return int(ws) if isinstance(ws, int) and ws > 0 else 1


def _bytes(op: str, n_in: Any, n_out: Any, size: int) -> int | None:
    ins = n_in if isinstance(n_in, int) and not isinstance(n_in, bool) and n_in > 0 else None
    outs = n_out if isinstance(n_out, int) and not isinstance(n_out, bool) and n_out > 0 else None
    n = (outs or ins) if op == "allgather" else (ins or outs)
    return n * size if n else None


def _kernel_call(trace: Trace, k: Ev, problems: list[str]) -> Call | None:
    args = _comm_args(trace, k)
    parts = kernel_name_parts(k.name)
    where = f"{trace.path}: kernel {k.name.split('(')[0]} at ts {k.ts}"
    op = op_name(str(args.get("Collective name") or parts.get("func") or ""))
    if op is None:
        problems.append(f"{where}: not a collective commscope models ({args.get('Collective name') or k.name}); "
                        "skipped")
        return None
    dt = dtype_of(str(args.get("dtype") or parts.get("dtype") or ""))
    if dt is None:
        problems.append(f"{where}: no element type (no 'dtype' arg, none in the name); skipped")
        return None
    nbytes = _bytes(op, args.get("In msg nelems"), args.get("Out msg nelems"), dt[1])
    if nbytes is None:
        problems.append(f"{where}: no message size ('In msg nelems' / 'Out msg nelems' in its args or its "
                        "record_param_comms op); skipped")
        return None
    if k.dur <= 0:
        problems.append(f"{where}: zero duration; skipped")
        return None
    launch = trace.launch_of(k)
    group = str(args.get("Process Group Description") or args.get("Process Group Name") or "default")
    return Call(op, nbytes, dt[0], dt[1], _group_size(trace, args), k.ts, k.end,
                launch.ts if launch is not None else k.ts, group, "device", parts.get("algorithm"),
                parts.get("protocol"))


def _gloo_call(trace: Trace, e: Ev, problems: list[str]) -> Call | None:
    where = f"{trace.path}: {e.name} at ts {e.ts}"
    op = op_name(e.name[len("gloo:"):])
    if op is None:
        return None  # barrier and the like: nothing to time against a size
    dims, types = e.args.get("Input Dims"), e.args.get("Input type")
    dt = dtype_of(str(types[0])) if isinstance(types, list) and types else None
    shapes = [d for d in dims if isinstance(d, list) and all(isinstance(x, int) for x in d)] if isinstance(
        dims, list) else []
    if dt is None or not shapes:
        problems.append(f"{where}: no tensor sizes (record the trace with record_shapes=True); skipped")
        return None
    nranks = _group_size(trace, {})
    nbytes = sum(math.prod(s) for s in shapes) * dt[1] * (nranks if op == "allgather" else 1)
    if nbytes <= 0 or e.dur <= 0:
        problems.append(f"{where}: empty tensors or zero duration; skipped")
        return None
    return Call(op, nbytes, dt[0], dt[1], nranks, e.ts, e.end, e.ts, "default", "host")


def calls(trace: Trace) -> tuple[list[Call], list[str]]:
    """The trace's collective calls (device kernels where there are any, else gloo ops), and what was skipped."""
    problems: list[str] = []
    kernels = [e for e in trace.device_work if is_comm_kernel(e)]
    if kernels:
        found = [_kernel_call(trace, k, problems) for k in sorted(kernels, key=lambda e: e.ts)]
    else:
        gloo = [e for e in trace.events if e.name.startswith("gloo:") and e.cat not in ("kernel",)]
        found = [_gloo_call(trace, e, problems) for e in sorted(gloo, key=lambda e: e.ts)]
    return [c for c in found if c is not None], problems


def backend(trace: Trace, found: list[Call]) -> str:
    info = trace.distributed.get("backend")
    if isinstance(info, str) and info:
        return info
    return "nccl" if any(c.timed_on == "device" for c in found) else "gloo"


def records(trace: Trace, found: list[Call], ranks_per_node: int | None = None) -> list[dict[str, Any]]:
    """One record per (op, bytes, dtype, group, algorithm, protocol): the median of its calls' times."""
    if not found:
        return []
    groups: dict[tuple[Any, ...], list[Call]] = defaultdict(list)
    for c in found:
        groups[(c.op, c.nbytes, c.dtype, c.nranks, c.group, c.algorithm, c.protocol)].append(c)
    info = trace.distributed
    world = info.get("world_size") if isinstance(info.get("world_size"), int) else max(c.nranks for c in found)
    if ranks_per_node is not None and ranks_per_node < 1:
        raise FormatError(f"--ranks-per-node must be >= 1, got {ranks_per_node}")
    per_node = ranks_per_node or world
    devices = trace.device_names[:1] if any(c.timed_on == "device" for c in found) else ["cpu"]
    run = imported_run(backend(trace, found), world, per_node, devices or ["GPU"], trace.host,
                       rank=info.get("rank"), imported_from=trace.path,
                       ranks_per_node_from="given" if ranks_per_node else "assumed: all ranks on one node "
                       "(a trace is one rank's; give --ranks-per-node)")
    out = []
    for (op, nbytes, dtype, nranks, group, algo, proto), cs in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        times = [c.seconds for c in cs]
        _, slow = stragglers(times)
        cfg = {"process_group": group, "timed_on": cs[0].timed_on, "placement": "as called in training"}
        if algo:
            cfg["algorithm"] = algo
        if proto:
            cfg["protocol"] = proto
        res = {"slow_calls": len(slow), "slow_call_factor": 1.5}
        out.append(collective_record(op, nbytes, dtype, nranks, times, run, FORMAT, trace.path, cfg, res,
                                     element_bytes=cs[0].element_bytes))
    return out
