"""Files commscope writes and reads: atomic writes (a failure never leaves a half-written or missing file
behind), outputs checked before any work, and JSON files read with one-line errors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import CommscopeError, WriteError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    Readers see the old content or the new one, never a mixture; on any error the temporary file
    is removed, the old file is untouched, and :class:`WriteError` (an ``OSError`` and a
    ``CommscopeError``) says why. The new file gets the usual permissions (0666 & ~umask).
    """
    path = Path(path)
    existed = path.exists()
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        kept = "the old file is unchanged" if existed else "nothing was written"
        raise WriteError(f"cannot write {str(path)!r}: {exc.strerror or exc}; {kept}") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_writable(path: str | os.PathLike[str], what: str, *, append: bool = False) -> Path:
    """Refuse, before any work, an output that cannot be written; return it as a Path.

    The directory must exist, the path must not be a directory or another non-regular file (a device, a
    pipe), and writing must really work: an existing file is opened for appending (``append``, nothing is
    written) or must be writable (it is replaced), and a new file's directory must take a file (a probe
    file is made and removed). Real opens rather than ``os.access``, which says yes to root on a
    read-only file system. A full disk cannot be foreseen: writers replace files atomically instead.
    """
    path = Path(path)
    name = f"{what} {str(path)!r}"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CommscopeError(f"cannot write {name}: directory {str(parent)!r} does not exist")
    if path.is_dir():
        raise CommscopeError(f"cannot write {name}: it is a directory")
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise CommscopeError(f"cannot write {name}: it is not a regular file")
        if append:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
            except OSError as exc:
                raise CommscopeError(f"cannot write {name}: {exc.strerror or exc}") from None
            return path
        if not os.access(path, os.W_OK):
            raise CommscopeError(f"cannot write {name}: it is read-only")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise CommscopeError(f"cannot write {name}: directory {str(parent)!r}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    return path


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    """Parse a JSON file; unreadable, undecodable (not UTF-8), invalid or too deeply nested files raise
    CommscopeError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommscopeError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CommscopeError(f"{path}: {what} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return loads(text, f"{path}: {what}")


def loads(text: str, what: str) -> Any:
    """``json.loads`` with one-line errors: invalid JSON, or nesting deeper than Python's recursion allows."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommscopeError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise CommscopeError(f"{what} is nested too deeply to read (JSON objects or lists within each other "
                             "thousands of levels deep)") from None
