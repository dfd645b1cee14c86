"""Sharded data parallelism: ZeRO-1/2 as DeepSpeed runs it, and ZeRO-3 / FSDP full sharding.

ZeRO-1/2 (Rajbhandari et al., SC 2020, Sec. 5-7; DeepSpeed ``runtime/zero/stage_1_and_2.py`` and
``runtime/zero/config.py``): gradients fill a reduce bucket in backward order; a bucket is reduced
from the hook of the gradient that would take it over ``reduce_bucket_size`` *elements* (default
5e8), the last one after backward. With ``overlap_comm`` (default False for stages 1 and 2) the
reduction runs on a side stream, and the compute stream waits for the previous bucket's reduction
before it goes on (``average_tensor``: ``current_stream().wait_stream(reduction_stream)``); without
it the reduction runs on the compute stream and backward stops while a bucket is reduced. After
the step the updated parameters are all-gathered in max(1, floor(Psi / allgather_bucket_size))
equal messages (``all_gather_dp_groups``' sequential path; one message with
``all_gather_into_tensor``, the same below 5e8 elements). Each reduction is priced as a
reduce-scatter of the bucket.

ZeRO-3 / FSDP full shard (Zhao et al., 'PyTorch FSDP', VLDB 2023, Sec. 3-4; torch
``fsdp/_runtime_utils.py``): without an auto-wrap policy the root unit is the whole model: one
all-gather of all parameters before forward and one reduce-scatter of all gradients after
backward, with no all-gather before backward, since the root is not resharded after forward
(``_post_forward_reshard``: ``not state._is_root``). With ``unit_bytes`` (size-based wrapping),
consecutive layers reaching ``unit_bytes`` form the wrapped units and the layers left over at the
end stay in the root; each wrapped unit is all-gathered before its forward (the next unit's
all-gather issued when a unit's forward starts: forward prefetch), freed, all-gathered again before
its backward (BACKWARD_PRE: the next unit's all-gather issued before this unit's backward), and
reduce-scattered after it. The link serves messages in the order they are issued. With interference,
host overhead or an optimizer step both run as task graphs (``terms_overlap``, which states where each
pays o and its shard of the step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import sympy as sp

from ..environment import Environment
from ..errors import CommscopeError
from ..messages import Comm
from ..profiles import DTYPE_BYTES, ModelProfile
from ..timeline import Event
from .blocks import (
    _bytes_option,
    _compute_events,
    _result,
    _validated,
    bounded_buckets,
    decoupled,
    greedy_buckets,
)
from .core import SCHEDULES, B, C, Configurations, F, IterationResult, Schedule, U

DEEPSPEED_BUCKET_ELEMENTS = 500_000_000  # zero_optimization reduce_bucket_size and allgather_bucket_size
Emit = Callable[[str, int, float, float], None] | None


def _decoupled(collective: Any) -> tuple[str | None, str | None]:
    """(reduce-scatter, allgather) algorithms of a sharded schedule; see ``blocks.decoupled``."""
    return decoupled(collective, "sharded schedules")


# --------------------------------------------------------------------------------------- ZeRO
def zero_buckets(nbytes: np.ndarray, bucket_bytes: float) -> list[list[int]]:
    """DeepSpeed's reduce buckets in backward order, each listing its layers in backward order: a
    bucket is reduced before a gradient that would take it over ``bucket_bytes``."""
    back = np.arange(len(nbytes) - 1, -1, -1)
    return [[int(back[j]) for j in g] for g in bounded_buckets(nbytes[back], bucket_bytes, strict=False)]


def _elements_option(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        raise CommscopeError(f"{name} must be a positive number of elements (DeepSpeed counts elements), "
                             f"got {value!r}")
    return float(value)


def _overlap(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise CommscopeError(f"overlap_comm must be True or False (DeepSpeed's zero_optimization.overlap_comm), "
                             f"got {value!r}")
    return bool(value)


def _zero_plan(prof: ModelProfile, reduce_bucket_size: Any, allgather_bucket_size: Any, bucket_bytes: Any,
               allgather_bucket_bytes: Any) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """(reduce buckets, when each is reduced (seconds after backward starts), all-gather message sizes).

    The caps are DeepSpeed's, in elements of the profile's dtype; ``bucket_bytes`` and
    ``allgather_bucket_bytes`` give them in bytes instead.
    """
    vb = DTYPE_BYTES[prof.dtype]
    rs_cap = (_bytes_option("bucket_bytes", bucket_bytes) if bucket_bytes is not None
              else _elements_option("reduce_bucket_size", reduce_bucket_size) * vb)
    ag_cap = (_bytes_option("allgather_bucket_bytes", allgather_bucket_bytes) if allgather_bucket_bytes is not None
              else _elements_option("allgather_bucket_size", allgather_bucket_size) * vb)
    nbytes = np.array(prof.column("grad_bytes"))
    buckets = zero_buckets(nbytes, rs_cap)
    after_backward = np.cumsum(np.array(prof.column("backward_s"))[::-1])[::-1]
    hooks = np.array([after_backward[buckets[b + 1][0]] for b in range(len(buckets) - 1)] + [after_backward[0]])
    total = float(nbytes.sum())
    shards = max(1, int(total // ag_cap))
    return buckets, hooks, np.full(shards, total / shards)


def _zero_reduce(start: Any, hooks: np.ndarray, t_rs: np.ndarray, overlap: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and end of each bucket's reduction and the compute's delay after its hook, (..., buckets).

    At hook b the compute is at ``start + hooks[b] + delay``. With ``overlap_comm`` the reduction
    starts once the previous one has ended and the compute waits for that previous one; without
    it the reduction runs on the compute stream, which it delays by its own time.
    """
    shape = np.broadcast_shapes(np.shape(start), t_rs.shape[:-1])
    starts, ends, delays = (np.empty((*shape, len(hooks))) for _ in range(3))
    link, delay = np.zeros(shape), np.zeros(shape)
    for b, h in enumerate(hooks):
        t = start + h + delay
        s = np.maximum(t, link)
        link = s + t_rs[..., b]
        delay = delay + (s - t if overlap else link - t)
        starts[..., b], ends[..., b], delays[..., b] = s, link, delay
    return starts, ends, delays


