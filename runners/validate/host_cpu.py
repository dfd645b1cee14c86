"""The host's CPU cost of communication, for prediction (c): measured once per validation, used per environment.

A validation on emulated links measures, before its jobs, the CPU seconds per byte of one TCP flow at each of
its link rates (:func:`runners.measure.emulate.cpu_cost.network_cpu_cost`) and keeps them in
``host_network_cpu.json`` at the top of ``--out``. Prediction (c) then takes the interference of CPU ranks that
share the host's cores with their communication from them (:mod:`costmodels.cpu_sharing`): nothing from the
timed iterations enters it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from costmodels._io import atomic_write_text

FILE = "host_network_cpu.json"
SCHEMA = "commscope.host_network_cpu_rates/1"


def measure(rates: Sequence[str], out: Path, warn: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """Measure each rate's CPU cost per byte and save it as ``out / FILE``; None (and a warning) where the host
    cannot (no CPU-accounting cgroup, no emulation)."""
    from runners.measure.emulate import cpu_cost
    from runners.measure.emulate.system import EmulationError

    measured: dict[str, Any] = {}
    for rate in dict.fromkeys(rates):
        try:
            measured[rate] = cpu_cost.network_cpu_cost(rate, seconds=2.0 if _slow(rate) else 1.0, repeats=3)
        except EmulationError as exc:
            if warn is not None:
                warn(f"the host's CPU cost per byte was not measured at {rate} ({exc}): prediction (c) keeps the "
                     "shipped default terms there")
    if not measured:
        return None
    first = next(iter(measured.values()))
    data = {"schema": SCHEMA, "cores": first["cores"], "rates": measured}
    atomic_write_text(out / FILE, json.dumps(data, indent=1) + "\n")
    return data


def note(data: Mapping[str, Any]) -> str:
    """The validation note that says where prediction (c)'s interference comes from."""
    rates = ", ".join(f"{r}: {m['cpu_s_per_byte'] * 1e9:.2f} ns/B" for r, m in data["rates"].items())
    return (f"(c) on shared cores: interference of the ranks' own communication derived from the host's CPU seconds "
            f"per byte ({rates}; {FILE}) and each link's fitted beta and gamma (costmodels.cpu_sharing)")


def _slow(rate: str) -> bool:
    from runners.measure.emulate.shaping import parse_rate

    return parse_rate(rate) < 500e6


def load(out: Path) -> dict[str, Any] | None:
    """``out / FILE`` as saved by :func:`measure`, or None."""
    try:
        data = json.loads((Path(out) / FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def shared_host(data: Mapping[str, Any] | None, records: Sequence[Mapping[str, Any]], threads: int,
                env: Any = None) -> Any:
    """The :class:`costmodels.cpu_sharing.SharedHost` of one environment's run: the host's cores, the run's ranks
    (all on this host), ``threads`` computing per rank, the CPU cost per byte measured at the run's link rate
    (from its records' network spec), and the CPU seconds per latency step that the fit of ``env`` found in the
    sweep's per-call CPU times (``metadata["cpu"]``, :mod:`runners.measure.fit.cpu`; 0 where it has none); None
    where any of the first four is unknown."""
    from costmodels.cpu_sharing import SharedHost

    if not data:
        return None
    run = next((r["run"] for r in records if r.get("kind") == "collective"), None)
    rate = ((run or {}).get("network") or {}).get("rate")
    entry = (data.get("rates") or {}).get(rate)
    if run is None or entry is None:
        return None
    source = (f"measured at {rate} on this host, {entry.get('time', '?')}, load average "
              f"{(entry.get('load_average') or ['?'])[0]}")
    return SharedHost(cores=float(data["cores"]), ranks=int(run["world_size"]),
                      cpu_s_per_byte=float(entry["cpu_s_per_byte"]), compute_threads=max(int(threads), 1),
                      source=source, cpu_s_per_step=_s_per_step(env))


def _s_per_step(env: Any) -> float:
    cpu = (getattr(env, "metadata", None) or {}).get("cpu") or {}
    try:
        step = float(cpu.get("s_per_step", 0.0))
    except (TypeError, ValueError):
        return 0.0
    return step if math.isfinite(step) and step > 0 else 0.0
