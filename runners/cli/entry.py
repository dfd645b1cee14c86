"""The ``commscope`` entry point: assembles the command modules into one typer app and runs it, turning every
error into one line ``commscope: error: ...`` with exit code 2 (never a traceback). It only assembles: each
command lives in a module of its own, which imports its heavy dependencies only when it runs."""

from __future__ import annotations

import sys

import typer

import costmodels as cm

from . import (
    app_command,
    bench,
    calibrate,
    catalog,
    compare_trace,
    constants,
    crossover,
    emulate,
    fit,
    imports,
    llm,
    predict,
    profile,
    train,
    validate,
)

app = typer.Typer(
    name="commscope",
    help="Which communication technique wins in your environment, and why: cost models and measurements.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# the order of `commscope --help`
for _module in (predict, llm, crossover, catalog, app_command, fit, calibrate, emulate, bench, imports, compare_trace,
                profile, train, constants, validate):
    _module.register(app)


def _click_exceptions() -> tuple[type[BaseException], type[BaseException], type[BaseException]]:
    """(ClickException, Exit, Abort) of the click that typer uses (newer typers vendor their own)."""
    mod = sys.modules[typer.BadParameter.__module__]
    return mod.ClickException, typer.Exit, typer.Abort


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``commscope`` script: one-line errors with exit code 2."""
    from runners._extras import MissingExtraError

    click_error, click_exit, click_abort = _click_exceptions()
    command = typer.main.get_command(app)
    try:
        # without standalone mode click returns a command's typer.Exit code instead of exiting with it
        result = command.main(args=argv, prog_name="commscope", standalone_mode=False)
    except click_exit as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except click_abort:
        print("commscope: aborted", file=sys.stderr)
        return 1
    except click_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # help was asked for by giving nothing
            print(exc.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
        print(f"commscope: error: {msg}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2) or 2)
    except (cm.CommscopeError, MissingExtraError) as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