def _zero(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          reduce_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS, allgather_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS,
          overlap_comm: bool = False, bucket_bytes: Any = None, allgather_bucket_bytes: Any = None, **params: Any
          ) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    buckets, hooks, ag_sizes = _zero_plan(prof, reduce_bucket_size, allgather_bucket_size, bucket_bytes,
                                          allgather_bucket_bytes)
    overlap = _overlap(overlap_comm)
    if p == 1:
        return _result("zero", p, prof, _compute_events(prof)[0], stage="ZeRO-1/2", buckets=len(buckets))
    rs_name, ag_name = _decoupled(collective)
    rs, ag = Comm("reduce_scatter", p, env, rs_name, params), Comm("allgather", p, env, ag_name, params)
    sizes = np.array([nbytes[g].sum() for g in buckets])
    starts, ends, delays = _zero_reduce(prof.forward_s, hooks, rs(sizes), overlap)
    events, t = _compute_events(prof)[0][:len(prof)], prof.forward_s  # the forward, then the delayed backward
    shifted = np.zeros(len(prof))  # delay of each layer's backward, by layer index
    for b in range(len(buckets) - 1):
        shifted[:buckets[b + 1][0]] = delays[b]
    for i in range(len(prof) - 1, -1, -1):
        s = t + shifted[i]
        events.append(Event("compute", "backward", names[i], s, s + prof.layers[i].backward_s))
        t += prof.layers[i].backward_s
    for g, s, e, size in zip(buckets, starts, ends, sizes, strict=True):
        label = names[g[0]] if len(g) == 1 else f"{names[g[-1]]}..{names[g[0]]} ({len(g)})"
        events.append(Event("comm", "reduce_scatter", label, float(s), float(e), float(size)))
    link = float(ends[-1])  # the step once every reduction is done, then the all-gathers
    for j, (size, dt) in enumerate(zip(ag_sizes, ag(ag_sizes), strict=True)):
        events.append(Event("comm", "allgather", f"parameters {j + 1}/{len(ag_sizes)}", link, link + float(dt),
                            float(size)))
        link += float(dt)
    return _result("zero", p, prof, events, stage="ZeRO-1/2", buckets=len(buckets), overlap_comm=overlap)


