"""What the app's download buttons write (pure, no Streamlit): figures as HTML pages that work offline, tables as
CSV under a ``#`` metadata header, and file names that say what is inside.

- :func:`offline_html`: plotly.js is bundled in the page (``include_plotlyjs=True``, about 4.7 MB), MathJax is
  left out, so the file opens with no network and asks no other host for anything.
- :func:`csv_with_header`: ``# key: value`` lines (what, environment, p, commscope version, date) before the
  table; byte sizes as integers. ``pandas.read_csv(path, comment="#")`` reads it back.
- :func:`file_name`: ``<what>_<environment>_p<p>.<ext>`` made of letters, digits, dots, dashes and underscores.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

SIZE_COLUMNS = ("bytes", "from_bytes", "to_bytes", "nbytes", "size_bytes")  # byte counts: integers in a CSV


def version() -> str:
    """The installed commscope's version ("unknown" in a bare checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    try:
        return _version("commscope")
    except PackageNotFoundError:
        return "unknown"


def offline_html(fig: go.Figure) -> str:
    """The figure as a standalone HTML page with plotly.js inside it: no script, style or font from another host."""
    return fig.to_html(include_plotlyjs=True, include_mathjax=False, full_html=True,
                       config={"displaylogo": False})


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._-")


def file_name(what: str, ext: str, env: str | None = None, p: Any = None, *extra: str) -> str:
    """``"allreduce_10GbE_p64.csv"``: what, the environment, p (an int, or a range such as ``(2, 4096)``) and
    any extra parts, each reduced to file-name-safe characters."""
    parts = [what]
    if env:
        parts.append(env)
    if p is not None and p != "":
        if isinstance(p, (tuple, list)) and len(p) == 2:
            parts.append(f"p{p[0]}-{p[1]}")
        else:
            parts.append(f"p{p}")
    parts += [x for x in extra if x]
    stem = "_".join(s for s in (_safe(x) for x in parts) if s) or "commscope"
    return f"{stem}.{ext.lstrip('.')}"


def integer_sizes(df: pd.DataFrame, columns: Iterable[str] = SIZE_COLUMNS) -> pd.DataFrame:
    """A copy of ``df`` whose byte-size columns are integers (rounded; missing values kept as empty cells)."""
    out = df.copy()
    for c in columns:
        if c in out.columns and pd.api.types.is_numeric_dtype(out[c]):
            values = out[c].to_numpy(dtype=float)
            out[c] = pd.array(np.where(np.isfinite(values), np.round(values), np.nan), dtype="Float64").astype("Int64")
    return out


def csv_with_header(df: pd.DataFrame, meta: Mapping[str, Any], *, now: _dt.datetime | None = None) -> str:
    """The table as CSV under ``# key: value`` lines: ``meta`` (what, environment, p, ...), then the commscope
    version and the date (UTC); byte sizes as integers."""
    when = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# {k}: {' '.join(str(v).split())}" for k, v in meta.items() if v is not None and v != ""]
    lines += [f"# commscope: {version()}", f"# date: {when}"]
    return "\n".join(lines) + "\n" + integer_sizes(df).to_csv(index=False)
