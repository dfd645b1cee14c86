"""Preset environments, each with the derivation of its numbers written next to it.

Conventions used below (all per direction, per link):

* Ethernet with TCP: goodput = line rate x 1448/1538 = 0.9415 (1500-byte MTU: 1448 payload bytes
  after IP, TCP and timestamp headers; 1538 bytes on the wire with Ethernet header, FCS, preamble
  and inter-frame gap). Latency is the kernel TCP path, dominated by software.
* InfiniBand and NVLink/PCIe: bandwidth as NVIDIA's NCCL models it (``src/graph/topo.h`` /
  ``topo.cc``: 12 GB/s per 100 Gb/s of IB, PCIe width x speed / 80 GB/s, NVLink 20 GB/s per link
  on V100/A100 and 20.6 GB/s on H100 for 25 GB/s of line rate, i.e. about 80% after NVLink's
  128-byte packet overhead). Latency alpha is NCCL's per-hop latency of its low-latency (LL)
  protocol (``src/graph/tuning.cc`` hwLat, NCCL 2.28: NVLink 0.6 us, PCI 1.0 us, NET 2.7 us),
  which is the protocol NCCL picks for the small messages where alpha matters.
* gamma (s per byte reduced) of a GPU: 3 bytes of memory traffic per byte reduced (two reads and
  a write) over the HBM bandwidth of the GPU named in the preset: V100 900 GB/s, A100 1555 GB/s,
  H100 SXM 3350 GB/s (NVIDIA data sheets). Replace it with your device's when it matters.

Each preset also names the collective library that runs on it (:mod:`costmodels.libraries`): GPU
presets NCCL, with the GPU's compute capability and the kind of link (NVLink, PCIe, network); CPU/Ethernet
presets gloo, the library PyTorch uses on CPUs. ``collective=None`` then means what that library runs.

Interference and host overhead (issue 16; :mod:`costmodels.schedules.engine`): GPU presets of A100 and
H100 take kappa_c = 0.189, the mean slowdown of compute overlapped with communication that Lee et al.
measured ("Characterizing compute-communication overlap in GPU-accelerated distributed deep learning:
performance and power implications", arXiv 2507.03114, 2025: GPT and LLaMA training on 4 x A100, H100,
MI250 and MI210; 18.9% on average, 40.0% at most, against the same compute with no communication).
No published measurement was found for kappa_m (communication slowed by compute), for the per-message
host overhead o, for V100-era GPUs, or for gloo's threads on CPUs: those are 0 pending measurement,
and each preset's source says so.

These are starting points; ``commscope fit`` (measurement issue) replaces them with fitted values.
"""

from __future__ import annotations

import dataclasses

from .environment import Environment
from .registry import Registry

GB = 1e9
TCP_EFFICIENCY = 1448 / 1538
GAMMA_V100 = 3 / 900e9
GAMMA_A100 = 3 / 1555e9
GAMMA_H100 = 3 / 3350e9
NCCL_LL_LATENCY_NET = 2.7e-6
NCCL_LL_LATENCY_PCI = 1.0e-6
NCCL_LL_LATENCY_NVLINK = 0.6e-6

TCP_1STREAM_100G_GBIT = 25.0  # ESnet fasterdata: one stream on a 100G host reaches 15-35 Gb/s
NCCL_SOCKET_100G_BUSBW = 4.7e9  # NVIDIA/nccl#398: NCCL 2.4.8 over TCP sockets on AWS p3dn (100 Gb/s), busbw
KAPPA_C_OVERLAP = 0.189  # Lee et al., arXiv 2507.03114: mean compute slowdown under overlapped communication
TERMS_NOTE = "; interference and overhead: "
OVERLAP_SOURCE = ("kappa_c 0.189: mean slowdown of compute overlapped with communication (max 0.40), Lee et al., "
                  "'Characterizing compute-communication overlap in GPU-accelerated distributed deep learning', "
                  "arXiv 2507.03114, 2025 (GPT and LLaMA on 4 x A100, H100, MI250, MI210)")

PRESETS: Registry[Environment] = Registry("environment preset")


