"""DDP broadcasts the module's buffers before every forward (``broadcast_buffers=True``, its default), and the fusion
schedule prices it.

``DistributedDataParallel.forward`` -> ``_pre_forward`` -> ``_sync_buffers`` -> ``dist._broadcast_coalesced`` from
rank 0: the buffers flattened into one message per dtype (buckets of at most 250 MiB, ``comm.cpp``), blocking.
BatchNorm's running mean and variance (float32) and ``num_batches_tracked`` (int64) make two messages. Measured on
2 x 2 gloo ranks at 1 Gbit/s (resnet_small, batch 32, 4,600 B of buffers): DDP's forward took 87.8 / 93.9 ms with
them and 84.9 / 81.6 ms without (two alternations, means of 20 iterations), a lone broadcast of 4,600 B 1.1 ms;
gpt_wide has no buffers. Validation found DDP on resnet_small 3-7% slower than one flat all-reduce after backward
on every run, where the schedule priced them the same.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

import costmodels as cm
from costmodels.errors import CommscopeError
from costmodels.schedules.blocks import DDP_BROADCAST_BUCKET_BYTES, buffer_broadcast_labels, buffer_broadcasts

MS = 1e-3
MiB = 2**20


def _profile(buffers: dict | None = None) -> cm.ModelProfile:
    layers = (cm.Layer("a", 1000, 4000.0, 2 * MS, 4 * MS), cm.Layer("b", 2000, 8000.0, 3 * MS, 6 * MS))
    meta = {} if buffers is None else {"buffers": buffers}
    return cm.ModelProfile("toy", layers, "cpu", "float32", 8, "estimated", "test", meta)


ENV = cm.Environment(alpha=1 * MS, beta=1e-9, name="toy link")
BINOMIAL = {"allreduce": "ring_allreduce", "broadcast": "binomial_broadcast"}
BN = {"float32": 4480, "int64": 120}  # resnet_small's: 15 BatchNorm layers


def test_one_message_per_dtype_in_buckets_of_250_mib() -> None:
    assert list(buffer_broadcasts(_profile(BN))) == [4480.0, 120.0]
    assert list(buffer_broadcasts(_profile({"float32": 600 * MiB}))) == [250.0 * MiB, 250.0 * MiB, 100.0 * MiB]
    assert DDP_BROADCAST_BUCKET_BYTES == 250 * MiB
    big = _profile({"float32": 600 * MiB, "int64": 8})
    assert buffer_broadcast_labels(big) == ["buffers (float32)"] * 3 + ["buffers (int64)"]
    casts = [e for e in cm.simulate(big, ENV, 2, "fusion", BINOMIAL).timeline.events if e.kind == "broadcast"]
    assert [e.nbytes for e in casts] == [250.0 * MiB, 250.0 * MiB, 100.0 * MiB, 8.0]  # each on the timeline
    assert all(a.end == pytest.approx(b.start) for a, b in itertools.pairwise(casts))
    assert buffer_broadcasts(_profile()).size == 0 and buffer_broadcasts(_profile({"float32": 0})).size == 0
    assert _profile(BN).buffer_bytes == {"float32": 4480.0, "int64": 120.0}


def test_fusion_is_longer_by_the_broadcasts_in_every_path() -> None:
    # binomial broadcast on 4 ranks: ceil(log2 4) (alpha + n beta) = 2 (1 ms + 4480 ns) = 2.00896 ms for the floats
    # and 2 (1 ms + 120 ns) = 2.00024 ms for the counters: 4.0092 ms before forward, nothing beside them
    extra = 2 * (MS + 4480e-9) + 2 * (MS + 120e-9)
    assert extra == pytest.approx(4.0092 * MS, rel=1e-12)
    plain, bn = _profile(), _profile(BN)
    base = cm.simulate(plain, ENV, 4, "fusion", BINOMIAL)
    with_bn = cm.simulate(bn, ENV, 4, "fusion", BINOMIAL)
    assert with_bn.iteration_time - base.iteration_time == pytest.approx(extra, rel=1e-9)
    assert with_bn.details["buffer_broadcast_s"] == pytest.approx(extra, rel=1e-9)
    casts = [e for e in with_bn.timeline.events if e.kind == "broadcast"]
    assert [(e.label, e.start, e.nbytes) for e in casts] == [
        ("buffers (float32)", 0.0, 4480.0), ("buffers (int64)", pytest.approx(2.00896 * MS), 120.0)]
    first_forward = min(e.start for e in with_bn.timeline.events if e.kind == "forward")
    assert first_forward == pytest.approx(extra, rel=1e-9)
    # the interference engine (o, kappa) and cm.sweep add the same: o + the link's time is each blocking call's price
    terms = ENV.with_(host_overhead=0.2 * MS, kappa_c=0.5, kappa_m=0.3)
    t_plain = cm.simulate(plain, terms, 4, "fusion", BINOMIAL).iteration_time
    t_bn = cm.simulate(bn, terms, 4, "fusion", BINOMIAL)
    assert t_bn.iteration_time - t_plain == pytest.approx(extra, rel=1e-9)
    assert min(e.start for e in t_bn.timeline.events if e.kind == "forward") == pytest.approx(extra, rel=1e-9)
    swept = cm.sweep(bn, [ENV, terms], [2, 4], "fusion", BINOMIAL).iteration_time
    assert swept[0, 1] == pytest.approx(with_bn.iteration_time, rel=1e-12)
    assert swept[1, 1] == pytest.approx(t_bn.iteration_time, rel=1e-12)
    two = 1 * (MS + 4480e-9) + 1 * (MS + 120e-9)  # p = 2: one step each
    assert swept[0, 0] - cm.simulate(plain, ENV, 2, "fusion", BINOMIAL).iteration_time == pytest.approx(two, rel=1e-9)


def test_no_broadcast_without_buffers_without_the_option_or_alone() -> None:
    bn = _profile(BN)
    off = cm.simulate(bn, ENV, 4, "fusion", BINOMIAL, broadcast_buffers=False).iteration_time
    assert off == cm.simulate(_profile(), ENV, 4, "fusion", BINOMIAL).iteration_time
    assert cm.sweep(bn, [ENV], [4], "fusion", BINOMIAL, broadcast_buffers=False).iteration_time[0, 0] == \
        pytest.approx(off, rel=1e-12)
    assert cm.simulate(bn, ENV, 1, "fusion", BINOMIAL).iteration_time == pytest.approx(bn.compute_s)
    with pytest.raises(CommscopeError, match="broadcast_buffers must be True or False, got 'yes'"):
        cm.simulate(bn, ENV, 4, "fusion", BINOMIAL, broadcast_buffers="yes")
    # other schedules do not broadcast buffers (their runners do not wrap the model in DDP)
    assert cm.simulate(bn, ENV, 4, "wfbp", BINOMIAL).iteration_time == \
        cm.simulate(_profile(), ENV, 4, "wfbp", BINOMIAL).iteration_time


def test_the_buffers_travel_uncompressed_under_a_ddp_comm_hook() -> None:
    # fp16 compresses the gradients' buckets (DDP's comm hook), not the buffers DDP broadcasts before forward
    extra = 2 * (MS + 4480e-9) + 2 * (MS + 120e-9)
    for spec in ("fp16", "powersgd:1"):
        r = cm.simulate(_profile(BN), ENV, 4, "fusion", BINOMIAL, spec)
        assert r.details["buffer_broadcast_s"] == pytest.approx(extra, rel=1e-12)
        assert r.iteration_time - cm.simulate(_profile(), ENV, 4, "fusion", BINOMIAL, spec).iteration_time == \
            pytest.approx(extra, rel=1e-9)


def test_a_fitted_environments_algorithms_or_the_librarys_choice_price_the_broadcast() -> None:
    gloo = ENV.with_(library="gloo")
    by_library = cm.simulate(_profile(BN), gloo, 4, "fusion", {"allreduce": "ring_allreduce"}).details
    chosen = cm.choose("broadcast", np.array([4480.0, 120.0]), 4, gloo)
    assert by_library["buffer_broadcast_s"] == pytest.approx(float(np.sum(chosen.time)), rel=1e-12)
    named = cm.simulate(_profile(BN), gloo, 4, "fusion", "ring_allreduce").details  # an allreduce name: the library
    assert named["buffer_broadcast_s"] == pytest.approx(by_library["buffer_broadcast_s"], rel=1e-12)


@pytest.mark.parametrize("bad", [{"float32": -1}, {"float32": float("nan")}, {"float32": True}, [4480], "4480"])
def test_bad_buffers_metadata_is_one_clear_error(bad) -> None:
    with pytest.raises(CommscopeError, match="metadata buffers"):
        _profile(bad)


def test_the_zoo_models_buffers_and_old_profiles_filled_from_them() -> None:
    from runners.training.profiler.target import module_buffers, with_model_buffers
    from runners.training.zoo import MODELS

    assert module_buffers(MODELS.get("resnet_small").builder(seed=0)) == BN  # 15 x (2 x 4 C + 8) bytes
    assert module_buffers(MODELS.get("gpt_wide").builder(seed=0)) == {}
    old = _profile()
    assert with_model_buffers(old, "resnet_small").metadata["buffers"] == BN
    assert with_model_buffers(_profile({"float32": 8}), "resnet_small").metadata["buffers"] == {"float32": 8}
    assert with_model_buffers(old, "no such model") is old
    kept = dataclasses.replace(old, metadata={"buffers": {}})
    assert with_model_buffers(kept, "resnet_small") is kept


_RUNNER = r"""
import json, tempfile, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
from runners.training.exact_allreduce import Fusion
out = {}
for flag in (True, False):
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    out[str(flag)] = Fusion(m, 0.1, broadcast_buffers=flag).ddp.broadcast_buffers
try:
    Fusion(torch.nn.Linear(2, 2), 0.1, broadcast_buffers=1)
except Exception as exc:
    out["bad"] = str(exc)
dist.destroy_process_group()
print(json.dumps(out))
"""


def test_the_runner_hands_broadcast_buffers_to_ddp_and_the_prediction_follows() -> None:
    from runners.training.pricing import schedule_call

    run = subprocess.run([sys.executable, "-c", _RUNNER], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["True"] is True and out["False"] is False
    assert out["bad"] == "broadcast_buffers must be True or False, got 1"
    assert schedule_call("fusion", {})[2]["broadcast_buffers"] is True  # DDP's default, what the runner uses
    assert schedule_call("fusion", {"broadcast_buffers": False})[2]["broadcast_buffers"] is False
