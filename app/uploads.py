"""Uploaded result files: the results store's JSON lines only, size-limited, checked by the store's validation.

A file is refused whole when it is over :data:`MAX_MB` MB, empty, binary (a NUL byte, e.g. a pickle) or
not JSON lines at all (its first character is not ``{``: CSV, a JSON array, a pickle, a notebook...).
Otherwise it is read line by line with :func:`runners.results.parse_lines`: ``json.loads`` and the
store's schema check, nothing else; each bad line is reported as ``file:line: reason`` and skipped.
Nothing in an upload is evaluated or imported.

The parsing is pure (:func:`parse_file`, :func:`parse_uploads`); :func:`results_uploader` is the thin
Streamlit wrapper the pages use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.text import md
from runners import results

MAX_MB = 20
MAX_BYTES = MAX_MB * 2**20
MAX_FILES = 20
LIMIT_TEXT = (f"Results-store JSON lines files (`commscope.result/1` records, as `commscope bench`, `fit`, `train` "
              f"and `validate` write them), at most {MAX_MB} MB each and {MAX_FILES} files. They are only parsed "
              "as JSON and checked against the schema; bad lines are reported and skipped.")
SHOWN_BAD = 20  # bad lines listed in the warning; the rest are counted
_BOM = b"\xef\xbb\xbf"


class UploadRefusedError(ValueError):
    """A file refused whole (the message starts with its name and says why)."""


@dataclass
class Uploads:
    """Accepted files (name -> records and bad lines read from it) and the files refused, with why."""

    files: dict[str, results.Loaded] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    digest: str = ""  # identifies the uploaded contents (names and bytes): a cache key

    @property
    def records(self) -> list[dict[str, Any]]:
        return [r for loaded in self.files.values() for r in loaded.records]

    @property
    def bad(self) -> list[results.BadLine]:
        return [b for loaded in self.files.values() for b in loaded.bad]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


def check(name: str, data: bytes, max_bytes: int = MAX_BYTES) -> bytes:
    """The file's bytes (a UTF-8 BOM dropped), or :class:`UploadRefusedError` if it cannot be JSON lines records."""
    if len(data) > max_bytes:
        raise UploadRefusedError(f"{name}: {len(data) / 2**20:.1f} MB is over the {max_bytes / 2**20:g} MB limit")
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    head = data.lstrip()
    if not head:
        raise UploadRefusedError(f"{name}: the file is empty")
    if b"\x00" in data:
        raise UploadRefusedError(f"{name}: a binary file (it holds NUL bytes), not JSON lines text")
    if not head.startswith(b"{"):
        what = "a JSON array" if head.startswith(b"[") else f"it starts with {head[:12]!r}"
        raise UploadRefusedError(f"{name}: not the results store's JSON lines (one JSON object per line); {what}")
    return data


def parse_file(name: str, data: bytes, max_bytes: int = MAX_BYTES) -> results.Loaded:
    """Records and bad lines of one uploaded file; :class:`UploadRefusedError` if the file is refused whole
    (see the module docstring) or not one of its lines is a valid record."""
    loaded = results.parse_lines(check(name, data, max_bytes), name)
    if not loaded.records:
        first = f"; first: {loaded.bad[0]}" if loaded.bad else ""
        raise UploadRefusedError(f"{name}: no valid records ({len(loaded.bad)} bad line(s){first})")
    return loaded


def parse_uploads(files: Iterable[tuple[str, bytes]], max_bytes: int = MAX_BYTES,
                  max_files: int = MAX_FILES) -> Uploads:
    """Parse uploaded ``(name, bytes)`` files; refused files are listed in ``Uploads.refused``."""
    out = Uploads()
    h = hashlib.sha256()
    for i, (name, data) in enumerate(files):
        if i >= max_files:
            out.refused.append(f"{name}: more than {max_files} files; the rest were not read")
            break
        unique, k = name, 2
        while unique in out.files:
            unique, k = f"{name} ({k})", k + 1
        h.update(unique.encode("utf-8", "replace") + b"\0" + hashlib.sha256(data).digest())
        try:
            out.files[unique] = parse_file(unique, data, max_bytes)
        except UploadRefusedError as exc:
            out.refused.append(str(exc))
    out.digest = h.hexdigest()
    return out


def _code(text: str) -> str:
    """Text inside a markdown code span, where nothing but a backtick means anything."""
    return str(text).replace("`", "'")


def bad_lines_text(bad: list[results.BadLine], shown: int = SHOWN_BAD) -> str:
    """The warning text: the first ``shown`` bad lines as ``file:line: reason``, then how many more."""
    lines = [f"{len(bad)} bad line(s) skipped:"]
    lines += [f"- `{_code(b.file)}:{b.line}`: {md(b.reason)}" for b in bad[:shown]]
    if len(bad) > shown:
        lines.append(f"- ... and {len(bad) - shown} more")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ Streamlit
@st.cache_data(show_spinner=False, max_entries=8)
def _parse_cached(files: tuple[tuple[str, bytes], ...]) -> Uploads:
    return parse_uploads(files)


def results_uploader(key: str, label: str = "results files (JSON lines)") -> Uploads | None:
    """A file uploader for result files: returns what was read (None before anything is uploaded);
    refused files are shown with ``st.error`` and bad lines with ``st.warning``."""
    import streamlit as st

    # no ``type=`` filter: Streamlit raises on a name it does not allow, while the content check below
    # refuses any file that is not JSON lines, whatever its name, with a message saying why
    uploaded = st.file_uploader(label, accept_multiple_files=True, key=key, max_upload_size=MAX_MB, help=LIMIT_TEXT)
    st.caption(LIMIT_TEXT)
    if not uploaded:
        return None
    refused = []
    items = []
    for f in uploaded:
        size = getattr(f, "size", None)
        if size is not None and size > MAX_BYTES:  # refuse before reading it into the cache key
            refused.append(f"{f.name}: {size / 2**20:.1f} MB is over the {MAX_MB} MB limit")
        else:
            items.append((f.name, f.getvalue()))
    up = _parse_cached(tuple(items))
    up = Uploads(dict(up.files), refused + list(up.refused), up.digest)
    for why in up.refused:
        st.error(f"Refused {md(why)}")
    if up.bad:
        st.warning(bad_lines_text(up.bad))
    return up


@st.cache_data(show_spinner=False)
def reference_records(link: str) -> list[dict[str, Any]]:
    """Every record of one link of the shipped reference run (``runners.reference``), read once: the
    default data of the pages that also take uploads."""
    from runners import reference

    return reference.records(link)


@st.cache_data(show_spinner=False)
def published_records() -> list[dict[str, Any]]:
    """The shipped published collective measurements (``runners.reference.published_records``), read once."""
    from runners import reference

    return reference.published_records()