def _zero_kernel(cfg: Configurations, collective: str | None = None, *,
                 reduce_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS,
                 allgather_bucket_size: Any = DEEPSPEED_BUCKET_ELEMENTS, overlap_comm: bool = False,
                 bucket_bytes: Any = None, allgather_bucket_bytes: Any = None, **params: Any) -> np.ndarray:
    buckets, hooks, ag_sizes = _zero_plan(cfg.prof, reduce_bucket_size, allgather_bucket_size, bucket_bytes,
                                          allgather_bucket_bytes)
    rs_name, ag_name = _decoupled(collective)
    sizes = np.array([cfg.nbytes[g].sum() for g in buckets])[None, :]
    t_rs = cfg.comm("reduce_scatter", rs_name, params)(sizes)
    ends = _zero_reduce(np.full(len(t_rs), cfg.prof.forward_s), hooks, t_rs, _overlap(overlap_comm))[1]
    gathered = ends[:, -1] + cfg.comm("allgather", ag_name, params)(ag_sizes[None, :]).sum(axis=1)
    return np.maximum(gathered, cfg.prof.compute_s)


# --------------------------------------------------------------------------------------- FSDP
def _fsdp_units(nbytes: np.ndarray, unit_bytes: Any) -> tuple[list[list[int]], bool]:
    """FSDP's units in forward order, and whether the last one is the root's own layers.

    No auto-wrap policy (``unit_bytes=None``): the root is the only unit. Size-based wrapping:
    consecutive layers reaching ``unit_bytes`` are wrapped; a smaller remainder at the end is the root's.
    """
    if unit_bytes is None:
        return [list(range(len(nbytes)))], True
    cap = _bytes_option("unit_bytes", unit_bytes)
    units = greedy_buckets(nbytes, cap)
    return units, float(nbytes[units[-1]].sum()) < cap


def _fsdp_run(t_ag: np.ndarray, t_rs: np.ndarray, f: np.ndarray, b: np.ndarray, root: bool, emit: Emit = None
              ) -> Any:
    """End of one FSDP iteration, (...) from times (..., units): the recurrence of the module docstring.

    ``emit(kind, unit, start, end)`` receives each message and each unit's forward and backward.
    """
    def send(kind: str, j: int, issued: Any, dt: Any) -> Any:
        nonlocal link
        s = np.maximum(link, issued)
        link = s + dt
        if emit is not None:
            emit(kind, j, s, link)
        return link

    n = t_ag.shape[-1]
    wrapped = n - 1 if root else n  # units re-gathered for backward: all but the root
    link = t = np.zeros(t_ag.shape[:-1])
    ag_end = {n - 1: send("allgather", n - 1, t, t_ag[..., n - 1])} if root else {}
    if wrapped:
        ag_end[0] = send("allgather", 0, t, t_ag[..., 0])
    for j in range(n):  # forward, prefetching one wrapped unit ahead
        start = np.maximum(t, ag_end[j])
        if j + 1 < wrapped:
            ag_end[j + 1] = send("allgather", j + 1, start, t_ag[..., j + 1])
        if emit is not None:
            emit("forward", j, start, start + f[j])
        t = start + f[j]
    agb_end = {} if root or not wrapped else {n - 1: send("allgather", n - 1, t, t_ag[..., n - 1])}
    for j in range(n - 1, -1, -1):  # backward, prefetching the previous unit before this unit's backward
        start = t if root and j == n - 1 else np.maximum(t, agb_end[j])
        if j - 1 >= 0:
            agb_end[j - 1] = send("allgather", j - 1, start, t_ag[..., j - 1])
        if emit is not None:
            emit("backward", j, start, start + b[j])
        t = start + b[j]
        send("reduce_scatter", j, t, t_rs[..., j])
    return np.maximum(link, t)


