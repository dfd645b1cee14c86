"""NCCL: the algorithm and protocol its tuning model picks, priced on the environment that is really there.

NCCL (2.21, constants in :mod:`.nccl_constants`) runs ring or tree (plus CollNet with SHARP switches, and
NVLS on NVLink switches), each with the LL, LL128 or Simple protocol, over several channels, and picks per
message the pair its own model predicts fastest (``src/graph/tuning.cc``, ``ncclTopoGetAlgoTime``;
``src/enqueue.cc`` ``topoGetAlgoInfo``). Its model, with t in us, bandwidths in GB/s::

    t = lat + nBytes / (1000 * algBw)
    lat (ring)  = baseLat + (nsteps - nInterSteps) * max(intraLat, netOverhead) + nInterSteps * interLat
    lat (tree)  = baseLat + 2 * ((ranks per node - 1) * intraLat + floor(log2 nNodes) * interLat)
    algBw       = busBw * nRanks / nsteps (ring), busBw / 2 (tree), busBw * 5/6 (NVLS)
    busBw       = protocol factors and per-channel caps applied to nChannels * per-channel bandwidth
    NVLS busBw  = ppn * the NVLS graph's channel speed (one channel per GPU; :func:`nvls_channel_speed`)

What commscope adds (derived here), so that the same model prices the real network:

* **bandwidths from the environment.** NCCL spreads its channels over every NIC of a node (rails), so a
  ring that leaves the node runs at ``min(intra bandwidth per GPU, nics_per_node / beta)`` bus bandwidth,
  not at one NIC's; a fat tree's oversubscription divides the per-node share once traffic crosses the
  spine (more nodes than a leaf serves: ``nodes_per_leaf``, times ``nics_per_node`` when rail-optimised).
  A double binary tree sends each byte across a node boundary once per direction on 2 nodes (each node is
  the root of one tree and the only child in the other), twice on more: its inter-node bound is
  ``2 * nics / beta`` (2 nodes) or ``nics / beta`` (more) in bus-bandwidth units.
* **the network's own latency.** NCCL's NET hop latency (2.7 us for ring/LL) is an InfiniBand figure;
  each hop is priced at the environment's ``alpha`` plus NCCL's protocol overhead over LL
  (``hwLat[NET][a][p] - hwLat[NET][ring][LL]``), and likewise for the intra-node link. NCCL still *chooses*
  with its own constants (:attr:`Option.estimate`), as the real library does.
* **reduction pipelined with the transfer.** NCCL reduces in the kernel that moves the data: a message
  costs ``lat + max(transfer, reduction)``, with ``gamma`` per byte reduced ((p-1)/p of n per rank).
* **NVLS as its kernel runs.** The price (not the estimate) takes NCCL 2.28's NVLS bandwidth and the three-stage
  kernel's pipeline fill (:mod:`.nccl_nvls`); the switch reduces, so no gamma.
* NCCL's channel count comes from its topology search; here ``nChannels = clip(ceil(busBw / 20 GB/s), 2, 32)``
  (20 GB/s: one NVLink, the per-channel speed its search settles on). It only sets the LL128 and tree caps.
* broadcast and reduce take ring latency with the same step counts (NCCL prices them per step without
  the netOverhead term); LL128 across nodes assumes GPUDirect RDMA; several nodes use NCCL's Intel-CPU
  LL cap row. all_to_all (point-to-point in NCCL, outside its tuning model) is ``lat + max(intra bytes /
  intra bandwidth, a node's inter bytes / its NICs)``: the GPUs of a node share its NICs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..environment import Environment
from ..environment_array import EnvironmentArray
from ..errors import CommscopeError
from . import nccl_constants as tables
from .core import Library, Option, Rows, register
from .nccl_nvls import nvls_bandwidth, nvls_channel_speed, nvls_pipeline_fill

PRIMITIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
REDUCING = ("allreduce", "reduce_scatter", "reduce")
DEFAULT_COMPUTE_CAPABILITY = 80


def _arrays(env: Environment | EnvironmentArray) -> dict[str, np.ndarray]:
    if isinstance(env, EnvironmentArray):
        return {f: np.asarray(getattr(env, f), dtype=np.float64) for f in
                ("alpha", "beta", "gamma", "intra_alpha", "intra_beta", "gpus_per_node", "nics_per_node")}
    two = env.two_level
    return {"alpha": np.float64(env.alpha), "beta": np.float64(env.beta), "gamma": np.float64(env.gamma),
            "intra_alpha": np.float64(env.intra_alpha if two else env.alpha),
            "intra_beta": np.float64(env.intra_beta if two else env.beta),
            "gpus_per_node": np.float64(env.gpus_per_node), "nics_per_node": np.float64(env.nics_per_node)}


def _row(cc: int) -> int:
    return 0 if cc < 80 else 1 if cc < 90 else 2


class Levels:
    """Where p ranks sit in the environment and what each level gives them (arrays broadcast over p and
    the environment)."""

    def __init__(self, p: Any, env: Environment | EnvironmentArray) -> None:
        a = _arrays(env)
        p = np.asarray(p, dtype=np.float64)
        self.p = p
        if env.link != "network":  # a one-level NVLink or PCIe environment: every rank on one node
            self.ppn, self.nodes = p, np.ones_like(p)
            self.intra_kind = env.link
        else:
            g = a["gpus_per_node"]
            self.ppn = np.minimum(p, g)
            self.nodes = np.ceil(p / g)
            self.intra_kind = env.intra_link
        cc = env.compute_capability or DEFAULT_COMPUTE_CAPABILITY
        self.cc, self.row = cc, _row(cc)
        within_leaf = (env.nodes_per_leaf or 1) * (a["nics_per_node"] if env.rail_optimized else 1)
        oversub = np.where(self.nodes > within_leaf, env.oversubscription, 1.0)
        nics = np.minimum(a["nics_per_node"], self.ppn)
        self.b_intra = np.where(self.ppn > 1, 1e-9 / a["intra_beta"], np.inf)  # GB/s per GPU
        self.b_net = nics * 1e-9 / a["beta"] / oversub  # GB/s per node, NCCL's channels over all NICs
        self.multi = multi = self.nodes > 1
        self.b_ring = np.where(multi, np.minimum(self.b_intra, self.b_net), self.b_intra)
        self.b_tree = np.where(multi, np.minimum(self.b_intra, self.b_net * np.where(self.nodes == 2, 2.0, 1.0)),
                               self.b_intra)
        self.channels = np.clip(np.ceil(self.b_ring / tables.CHANNEL_GBPS), 2, tables.MAX_CHANNELS)
        self.column = np.clip(self.nodes - 1, 0, 2).astype(np.intp)
        self.ll_max = np.where(multi, np.take(tables.LL_MAX_BW[0], self.column),
                               np.take(tables.LL_MAX_BW[self.row], self.column))
        nvlink_inside = self.intra_kind == "nvlink"
        self.ll128 = cc in tables.LL128_ARCHITECTURES and nvlink_inside
        self.intra_alpha_us = a["intra_alpha"] * 1e6
        self.alpha_us = a["alpha"] * 1e6
        self.gamma = a["gamma"]
        self.intra_hw = self.intra_kind if self.intra_kind != "network" else "pcie"
        self.reduced = (p - 1) / p * self.gamma  # s per byte of n that a reducing collective reduces

    def hop(self, algorithm: str, protocol: int) -> tuple[Any, Any, Any, Any]:
        """(intra model, intra real, inter model, inter real) latency of one hop, us."""
        intra = tables.HW_LATENCY[self.intra_hw][algorithm][protocol]
        inter = tables.HW_LATENCY["network"][algorithm][protocol]
        intra_real = intra + (self.intra_alpha_us - tables.HW_LATENCY[self.intra_hw]["ring"][0])
        inter_real = inter + (self.alpha_us - tables.HW_LATENCY["network"]["ring"][0])
        return intra, intra_real, inter, inter_real


def _steps(primitive: str, p: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's nsteps and nInterSteps of a ring (tuning.cc 158-163)."""
    multi = nodes > 1
    if primitive == "allreduce":
        return 2 * (p - 1), np.where(multi, 2 * nodes, 0)
    if primitive in ("allgather", "reduce_scatter"):
        return p - 1, nodes - 1
    return p, nodes


