"""Environments: validation, JSON round trip, atomic save, presets and their numbers."""

from __future__ import annotations

import json
import math
import os

import pytest

import costmodels as cm


def test_one_level_and_two_level() -> None:
    env = cm.Environment(alpha=5e-6, beta=1 / 12.5e9, gamma=0.0)
    assert not env.two_level and env.bandwidth == pytest.approx(12.5e9)
    two = cm.Environment(alpha=5e-6, beta=1e-10, gamma=1e-12, intra_alpha=1e-6, intra_beta=1e-11, gpus_per_node=8)
    assert two.two_level and two.intra_bandwidth == pytest.approx(1e11) and two.nics_per_node == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": -1e-6, "beta": 1e-9}, "alpha must be >= 0, got -1e-06"),
        ({"alpha": math.nan, "beta": 1e-9}, "alpha must be finite, got nan"),
        ({"alpha": 1e-6, "beta": 0.0}, "beta must be > 0, got 0.0"),
        ({"alpha": 1e-6, "beta": math.inf}, "beta must be finite, got inf"),
        ({"alpha": 1e-6, "beta": 1e-9, "gamma": -1.0}, "gamma must be >= 0"),
        ({"alpha": "fast", "beta": 1e-9}, "alpha must be a number, got 'fast'"),
        ({"alpha": True, "beta": 1e-9}, "alpha must be a number, got True"),
        ({"alpha": 1e-6, "beta": 1e-9, "intra_alpha": 1e-6}, "give both intra_alpha and intra_beta"),
        ({"alpha": 1e-6, "beta": 1e-9, "gpus_per_node": 4}, "gpus_per_node=4 needs an intra-node link"),
        ({"alpha": 1e-6, "beta": 1e-9, "intra_alpha": 1e-6, "intra_beta": 1e-10}, "needs gpus_per_node >= 2"),
        ({"alpha": 1e-6, "beta": 1e-9, "intra_alpha": 1e-6, "intra_beta": -1e-10, "gpus_per_node": 2},
         "intra_beta must be > 0"),
        ({"alpha": 1e-6, "beta": 1e-9, "gpus_per_node": 2.5}, "gpus_per_node must be a positive integer, got 2.5"),
        ({"alpha": 1e-6, "beta": 1e-9, "gpus_per_node": 0}, "gpus_per_node must be a positive integer, got 0"),
        ({"alpha": 1e-6, "beta": 1e-9, "intra_alpha": 1e-6, "intra_beta": 1e-10, "gpus_per_node": 2,
          "nics_per_node": 4}, "nics_per_node must be <= gpus_per_node (2), got 4"),
        ({"alpha": 1e-6, "beta": 1e-9, "name": ""}, "name must be a non-empty string"),
        ({"alpha": 1e-6, "beta": 1e-9, "metadata": {"x": object()}}, "metadata must be JSON-serialisable"),
    ],
)
def test_validation_names_the_bad_value(kwargs: dict, message: str) -> None:
    with pytest.raises(cm.CommscopeError) as err:
        cm.Environment(**kwargs)
    assert message in str(err.value)


def test_zero_latency_and_zero_gamma_are_allowed() -> None:
    env = cm.Environment(alpha=0.0, beta=1e-9, gamma=0.0)
    assert cm.collective("ring_allreduce").time(1e6, 8, env) == pytest.approx(2 * 7 / 8 * 1e6 * 1e-9)


@pytest.mark.parametrize("name", cm.environments())
def test_json_round_trip_of_every_preset(name: str, tmp_path) -> None:
    env = cm.environment(name)
    path = env.save(tmp_path / "env.json")
    assert cm.Environment.load(path) == env
    assert cm.Environment.from_json(env.to_json()) == env
    assert cm.environment(str(path)) == env  # a file path works wherever a preset name does


