"""The interference and overhead terms commscope assumes when none were calibrated: one entry per kind of system.

An environment's ``kappa_c``, ``kappa_m`` and ``host_overhead`` (:mod:`costmodels.environment`) are what
``commscope calibrate`` fits on a person's own cluster. Before that, a prediction can only use what was
measured on systems of the same kind; :func:`default_terms` gives those values with their source, by the
environment's collective library (which says whether the ranks are GPUs under NCCL or CPU processes under
gloo). A term with no published or measured value is 0 and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .cpu_sharing import SharedHost, cpu_sharing_terms


@dataclass(frozen=True)
class DefaultTerms:
    """Default interference and overhead terms of one kind of system, each with where it comes from."""

    kind: str
    kappa_c: float
    kappa_m: float
    host_overhead: float
    sources: Mapping[str, str]
    contended_step: float = 0.0
    compute_loss_step: float = 0.0

    def values(self) -> dict[str, float]:
        return {"kappa_c": self.kappa_c, "kappa_m": self.kappa_m, "host_overhead": self.host_overhead,
                "contended_step": self.contended_step, "compute_loss_step": self.compute_loss_step}


NO_STEP_GPU = "NCCL's kernels progress on the GPU whatever the host threads do: no contended step, 0"
SHARED_STEP = ("measured on 4 gloo ranks over 2 cores: 4-11 ms per latency step in a real backward "
               "(bench/results/bench_overlap_wfbp_*.json, bench_overlap_timing_2500mbit.json; 10-21 ms beside a "
               "matmul loop, bench_overlap_progress_*.json). Not a default (0): priced on the sweep's alpha it made "
               "(c) worse on six of seven runs, because that alpha over-prices a back-to-back 1 KB all-reduce "
               "(by 27% and 39% at the median of two runs' cells, against validate's latency probes, "
               "runners/validate/latency.py); with the probes' latency, 7.5 ms "
               "took (c) from 5.8/28.1% to 4.8/24.6% (median/max) on one run and from 5.7/27.2% to 5.3/28.1% on the "
               "next, not better on both (README, Validation): calibrate it with --terms ...,contended_step")


GPU_NCCL = DefaultTerms(
    "A100/H100-class GPU ranks, NCCL", kappa_c=0.189, kappa_m=0.0, host_overhead=0.0,
    sources={
        "kappa_c": "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning "
                   "(arXiv:2507.03114, 2025), abstract: overlapping computation with communication slows the "
                   "computation by 18.9% on average (max 40.0%) over GPT and LLaMA training on 4 A100, H100, "
                   "MI250 and MI210",
        "kappa_m": "no published measurement of NCCL's slowdown under concurrent compute found: 0",
        "host_overhead": "PyTorch's host overhead per torch.distributed call is 20-30 us (stas00/ml-engineering "
                         "network/benchmarks/README.md; 17.8-21.6 us between the shipped one-call and queued 8x H200 "
                         "tables, costmodels/harness.py), but it is 0 here: a schedule's o is charged on the thread "
                         "that also runs compute and is taken out of the message's price, which fits CPU ranks whose "
                         "sweep timed blocking calls; a GPU's host runs ahead of its kernels and NCCL's model prices "
                         "device time, so neither holds there",
        "contended_step": NO_STEP_GPU,
        "compute_loss_step": "NCCL's kernels take SMs, priced by kappa_c; no host thread per step: 0",
    })
CPU_GLOO = DefaultTerms(
    "CPU ranks, gloo", kappa_c=0.0, kappa_m=0.0, host_overhead=0.0,
    sources={
        "kappa_c": "not yet measured: 0",
        "kappa_m": "not yet measured: 0",
        "host_overhead": "not yet measured: 0",
        "contended_step": "not measured on hosts with spare cores: 0",
        "compute_loss_step": "no host given: its cores and the sweep's CPU per step unknown, 0",
    })
OLDER_GPU_NCCL = DefaultTerms(
    "GPU ranks before A100, NCCL", 0.0, 0.0, 0.0,
    {"kappa_c": "arXiv:2507.03114 measured A100, H100, MI250 and MI210 only; no published value for older GPUs: 0",
     "kappa_m": GPU_NCCL.sources["kappa_m"], "host_overhead": GPU_NCCL.sources["host_overhead"],
     "contended_step": NO_STEP_GPU, "compute_loss_step": GPU_NCCL.sources["compute_loss_step"]})
NONE = DefaultTerms("no interference or overhead assumed (ideal, mpich)", 0.0, 0.0, 0.0,
                    {"kappa_c": "no default for this library", "kappa_m": "no default for this library",
                     "host_overhead": "no default for this library", "contended_step": "no default for this library",
                     "compute_loss_step": "no default for this library"})


def shared_cores_entry(env: Any, host: SharedHost) -> DefaultTerms:
    """CPU ranks under gloo on ``host``, whose cores also run their communication: kappa_c and kappa_m derived
    from the host's CPU cost per byte and the environment's beta and gamma (:mod:`costmodels.cpu_sharing`)."""
    t = cpu_sharing_terms(env, host)
    why = (f"derived (costmodels.cpu_sharing): {host.ranks} ranks on {host.cores:g} cores keep "
           f"{t['load_cores']:.2f} cores busy communicating at the link's rate (c = {host.cpu_s_per_byte * 1e9:.3g} "
           f"ns/B{'; ' + host.source if host.source else ''}; gamma = {env.gamma:.3g} s/B), of a fair share of "
           f"{t['fair_cores']:.2f}")
    loss = (f"derived (costmodels.cpu_sharing): {host.ranks} ranks on {host.cores:g} cores, each step "
            f"{host.cpu_s_per_step * 1e3:.3g} ms of CPU per rank (the sweep's fit), x ranks / cores"
            if host.cpu_s_per_step > 0 else "the sweep's CPU per step unknown: 0")
    return DefaultTerms("CPU ranks, gloo, sharing cores with their network", t["kappa_c"], t["kappa_m"], 0.0,
                        {"kappa_c": why, "kappa_m": why, "host_overhead": CPU_GLOO.sources["host_overhead"],
                         "contended_step": SHARED_STEP, "compute_loss_step": loss},
                        compute_loss_step=t["compute_loss_step"])


def default_entry(env: Any, host: SharedHost | None = None) -> DefaultTerms:
    """The defaults that apply to ``env`` (by its library and, under NCCL, its GPU), with their sources; the same
    values the presets carry (:mod:`costmodels.presets`). Under gloo, with the ``host`` the ranks share (cores,
    ranks and its CPU cost per byte), interference derived from it (:func:`shared_cores_entry`)."""
    library = getattr(env, "library", "ideal")
    if library == "nccl":
        cc = getattr(env, "compute_capability", None)
        return GPU_NCCL if cc is not None and cc >= 80 else OLDER_GPU_NCCL
    if library == "gloo":
        return CPU_GLOO if host is None else shared_cores_entry(env, host)
    return NONE


def default_terms(env: Any, host: SharedHost | None = None) -> dict[str, float]:
    """``{kappa_c, kappa_m, host_overhead, contended_step, compute_loss_step}`` that commscope ships for ``env``'s
    kind of system (and ``host``)."""
    return default_entry(env, host).values()