def _fsdp(prof: ModelProfile, env: Environment, p: int, collective: str | None = None, *,
          unit_bytes: Any = None, **params: Any) -> IterationResult:
    nbytes, names = _validated(prof, env, p)
    units, root = _fsdp_units(nbytes, unit_bytes)
    if p == 1:
        return _result("fsdp", p, prof, _compute_events(prof)[0], units=len(units))
    rs_name, ag_name = _decoupled(collective)
    rs, ag = Comm("reduce_scatter", p, env, rs_name, params), Comm("allgather", p, env, ag_name, params)
    size = np.array([nbytes[u].sum() for u in units])
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    label = [names[u[0]] if len(u) == 1 else f"{names[u[0]]}..{names[u[-1]]} ({len(u)})" for u in units]
    events: list[Event] = []

    def emit(kind: str, j: int, start: float, end: float) -> None:
        if kind in ("forward", "backward"):
            (layers, times), t = (units[j], fwd) if kind == "forward" else (units[j][::-1], bwd), float(start)
            for i in layers:
                events.append(Event("compute", kind, names[i], t, t + times[i]))
                t += times[i]
        else:
            events.append(Event("comm", kind, label[j], float(start), float(end), float(size[j])))

    _fsdp_run(ag(size), rs(size), np.array([fwd[u].sum() for u in units]), np.array([bwd[u].sum() for u in units]),
              root, emit)
    return _result("fsdp", p, prof, events, units=len(units), root_unit=root)


def _fsdp_kernel(cfg: Configurations, collective: str | None = None, *, unit_bytes: Any = None,
                 **params: Any) -> np.ndarray:
    """:func:`_fsdp` for many configurations: the same recurrence (:func:`_fsdp_run`) on arrays."""
    rs_name, ag_name = _decoupled(collective)
    prof, nbytes = cfg.prof, cfg.nbytes
    units, root = _fsdp_units(nbytes, unit_bytes)
    size = np.array([nbytes[u].sum() for u in units])[None, :]
    fwd, bwd = np.array(prof.column("forward_s")), np.array(prof.column("backward_s"))
    end = _fsdp_run(cfg.comm("allgather", ag_name, params)(size), cfg.comm("reduce_scatter", rs_name, params)(size),
                    np.array([fwd[u].sum() for u in units]), np.array([bwd[u].sum() for u in units]), root)
    return np.maximum(end, prof.compute_s)


PLACEMENTS = {  # where each pays o and the optimizer step (see terms*.py)
    "zero": ("o per reduction on the backward thread (DeepSpeed's gradient hooks) and per parameter all-gather "
            "after the step; the optimizer step on this worker's shard (1/p of it) after the last reduction"),
    "fsdp": ("o per all-gather and reduce-scatter on the training thread (FSDP's pre-forward, pre-backward and "
            "post-backward hooks); the optimizer step on the sharded parameters (1/p of it) once backward returns"),
}

for _entry in (
    Schedule("zero", "ZeRO-1/2 as DeepSpeed runs it: gradients reduced in buckets of reduce_bucket_size elements "
             "(overlapping backward only with overlap_comm), all-gather of the updated parameters after the step "
             "(2 Psi bytes)",
             "Rajbhandari et al., 'ZeRO: memory optimizations toward training trillion parameter models', SC 2020; "
             "DeepSpeed runtime/zero/stage_1_and_2.py (bucketing, streams) and runtime/zero/config.py (defaults: "
             "reduce_bucket_size = allgather_bucket_size = 5e8 elements, overlap_comm False below stage 3)",
             "reduce_scatter", {"reduce_bucket_size": DEEPSPEED_BUCKET_ELEMENTS,
                                "allgather_bucket_size": DEEPSPEED_BUCKET_ELEMENTS, "overlap_comm": False,
                                "bucket_bytes": None, "allgather_bucket_bytes": None},
             _zero, vectorized=_zero_kernel),
    Schedule("fsdp", "ZeRO-3 / FSDP full shard: by default the root unit is the whole model (one all-gather "
             "before forward, one reduce-scatter after backward); with unit_bytes, wrapped units all-gathered "
             "before forward and again before backward (prefetched), reduce-scattered after backward",
             "Zhao et al., 'PyTorch FSDP: experiences on scaling fully sharded data parallel', VLDB 2023; torch "
             "fsdp/_runtime_utils.py (the root is not resharded after forward); Rajbhandari et al., SC 2020 "
             "(ZeRO stage 3)", "allgather", {"unit_bytes": None},
             _fsdp, perfect_overlap=sp.Max(F + B + U, C), vectorized=_fsdp_kernel),
):
    SCHEDULES.register(replace(_entry, placement=PLACEMENTS[_entry.name]))