def _terms_note(kwargs: dict[str, object]) -> str:
    """What the preset's kappa_c, kappa_m and host_overhead rest on."""
    pending = "kappa_m and host_overhead 0 pending measurement (no published value found)"
    if kwargs.get("kappa_c"):
        return f"{OVERLAP_SOURCE}; {pending}"
    what = "gloo's threads on CPUs" if kwargs.get("library") == "gloo" else "this GPU"
    return f"kappa_c, kappa_m and host_overhead 0 pending measurement (no published interference value for {what})"


def _preset(**kwargs: object) -> Environment:
    kwargs["source"] = f"{kwargs['source']}{TERMS_NOTE}{_terms_note(kwargs)}"
    return PRESETS.register(Environment(**kwargs))  # type: ignore[arg-type]


GLOO = {"library": "gloo"}
NCCL_V100 = {"library": "nccl", "compute_capability": 70}
NCCL_A100, NCCL_H100 = ({"library": "nccl", "compute_capability": cc, "kappa_c": KAPPA_C_OVERLAP} for cc in (80, 90))


# ---------------------------------------------------------------------------------- Ethernet
_preset(
    name="1GbE",
    **GLOO,
    alpha=50e-6,
    beta=1 / (1e9 / 8 * TCP_EFFICIENCY),
    gamma=GAMMA_V100,
    description="1 Gb/s Ethernet, TCP (117.7 MB/s goodput)",
    source=(
        "line 1 Gb/s x 1448/1538 TCP efficiency = 117.7 MB/s; alpha 50 us: estimate, one-way "
        "latency of small TCP messages on 1GbE NICs is 55-110 us measured as half round trips "
        "(serverfault.com/questions/791539) and ~30-50 us on tuned hosts; gamma: V100"
    ),
)
_preset(
    name="10GbE",
    **GLOO,
    alpha=20e-6,
    beta=1 / (10e9 / 8 * TCP_EFFICIENCY),
    gamma=GAMMA_V100,
    description="10 Gb/s Ethernet, TCP (1.177 GB/s goodput)",
    source=(
        "line 10 Gb/s x 1448/1538 = 1.177 GB/s, which one tuned TCP stream reaches (9.75 Gb/s measured with "
        "iperf3, thoughts.greyh.at/posts/saturating-10-gigabit; untuned at MTU 1500 a BCM57800 gave 7.24 Gb/s, "
        "github.com/shawfdong/hyades/wiki/iperf3); alpha 20 us: application-to-application TCP "
        "latency on tuned 10GbE, Hurwitz & Feng, 'Initial end-to-end performance evaluation of "
        "10-Gigabit Ethernet', HOTI 2003; gamma: V100"
    ),
)
_preset(
    name="25GbE",
    **GLOO,
    alpha=15e-6,
    beta=1 / (25e9 / 8 * TCP_EFFICIENCY),
    gamma=GAMMA_V100,
    description="25 Gb/s Ethernet, TCP (2.94 GB/s goodput)",
    source=(
        "line 25 Gb/s x 1448/1538 = 2.94 GB/s (no published single-stream measurement at 25 Gb/s found: "
        "the line goodput is an upper bound); alpha 15 us: estimate (kernel TCP path, between "
        "the 10GbE and 100GbE values); gamma: V100"
    ),
)
_preset(
    name="100GbE",
    **GLOO,
    alpha=10e-6,
    beta=1 / (TCP_1STREAM_100G_GBIT * 1e9 / 8),
    gamma=GAMMA_A100,
    description="100 Gb/s Ethernet (nominal 11.77 GB/s TCP goodput), one TCP stream per peer as gloo runs it: "
                "25 Gb/s achieved (3.125 GB/s)",
    source=(
        "achieved: one TCP stream on a 100G host 'will range from 15-35 Gbps' with tuning and core choice, ESnet "
        "fasterdata 'Performance expectations for a 100G host' (2024-01-17): 25 Gb/s, the middle of that range; "
        "several streams reach ~90 Gb/s there (iperf3 -P 12). gloo's TCP transport is one connection per pair of "
        "ranks. Nominal: line 100 Gb/s x 1448/1538 = 11.77 GB/s. alpha 10 us: estimate (kernel TCP path); "
        "gamma: A100"
    ),
)
# -------------------------------------------------------------------------------- InfiniBand
_preset(
    name="IB-EDR",
    **NCCL_V100,
    alpha=NCCL_LL_LATENCY_NET,
    beta=1 / (12 * GB),
    gamma=GAMMA_V100,
    description="100 Gb/s InfiniBand EDR, RDMA (12 GB/s)",
    source=(
        "4 lanes x 25.78125 Gb/s with 64b/66b = 100 Gb/s; 12 GB/s as NCCL models it "
        "(topo.h NET_BW 12.0 for 100 Gbit; perftest ib_write_bw reports ~11.7 'MB/s' x 1e3 on "
        "100 Gb/s, linux-rdma/perftest#225); alpha 2.7 us: NCCL tuning.cc NET hwLat (Ring, LL); "
        "gamma: V100"
    ),
)
_preset(
    name="IB-HDR",
    **NCCL_A100,
    alpha=NCCL_LL_LATENCY_NET,
    beta=1 / (24 * GB),
    gamma=GAMMA_A100,
    description="200 Gb/s InfiniBand HDR, RDMA (24 GB/s)",
    source=(
        "4 lanes x 50 Gb/s = 200 Gb/s (NCCL ibvSpeeds); 24 GB/s = NCCL's 12 GB/s per 100 Gb/s; "
        "alpha 2.7 us: NCCL tuning.cc NET hwLat (Ring, LL); gamma: A100"
    ),
)
_preset(
    name="IB-NDR",
    **NCCL_H100,
    alpha=NCCL_LL_LATENCY_NET,
    beta=1 / (48 * GB),
    gamma=GAMMA_H100,
    description="400 Gb/s InfiniBand NDR, RDMA (48 GB/s)",
    source=(
        "4 lanes x 100 Gb/s = 400 Gb/s (NCCL ibvSpeeds); 48 GB/s = NCCL's 12 GB/s per 100 Gb/s; "
        "alpha 2.7 us: NCCL tuning.cc NET hwLat (Ring, LL); gamma: H100"
    ),
)
# ---------------------------------------------------------------------------------- PCIe
_preset(
    name="PCIe3x16",
    link="pcie",
    **NCCL_V100,
    alpha=NCCL_LL_LATENCY_PCI,
    beta=1 / (12 * GB),
    gamma=GAMMA_V100,
    description="PCIe 3.0 x16 (12 GB/s)",
    source=(
        "8 GT/s x 16 lanes x 128/130 = 15.75 GB/s raw; about 14.4 GB/s after TLP headers "
        "(256-byte payloads); 12 GB/s as NCCL models it (topo.cc: width 16 x 60 / 80); "
        "alpha 1.0 us: NCCL tuning.cc PCI hwLat (Ring, LL); gamma: V100"
    ),
)
_preset(
    name="PCIe4x16",
    link="pcie",
    **NCCL_A100,
    alpha=NCCL_LL_LATENCY_PCI,
    beta=1 / (24 * GB),
    gamma=GAMMA_A100,
    description="PCIe 4.0 x16 (24 GB/s)",
    source=(
        "16 GT/s x 16 lanes x 128/130 = 31.5 GB/s raw; 24 GB/s as NCCL models it "
        "(topo.cc: width 16 x 120 / 80); alpha 1.0 us: NCCL tuning.cc PCI hwLat (Ring, LL); "
        "gamma: A100"
    ),
)
_preset(
    name="PCIe3x16-noP2P",
    alpha=NCCL_LL_LATENCY_PCI,
    beta=1 / (3.9 * GB),
    gamma=3 / 616e9,
    link="pcie",
    library="nccl",
    compute_capability=75,
    description="PCIe 3.0 x16 GPUs without peer-to-peer (NCCL's SHM transport through host memory): 3.9 GB/s achieved "
                "each way with both directions busy, as a ring runs (12 GB/s nominal; 10.3 GB/s one way)",
    source=(
        "ACHIEVED: NCCL's SHM transport on 2 GPUs over PCIe 3.0 x16 with P2P disabled, nccl-tests peak busbw: "
        "allreduce 3.9, allgather and reduce-scatter 3.17 GB/s, broadcast 10.31 and reduce 9.62 GB/s (one way); "
        "NCCL answers that some CPUs handle bidirectional traffic poorly (github.com/NVIDIA/nccl/issues/384, NCCL "
        "2.4.8). cudaMemcpyPeer's host-staged copy measures 5.71 GB/s one way (p2pBandwidthLatencyTest, 2x RTX "
        "2080 Ti, github.com/Anthony-Hoo/Anthony-Hoo.github.io posts/AutoDL_Multi-GPU_Interconnection_Test.md "
        "@37e805e8), but NCCL does not take that path. One bandwidth for both directions: p = 2 broadcast and "
        "reduce, which flow one way, are priced 2.6x too slow. Nominal PCIe 3.0 x16 is 12 GB/s as NCCL models it; "
        "alpha 1.0 us: NCCL tuning.cc PCI hwLat (Ring, LL); gamma: RTX 2080 Ti 616 GB/s GDDR6; cc 7.5 (no LL128)"
    ),
)
# -------------------------------------------------------------------------------- NVLink
_preset(
    name="NVLink-V100",
    link="nvlink",
    **NCCL_V100,
    alpha=NCCL_LL_LATENCY_NVLINK,
    beta=1 / (6 * 20 * GB),
    gamma=GAMMA_V100,
    description="NVLink 2.0 of V100 (6 links, 120 GB/s)",
    source=(
        "6 links x 25 GB/s = 150 GB/s line rate per direction (DGX-1V); 20 GB/s per link after "
        "128-byte packet overhead as NCCL models it (SM70_NVLINK_BW 20.0) = 120 GB/s; "
        "alpha 0.6 us: NCCL tuning.cc NVLINK hwLat (Ring, LL); gamma: V100"
    ),
)
_preset(
    name="NVLink-A100",
    link="nvlink",
    **NCCL_A100,
    alpha=NCCL_LL_LATENCY_NVLINK,
    beta=1 / (12 * 20 * GB),
    gamma=GAMMA_A100,
    description="NVLink 3.0 of A100 (12 links, 240 GB/s)",
    source=(
        "12 links x 25 GB/s = 300 GB/s line rate per direction; NCCL models 20 GB/s per link "
        "(SM80_NVLINK_BW 20.0) = 240 GB/s; nccl-tests allreduce busbw ~230 GB/s on DGX A100 "
        "(NVIDIA/nccl-tests#149); alpha 0.6 us: NCCL hwLat (Ring, LL); gamma: A100"
    ),
)
_preset(
    name="NVLink-H100",
    link="nvlink",
    nvls=True,
    **NCCL_H100,
    alpha=NCCL_LL_LATENCY_NVLINK,
    beta=1 / (18 * 20.6 * GB),
    gamma=GAMMA_H100,
    description="NVLink 4.0 of H100 (18 links, 370.8 GB/s)",
    source=(
        "18 links x 25 GB/s = 450 GB/s line rate per direction; NCCL models 20.6 GB/s per link "
        "(SM90_NVLINK_BW 20.6) = 370.8 GB/s; nccl-tests ring allreduce busbw ~370 GB/s on "
        "DGX H100 (NVIDIA/nccl-tests#212; NVLS reaches ~480); alpha 0.6 us: NCCL hwLat "
        "(Ring, LL); gamma: H100"
    ),
)
PRESETS.register(dataclasses.replace(
    PRESETS.get("NVLink-H100"), name="NVLink-H100-ring", nvls=False,
    description="NVLink 4.0 of H100 with NVLink SHARP off (NCCL_NVLS_ENABLE=0): NCCL runs ring and tree only",
    source="NVLink-H100 with nvls=False, what NCCL_NVLS_ENABLE=0 leaves (the switches' in-network reduction unused). "
           + PRESETS.get("NVLink-H100").source,
))
# ------------------------------------------------------------------------------ two levels