_INVERSE_CORRECTION = [1.0 / np.asarray((*row, 1.0)) for row in tables.TREE_CORRECTION]


class _TreeCorrection:
    """1 / treeCorrectionFactor at log2(n / 64), 1 beyond the table (tuning.cc 412-420); the table index of a
    pricer's block of sizes (``rows``) is kept, as the three tree options of one pricer are priced on the same
    block in turn."""

    def __init__(self) -> None:
        self._rows: Rows | None = None
        self._index: Any = None

    def __call__(self, protocol: int, n: np.ndarray, rows: Rows | None = None) -> np.ndarray:
        if rows is None or self._rows is not rows:
            sizes = n if rows is None else rows.sizes
            index = np.log2(np.maximum(sizes, 64.0) / 64.0).astype(np.intp)  # floor: the argument is >= 1
            index = np.minimum(index, len(_INVERSE_CORRECTION[0]) - 1)
            if rows is None:
                return _INVERSE_CORRECTION[protocol][index]
            self._rows, self._index = rows, index
        return _INVERSE_CORRECTION[protocol][self._index]


def _option(name: str, protocol: int, lv: Levels, lat_model: Any, lat_real: Any, alg_bw: Any, primitive: str,
            plateau: bool = False, correction: _TreeCorrection | None = None) -> Option:
    """An (algorithm, protocol) of NCCL: commscope's price and NCCL's estimate, both in seconds.

    Transfer and in-kernel reduction are both linear in n, so the slower of the two is n times the larger
    slope (per size for the tree, whose bandwidth NCCL corrects by size). Without buffers the prices are
    the formulas as written. Into buffers (a pricer's blocks) the same operations run in place, sharing
    n times the transfer slope between price and estimate on the rows where the transfer is the slower,
    and taking the ring/Simple plateau's scaled latencies (computed once per p) where it applies."""
    alg_bw = np.asarray(alg_bw)
    inv_bw = np.divide(1e-9, alg_bw, out=np.full(alg_bw.shape, np.nan), where=alg_bw > 0)  # s per byte
    reduced = lv.reduced if primitive in REDUCING else 0.0
    slope = np.maximum(inv_bw, reduced)
    lat_model_s, lat_real_s = np.asarray(lat_model) * 1e-6, np.asarray(lat_real) * 1e-6
    arrays = [inv_bw, reduced, slope, lat_model_s, lat_real_s]
    if plateau:  # x 1.0 leaves a latency as it is: the plateau picks between the two latencies
        factor = tables.RING_PLATEAU_LATENCY_FACTOR[1 if lv.cc >= 80 else 0]
        plateau_from = tables.RING_PLATEAU_MIN_BYTES * lv.channels * lv.p
        arrays += [np.where(lv.multi, plateau_from, np.nan), lat_real_s * factor, lat_model_s * factor]
    shape = np.broadcast_shapes(*(np.shape(x) for x in arrays))
    # rows where n * slope is n * inv_bw: the price shares the estimate's product (None: every row)
    transfer_bound: Any = (slope == inv_bw) | np.isnan(inv_bw)
    transfer_bound = None if np.all(transfer_bound) else transfer_bound
    # the tree's max(inv_bw x correction, reduced) is its first term on every row whatever the size
    tree_bound = name == "tree" and _at_least(inv_bw, _INVERSE_CORRECTION[protocol].min(), reduced)

    def ring_prices(n: np.ndarray, out: Any = None, rows: Rows | None = None) -> tuple[np.ndarray, np.ndarray]:
        if out is None and rows is not None:  # a block without buffers: the same operations into new ones
            block = np.broadcast_shapes(np.shape(n), *(np.shape(rows(x)) for x in arrays))
            return ring_prices(n, (np.empty(block), np.empty(block)), rows)
        if out is None:
            if plateau:  # ring/Simple allreduce across nodes: latency x 1.4 (1.9 before Ampere) past 64 B a channel
                scale = np.where(lv.multi & (n >= plateau_from), factor, 1.0)
                return lat_real_s * scale + n * slope, lat_model_s * scale + n * inv_bw
            return lat_real_s + n * slope, lat_model_s + n * inv_bw
        part = (lambda x: x) if rows is None else rows
        t, e = out
        shared = transfer_bound is None or bool(np.all(part(transfer_bound)))
        np.multiply(n, part(inv_bw if shared else slope), out=t)
        if not shared:
            np.multiply(n, part(inv_bw), out=e)
        if not plateau:
            np.add(t if shared else e, part(lat_model_s), out=e)  # the estimate first: t may be the product
            t += part(lat_real_s)
            return t, e
        past = np.greater_equal(n, part(arrays[5]))
        latency = np.empty_like(t)
        for x, plain, past_plateau in ((e, lat_model_s, arrays[7]), (t, lat_real_s, arrays[6])):
            np.copyto(latency, part(plain))
            np.copyto(latency, part(past_plateau), where=past)
            np.add(t if shared else x, latency, out=x)
        return t, e

    def tree_prices(n: np.ndarray, out: Any = None, rows: Rows | None = None) -> tuple[np.ndarray, np.ndarray]:
        assert correction is not None
        part = (lambda x: x) if rows is None else rows
        corrected = correction(protocol, n, rows)
        per_byte = np.multiply(part(inv_bw), corrected, out=None if out is None else out[1])
        if out is not None and (tree_bound or _at_least(part(inv_bw), np.min(corrected), part(reduced))):
            t = np.multiply(per_byte, n, out=out[0])  # max(per_byte, reduced) is per_byte: share n * per_byte
            np.add(t, part(lat_model_s), out=per_byte)
            t += part(lat_real_s)
            return t, per_byte
        t = np.maximum(per_byte, part(reduced), out=None if out is None else out[0])
        t *= n
        t += part(lat_real_s)
        per_byte *= n
        per_byte += part(lat_model_s)
        return t, per_byte

    def bounds(rows: Rows, low: float, high: float) -> tuple[Any, Any]:
        """The estimate at either end of [low, high], as the prices compute it: it grows with n (and with the
        tree's correction, whose least and greatest on the block's sizes bound it; a plateau bound either
        latency), and rounding keeps the order."""
        w, latency = rows(inv_bw), rows(lat_model_s)
        if name == "tree":
            corrected = correction(protocol, rows.sizes, rows)
            return (np.multiply(np.multiply(w, np.min(corrected)), low) + latency,
                    np.multiply(np.multiply(w, np.max(corrected)), high) + latency)
        at_low, at_high = np.multiply(low, w), np.multiply(high, w)
        if not plateau:
            return at_low + latency, at_high + latency
        return (np.fmin(at_low + latency, at_low + rows(arrays[7])),
                np.fmax(at_high + latency, at_high + rows(arrays[7])))

    return Option(name, tables.PROTOCOLS[protocol], lv.channels, tree_prices if name == "tree" else ring_prices,
                  shape, bounds=bounds)


