"""The fusion schedule's buckets are the ones PyTorch DDP builds, as the runner constructs it.

The runner (runners/training/exact_allreduce.py) passes ``bucket_cap_mb`` to DDP. In the installed torch
(2.13, torch/nn/parallel/distributed.py ``_BucketCapacityConfig.create``) the 1 MiB first bucket applies only
when ``bucket_cap_mb`` is left at None; an explicit one caps the first bucket too, and the prediction of a
run (``runners.training.pricing.schedule_call``) prices it so. DDP's rebuilt buckets are read from its own
logging data after a few steps of one rank (a subprocess: a process group is global state).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from scripts import load_script

from costmodels.schedules import DDP_FIRST_BUCKET_BYTES
from costmodels.schedules.blocks import greedy_buckets
from runners.training.pricing import schedule_call

_DDP = r"""
import json, sys, tempfile, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
out = {}
for cap in (None, 25.0, 4.0):
    m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 512))
    d = DDP(m) if cap is None else DDP(m, bucket_cap_mb=cap)
    for _ in range(3):
        d(torch.randn(4, 512)).sum().backward()
    data = d._get_ddp_logging_data()
    out[str(cap)] = [int(x) for x in data["rebuilt_bucket_sizes"].split(",")]
dist.destroy_process_group()
print(json.dumps(out))
"""


def _model_buckets(cap: float, first: float) -> list[int]:
    # gradients in ready order (the last layer first): bias then weight of each Linear, from the last one
    grads = []
    for n_in, n_out in [(1024, 512), (1024, 1024), (512, 1024)]:
        grads += [4 * n_out, 4 * n_in * n_out]
    sizes = np.array(grads, dtype=float)
    return [int(sizes[g].sum()) for g in greedy_buckets(sizes, cap, first)]


def test_model_buckets_are_ddps_buckets() -> None:
    done = subprocess.run([sys.executable, "-c", _DDP], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ddp = json.loads(done.stdout.strip().splitlines()[-1])
    # DDP's defaults: first bucket 1 MiB (the last layer's 2 MiB weight and bias close it), then 25 MiB
    assert ddp["None"] == _model_buckets(25 * 2**20, DDP_FIRST_BUCKET_BYTES) == [2099200, 6299648]
    # an explicit bucket_cap_mb is the first bucket's cap too: 25 MiB holds all 8.4 MB in one bucket ...
    assert ddp["25.0"] == _model_buckets(25 * 2**20, 25 * 2**20) == [8398848]
    # ... and 4 MiB closes the first bucket at 2.1 + 4.2 MB, not at 1 MiB
    assert ddp["4.0"] == _model_buckets(4 * 2**20, 4 * 2**20) == [6297600, 2101248]


def test_a_run_of_fusion_is_priced_with_its_first_bucket_at_the_cap() -> None:
    schedule, _, opts = schedule_call("fusion", {"bucket_cap_mb": 4.0})
    assert schedule == "fusion" and opts["bucket_bytes"] == opts["first_bucket_bytes"] == 4 * 2**20
    _, _, default = schedule_call("fusion", {})  # the runner's default, 25 MiB, is handed to DDP explicitly too
    assert default["bucket_bytes"] == default["first_bucket_bytes"] == 25 * 2**20


def test_overlap_diagnostics_bench_refuses_a_single_rank(capsys) -> None:
    bench = load_script("bench/bench_overlap_diagnostics.py")
    assert bench.main(["--nodes", "1", "--ranks-per-node", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["commscope: error: need at least 2 ranks and 1 repeat, got --nodes 1 --ranks-per-node 1 "
                   "--repeats 2"]
