"""``commscope profile``: measure a zoo model's per-layer forward and backward times into a model profile.

    commscope profile --model NAME --batch-size B --out profile.json [--device cpu|cuda|cuda:N]
                      [--iterations 20] [--warmup 3] [--threads N] [--option key=value ...]
                      [--seed 0] [--raw] [--codecs topk,qsgd,...] [--record results.jsonl] [--json]

Prints one row per parameter tensor (name, parameters, forward ms, backward ms) and the profiler's
overhead, writes the profile JSON atomically (``cm.load_profile`` and ``commscope predict iteration
--model FILE`` read it), and with ``--record`` appends a "profile" record to a results file. Options
are checked before torch is imported; the profile is measured before anything is written. ``--codecs`` also
times the named compressed techniques' encode and decode on the device (their runners' own code, one process:
``runners.training.profiler.codecs``), kept in the profile, where the cost models price them from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from costmodels.errors import CommscopeError

from .common import UsageError, check_writable, console, parse_options

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")

MAX_BATCH = 2**20  # samples per profiled iteration: beyond it a batch of the zoo models does not fit in memory


def profile_command(
    model: Annotated[str, typer.Option(help="zoo model: mlp, resnet_small, gpt_small; resnet50, vgg16 (torchvision); "
                                            "bert-base, gpt2 (transformers)")],
    batch_size: Annotated[int, typer.Option("--batch-size", help="samples per iteration")],
    out: Annotated[Path, typer.Option(help="write the profile JSON here (atomically)")],
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N")] = "cpu",
    iterations: Annotated[int, typer.Option(help="timed iterations (per-layer medians)")] = 20,
    warmup: Annotated[int, typer.Option(help="untimed iterations first")] = 3,
    threads: Annotated[int | None, typer.Option(
        help="torch.set_num_threads for the measurement (CPU compute alone differs from beside other ranks)")] = None,
    option: Annotated[list[str], typer.Option(
        "--option", help="model option NAME=VALUE, e.g. widths=512,512 or depth=4 (repeatable)")] = [],  # noqa: B006
    seed: Annotated[int, typer.Option(help="seed of the model's initial weights")] = 0,
    raw: Annotated[bool, typer.Option("--raw", help="keep the hooks' own cost in the reported times")] = False,
    codecs: Annotated[str | None, typer.Option(
        help="comma-separated compressed techniques whose encode and decode to time as well (fp16, powersgd, topk, "
             "randomk, dgc, qsgd, terngrad, signsgd, ef_signsgd), or 'all'")] = None,
    record: Annotated[Path | None, typer.Option(help="append a 'profile' record to this results file")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Measure per-layer forward and backward times of a model into a profile the cost models read."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise UsageError(f"--batch-size must be from 1 to {MAX_BATCH:,} samples, got {batch_size}")
    if iterations < 1:
        raise UsageError(f"--iterations must be >= 1, got {iterations}")
    if warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {warmup}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be >= 1, got {threads}")
    if not _DEVICE.match(device):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    check_writable(out, "the profile")
    if record is not None:
        check_writable(record, "the record", append=True)
    opts = parse_options(option)
    wanted = _codecs(codecs)

    from runners import results as rs
    from runners.training import profiler, zoo

    entry = zoo.model(model)  # unknown names and options fail before any work
    entry.options(**opts)
    if wanted:
        from runners.training.profiler.codecs import compressed_techniques

        known = compressed_techniques()
        wanted = known if wanted == ["all"] else wanted
        bad = [w for w in wanted if w not in known]
        if bad:
            raise UsageError(f"--codecs takes {', '.join(known)} or all, got {', '.join(bad)}")
        if opts:
            raise UsageError("--codecs times the zoo model with its default options; drop --option or --codecs")
    dev = profiler.resolve_device(device)
    prof = profiler.profile_model(entry.name, batch_size, str(dev), warmup=warmup, iterations=iterations,
                                  threads=threads, seed=seed, correct_overhead=not raw, **opts)
    if wanted:
        prof = _with_codecs(prof, wanted, batch_size, dev, iterations, warmup, threads, seed)
    meta = prof.metadata
    entry_record = None
    if record is not None:
        config = {"model": prof.name, "batch_size": batch_size, "device": str(dev), "device_name": prof.device,
                  "iterations": iterations, "warmup": warmup, "threads": meta["threads"], "seed": seed,
                  "options": meta["options"], "corrected": not raw}
        run = rs.run_info("none", 1, 1, [prof.device], device_type=dev.type, timing=meta["timing"])
        entry_record = rs.record("profile", config, prof.to_dict(), run, source="commscope profile")
    written: dict[str, str] = {}
    try:
        prof.save(out)
    except OSError as exc:
        raise CommscopeError(f"cannot write the profile {str(out)!r}: {exc.strerror or exc}") from None
    written["profile"] = str(out)
    if record is not None and entry_record is not None:
        try:
            rs.append(record, [entry_record])
        except OSError as exc:
            raise CommscopeError(f"cannot append to {str(record)!r}: {exc.strerror or exc}") from None
        written["record"] = str(record)
    if as_json:
        print(json.dumps({"profile": prof.to_dict(), "written": written}, indent=2, allow_nan=False))
        return
    _print(prof, written, console())


def _codecs(value: str | None) -> list[str]:
    if value is None:
        return []
    names = [v.strip() for v in value.split(",")]
    if not value.strip() or any(not n for n in names):
        raise UsageError(f"--codecs must be comma-separated technique names or all, got {value!r}")
    return names


def _with_codecs(prof: Any, wanted: list[str], batch_size: int, dev: Any, iterations: int, warmup: int,
                 threads: int | None, seed: int) -> Any:
    """``prof`` with the techniques' measured codecs in its metadata (with the profile's threads)."""
    import dataclasses

    import torch

    from runners.training.profiler.codecs import measure_codecs

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        codecs = measure_codecs(prof.name, batch_size, wanted, dev, iterations, warmup, seed)
    finally:
        torch.set_num_threads(before)
    return dataclasses.replace(prof, metadata={**prof.metadata, "codecs": codecs})


def _print(prof: Any, written: dict[str, str], console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    from runners.training.profiler import describe_overhead

    meta = prof.metadata
    table = Table("layer", "params", "forward (ms)", "backward (ms)",
                  title=escape(f"{prof.name}: batch {prof.batch_size} on {prof.device}, {len(prof)} tensors, "
                               f"{prof.params:,} parameters (forward order; backward runs bottom to top)"))
    for x in prof.layers:
        table.add_row(escape(x.name), f"{x.params:,}", f"{x.forward_s * 1e3:.4f}", f"{x.backward_s * 1e3:.4f}")
    table.add_row("total", f"{prof.params:,}", f"{prof.forward_s * 1e3:.4f}", f"{prof.backward_s * 1e3:.4f}")
    console.print(table)
    console.print(escape(describe_overhead(meta["overhead"], meta["iterations"])))
    for key, c in meta.get("codecs", {}).items():
        console.print(escape(f"codec {key}: encode {c['encode_s'] * 1e3:.3f} ms, decode {c['decode_s'] * 1e3:.3f} ms "
                             f"({c['technique']}, {c['how']})"))
    if meta.get("note"):
        console.print(escape(f"note: {meta['note']}"))
    if "profile" in written:
        console.print(escape(f"wrote the profile to {written['profile']}"))
    if "record" in written:
        console.print(escape(f"appended a profile record to {written['record']}"))


def register(app: typer.Typer) -> None:
    """Add ``commscope profile`` to the command line."""
    app.command("profile")(profile_command)