def _at_least(inv_bw: Any, factor: float, reduced: Any) -> bool:
    """Whether inv_bw * f >= reduced on every row for every f >= ``factor`` (rounding is monotonic), or inv_bw
    is NaN there (NaN either way); a NaN reduction never is."""
    return bool(np.all((np.multiply(inv_bw, factor) >= reduced) | (np.isnan(inv_bw) & ~np.isnan(reduced))))


def _ring(primitive: str, lv: Levels) -> list[Option]:
    nsteps, inter_steps = _steps(primitive, lv.p, lv.nodes)
    out = []
    for q in range(3):
        if q == 1 and not lv.ll128:
            continue
        intra, intra_real, inter, inter_real = lv.hop("ring", q)
        simple = tables.NET_OVERHEAD_SIMPLE_FACTOR if q == 2 else 1.0
        overhead = np.where(lv.nodes > 1, tables.NET_OVERHEAD_US * simple, 0.0)
        base = tables.BASE_LATENCY["ring"][q]
        lat_model = base + (nsteps - inter_steps) * np.maximum(intra, overhead) + inter_steps * inter
        lat_real = base + (nsteps - inter_steps) * np.maximum(intra_real, overhead) + inter_steps * inter_real
        if q == 0:
            bus = np.minimum(lv.ll_max, lv.b_ring * tables.RING_LL_FACTOR)
        elif q == 1:
            factor = np.where(lv.ppn < 2, tables.RING_LL128_FACTOR_ONE_GPU_PER_NODE, tables.RING_LL128_FACTOR)
            bus = np.minimum(lv.b_ring * factor,
                             lv.channels * np.take(tables.PER_CHANNEL_RING_LL128_BW[lv.row], lv.column))
        else:
            bus = lv.b_ring
        plateau = q == 2 and primitive == "allreduce"
        out.append(_option("ring", q, lv, lat_model, lat_real, bus * lv.p / nsteps, primitive, plateau))
    return out


