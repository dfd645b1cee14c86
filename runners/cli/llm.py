"""``commscope predict llm`` and ``commscope plan llm``: large-model training plans (:mod:`costmodels.llm`).

    commscope predict llm --model gpt3-175b --gpus 1024 --env 8xH100-NVLink+IB-NDR [--tp 8 --pp 16 --dp N
                          --cp 1 --ep 1 --sp --zero 1 --schedule 1f1b --v 1 --micro-batch 1 --global-batch 1536
                          --recompute none --achieved 0.48|kernel [--attention fused] [--loss fp32]]
                          [--trace pipeline.json] [--json]
    commscope plan llm --model gpt3-175b --gpus 1024 --env 8xH100-NVLink+IB-NDR [--device-memory 80GiB]
                       [--top 10] [--global-batch N] [--achieved 0.48|kernel] [--no-switch] [--json | --csv]

``predict llm`` prints one plan's iteration time, MFU, tokens/s, memory per GPU (OOM flagged), each group's
collectives (bytes, the library's algorithm/protocol, time, exposed), the bubble and the three-layer
attribution. ``plan llm`` ranks every valid plan that fits and says at which inter-node bandwidth the best
plan changes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

import costmodels as cm

from .common import UsageError, check_writable, console

GIB = 2**30
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
RECOMPUTE = ("none", "selective", "full")

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="transformer spec: gpt3-175b, llama3-8b, llama3-70b, "
                                                              "mixtral-8x7b, deepseek-v3")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="number of GPUs")]
EnvOpt = Annotated[str, typer.Option("--env", help="two-level preset (e.g. 8xH100-NVLink+IB-NDR) or environment "
                                                   "JSON file")]
AchievedOpt = Annotated[str, typer.Option(
    "--achieved", help="compute: a fraction of the device's peak FLOP/s in (0, 1], or 'kernel' for the kernel model "
                       "(each GEMM by its shape at the device's measured matmul ceiling, element-wise work at HBM "
                       "bandwidth; A100 and H100)")]
AttentionOpt = Annotated[str, typer.Option(
    "--attention", help="with --achieved kernel: 'fused' (FlashAttention) or 'materialized' (scores written to "
                        "memory, as Megatron-LM in 2021)")]
LossOpt = Annotated[str, typer.Option(
    "--loss", help="with --achieved kernel: the cross-entropy's kernels, 'fp32' (logits cast to fp32, Megatron-LM's "
                   "default), 'fp16' (--fp16-lm-cross-entropy) or 'fused' (one pass)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _spec(model: str) -> Any:
    """The shipped spec of --model (a TransformerSpec)."""
    from costmodels.llm import llm, llms

    if model not in llms():
        raise UsageError(f"--model must be one of {', '.join(llms())}, got {model!r}")
    return llm(model)


def _environment(env: str) -> cm.Environment:
    try:
        return cm.environment(env)
    except cm.CommscopeError as exc:
        raise UsageError(f"--env: {exc}") from None


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag} must be a positive integer, got {value}")


def _compute_options(achieved: str, attention: str, loss: str = "fp32") -> dict[str, Any]:
    """--achieved, --attention and --loss as :func:`costmodels.llm.iteration.evaluate` takes them: ``achieved`` a
    fraction, or None for the kernel model."""
    from costmodels.llm.iteration import ATTENTION
    from costmodels.llm.kernels import LOSS_BYTES

    if attention not in ATTENTION:
        raise UsageError(f"--attention must be one of {', '.join(ATTENTION)}, got {attention!r}")
    if loss not in LOSS_BYTES:
        raise UsageError(f"--loss must be one of {', '.join(LOSS_BYTES)}, got {loss!r}")
    if achieved.strip().lower() == "kernel":
        return {"achieved": None, "attention": attention, "loss": loss}
    try:
        value = float(achieved)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise UsageError(f"--achieved must be a number in (0, 1] or 'kernel', got {achieved!r}")
    if attention != "fused":
        raise UsageError("--attention applies to --achieved kernel only")
    if loss != "fp32":
        raise UsageError("--loss applies to --achieved kernel only (an achieved fraction is end to end)")
    return {"achieved": value}


def _fmt_bytes(n: float) -> str:
    return cm.format_size(round(n))


def attribution_dict(a: Any) -> dict[str, Any]:
    """An :class:`~costmodels.llm.Attribution` as JSON-safe values."""
    return {"iteration_time_s": a.iteration_time, "compute_s": a.compute, "strategy_s": a.strategy,
            "library_s": a.library, "network_s": a.network, "bubble_s": a.bubble, "exposed_s": dict(a.exposed),
            "faster_network_factor": a.faster, "shares": a.shares()}


def predict_llm(
    model: ModelOpt,
    gpus: GpusOpt,
    env: EnvOpt = "8xH100-NVLink+IB-NDR",
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel size (inside a node)")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="pipeline stages")] = 1,
    dp: Annotated[int | None, typer.Option("--dp", help="data-parallel size [default: gpus / (tp cp pp)]")] = None,
    cp: Annotated[int, typer.Option("--cp", help="context-parallel size (ring attention)")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="expert-parallel size (a divisor of dp; MoE only)")] = 1,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="sequence parallelism (needs tp > 1)")] = False,
    zero: Annotated[int, typer.Option("--zero", help="ZeRO stage 0-3")] = 0,
    schedule: Annotated[str | None, typer.Option(
        "--schedule", help="pipeline schedule: gpipe, 1f1b, interleaved, zb-h1 [default: 1f1b, interleaved "
                           "when --v > 1]")] = None,
    v: Annotated[int, typer.Option("--v", help="virtual stages per GPU (interleaved schedule)")] = 1,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="sequences per micro-batch")] = 1,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="sequences per iteration [default: the spec's]")] = None,
    recompute: Annotated[str, typer.Option("--recompute", help="activation recomputation: none, selective, full")
                         ] = "none",
    achieved: AchievedOpt = "0.48",
    attention: AttentionOpt = "fused",
    loss: LossOpt = "fp32",
    trace: Annotated[Path | None, typer.Option(help="write the pipeline timeline as a Chrome/Perfetto trace")
                     ] = None,
    as_json: JsonOpt = False,
) -> None:
    """One large-model plan: iteration time, MFU, tokens/s, memory per GPU, communication per group, bubble and
    the three-layer attribution."""
    from costmodels.llm import attribute, plan

    spec = _spec(model)
    environment = _environment(env)
    for value, flag in ((gpus, "--gpus"), (tp, "--tp"), (pp, "--pp"), (dp, "--dp"), (cp, "--cp"), (ep, "--ep"),
                        (v, "--v"), (micro_batch, "--micro-batch"), (global_batch, "--global-batch")):
        _positive(value, flag)
    if zero not in (0, 1, 2, 3):
        raise UsageError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    if schedule is not None and schedule not in SCHEDULES:
        raise UsageError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if recompute not in RECOMPUTE:
        raise UsageError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    compute = _compute_options(achieved, attention, loss)
    if dp is None and gpus % (tp * cp * pp):
        raise UsageError(f"--gpus {gpus} must be a multiple of --tp x --cp x --pp ({tp * cp * pp})")
    if dp is not None and dp * tp * cp * pp != gpus:
        raise UsageError(f"--tp x --cp x --pp x --dp = {tp * cp * pp * dp}, not --gpus {gpus}")
    if trace is not None:
        check_writable(trace, "the trace")
    r = plan(spec, gpus, environment, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, sp=sp, zero=zero, schedule=schedule, v=v,
             micro_batch=micro_batch, global_batch=global_batch, recompute=recompute, **compute)
    a = attribute(r, **compute)
    if trace is not None:
        r.timeline().save_chrome_trace(trace, process=f"commscope {spec.name} {r.plan.label()}")
    if as_json:
        print(json.dumps({**r.to_dict(), "bubble_fraction": r.bubble_fraction,
                          "attribution": attribution_dict(a)}, indent=2, allow_nan=False))
        return
    _print_prediction(r, a, kernel=compute["achieved"] is None)


def _print_prediction(r: Any, a: Any, kernel: bool = False) -> None:
    from rich.table import Table

    out = console()
    mem = r.memory
    out.print(f"{r.spec.name} on {r.plan.gpus} GPUs ({r.device}) on {r.env.name}: {r.plan.label()}")
    out.print(f"  iteration {r.iteration_time:.3f} s, MFU {r.mfu:.1%}, {r.tflops_per_gpu:.0f} TFLOP/s per GPU, "
              f"{r.tokens_per_s:,.0f} tokens/s")
    out.print(f"  memory per GPU {mem['total'] / GIB:.1f} GiB of {r.device_memory / GIB:.0f} GiB"
              + (" -- OUT OF MEMORY" if r.oom else "") + f" (weights {mem['weights'] / GIB:.1f}, gradients "
              f"{mem['gradients'] / GIB:.1f}, optimizer {mem['optimizer'] / GIB:.1f}, activations "
              f"{mem['activations'] / GIB:.1f} GiB)")
    out.print(f"  compute {r.compute:.3f} s, bubble {r.bubble:.3f} s ({r.bubble_fraction:.1%} of the iteration, "
              f"{r.plan.schedule}, {r.plan.micro_batches:g} micro-batches), exposed communication "
              f"{r.exposed_comm:.3f} s, optimizer {r.optimizer:.3f} s")
    table = Table("group", "collective", "ranks", "bytes", "calls", "per", "algorithm/protocol", "time (ms)",
                  "total (ms)", "exposed (ms)", title="communication per group (exposed: on the critical path)")
    shown: set[str] = set()
    for g in r.groups:  # a group's exposed time once, on its first collective
        exposed = "" if g.group in shown else f"{r.exposed.get(g.group, 0.0) * 1e3:.1f}"
        shown.add(g.group)
        table.add_row(g.group, g.primitive, str(g.ranks), _fmt_bytes(g.nbytes), f"{g.calls:g}", g.per,
                      f"{g.algorithm}/{g.protocol}", f"{g.time * 1e3:.3f}", f"{g.total * 1e3:.1f}", exposed)
    out.print(table)
    s = a.shares()
    att = Table("layer", "seconds", "share", "meaning", title="three-layer attribution")
    att.add_row("compute", f"{a.compute:.3f}", f"{s['compute']:.1%}", "kernels by shape (kernel model)" if kernel else
                "FLOPs at the achieved rate")
    att.add_row("strategy", f"{a.strategy:.3f}", f"{s['strategy']:.1%}", "exposed communication + bubble")
    att.add_row("library", f"{a.library:.3f}", f"{s['library']:.1%}",
                "the library's choice vs the cheapest registered algorithm (negative: the library wins)")
    att.add_row("network", f"{a.network:.3f}", f"{s['network']:.1%}", f"vs a network {a.faster:g}x faster")
    out.print(att)


def plan_llm(
    model: ModelOpt,
    gpus: GpusOpt,
    env: EnvOpt = "8xH100-NVLink+IB-NDR",
    device_memory: Annotated[str | None, typer.Option(
        "--device-memory", help="memory per GPU, e.g. 80GiB [default: the device's]")] = None,
    top: Annotated[int, typer.Option("--top", help="plans to show")] = 10,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="sequences per iteration [default: the spec's]")] = None,
    achieved: AchievedOpt = "0.48",
    attention: AttentionOpt = "fused",
    loss: LossOpt = "fp32",
    switch: Annotated[bool, typer.Option("--switch/--no-switch",
                                         help="scan the inter-node bandwidth for where the best plan changes")] = True,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="the ranked table as CSV on stdout")] = False,
) -> None:
    """Rank every valid plan that fits in memory, fastest first, and say what would change the best plan."""
    from costmodels.llm import search, switch_points

    spec = _spec(model)
    environment = _environment(env)
    _positive(gpus, "--gpus")
    _positive(top, "--top")
    _positive(global_batch, "--global-batch")
    compute = _compute_options(achieved, attention, loss)
    if as_json and as_csv:
        raise UsageError("give --json or --csv, not both")
    limit = None
    if device_memory is not None:
        try:
            limit = float(cm.parse_size(device_memory))
        except cm.CommscopeError as exc:
            raise UsageError(f"--device-memory: {exc}") from None
        if limit <= 0:
            raise UsageError(f"--device-memory must be positive, got {device_memory!r}")
    found = search(spec, gpus, environment, device_memory=limit, global_batch=global_batch, **compute)
    if len(found.order) == 0:
        raise UsageError(f"no plan of {spec.name} on {gpus} GPUs fits in {found.device_memory / GIB:.1f} GiB per "
                         "GPU; give more --gpus or --device-memory")
    best = found.best(top)
    rows = plan_rows(best)
    switches = None
    if switch:
        sw = switch_points(spec, gpus, environment, device_memory=found.device_memory, global_batch=global_batch,
                           **compute)
        switches = [{"bandwidth_Bps": bw, "from": before, "to": after} for bw, before, after in sw.switches]
    if as_csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        sys.stdout.write(buf.getvalue())
        return
    if as_json:
        print(json.dumps({"spec": spec.name, "gpus": gpus, "environment": environment.name,
                          "device_memory_bytes": found.device_memory, "valid_plans": found.count,
                          "fitting_plans": len(found.order), "plans": rows, "switches": switches},
                         indent=2, allow_nan=False))
        return
    _print_plans(spec.name, gpus, environment, found, rows, switches)


def plan_rows(best: list[Any]) -> list[dict[str, Any]]:
    """One flat row per plan (rank, label, times, vs best, MFU, tokens/s, memory), fastest first."""
    t0 = best[0].iteration_time
    return [{"rank": i + 1, "plan": r.plan.label(), **r.plan.to_dict(),
             "iteration_s": r.iteration_time, "vs_best": r.iteration_time / t0 - 1, "mfu": r.mfu,
             "tokens_per_s": r.tokens_per_s, "memory_gib": r.memory["total"] / GIB, "bubble_s": r.bubble,
             "exposed_comm_s": r.exposed_comm} for i, r in enumerate(best)]


def _print_plans(name: str, gpus: int, environment: cm.Environment, found: Any, rows: list[dict[str, Any]],
                 switches: list[dict[str, Any]] | None) -> None:
    from rich.table import Table

    out = console()
    table = Table("#", "plan", "iteration (s)", "vs best", "MFU", "tokens/s", "GiB/GPU", "bubble (s)",
                  "exposed comm (s)",
                  title=f"{name} on {gpus} GPUs on {environment.name}: {len(found.order):,} of {found.count:,} "
                        f"valid plans fit in {found.device_memory / GIB:.0f} GiB per GPU")
    for r in rows:
        table.add_row(str(r["rank"]), r["plan"], f"{r['iteration_s']:.3f}",
                      "best" if r["rank"] == 1 else f"+{r['vs_best']:.1%}", f"{r['mfu']:.1%}",
                      f"{r['tokens_per_s']:,.0f}", f"{r['memory_gib']:.1f}", f"{r['bubble_s']:.3f}",
                      f"{r['exposed_comm_s']:.3f}")
    out.print(table)
    if switches is None:
        return
    out.print("what would change the best plan (inter-node bandwidth per NIC scaled 1/16x..16x, now "
              f"{1 / environment.beta / 1e9:.0f} GB/s):")
    if not switches:
        out.print("  nothing in that range: the best plan stays the same")
    for s in switches:
        out.print(f"  from {s['bandwidth_Bps'] / 1e9:.1f} GB/s: {s['to']} (was {s['from']})")


def register_predict(predict_app: typer.Typer) -> None:
    """Add ``predict llm`` to the ``predict`` group."""
    predict_app.command("llm")(predict_llm)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` group and ``plan llm``."""
    plan_app = typer.Typer(help="Search parallel plans: ranked by iteration time.", no_args_is_help=True)
    plan_app.command("llm")(plan_llm)
    app.add_typer(plan_app, name="plan")
