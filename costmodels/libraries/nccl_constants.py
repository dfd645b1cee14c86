"""NCCL's tuning-model constants, as NCCL 2.21.5 ships them (github.com/NVIDIA/nccl, tag v2.21.5-1, commit
ab2b89c4c339bd7f816fbc114a4b05d386b66290). Units: microseconds and GB/s (1e9 B/s), as in the source.

Each table names the file and lines it was read from. Indices follow ``src/include/nccl_common.h``:
algorithms TREE, RING, COLLNET_DIRECT, NVLS; protocols LL, LL128, SIMPLE; hardware NVLINK, PCI, NET.
Constants differ between releases (e.g. 2.18.3 has NVLink tree/Simple latency 4 us, not 28, and a ring LL
factor of 1/4 or 1/3, not 1/2): they are NCCL 2.21's, named ``VERSION``.
"""

from __future__ import annotations

VERSION = "2.21.5"
PROTOCOLS = ("LL", "LL128", "Simple")
HARDWARE = ("nvlink", "pcie", "network")  # NCCL's NVLINK, PCI, NET latency classes

# baseLat[algorithm][protocol], us (src/graph/tuning.cc 56-59)
BASE_LATENCY = {
    "tree": (6.8, 14.0, 0.0),
    "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0),
}
# hwLat[hardware][algorithm][protocol], us per hop (src/graph/tuning.cc 62-78)
HW_LATENCY = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0.0, 0.0, 3.7),
               "nvls": (0.0, 0.0, 25.0)},
    "pcie": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0.0, 0.0, 3.7),
             "nvls": (0.0, 0.0, 0.0)},
    "network": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0.0, 0.0, 31.0),
                "nvls": (0.0, 0.0, 18.0)},
}
# Rows by GPU architecture (tuning.cc 139): Volta (cc < 80), Ampere (80 <= cc < 90), Hopper (cc >= 90);
# columns by node count (tuning.cc 142): 1 node, 2 nodes, more.
# llMaxBws: a total LL cap; a single node takes its architecture's row, several nodes row 0 (Intel CPUs;
# row 1 on AMD) (tuning.cc 81-85, 144)
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0))
PER_CHANNEL_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))  # tuning.cc 87-91
PER_CHANNEL_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))  # tuning.cc 92-96
PER_CHANNEL_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))  # tuning.cc 97-106
# Protocol efficiency factors on the bus bandwidth (tuning.cc 180-185)
RING_LL_FACTOR = 0.5  # LL lines carry 8 data bytes in 16 (device.h 38-51)
RING_LL128_FACTOR = 0.92  # "0.92 /*120.0/128.0*/": one 8-byte flag per 128-byte line; 0.7 with < 2 GPUs a node
RING_LL128_FACTOR_ONE_GPU_PER_NODE = 0.7
TREE_FACTOR = 0.92
TREE_LL_DIVISOR = 3.8
TREE_LL128_FACTOR_ONE_NODE = 7.0 / 9.0
TREE_LL128_FACTOR_NODES = 120.0 / 128.0
# bus -> algorithm bandwidth (tuning.cc 212-219): tree and CollNet 0.5, NVLS 5/6, ring nRanks/nsteps
TREE_RATIO = 0.5
NVLS_RATIO = 5.0 / 6.0
# The NVLS graph (src/graph/search.cc): one channel per GPU of the node ("NVLS search must have ngpus heads",
# 893-901), each at the fastest intra-node speed of the architecture's array (850-856) whose paths fit: channel
# g pulls from every GPU through the NVSwitch at that speed, twice from GPU g itself (ncclTopoSearchTryNvls,
# 342-357), so a GPU's NVLinks carry (ngpus + 1) x speed. DupChannels skips NVLS (837); pass 2 raises only
# bwInter, and a single node's bandwidth is min(bwIntra, bwInter) (tuning.cc 175).
# NVLS kernels (NCCL 2.21.5): 16 channels (src/transport/nvls.cc 232, NCCL_NVLS_NCHANNELS), a chunk of 128 KiB
# (233, NCCL_NVLS_CHUNKSIZE) that enqueue.cc (1742-1750) halves to 64 KiB when nBytes < 64 x ops x chunk, to 32 KiB
# when < 8 x ops x chunk, to 16 KiB when < 2 x ops x chunk, ops = nChannels x nHeads (one head per GPU of the node),
# each rule on the chunk the one before left. nBytes is the whole buffer (allgather, reduce-scatter: x nRanks,
# include/info.h 84). The kernels' pipeline stages per channel: allreduce scatter -> NVLS reduce -> gather
# (device/all_reduce.h, oneNode), allgather NVLS broadcast -> gather, reduce-scatter scatter -> NVLS reduce.
NVLS_CHANNELS = 16
NVLS_CHUNK_BYTES = 131072
NVLS_CHUNK_HALVING = ((64, 65536), (8, 32768), (2, 16384))  # (x ops x chunk, the smaller chunk)
NVLS_PIPELINE_STAGES = {"allreduce": 3, "allgather": 2, "reduce_scatter": 2}
# NCCL 2.28 replaced 2.21's NVLS algBw = 5/6 x busBw by a bandwidth per NVLS graph channel of bwIntra x efficiency x
# (nChannels - 1) / nChannels, x 2 for allreduce ("AllReduce pipelines two operations"), x (ppn - 1) / ppn otherwise;
# allreduce's algBw is then busBw x nRanks / (2 (nRanks - 1)), allgather's and reduce-scatter's is busBw
# (tag v2.30.7-1, src/graph/tuning.cc 139-144 and 307-318, 376-381). Efficiency by architecture: Hopper, Blackwell.
NVLS_EFFICIENCY_V2_28 = {90: 0.85, 100: 0.74}
SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)  # before sm90 (850)
SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)  # sm90 and later (855)
# treeCorrectionFactor[protocol][log2(nBytes / 64)] for 64 B .. 256 MiB (tuning.cc 412-416)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
NET_OVERHEAD_US = 1.0  # getNetOverhead on Intel x86 (tuning.cc 108-118); x3 for Simple (241-248)
NET_OVERHEAD_SIMPLE_FACTOR = 3.0
RING_PLATEAU_LATENCY_FACTOR = (1.9, 1.4)  # ring/Simple allreduce on > 1 node: cc < 80, cc >= 80 (tuning.cc 429-431)
RING_PLATEAU_MIN_BYTES = 64  # ... when nBytes / (nChannels * nRanks) >= 64
COLLNET_ARITY_LATENCY_US = 0.4  # CollNetDirect "arity serialization" per GPU of a node (tuning.cc 253-256)
LL128_ARCHITECTURES = (70, 80, 90)  # LL128 is on by default only for these (tuning.cc 300-320)
MAX_CHANNELS = 32  # MAXCHANNELS (device.h)
CHANNEL_GBPS = 20.0  # SM70/SM80_NVLINK_BW, one NVLink's worth: the per-channel speed NCCL's search settles on
