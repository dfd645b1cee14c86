"""Measured codecs: a profile's encode and decode seconds per compressor, how the schedules take them, and the
measurement on the runners' own encoders (``runners.training.profiler.codecs``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

import costmodels as cm
from costmodels import CommscopeError
from costmodels.compression import codec_key
from costmodels.schedules.core import compress
from runners.training.profiler.codecs import _Spans, measured_techniques

ROOT = Path(__file__).resolve().parents[1]


def _two_layers(codecs: dict | None = None) -> cm.ModelProfile:
    # 1e6 and 3e6 fp32 elements: 4 MB and 12 MB of gradients
    layers = (cm.Layer("a", 1_000_000, 4e6, 0.01, 0.02), cm.Layer("b", 3_000_000, 12e6, 0.01, 0.03))
    meta = {} if codecs is None else {"codecs": codecs}
    return cm.ModelProfile("two", layers, "cpu", "float32", 8, "measured", "by hand", meta)


@pytest.mark.parametrize(("spec", "key"), [("topk", "topk:0.01"), ("topk:0.010", "topk:0.01"), ("qsgd:8.0", "qsgd:8"),
                                           ("signsgd:8", "signsgd:8"), ("fp16", "fp16"), ("powersgd", "powersgd:4")])
def test_codec_key_is_one_name_per_compressor_and_parameter(spec: str, key: str) -> None:
    assert codec_key(spec) == key


def test_a_measured_all_gather_codec_replaces_the_memory_passes() -> None:
    # top-k 1%: the model's encode is 10 passes per layer, so layer b (3x the bytes) takes 3/4 of any total:
    # a measured 80 ms encode gives a 20 ms and b 60 ms. Wire per layer k (4 + 4) B: 10,000 x 8 = 80 kB and
    # 30,000 x 8 = 240 kB, w = 320 kB. Modelled decode (module docstring of costmodels.compression, V100 at
    # 630 GB/s): D0 = d x 4 / bw = 16e6 / 630e9 = 25.397 us; per message f x w / bw = f x 0.50794 us.
    # Measured 20 ms on 2 ranks (an all-gather: f_m = 2): r = 20 ms / (25.397 + 2 x 0.50794) us = 757.19, so
    # decode(4) = r (25.397 + 4 x 0.50794) us = 20.769 ms.
    codecs = {"topk:0.01": {"encode_s": 0.080, "decode_s": 0.020, "ranks": 2, "technique": "topk"}}
    plain, measured = compress(_two_layers(), "topk:0.01"), compress(_two_layers(codecs), "topk")
    added = [m.backward_s - x.backward_s for m, x in zip(measured.profile.layers, _two_layers().layers, strict=True)]
    assert added == pytest.approx([0.020, 0.060])
    w = measured.profile.grad_bytes
    assert w == pytest.approx(320_000)

    def decode(c, f: int) -> float:  # what the Wire charges for w bytes from each of f workers
        return f * w * (c.per_received + c.fixed / f)

    assert decode(plain, 2) == pytest.approx(16e6 / 630e9 + 2 * 320e3 / 630e9)
    assert decode(measured, 2) == pytest.approx(0.020)
    assert decode(measured, 4) == pytest.approx(0.020769, rel=1e-4)
    assert "measured: encode 80 ms, decode 20 ms on 2 rank(s)" in measured.profile.metadata["codec"]


def test_a_measured_all_reduce_codec_is_taken_at_one_message() -> None:
    # random-k sums in place (an all-reduce): one message decoded whatever the ranks, so the measured decode on
    # 4 ranks is the decode at every p
    codecs = {"randomk:0.01": {"encode_s": 0.05, "decode_s": 0.004, "ranks": 4}}
    c = compress(_two_layers(codecs), "randomk:0.01")
    w = c.profile.grad_bytes
    assert w * (c.per_received + c.fixed) == pytest.approx(0.004)
    assert c.profile.backward_s - _two_layers().backward_s == pytest.approx(0.05)


def test_iteration_time_grows_by_the_measured_codec_on_one_message() -> None:
    # one bucket after backward (fusion with every tensor in it): encode and decode are both on the critical path,
    # so the iteration grows by exactly what the measured codec adds over the modelled one
    codecs = {"qsgd:8": {"encode_s": 0.036, "decode_s": 0.099, "ranks": 2}}
    env = cm.environment("10GbE")
    one = {"bucket_bytes": 2**60, "first_bucket_bytes": 2**60}
    base = cm.simulate(_two_layers(), env, 2, "fusion", compressor="qsgd:8", **one).iteration_time
    result = cm.simulate(_two_layers(codecs), env, 2, "fusion", compressor="qsgd:8", **one)
    timed = result.iteration_time
    assert result.details["codec"].startswith("measured: encode 36 ms, decode 99 ms")
    assert cm.simulate(_two_layers(), env, 2, "fusion", compressor="qsgd:8", **one).details["codec"].startswith(
        "modelled")
    c0 = compress(_two_layers(), "qsgd:8")
    w = c0.profile.grad_bytes
    modelled = (c0.profile.backward_s - _two_layers().backward_s) + 2 * w * (c0.per_received + c0.fixed / 2)
    assert timed - base == pytest.approx(0.036 + 0.099 - modelled, rel=1e-9)


def test_a_codec_for_another_compressor_or_parameter_is_not_used() -> None:
    codecs = {"topk:0.1": {"encode_s": 1.0, "decode_s": 1.0, "ranks": 2}}
    assert compress(_two_layers(codecs), "topk:0.01").profile.backward_s == pytest.approx(
        compress(_two_layers(), "topk:0.01").profile.backward_s)


@pytest.mark.parametrize(("codecs", "match"), [
    ([1, 2], "codecs must be an object"),
    ({"topk:0.01": {"encode_s": 0.1, "decode_s": 0.1}}, "needs encode_s, decode_s, ranks"),
    ({"topk:0.01": {"encode_s": -0.1, "decode_s": 0.1, "ranks": 2}}, r"encode_s must be a finite number"),
    ({"topk:0.01": {"encode_s": 0.1, "decode_s": float("nan"), "ranks": 2}}, r"decode_s must be a finite number"),
    ({"topk:0.01": {"encode_s": 0.1, "decode_s": 0.1, "ranks": True}}, r"ranks must be an integer >= 1"),
    ({"topk:0.01": {"encode_s": 0.1, "decode_s": 0.1, "ranks": 0}}, r"ranks must be an integer >= 1"),
])
def test_bad_codecs_are_refused_with_what_is_allowed(codecs: object, match: str) -> None:
    with pytest.raises(CommscopeError, match=match):
        _two_layers(codecs)  # type: ignore[arg-type]


def test_codecs_survive_a_round_trip() -> None:
    prof = _two_layers({"dgc:0.001": {"encode_s": 0.0177, "decode_s": 0.0021, "ranks": 2}})
    back = cm.ModelProfile.from_dict(prof.to_dict())
    assert back.metadata["codecs"] == prof.metadata["codecs"]
    assert replace(back).metadata["codecs"]["dgc:0.001"]["ranks"] == 2


def test_spans_split_compression_before_and_after_the_messages() -> None:
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 3.5, 3.5, 7.0])  # compression 1 s, comm 2 s, comm 0.5 s, compression 3.5 s
    spans = _Spans(lambda: next(ticks))
    for phase in ("compression", "exposed_comm", "exposed_comm", "compression"):
        with spans(phase):
            pass
    assert spans.encode_decode() == (1.0, 3.5)


def test_the_codecs_measured_are_those_of_the_compressed_techniques() -> None:
    # after backward (exchange) and DDP hooks; bsp has no compressor
    picked = measured_techniques([("bsp", {}), ("fp16", {}), ("powersgd", {}), ("topk", {}), ("qsgd", {"bits": 4}),
                                  ("signsgd", {}), ("dgc", {})])
    assert [(n, k) for n, _, k in picked] == [("fp16", "fp16"), ("powersgd", "powersgd:4"), ("topk", "topk:0.01"),
                                              ("qsgd", "qsgd:4"), ("signsgd", "signsgd:8"), ("dgc", "dgc:0.001")]


@pytest.mark.multiprocess
def test_synchronised_codecs_time_the_runners_own_encoders(tmp_path: Path) -> None:
    # one gloo rank: every compressed technique's exchange runs with local messages, and PowerSGD's hook is timed
    # against plain DDP past its start (start_powerSGD_iter 10: 10 iterations of warm-up, not the 1 asked for)
    script = tmp_path / "codecs.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys, types
        sys.path.insert(0, {str(ROOT)!r})
        import torch, torch.distributed as dist
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        ctx = types.SimpleNamespace(torch=torch, dist=dist, rank=0, world=1, device=torch.device("cpu"))
        from runners.training.profiler.codecs import synchronised_codecs
        out = synchronised_codecs(ctx, "resnet_small", 4, [["topk", {{}}], ["qsgd", {{}}], ["powersgd", {{}}],
                                                           ["bsp", {{}}]], 3, 1)
        print(json.dumps(out))
        dist.destroy_process_group()
    """))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    import json

    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(out) == ["powersgd:4", "qsgd:8", "topk:0.01"]
    for c in out.values():
        assert c["ranks"] == 1 and c["encode_s"] > 0 and c["decode_s"] > 0
    assert "after 10 " in out["powersgd:4"]["how"] and "after 1 " in out["topk:0.01"]["how"]
    assert "hook clocked" in out["powersgd:4"]["how"]
    # the profile takes them as measured
    _two_layers(out)