def _tree(lv: Levels) -> list[Option]:
    levels = np.floor(np.log2(lv.nodes))
    base_bus = np.minimum(lv.b_tree * tables.TREE_FACTOR,
                          lv.channels * np.take(tables.PER_CHANNEL_TREE_BW[lv.row], lv.column))
    correction = _TreeCorrection()
    out = []
    for q in range(3):
        if q == 1 and not lv.ll128:
            continue
        intra, intra_real, inter, inter_real = lv.hop("tree", q)
        base = tables.BASE_LATENCY["tree"][q]
        lat_model = base + 2 * ((lv.ppn - 1) * intra + levels * inter)
        lat_real = base + 2 * ((lv.ppn - 1) * intra_real + levels * inter_real)
        if q == 0:
            bus = np.minimum(base_bus / tables.TREE_LL_DIVISOR, lv.ll_max)
        elif q == 1:
            factor = np.where(lv.nodes == 1, tables.TREE_LL128_FACTOR_ONE_NODE, tables.TREE_LL128_FACTOR_NODES)
            cap = lv.channels * np.take(tables.PER_CHANNEL_TREE_LL128_BW[lv.row], lv.column)
            bus = np.minimum(base_bus * factor, cap)
        else:
            bus = base_bus
        out.append(_option("tree", q, lv, lat_model, lat_real, bus * tables.TREE_RATIO, "allreduce",
                           correction=correction))
    return out


