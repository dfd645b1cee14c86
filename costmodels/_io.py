"""Atomic file writes: a failure never leaves a half-written or missing file behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import CommscopeError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Readers see the old content or the new one, never a mixture; on any error the temporary file
    is removed and the old file is untouched. The new file gets the usual permissions (0666 & ~umask).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """Parse a JSON file; unreadable or invalid files raise CommscopeError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommscopeError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommscopeError(f"{path}: {what} is not valid JSON: {exc}") from None
