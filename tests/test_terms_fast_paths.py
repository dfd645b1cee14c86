"""The fast paths of ``cm.sweep`` with interference, host overhead and the optimizer step (issue 16, item 6).

``engine.run_many`` (a chain summed in order, ended tasks rewritten by index) and ByteScheduler's queue of
intervals (``terms_bytescheduler_fast``) must give what ``cm.simulate`` gives one configuration at a time
(``engine.run_one``, and ByteScheduler's reference loop), with the terms on and off in one grid.
"""

from __future__ import annotations

import numpy as np
import pytest

import costmodels as cm
from costmodels.environment_array import as_environment_array
from costmodels.schedules import terms
from costmodels.schedules import terms_bytescheduler as tb
from costmodels.schedules.core import Configurations
from costmodels.schedules.engine import chain, run_many, run_one
from costmodels.schedules.terms import _bsp, _wfbp
from costmodels.schedules.terms_bytescheduler_fast import integral
from costmodels.schedules.vectorized import _configurations

PS = [1, 2, 8, 64]


def random_profile(rng: np.random.Generator, n: int = 20, optimizer: float = 0.0) -> cm.ModelProfile:
    """Empty tensors, layers of no forward or backward time and tensors of several partitions."""
    layers = tuple(cm.Layer(f"l{i}", 1, float(rng.choice([0, rng.integers(1, 9_000_000)])),
                            float(rng.choice([0, rng.uniform(0, 2e-3)])), float(rng.choice([0, rng.uniform(0, 4e-3)])))
                   for i in range(n))
    prof = cm.ModelProfile(name="random", layers=layers, device="x", dtype="float32", batch_size=1,
                           origin="estimated", source="random")
    return prof.with_optimizer(optimizer * prof.compute_s) if optimizer else prof


def grid_envs() -> list[cm.Environment]:
    """Terms off, all on, interference only, host overhead only, a contended step (gloo: whose steps are alpha's),
    and the compute a message's steps take."""
    return [cm.environment("10GbE"), cm.environment("10GbE").with_(kappa_c=0.2, kappa_m=0.1, host_overhead=1e-5),
            cm.environment("1GbE").with_(kappa_c=0.7, kappa_m=0.0), cm.environment("IB-EDR").with_(host_overhead=3e-5),
            cm.environment("10GbE").with_(library="gloo", kappa_m=0.3, contended_step=2e-4),
            cm.environment("10GbE").with_(library="gloo", kappa_c=0.1, compute_loss_step=3e-4)]


@pytest.mark.parametrize("schedule", cm.schedules())
def test_sweep_equals_simulate_with_the_terms_on_and_off(schedule: str) -> None:
    rng = np.random.default_rng(5)
    envs = grid_envs()
    for prof in (cm.profile("resnet50").with_optimizer(0.002), random_profile(rng), random_profile(rng, 12, 0.05)):
        got = cm.sweep(prof, envs, PS, schedule).iteration_time
        want = [[cm.simulate(prof, e, q, schedule).iteration_time for q in PS] for e in envs]
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"{schedule} {prof.name}")


def configurations(prof: cm.ModelProfile, envs: list[cm.Environment]) -> Configurations:
    """Every (environment, p in PS) pair, as ``cm.sweep`` hands them to a schedule."""
    ps, es = _configurations(as_environment_array(envs), np.array(PS), 0, len(envs) * len(PS))
    return Configurations(prof, ps, es)


def test_bytescheduler_intervals_equal_the_reference_loop_on_random_models(monkeypatch) -> None:
    """The queue of intervals against the reference's configurations x partitions mask (same record=False run),
    with credits of one to four partitions, partitions that do not divide the tensors and random terms."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        prof = random_profile(rng, 25, float(rng.choice([0.0, 0.02])))
        envs = [cm.Environment(alpha=float(rng.uniform(1e-6, 1e-3)), beta=float(rng.uniform(1e-10, 3e-9)),
                               kappa_c=float(rng.uniform(0, 1.5)), kappa_m=float(rng.uniform(0, 1.5)),
                               host_overhead=float(rng.choice([0, rng.uniform(0, 1e-4)])),
                               contended_step=float(rng.choice([0, rng.uniform(0, 2e-3)])),
                               compute_loss_step=float(rng.choice([0, rng.uniform(0, 1e-3)]))) for _ in range(3)]
        part = float(rng.choice([2**20, 2**21, 3e6]))
        options = {"partition_bytes": part, "credit_bytes": part * float(rng.choice([1, 1.5, 2, 4]))}
        cfg = configurations(prof, envs)
        fast = tb._bytescheduler(cfg, None, False, **options).time
        monkeypatch.setattr(tb, "integral", lambda *a: False)
        ref = tb._bytescheduler(cfg, None, False, **options).time
        monkeypatch.undo()
        np.testing.assert_allclose(fast, ref, rtol=1e-12, err_msg=f"trial {trial}")


def test_bytescheduler_fractional_bytes_take_the_reference() -> None:
    """Prefix sums of bytes are exact only for integers: other sizes run the reference loop."""
    assert integral(np.array([1.0, 2.0**20]), 4.0 * 2**20) and not integral(np.array([1.5, 2.0]), 8.0)
    prof = cm.profile("resnet50")
    frac = cm.ModelProfile(name="frac", layers=tuple(cm.Layer(x.name, x.params, x.grad_bytes + 0.5, x.forward_s,
                                                               x.backward_s) for x in prof.layers),
                           device="x", dtype="float32", batch_size=1, origin="estimated", source="test")
    envs = grid_envs()[1:3]
    got = cm.sweep(frac, envs, [2, 16], "bytescheduler").iteration_time
    want = [[cm.simulate(frac, e, q, "bytescheduler").iteration_time for q in (2, 16)] for e in envs]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_engine_sums_a_chain_and_steps_the_rest(monkeypatch) -> None:
    """BSP's graph runs one task at a time (a chain: its end is the sum in order); WFBP's overlaps."""
    prof = cm.profile("resnet50").with_optimizer(0.002)
    cfg = configurations(prof, [cm.environment("10GbE").with_(kappa_c=0.3, kappa_m=0.2, host_overhead=2e-5)])
    graphs = []

    def keep(g, kc, km):
        graphs.append(g)
        return run_many(g, kc, km)

    monkeypatch.setattr(terms, "run_many", keep)
    times = [_bsp(cfg, None, False).time, _wfbp(cfg, None, False).time]
    assert chain(graphs[0]) is not None and chain(graphs[1]) is None
    for g, t in zip(graphs, times, strict=True):
        np.testing.assert_allclose(t, [run_one(g, 0.3, 0.2, c)[0] for c in range(g.work.shape[1])], rtol=1e-12)
