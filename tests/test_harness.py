"""costmodels.harness: what a benchmark's timing adds to a collective's device time."""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm


def test_harnesses_registered_with_sources() -> None:
    assert cm.HARNESSES.names() == ["back_to_back", "one_call_idle_device"]
    for h in cm.HARNESSES:
        assert h.description and h.source
    assert "20-30 us" in cm.harness("one_call_idle_device").source


def test_one_call_adds_pytorchs_per_call_overhead() -> None:
    # 15.4 us of kernels timed alone on an idle device print 15.4 + 25 = 40.4 us; queued, 15.4 us
    assert cm.harness("one_call_idle_device").measured_time(15.4e-6) == pytest.approx(40.4e-6)
    assert cm.harness("back_to_back").measured_time(15.4e-6) == pytest.approx(15.4e-6)
    t = cm.harness("one_call_idle_device").measured_time(np.array([0.0, 1e-3]))
    assert isinstance(t, np.ndarray) and t == pytest.approx([25e-6, 1.025e-3])


def test_unknown_harness_names_the_choices() -> None:
    with pytest.raises(cm.UnknownNameError, match="back_to_back"):
        cm.harness("nccl-tests")