def test_round_trip_keeps_metadata(tmp_path) -> None:
    env = cm.Environment(alpha=1e-6, beta=1e-9, name="fitted", metadata={"files": ["a.jsonl"], "r2": 0.99})
    back = cm.Environment.load(env.save(tmp_path / "f.json"))
    assert back.metadata == {"files": ["a.jsonl"], "r2": 0.99} and back.name == "fitted"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"alpha": 1e-6}', "missing required field(s): beta"),
        ('{"alpha": 1e-6, "beta": 1e-9, "bandwith": 3}', "unknown environment field(s) bandwith"),
        ('{"schema": "commscope.environment/99", "alpha": 1e-6, "beta": 1e-9}', "unsupported environment schema"),
        ('{"alpha": -1, "beta": 1e-9}', "alpha must be >= 0"),
    ],
)
def test_bad_files_are_rejected_with_the_file_named(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(cm.CommscopeError) as err:
        cm.Environment.load(path)
    assert message in str(err.value) and "bad.json" in str(err.value)


def test_missing_file() -> None:
    with pytest.raises(cm.CommscopeError, match="cannot read environment file"):
        cm.Environment.load("/nonexistent/env.json")


def test_failed_save_leaves_the_old_file_intact(tmp_path, monkeypatch) -> None:
    path = tmp_path / "env.json"
    old = cm.environment("10GbE").save(path).read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        cm.environment("IB-NDR").save(path)
    assert path.read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.json"]  # no temporary left behind


def test_preset_names_required_by_the_foundation_issue() -> None:
    required = {"1GbE", "10GbE", "25GbE", "100GbE", "IB-EDR", "IB-HDR", "IB-NDR", "PCIe3x16", "PCIe4x16",
                "NVLink-V100", "NVLink-A100", "NVLink-H100", "4xPCIe3+10GbE", "8xH100-NVLink+IB-NDR"}
    assert required <= set(cm.environments())
    for name in cm.environments():
        env = cm.environment(name)
        assert env.source and env.description, name
        json.dumps(env.to_dict())


@pytest.mark.parametrize(
    ("name", "bytes_per_s"),
    [
        ("1GbE", 1e9 / 8 * 1448 / 1538),  # 117.68 MB/s TCP goodput
        ("10GbE", 10e9 / 8 * 1448 / 1538),  # 1.1769 GB/s
        ("100GbE", 25e9 / 8),  # achieved: one TCP stream on a 100G host, 15-35 Gb/s (ESnet fasterdata), middle
        ("8xV100-NVLink+100GbE-sockets", 4.7e9),  # achieved: NCCL over TCP sockets, 100 Gb/s (NVIDIA/nccl#398)
        ("IB-EDR", 12e9), ("IB-HDR", 24e9), ("IB-NDR", 48e9),  # NCCL: 12 GB/s per 100 Gb/s
        ("PCIe3x16", 12e9), ("PCIe4x16", 24e9),  # NCCL: width 16 x 60 / 80, 16 x 120 / 80
        ("NVLink-V100", 120e9), ("NVLink-A100", 240e9), ("NVLink-H100", 370.8e9),  # 6x20, 12x20, 18x20.6
    ],
)
def test_preset_bandwidth_derivations(name: str, bytes_per_s: float) -> None:
    assert cm.environment(name).bandwidth == pytest.approx(bytes_per_s, rel=1e-12)


def test_achieved_rate_presets_name_the_nominal_rate_in_their_description() -> None:
    for name, nominal in (("100GbE", "11.77 GB/s"), ("8xV100-NVLink+100GbE-sockets", "12.5 GB/s"),
                          ("PCIe3x16-noP2P", "12")):
        env = cm.environment(name)
        assert nominal in env.description and "achieved" in env.description + env.source
    sockets, rdma = cm.environment("8xV100-NVLink+100GbE-sockets"), cm.environment("8xV100-NVLink+IB-EDR")
    # the same nodes over sockets against RDMA: the socket path is 2.55x slower per NIC and has 1 NIC, not 4
    assert rdma.bandwidth / sockets.bandwidth == pytest.approx(12 / 4.7)
    assert cm.simulate(cm.profile("resnet50"), sockets, 16, "wfbp").iteration_time > \
        cm.simulate(cm.profile("resnet50"), rdma, 16, "wfbp").iteration_time


def test_two_level_presets() -> None:
    h100 = cm.environment("8xH100-NVLink+IB-NDR")
    assert (h100.gpus_per_node, h100.nics_per_node) == (8, 8)
    assert h100.intra_bandwidth == pytest.approx(370.8e9) and h100.bandwidth == pytest.approx(48e9)
    pcie = cm.environment("4xPCIe3+10GbE")
    assert (pcie.gpus_per_node, pcie.nics_per_node) == (4, 1)
    assert pcie.intra_bandwidth == pytest.approx(12e9) and pcie.alpha == cm.environment("10GbE").alpha


def test_preset_lookup_is_case_insensitive_and_lists_names() -> None:
    assert cm.environment("10gbe").name == "10GbE"
    with pytest.raises(cm.UnknownNameError) as err:
        cm.environment("10GbE-turbo")
    assert "10GbE" in str(err.value) and "IB-NDR" in str(err.value)
