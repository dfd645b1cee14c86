"""The constants of a "constants" record as text lines: what ``commscope constants`` prints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _g(x: Any) -> str:
    if x is None:
        return "-"
    return f"1-{1 - x:.2g}" if 0.999 < x < 1 else f"{x:.4g}"


def _list(xs: Sequence[Any]) -> str:
    return "[" + ", ".join(_g(x) for x in xs) + "]"


def lines(rec: dict[str, Any]) -> list[str]:
    """Text lines of a record: the constants with how they were measured, then each compressor's measured
    delta / omega beside its worst case."""
    c, r = rec["config"], rec["result"]
    L, s, z, d, s1 = r["L"], r["sigma"], r["zeta"], r["Delta"], r["sigma1"]
    out = [
        f"# constants of {c['model']} on {c['dataset']}: {c['world_size']} rank(s) x batch {c['batch_size']}, "
        f"{r['parameters']} parameters, checkpoints at steps {r['checkpoints']} ({r['seconds']:.1f} s)",
        f"loss f(x)  = {_list(r['loss'])} at the checkpoints (mean over all shards)",
        f"L          = {_g(L['value'])}  ({L['used']}); power {_list(L['power'])}, converged {L['converged']}; "
        f"secants: local {_list(L['secant_local'])}, between checkpoints {_list(L['secant_between'])}",
        f"sigma      = {_g(s['value'])}  (sigma^2 = {_g(s['sigma2'])} per worker batch of {s['batch_size']}, "
        f"max {_g(s['sigma2_max'])}; per sample {_g(s['sigma2_per_sample'])}); per checkpoint per batch "
        + (f"{_list(s['per_batch_from_sample'])} from per-sample, " if s["per_sample_measured"] else "")
        + f"{_list(s['per_batch_measured'])} measured",
        f"zeta       = {_g(z['value'])}  (zeta^2 = {_g(z['zeta2'])}, max {_g(z['zeta2_max'])}; per checkpoint "
        f"{_list(z['per_checkpoint'])})" + (f"; {z['note']}" if z["note"] else ""),
        f"Delta      = {_g(d['value'])}  (f(x0) = {_g(d['f0'])}, f* = {_g(d['f_star'])}: {d['f_star_method']})",
        f"sigma1     = {_g(s1['value'])}  (signSGD's ||sigma_vec||_1 per worker batch)",
    ]
    if L["note"]:
        out.append(f"note: {L['note']}")
    out += [f"note: {n}" for n in r["notes"]]
    comps = r["compressors"]
    if comps:
        out.append(f"{'compressor':<14} {'constant':<8} {'measured':>10} {'worst seen':>10} {'worst case':>10}  "
                   "per checkpoint; extreme tensor")
        for label, e in comps.items():
            if e["constant"] is None:
                out.append(f"{label:<14} {'-':<8} {'-':>10} {'-':>10} {'-':>10}  {e['note']}")
                continue
            rows = [(label, e)] + ([("  unbiased", e["unbiased"])] if "unbiased" in e else [])
            for name, x in rows:
                out.append(f"{name:<14} {x['constant']:<8} {_g(x['value']):>10} {_g(x['worst_measured']):>10} "
                           f"{_g(x['worst_case']):>10}  {_list(x['per_checkpoint'])}; {_g(x['tensor_extreme'])}")
    return out
