"""The compute that validate's predictions use: the synchronised forward plus backward split by phase, and the
profile rescaled to the median of the probes taken before each technique's run."""

from __future__ import annotations

import types

import pytest

import costmodels as cm
from runners import results
from runners.validate import rank
from runners.validate.compute import split_total


def test_split_total_keeps_the_phase_shares_of_their_medians() -> None:
    # slowest rank's forward 60 ms and backward 76 ms as separate medians, 120 ms for forward + backward:
    # 120 x 60/136 = 52.94 ms forward, 120 x 76/136 = 67.06 ms backward
    f, b = split_total(0.120, 0.060, 0.076)
    assert f == pytest.approx(0.0529412, rel=1e-5) and b == pytest.approx(0.0670588, rel=1e-5)
    assert f + b == pytest.approx(0.120)
    assert split_total(0.0, 0.0, 0.0) == (0.0, 0.0)


class _Dist:
    def barrier(self) -> None:
        pass


def _ctx() -> types.SimpleNamespace:
    return types.SimpleNamespace(rank=0, world=4, device=types.SimpleNamespace(type="cpu"), dist=_Dist(),
                                 run_info=lambda: results.run_info("gloo", 4, 1, ["cpu"] * 4))


def test_the_profile_is_rescaled_to_the_median_of_its_probes(tmp_path) -> None:
    prof = cm.ModelProfile("toy", (cm.Layer("a", 100, 400, 0.010, 0.020), cm.Layer("b", 300, 1200, 0.030, 0.040)),
                           "cpu", "float32", 8, "measured", "test",
                           {"mean_rank_forward_s": 0.05, "mean_rank_backward_s": 0.07, "how": "profiled"})
    path = tmp_path / "profile.json"
    prof.with_optimizer(0.001).save(path)
    records = tmp_path / "records.jsonl"
    plan = {"records": str(records), "threads": 1}
    w = {"model": "toy", "batch_size": 8, "profile_path": str(path)}
    # (forward, backward, optimizer, averaging pass): the profile's own (fast) and four probes
    probes = [(0.030, 0.045, 0.0010, 0.0002), (0.040, 0.060, 0.0012, 0.0003), (0.042, 0.058, 0.0011, 0.0003),
              (0.041, 0.062, 0.0013, 0.0004), (0.039, 0.061, 0.0009, 0.0003)]
    rank._settle_profile(_ctx(), plan, w, probes)
    out = cm.load_profile(path)
    # medians: forward + backward 0.100 (totals 0.075, 0.100, 0.100, 0.103, 0.100), split 0.040 : 0.060 by the
    # phases' own medians; optimizer 0.0011, pass 0.0003; the layers keep their shares
    # (forward 1:3 -> 0.010 and 0.030; backward 1:2 -> 0.020 and 0.040)
    assert out.forward_s == pytest.approx(0.040) and out.backward_s == pytest.approx(0.060)
    assert [x.forward_s for x in out.layers] == pytest.approx([0.010, 0.030])
    assert [x.backward_s for x in out.layers] == pytest.approx([0.020, 0.040])
    assert out.optimizer_s == pytest.approx(0.0011)
    assert out.metadata["pass_s_per_byte"] == pytest.approx(0.0003 / 1600)
    assert out.metadata["mean_rank_forward_s"] == 0.05  # the per-rank profile's own, not overwritten
    assert len(out.metadata["compute_probes_s"]) == 5
    # totals 0.075, 0.100, 0.100, 0.103, 0.100: 10-90% = 0.085..0.1018, half of it over the median 0.100
    assert out.metadata["compute_probe_spread"] == pytest.approx(0.5 * (0.1018 - 0.085) / 0.100)
    (rec,) = results.load(records).records
    assert rec["kind"] == "profile" and rec["config"]["probes"] == 5
    assert cm.ModelProfile.from_dict(rec["result"]).compute_s == pytest.approx(out.compute_s)


def test_one_probe_leaves_the_profile_as_it_is(tmp_path) -> None:
    prof = cm.ModelProfile("toy", (cm.Layer("a", 100, 400, 0.010, 0.020),), "cpu", "float32", 8, "measured", "t")
    path = tmp_path / "profile.json"
    prof.save(path)
    before = path.read_text()
    rank._settle_profile(_ctx(), {"records": str(tmp_path / "r.jsonl")}, {"model": "toy", "batch_size": 8,
                                                                         "profile_path": str(path)},
                         [(0.01, 0.02, 0.0, 0.0)])
    assert path.read_text() == before and not (tmp_path / "r.jsonl").exists()


def test_the_rescaled_total_is_the_median_of_the_probes_totals(tmp_path) -> None:
    # totals 0.10, 0.09, 0.12 -> 0.10, where the phases' medians (0.04 + 0.07) would say 0.11; split 4 : 7:
    # forward 0.10 x 4/11 = 0.036364, backward 0.10 x 7/11 = 0.063636
    prof = cm.ModelProfile("toy", (cm.Layer("a", 100, 400, 0.010, 0.020),), "cpu", "float32", 8, "measured", "t")
    path = tmp_path / "profile.json"
    prof.save(path)
    probes = [(0.03, 0.07, 0.0, 0.0), (0.05, 0.04, 0.0, 0.0), (0.04, 0.08, 0.0, 0.0)]
    rank._settle_profile(_ctx(), {"records": str(tmp_path / "r.jsonl")},
                         {"model": "toy", "batch_size": 8, "profile_path": str(path)}, probes)
    out = cm.load_profile(path)
    assert out.forward_s == pytest.approx(0.1 * 4 / 11) and out.backward_s == pytest.approx(0.1 * 7 / 11)
    assert out.metadata["mean_rank_forward_s"] == pytest.approx(0.010)  # the first scaling's, kept
