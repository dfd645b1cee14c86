"""What time to accuracy takes besides the bounds: measured "constants" records, and what each algorithm is priced as.

**Measured constants** (:func:`measured`). ``time_to_accuracy(..., constants=records)`` takes results-store record
dicts of kind "constants" (``commscope constants`` writes them; other kinds are skipped) and turns them, with
:mod:`convergence.measured_constants`, into

- the problem constants L, sigma, Delta, zeta (:func:`~convergence.measured_constants.constants_from_records`),
  sigma rescaled from the measured per-worker batch B to the profile's B' as a batch of B' drawn without
  replacement from a shard of m samples: ``sigma^2 = sigma_1^2 / B' (m - B') / (m - 1)`` (Cochran, Sampling
  Techniques, Thm 2.2); constants given as keywords override them;
- each compressor's measured delta (contraction, ``||C(g) - g||^2 <= (1 - delta) ||g||^2``) or omega (variance,
  ``E||C(g) - g||^2 <= omega ||g||^2``) on real gradients
  (:func:`~convergence.measured_constants.compressor_constants_from_records`), which replaces the algorithm's
  worst case (``Compressor.model_constants``, e.g. ``min_j ceil(q d_j) / d_j`` for top-k) where the records
  measured that compressor at the algorithm's setting (:func:`compressor_override`); elsewhere the worst case
  stays. Each algorithm's note says which it got.

**Arguments** of :func:`~convergence.tta.time_to_accuracy` and :func:`~convergence.tta.winner_map` (model,
environments, eps, p, grids), checked with errors that name what is allowed.

**Priced schedule** (:func:`priced_schedule`): the cost-model schedule, compressor and collective that price one
iteration of an algorithm (``"fusion + topk:0.01"``), from its :class:`~convergence.algorithms.Algorithm` entry.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import costmodels as cm
from costmodels._inputs import as_ranks
from costmodels.environment_array import EnvironmentArray, as_environment_array
from costmodels.errors import CommscopeError

from .algorithms import Algorithm, async_time, gossip_time, ssp_time, sweep_time
from .measured_constants import KIND, compressor_constants_from_records, constants_from_records

UNIT = "unit constants (L = sigma = Delta = 1, zeta = 0) unless given"
"""How the problem constants were chosen when no records are given."""


@dataclass(frozen=True)
class Measured:
    """Constants from "constants" records: ``problem`` (L, sigma, Delta, zeta), ``compressors`` keyed by
    (compressor name, parameter) with the record's entry (``delta`` or ``omega``, ``worst_case``) and its label,
    ``model`` the model they were measured on, ``source`` one sentence saying where they came from."""

    problem: dict[str, float]
    compressors: dict[tuple[str, Any], tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    model: str = ""
    source: str = ""


def _key(spec: str) -> tuple[str, Any]:
    entry, value = cm.parse_compressor(spec)
    return entry.name, None if value is None else float(f"{value:g}")


def _usable(records: Any) -> list[Mapping[str, Any]]:
    """The "constants" records among ``records``, each checked on its own so that an error names the bad one."""
    if isinstance(records, (str, bytes, os.PathLike)):
        raise CommscopeError(f"constants= takes record dicts of kind '{KIND}' (runners.results.load(path).records), "
                             f"not a path: {records!r}")
    if isinstance(records, Mapping):
        raise CommscopeError(f"constants= takes a list of record dicts of kind '{KIND}', not one dict: wrap it in "
                             "a list")
    if not isinstance(records, Iterable):
        raise CommscopeError(f"constants= takes a list of record dicts of kind '{KIND}', got {records!r}")
    out = []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            raise CommscopeError(f"constants= record {i} is not a record dict (got {type(r).__name__})")
        if r.get("kind") != KIND:
            continue
        try:
            if not isinstance(r.get("config"), Mapping) or not isinstance(r.get("result"), Mapping):
                raise KeyError("config" if not isinstance(r.get("config"), Mapping) else "result")
            constants_from_records([r])
            compressor_constants_from_records([r])
        except CommscopeError as exc:
            raise CommscopeError(f"constants= record {i}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise CommscopeError(f"constants= record {i} is not a usable '{KIND}' record (bad or missing field "
                                 f"{exc}); commscope constants writes them") from None
        out.append(r)
    if not out:
        raise CommscopeError(f"constants= holds no '{KIND}' records (commscope constants writes them)")
    return out


def measured(records: Any, prof: cm.ModelProfile) -> Measured:
    """The constants of ``records`` for pricing ``prof``: sigma at the profile's per-worker batch (module
    docstring). Records of several models are narrowed to the profile's model when it is among them."""
    recs = _usable(records)
    models = sorted({str(r["config"].get("model")) for r in recs})
    if len(models) > 1:
        if prof.name not in models:
            raise CommscopeError(f"constants= records measure several models ({', '.join(models)}) and none is "
                                 f"{prof.name}: give the records of one")
        models = [prof.name]
    model = models[0]
    problem = constants_from_records(recs, batch_size=prof.batch_size, model=model)
    table = {}
    for label, entry in compressor_constants_from_records(recs, model=model).items():
        try:
            table[_key(label)] = (label, entry)
        except CommscopeError:  # a compressor this version does not know: it prices no algorithm here
            continue
    sigma = recs[0]["result"]["sigma"]
    b, m = sigma.get("batch_size"), sigma.get("shard_size")
    source = (f"measured on {model} ({recs[0]['config'].get('dataset', 'its data set')}, {len(recs)} record(s)); "
              f"sigma rescaled from the measured per-worker batch {b} to {prof.name}'s {prof.batch_size} "
              f"(shard of {m} samples)")
    if isinstance(m, int) and prof.batch_size >= m:
        source += ": the batch covers the whole shard, so sigma = 0"
    return Measured(problem, table, model, source)


