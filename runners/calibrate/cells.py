"""What a calibration is fitted to: the measured iterations (cells), their model profiles, and the environment
fitted to the collective sweeps among the same records.

A *cell* is one measured training configuration: a technique with its options, a model, a batch size and
a world size, with the measured seconds per iteration (the median iteration, max over ranks; the
wall-clock mean over whole periods for a periodic technique such as local SGD) and its spread over the
timed iterations (10th and 90th percentiles). Records of kind ``iteration`` come from ``commscope
train``, ``commscope validate`` and the importers alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import costmodels as cm
from costmodels.errors import CommscopeError

#: Schedules that overlap communication with computation (the others run it after backward or between
#: periods). Interference (kappa_c, kappa_m) can only be seen in cells of these.
OVERLAPPING = frozenset({"wfbp", "fusion", "mgwfbp", "bytescheduler", "dear", "zero", "fsdp"})

#: The sweep fit that validation uses (:func:`runners.validate.suite.make_plan`): ring allreduce and
#: allgather, reduce-scatter left to ``auto`` (gloo's is a whole-buffer allreduce); the chain time (each rank's
#: calls summed; the mean of the per-iteration times in records made before sweeps kept it), since an iteration
#: sends its messages back to back. Each is fitted as the records' backend runs it
#: (:func:`runners.measure.fit.as_run_by`: gloo's allgather).
SWEEP_ALGORITHM = "ring_allreduce,ring_allgather"
SWEEP_STATISTIC = "chain"


@dataclass(frozen=True)
class Cell:
    """One measured training configuration and what the model needs to predict it."""

    technique: str
    options: Mapping[str, Any]
    model: str
    batch_size: int
    p: int
    measured_s: float
    p10_s: float | None
    p90_s: float | None
    profile: cm.ModelProfile = field(repr=False)
    record_id: str = ""
    latency_scale: float = 1.0  # factor on the environment's latencies from validate's probes (1: the sweep's fit)

    @property
    def schedule(self) -> str | None:
        from runners.training import technique

        return technique(self.technique).schedule

    @property
    def overlaps(self) -> bool:
        """Whether its schedule overlaps communication with computation."""
        return self.schedule in OVERLAPPING

    @property
    def spread(self) -> float | None:
        """Half the 10-90 percentile range relative to the measured time (the measurement's own noise)."""
        if self.p10_s is None or self.p90_s is None:
            return None
        return 0.5 * (self.p90_s - self.p10_s) / self.measured_s

    def label(self) -> str:
        return f"{self.technique} {self.model} p={self.p}"


def scale_latency(env: cm.Environment, factor: float) -> cm.Environment:
    """``env`` with its latencies (``alpha``, ``intra_alpha``) times ``factor``: the environment as a cell whose
    runs saw ``factor`` times the sweep's small-message time (:mod:`runners.validate.latency`)."""
    if factor == 1.0:
        return env
    from dataclasses import replace

    intra = None if env.intra_alpha is None else env.intra_alpha * factor  # one level: no intra-node link
    return replace(env, alpha=env.alpha * factor, intra_alpha=intra)


def _profiles(records: Sequence[Mapping[str, Any]]) -> dict[str, cm.ModelProfile]:
    """The last profile record of each model, as a profile."""
    out: dict[str, cm.ModelProfile] = {}
    for rec in records:
        if rec.get("kind") == "profile":
            model = str(rec["config"].get("model", ""))
            try:
                out[model] = cm.ModelProfile.from_dict(rec["result"])
            except (CommscopeError, KeyError, TypeError, ValueError) as exc:
                raise CommscopeError(f"profile record {rec.get('id', '?')} of model {model!r} is not a profile: "
                                     f"{exc}") from None
    return out


def _network(rec: Mapping[str, Any]) -> str:
    """What identifies the network a record was measured on (its rate and nodes), for the one-network check."""
    net = rec.get("run", {}).get("network") or {}
    if not isinstance(net, Mapping):
        return ""
    return json.dumps({k: net.get(k) for k in ("rate", "nodes", "ranks_per_node", "emulated")}, sort_keys=True)


def gather_cells(records: Sequence[Mapping[str, Any]], profile: cm.ModelProfile | None = None) -> list[Cell]:
    """The iteration records as cells, each with its model's profile (``profile`` overrides the records').

    Raises a one-line error when a model has no profile, when one ``profile`` is given for iterations of several
    models (each would be priced with another model's layers), or when the iterations come from more than one
    network (calibrate each network on its own).
    """
    from runners.training.pricing import measured_time

    its = [r for r in records if r.get("kind") == "iteration"]
    if not its:
        raise CommscopeError("no iteration records among the inputs: calibration needs measured training iterations "
                             "(commscope train or commscope validate records) of at least two techniques")
    nets = {_network(r) for r in its}
    if len(nets) > 1:
        raise CommscopeError(f"the iteration records come from {len(nets)} different networks "
                             f"({'; '.join(sorted(nets))}); calibrate each network on its own")
    models = sorted({str(r["config"].get("model", "")) for r in its})
    if profile is not None and len(models) > 1:
        raise CommscopeError(f"--profile prices every iteration with one model ({profile.name!r}), but the records "
                             f"hold iterations of {len(models)} models ({', '.join(map(repr, models))}); leave "
                             "--profile out to use each model's own profile record, or pass the records of one model")
    from runners.training.profiler.target import with_model_buffers

    profiles = _profiles(records)
    cells = []
    for rec in its:
        cfg, res = rec["config"], rec["result"]
        model = str(cfg.get("model", ""))
        prof = profile if profile is not None else profiles.get(model)
        if prof is None:
            have = ", ".join(sorted(profiles)) or "none"
            raise CommscopeError(f"no profile for model {model!r} of iteration record {rec['id']} (profiles in the "
                                 f"records: {have}); add its profile record or pass --profile")
        prof = with_model_buffers(prof, model)  # DDP broadcasts them; profiles made before do not say (validate too)
        opts = {k: v for k, v in (cfg.get("options") or {}).items() if k not in ("profile", "env")}
        cells.append(Cell(technique=str(cfg["algorithm"]), options=opts, model=model,
                          batch_size=int(cfg.get("batch_size", prof.batch_size)), p=int(cfg["world_size"]),
                          measured_s=measured_time(rec), p10_s=res.get("time_p10_s"), p90_s=res.get("time_p90_s"),
                          profile=prof, record_id=str(rec.get("id", ""))))
    return cells


def sweep_environment(paths: Sequence[str], records: Sequence[Mapping[str, Any]], name: str | None = None,
                      host: Any = None) -> Any:
    """The environment fitted to the collective records (alpha, beta, gamma), as validation fits it: in two regimes
    when the sweep reaches both the latency- and the bandwidth-bound sizes, else one fit over every size.

    Returns the :class:`runners.measure.fit.FitResult`.
    """
    from runners.measure import fit

    colls = [r for r in records if r.get("kind") == "collective"]
    if not colls:
        raise CommscopeError("no collective records among the inputs: give a sweep (commscope bench collectives) to "
                             "fit alpha, beta and gamma, or an environment with --environment")
    prims = sorted({str(r["config"]["op"]) for r in colls} & {"allreduce", "allgather", "reduce_scatter"})
    if not prims:
        raise CommscopeError("the collective records hold no allreduce, allgather or reduce_scatter to fit")
    wanted = ",".join(a for a in SWEEP_ALGORITHM.split(",") if a.split("_", 1)[1] in prims) or None
    sizes = sorted(int(r["config"]["bytes"]) for r in colls)
    how = dict(primitive=",".join(prims), algorithm=fit.as_run_by(wanted, fit.records_backend(colls)), name=name,
               statistic=SWEEP_STATISTIC, host=host)
    if sizes[0] < fit.LATENCY_BELOW and sizes[-1] >= fit.BANDWIDTH_FROM:
        return fit.fit_two_regimes(list(paths), **how)
    return fit.fit(list(paths), **how)
