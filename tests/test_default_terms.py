"""The shipped default interference and overhead terms: one table, the same values the presets carry, a source each."""

from __future__ import annotations

import pytest

import costmodels as cm
from costmodels.default_terms import default_entry
from costmodels.presets import PRESETS


@pytest.mark.parametrize("name", PRESETS.names())
def test_presets_carry_the_default_terms(name):
    env = cm.environment(name)
    assert {k: getattr(env, k) for k in ("kappa_c", "kappa_m", "host_overhead", "contended_step",
                                         "compute_loss_step")} == \
        cm.default_terms(env)


def test_defaults_by_kind_of_system_with_sources():
    a100 = cm.environment("8xA100-NVLink+IB-HDR")
    assert cm.default_terms(a100)["kappa_c"] == 0.189  # arXiv:2507.03114: 18.9% mean compute slowdown
    assert "2507.03114" in default_entry(a100).sources["kappa_c"]
    v100 = cm.Environment(alpha=1e-6, beta=1e-10, library="nccl", compute_capability=70)
    zero = {"kappa_c": 0.0, "kappa_m": 0.0, "host_overhead": 0.0, "contended_step": 0.0, "compute_loss_step": 0.0}
    assert cm.default_terms(v100) == zero
    assert cm.default_terms(cm.Environment(alpha=1e-6, beta=1e-9)) == zero
    for entry in (default_entry(a100), default_entry(v100), default_entry(cm.environment("10GbE"))):
        assert set(entry.sources) == {"kappa_c", "kappa_m", "host_overhead", "contended_step", "compute_loss_step"}
        assert all(entry.sources.values())