def compressor_override(a: Algorithm, value: Any, names: set[str], fixed: Mapping[str, np.ndarray],
                        m: Measured | None, profile: str = "the profile") -> tuple[dict[str, float], str]:
    """The measured delta / omega replacing the worst case of ``a`` (at parameter ``value``) where its bound takes
    one and the records measured its compressor at that setting, and the note saying which it got ("" if the
    bound takes neither or no records were given). ``fixed``: the algorithm's worst-case constants on the
    tensors of ``profile`` (:meth:`Algorithm.bound_constants`)."""
    takes = sorted(names & {"delta", "omega"})
    spec = a.compressor_spec(value)
    if m is None or not takes or spec is None:
        return {}, ""
    k = takes[0]
    worst = float(np.asarray(fixed[k]).reshape(-1)[0])
    label, entry = m.compressors.get(_key(spec), (spec, {}))
    v = entry.get(k)
    if v is None:
        return {}, f"{k} = {worst:.3g}, the worst case on {profile} ({m.model}'s records measure no {spec} {k})"
    v = float(v)
    if not np.isfinite(v) or (v <= 0 or v > 1 if k == "delta" else v < 0):
        return {}, f"{k} = {worst:.3g}, the worst case on {profile} (the measured {k} {v:.3g} of {label} is " \
                   "out of range)"
    return {k: v}, f"{k} = {v:.3g} measured on {m.model}'s gradients ({label}; worst case on {profile}'s " \
                   f"tensors {worst:.3g})"


def priced_schedule(a: Algorithm, value: Any = None) -> str:
    """What prices one iteration of ``a``: ``"fusion + topk:0.01"``, ``"local_sgd (H=8)"``, ``"ps / p
    (parameter_server)"``, ``"gossip on a ring"`` (see each timing function in :mod:`convergence.algorithms`)."""
    v = a.resolve(value)
    spec = a.compressor_spec(v)
    if a.timing is gossip_time:
        base = f"gossip on a {v if a.parameter == 'topology' else 'ring'} (neighbour exchange)"
    elif a.timing is async_time:
        base = "ps / p (parameter_server, one worker's update)"
    elif a.timing is ssp_time:
        base = "ps (parameter_server)" if v == 0 else "bsp over parameter_server, comm behind compute"
    elif a.timing is sweep_time and a.schedule is not None:
        opts = a.schedule_options(v)
        base = a.schedule + (f" ({', '.join(f'{k}={x}' for k, x in opts.items())})" if opts else "")
        if a.collective:
            base += f", {a.collective}"
    else:
        base = a.schedule or "its own timing"
    return base + (f" + {spec}" if spec else "")


# ------------------------------------------------------------------------------------- arguments
def _profile(model: Any) -> cm.ModelProfile:
    if isinstance(model, cm.ModelProfile):
        return model
    if isinstance(model, str):
        if model.endswith(".json") or "/" in model:
            return cm.load_profile(model)
        return cm.profile(model)
    raise CommscopeError(f"model must be a profile name ({', '.join(cm.profiles())}) or a costmodels.ModelProfile, "
                         f"got {model!r}")


def _environments(env: Any) -> tuple[EnvironmentArray, bool]:
    """The environments as an array, and whether a single one was given."""
    if isinstance(env, str):
        env = cm.environment(env)
    if isinstance(env, cm.Environment):
        return EnvironmentArray.of([env]), True
    if isinstance(env, (EnvironmentArray, list, tuple)):
        return as_environment_array(env), False
    raise CommscopeError(f"env must be a preset name ({', '.join(cm.environments())}), an environment JSON file, "
                         f"a costmodels.Environment or an EnvironmentArray, got {env!r}")


def _eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not (
            np.isfinite(eps) and eps > 0):
        raise CommscopeError(f"eps must be a finite number > 0 (the target of the bound's metric), got {eps!r}")
    return float(eps)


def _ranks(p: Any) -> np.ndarray:
    if isinstance(p, (str, bool)):
        raise CommscopeError(f"p must be a positive integer number of workers or an array of them, got {p!r}")
    ranks = as_ranks(p).reshape(-1)
    if not ranks.size:
        raise CommscopeError("p must name at least one worker count")
    return ranks


def _positive(name: str, values: Any, unit: str, *, allow_zero: bool) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise CommscopeError(f"{name} must be numbers ({unit}), got {values!r}") from None
    bad = ~np.isfinite(arr) | (arr < 0 if allow_zero else arr <= 0)
    if not arr.size or bad.any():
        got = arr[bad].flat[0].item() if arr.size else "nothing"
        raise CommscopeError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'} {unit}, got {got!r}")
    return arr
