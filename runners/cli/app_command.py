"""``commscope app``: serve the Streamlit app (``app/main.py``) on the bundled data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from .common import UsageError


def app_(ctx: typer.Context) -> None:
    """Serve the Streamlit app; Streamlit's own flags pass through (e.g. --server.port 8600)."""
    from runners._extras import require

    require("streamlit", "commscope app")
    require("plotly", "commscope app")
    import importlib.util

    spec = importlib.util.find_spec("app.main")
    if spec is None or spec.origin is None:
        raise UsageError("cannot find the app's entry point app/main.py; reinstall commscope")
    entry = Path(spec.origin)
    args = list(ctx.args)
    defaults = {"--server.headless": "true", "--browser.gatherUsageStats": "false"}
    for flag, value in defaults.items():
        if not any(a == flag or a.startswith(flag + "=") for a in args):
            args += [flag, value]
    os.execv(sys.executable, [sys.executable, "-m", "streamlit", "run", str(entry), *args])


def register(app: typer.Typer) -> None:
    """Add ``app``."""
    app.command("app", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(app_)