def _collnet(lv: Levels) -> Option:
    """CollNet Direct over SHARP switches (Simple only): the switches reduce, each node sends and receives n
    once through its NICs, and its GPUs reduce-scatter and all-gather inside the node (derived here)."""
    intra, intra_real, inter, inter_real = lv.hop("collnet_direct", 2)
    serial = 2 * (np.minimum(1, lv.ppn - 1) * intra + (lv.ppn - 1) * tables.COLLNET_ARITY_LATENCY_US)
    serial_real = 2 * (np.minimum(1, lv.ppn - 1) * intra_real + (lv.ppn - 1) * tables.COLLNET_ARITY_LATENCY_US)
    inside = np.where(lv.ppn > 1, 2 * (lv.ppn - 1) / lv.ppn / lv.b_intra, 0.0)
    alg_bw = 1.0 / np.maximum(1.0 / lv.b_net, inside)
    ok = lv.nodes > 1
    return _option("collnet_direct", 2, lv, np.where(ok, serial + inter, np.nan),
                   np.where(ok, serial_real + inter_real, np.nan), alg_bw, "allreduce")


def _nvls(primitive: str, lv: Levels) -> Option:
    """NVLS (NVLink SHARP) inside one node (Simple only), latency one NVLink hop. NCCL 2.21.5 chooses by busBw =
    NVLS channels (one per GPU) x their speed (:func:`nvls_channel_speed`), algBw 5/6 of it (tuning.cc 170-175,
    212-219, 253-263). The price takes NCCL 2.28's revised NVLS bandwidth (:func:`nvls_bandwidth`) and the
    kernel's pipeline fill (:func:`nvls_pipeline_fill`); the switch reduces (multimem.ld_reduce), so the GPU's
    gamma does not enter."""
    intra, intra_real, _, _ = lv.hop("nvls", 2)
    ok = (lv.nodes == 1) & (lv.ppn > 1)
    speed = nvls_channel_speed(lv.ppn, np.where(np.isfinite(lv.b_intra), lv.b_intra, 0.0), lv.cc)
    lat_model = np.where(ok, intra, np.nan) * 1e-6
    lat_real = np.where(ok, intra_real, np.nan) * 1e-6
    estimate_inv = 1e-9 / (lv.ppn * speed * tables.NVLS_RATIO)  # s per byte
    bw = nvls_bandwidth(primitive, lv.ppn, speed, lv.cc)
    price_inv = np.divide(1e-9, bw, out=np.full(np.shape(bw), np.nan), where=bw > 0)
    shape = np.broadcast_shapes(*(np.shape(x) for x in (lat_model, lat_real, estimate_inv, price_inv)))

    def prices(n: np.ndarray, out: Any = None, rows: Rows | None = None) -> tuple[np.ndarray, np.ndarray]:
        part = (lambda x: x) if rows is None else rows
        fill = nvls_pipeline_fill(primitive, n, part(lv.ppn), part(price_inv))
        if out is None:
            return part(lat_real) + n * part(price_inv) + fill, part(lat_model) + n * part(estimate_inv)
        t, e = out
        np.multiply(n, part(estimate_inv), out=e)
        e += part(lat_model)
        np.multiply(n, part(price_inv), out=t)
        t += part(lat_real)
        t += fill
        return t, e

    def bounds(rows: Rows, low: float, high: float) -> tuple[Any, Any]:
        w, latency = rows(estimate_inv), rows(lat_model)
        return np.multiply(low, w) + latency, np.multiply(high, w) + latency

    return Option("nvls", tables.PROTOCOLS[2], lv.channels, prices, shape, bounds=bounds)