def _two_level(name: str, intra: str, inter: str, gpus: int, nics: int, description: str) -> None:
    i, o = PRESETS.get(intra), PRESETS.get(inter)
    _preset(
        name=name,
        library="nccl",
        intra_link=i.link,
        compute_capability=i.compute_capability,
        nvls=i.nvls,
        alpha=o.alpha,
        beta=o.beta,
        gamma=i.gamma,
        intra_alpha=i.alpha,
        intra_beta=i.beta,
        gpus_per_node=gpus,
        nics_per_node=nics,
        kappa_c=i.kappa_c,  # the GPU's
        description=description,
        source=(f"intra-node: preset {intra} ({i.source.split(TERMS_NOTE)[0]}); inter-node: preset {inter} "
                f"({o.source.split(TERMS_NOTE)[0]})"),
    )


_two_level(
    "4xPCIe3+10GbE", "PCIe3x16", "10GbE", 4, 1,
    "nodes of 4 GPUs on PCIe 3.0 x16 joined by one 10GbE NIC each",
)
_two_level(
    "8xV100-NVLink+IB-EDR", "NVLink-V100", "IB-EDR", 8, 4,
    "DGX-1V-like: 8 x V100 on NVLink 2.0, 4 x 100 Gb EDR NICs per node",
)
_preset(
    name="8xV100-NVLink+100GbE-sockets",
    library="nccl",
    intra_link="nvlink",
    compute_capability=70,
    alpha=NCCL_LL_LATENCY_NET,
    beta=1 / NCCL_SOCKET_100G_BUSBW,
    gamma=GAMMA_V100,
    intra_alpha=NCCL_LL_LATENCY_NVLINK,
    intra_beta=1 / (6 * 20 * GB),
    gpus_per_node=8,
    nics_per_node=1,
    description="AWS p3dn-like: 8 x V100 on NVLink 2.0, one 100 Gb/s Ethernet NIC (nominal 12.5 GB/s) used by NCCL "
                "over TCP sockets: 4.7 GB/s achieved; beside 8xV100-NVLink+IB-EDR, sockets against RDMA",
    source=(
        "inter-node achieved: nccl-tests all_reduce_perf busbw ~4.7 GB/s from 8 MB to 256 MB between two p3dn.24xlarge "
        "(100 Gb/s TCP, NCCL 2.4.8 socket transport; more socket threads did not help), github.com/NVIDIA/nccl/"
        "issues/398; 4 nodes of 8 V100 on 100 Gb/s TCP gave 4-6 GB/s, NVIDIA/nccl#450. alpha: NCCL's NET hwLat "
        "2.7 us (a lower bound for the socket path); intra-node: preset NVLink-V100 (6 x 20 GB/s); gamma: V100"
    ),
)
_two_level(
    "8xA100-NVLink+IB-HDR", "NVLink-A100", "IB-HDR", 8, 8,
    "DGX A100-like: 8 x A100 on NVLink 3.0, 8 x 200 Gb HDR NICs per node",
)
_two_level(
    "8xH100-NVLink+IB-NDR", "NVLink-H100", "IB-NDR", 8, 8,
    "DGX H100-like: 8 x H100 on NVLink 4.0, 8 x 400 Gb NDR NICs per node",
)
_preset(
    name="8xH100-NVLink+8x200Gb-TCPXO",
    alpha=NCCL_LL_LATENCY_NET,
    beta=1 / (24 * GB),
    gamma=GAMMA_H100,
    intra_alpha=NCCL_LL_LATENCY_NVLINK,
    intra_beta=1 / (18 * 20.6 * GB),
    gpus_per_node=8,
    nics_per_node=8,
    library="nccl",
    intra_link="nvlink",
    compute_capability=90,
    kappa_c=KAPPA_C_OVERLAP,
    description="Google Cloud A3 Mega-like: 8 x H100 on NVLink 4.0, 8 x 200 Gb/s NICs per node (GPUDirect-TCPXO)",
    source=(
        "intra-node: preset NVLink-H100 (18 x 20.6 GB/s); inter-node: A3 Mega's 8 NICs of 200 Gb/s (Google Cloud "
        "A3 machine series documentation), 24 GB/s each as NCCL models 200 Gb/s (12 GB/s per 100 Gb/s); alpha: "
        "NCCL's NET hwLat 2.7 us, a placeholder: the TCPXO path's latency is not published (the 2-node nccl-tests "
        "table in github.com/lessizzmore/create-a3mega-ztan-fork shows ~123 us for small allreduces)"
    ),
)
