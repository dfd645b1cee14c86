"""The records a fit uses: read from files, a ``Loaded`` or dicts, chosen by primitive and size, the time
taken of each (:func:`record_time`) and their layout.

Two levels: records with several ranks per node spanning several nodes fit the inter-node link; records
from within one node (p <= ranks per node) fit the intra-node link; without them the intra-node link
is not identifiable and is set equal to the inter-node one.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import costmodels as cm
from costmodels.errors import CommscopeError
from runners import results as rs


def _primitives(primitive: str | Sequence[str]) -> tuple[str, ...]:
    items = primitive.split(",") if isinstance(primitive, str) else list(primitive)
    prims = tuple(dict.fromkeys(x.strip() for x in items if isinstance(x, str) and x.strip()))
    if not prims:
        raise CommscopeError(f"primitive must name at least one primitive, got {primitive!r}")
    for q in prims:
        if q not in cm.PRIMITIVES:
            raise CommscopeError(f"no cost models for primitive {q!r}; modelled primitives: {', '.join(cm.PRIMITIVES)}")
    return prims


def _is_paths(x: Any) -> bool:
    if isinstance(x, (str, os.PathLike)):
        return True
    return isinstance(x, Sequence) and bool(x) and all(isinstance(e, (str, os.PathLike)) for e in x)


def _gather(records: Any) -> tuple[list[tuple[dict[str, Any], str | None]], list[rs.BadLine], list[str]]:
    """(record, file) pairs, bad lines, file names, from paths, a Loaded or a list of records."""
    if _is_paths(records):
        paths = [records] if isinstance(records, (str, os.PathLike)) else list(records)
        pairs: list[tuple[dict[str, Any], str | None]] = []
        bad: list[rs.BadLine] = []
        for path in paths:
            loaded = rs.load(path)
            pairs += [(r, str(path)) for r in loaded.records]
            bad += loaded.bad
        return pairs, bad, [str(x) for x in paths]
    if isinstance(records, rs.Loaded):
        return [(r, None) for r in records.records], list(records.bad), []
    if isinstance(records, Mapping) and records and all(isinstance(v, rs.Loaded) for v in records.values()):
        pairs = [(r, str(path)) for path, loaded in records.items() for r in loaded.records]
        return pairs, [b for loaded in records.values() for b in loaded.bad], [str(p) for p in records]
    if isinstance(records, Mapping) or not isinstance(records, Sequence):
        raise CommscopeError("records must be a list of result records, a results.Loaded, or results file path(s)")
    out = []
    for r in records:
        if not isinstance(r, Mapping):
            raise CommscopeError(f"records must be result records (dicts), got {type(r).__name__}")
        out.append((dict(r), None))
    return out, [], []


@dataclass
class _Data:
    prim: np.ndarray
    n: np.ndarray
    p: np.ndarray
    rpn: np.ndarray
    y: np.ndarray
    runs: list[dict[str, Any]]
    files: list[str | None]
    se: np.ndarray  # relative standard error of each y (0 where a record has no per-iteration times)
    cpu: np.ndarray | None = None  # CPU seconds per call of each record, mean over ranks (NaN where not measured)


STATISTICS = ("median", "mean", "chain")
STATISTIC_WORDS = {"median": "median per-iteration times", "mean": "mean per-iteration times",
                   "chain": "chain times (the slowest rank's timed calls summed, per iteration)"}


def record_time(record: dict[str, Any], statistic: str = "median") -> float:
    """A collective record's time: its median (``time_s``), the mean of its per-iteration ``times``, or
    its ``chain`` time.

    The mean is what a chain of many messages costs per message (sum of n draws ~ n x mean): on
    shared cores a small message's time is bimodal (0.2 ms usually, 4 ms one time in five, measured
    with 2 gloo ranks on 2 cores), so its median understates what 47 of them take back to back.
    ``chain`` is closer still: ``time_chain_s``, each rank's calls summed over the iterations (the slowest
    rank's), which the per-iteration maxima over ranks overstate where the ranks' calls end at jittered times
    (:mod:`runners.measure.sweep.timing`); records made before the sweep kept it fall back to the mean.
    Records without ``times`` (imported nccl-tests logs) keep ``time_s``.
    """
    if statistic not in STATISTICS:
        raise CommscopeError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    result = record["result"]
    chain = result.get("time_chain_s")
    if statistic == "chain" and isinstance(chain, (int, float)) and not isinstance(chain, bool) \
            and math.isfinite(chain) and chain > 0:
        return float(chain)
    times = result.get("times")
    if statistic in ("mean", "chain") and isinstance(times, list) and times:
        return float(np.mean(times))
    return float(result["time_s"])


def record_cpu(record: dict[str, Any], statistic: str = "median") -> float:
    """A collective record's CPU seconds per call (``cpu_s``, or ``cpu_mean_s`` for the mean; sweeps on CPU ranks
    keep them), NaN where it has none."""
    value = record["result"].get("cpu_s" if statistic == "median" else "cpu_mean_s")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else math.nan


def record_se(record: dict[str, Any], statistic: str = "median") -> float:
    """The relative standard error of :func:`record_time` from the record's per-iteration ``times``: s / sqrt(k) /
    mean for the mean (and the chain time, a mean of the same calls), sqrt(pi / 2) times that for the median (its
    large-sample efficiency under a normal spread); 0 for a record without at least two ``times`` (an imported
    log), which then weighs as before."""
    times = record["result"].get("times")
    if not isinstance(times, list) or len(times) < 2:
        return 0.0
    t = np.asarray(times, dtype=np.float64)
    se = float(t.std(ddof=1) / math.sqrt(len(t)) / t.mean()) if t.mean() > 0 else 0.0
    return se * math.sqrt(math.pi / 2) if statistic == "median" else se


def _unique(pairs: list[tuple[dict[str, Any], str | None]]) -> tuple[list[tuple[dict[str, Any], str | None]], int]:
    """The pairs without records whose id an earlier one has (a file given twice, lines copied), and how many
    were dropped. Records without an id (hand-made dicts) are all kept."""
    seen: set[str] = set()
    out = []
    for r, f in pairs:
        rid = r.get("id")
        if isinstance(rid, str):
            if rid in seen:
                continue
            seen.add(rid)
        out.append((r, f))
    return out, len(pairs) - len(out)


def _select(pairs: list[tuple[dict[str, Any], str | None]], prims: tuple[str, ...], min_bytes: int,
            bad: list[rs.BadLine], paths: list[str], statistic: str = "median") -> tuple[_Data, list[str]]:
    notes: list[str] = []
    where = f" in {', '.join(paths)}" if paths else ""
    pairs, dropped = _unique(pairs)
    if dropped:
        notes.append(f"dropped {dropped} duplicated record(s) (the id of an earlier record: one measurement counted "
                     "twice would narrow the confidence intervals)")
    coll = [(r, f) for r, f in pairs if r.get("kind") == "collective"]
    if not pairs:
        extra = f" ({len(bad)} bad line(s), first: {bad[0]})" if bad else ""
        raise CommscopeError(f"no valid records{where}{extra}")
    chosen = [(r, f) for r, f in coll if r["config"].get("op") in prims]
    if not chosen:
        found = Counter(r["config"].get("op") for r, _ in coll)
        kinds = Counter(r.get("kind") for r, _ in pairs)
        what = (", ".join(f"{op} ({k})" for op, k in sorted(found.items())) if found
                else "no collective records; kinds: " + ", ".join(f"{k} ({v})" for k, v in sorted(kinds.items())))
        raise CommscopeError(f"no {'/'.join(prims)} records{where}; found: {what}")
    ones = [x for x in chosen if int(x[0]["run"]["world_size"]) < 2]
    if ones:
        notes.append(f"skipped {len(ones)} record(s) with world size 1 (nothing crosses a link)")
    chosen = [x for x in chosen if int(x[0]["run"]["world_size"]) >= 2]
    small = [x for x in chosen if int(x[0]["config"]["bytes"]) < min_bytes]
    if small:
        notes.append(f"skipped {len(small)} record(s) below the minimum size {cm.format_size(min_bytes)}")
    chosen = [x for x in chosen if int(x[0]["config"]["bytes"]) >= min_bytes]
    if not chosen:
        raise CommscopeError(f"no {'/'.join(prims)} records{where} with world size >= 2 and at least "
                             f"{cm.format_size(min_bytes)}")
    for key, what in (("network", "emulated networks"), ("backend", "backends")):
        seen = {json.dumps(r["run"].get(key), sort_keys=True) for r, _ in chosen}
        if len(seen) > 1:
            raise CommscopeError(f"the records come from {len(seen)} different {what} ({'; '.join(sorted(seen))}); "
                                 "one environment cannot describe them: fit them separately")
    data = _Data(
        prim=np.array([r["config"]["op"] for r, _ in chosen], dtype=object),
        n=np.array([float(r["config"]["bytes"]) for r, _ in chosen]),
        p=np.array([int(r["run"]["world_size"]) for r, _ in chosen], dtype=np.int64),
        rpn=np.array([int(r["run"]["ranks_per_node"]) for r, _ in chosen], dtype=np.int64),
        y=np.array([record_time(r, statistic) for r, _ in chosen]),
        runs=[r["run"] for r, _ in chosen], files=[f for _, f in chosen],
        se=np.array([record_se(r, statistic) for r, _ in chosen]),
        cpu=np.array([record_cpu(r, statistic) for r, _ in chosen], dtype=np.float64))
    return data, notes


def _layout(d: _Data) -> int:
    """Ranks per node of a two-level environment (1 for one level); errors for layouts one env cannot hold."""
    multi = d.p > d.rpn
    if not multi.any():
        return 1  # one node: the only link is the one inside it
    gs = sorted(set(d.rpn[multi].tolist()))
    if len(gs) > 1:
        raise CommscopeError(f"the multi-node records have different ranks per node ({', '.join(map(str, gs))}); "
                             "one environment has one gpus_per_node: fit them separately")
    g = gs[0]
    over = (~multi) & (d.p > g)
    if over.any():
        raise CommscopeError(
            f"single-node records of {int(d.p[over][0])} ranks do not fit an environment whose nodes hold "
            f"{g} rank(s) (the multi-node records' ranks per node); fit them separately")
    return g