def _all_to_all(lv: Levels) -> Option:
    """Point-to-point all-to-all: n/p to every rank; a node's GPUs share its NICs (derived here)."""
    intra, intra_real, inter, inter_real = lv.hop("ring", 2)
    multi = lv.nodes > 1
    lat_model = tables.BASE_LATENCY["ring"][2] + np.where(multi, inter, intra)
    lat_real = tables.BASE_LATENCY["ring"][2] + np.where(multi, inter_real, intra_real)
    intra_s = np.where(lv.ppn > 1, (lv.ppn - 1) / lv.p / lv.b_intra, 0.0)  # per byte of n, us*1e-3 units
    inter_s = np.where(multi, lv.ppn * (lv.p - lv.ppn) / lv.p / lv.b_net, 0.0)
    alg_bw = 1.0 / np.maximum(np.maximum(intra_s, inter_s), 1e-30)
    return _option("p2p", 2, lv, lat_model, lat_real, alg_bw, "all_to_all")


def _options(primitive: str, p: Any, env: Environment | EnvironmentArray, params: Mapping[str, Any]) -> list[Option]:
    if params:
        raise CommscopeError(f"nccl takes no algorithm parameters, got {', '.join(sorted(params))}")
    lv = Levels(p, env)
    if primitive == "all_to_all":
        return [_all_to_all(lv)]
    out = _ring(primitive, lv)
    if primitive == "allreduce":
        out += _tree(lv)
        if env.sharp:
            out.append(_collnet(lv))
    if env.nvls and primitive in ("allreduce", "allgather", "reduce_scatter"):
        out.append(_nvls(primitive, lv))
    return out


register(Library(
    name="nccl",
    description=f"NVIDIA NCCL {tables.VERSION}: ring/tree (CollNet with SHARP, NVLS on NVLink switches) x "
                "LL/LL128/Simple, chosen by NCCL's own tuning model",
    source=f"NVIDIA/nccl v{tables.VERSION}-1 (ab2b89c4) src/graph/tuning.cc (latencies, bandwidth caps, protocol "
           "factors, time model), src/graph/topo.h, src/enqueue.cc (choice); network terms derived here (module "
           "docstring)",
    primitives=PRIMITIVES,
    options=_options,
))
