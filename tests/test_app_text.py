"""User-supplied text reaches the app's markdown escaped (issue 19 item 5, 'Upload text'): file names, record fields
and the errors that quote them show as written, never as links, images, emphasis, math or HTML."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import uploads
from app.text import md
from runners import results

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
HOSTILE = "[click](javascript:alert(1)) ![x](http://h/x.png) **b** _i_ `c` $x^2$ <b>h</b> # H | :red[r]"


def test_md_escapes_every_markdown_special_character() -> None:
    out = md(HOSTILE)
    for ch in "[]*_`$<>|~":
        assert all(out[i - 1] == "\\" for i, c in enumerate(out) if c == ch), (ch, out)
    assert md("a\nb") == "a b" and md("plain text 1 2") == "plain text 1 2"


def test_bad_lines_and_refusals_quote_the_user_text_escaped() -> None:
    bad = [results.BadLine(file=HOSTILE, line=3, reason=f"op {HOSTILE!r} unknown")]
    text = uploads.bad_lines_text(bad)
    assert "[click](javascript" not in text.split("`: ")[1] and "\\[click\\](javascript" in text
    assert "`" not in text.split("`")[1]  # the file name in its code span, its own backticks made quotes
    up = uploads.parse_uploads([(HOSTILE + ".jsonl", b"not json")])
    assert up.refused and HOSTILE in up.refused[0]  # the raw text is kept; the page escapes it (below)


def test_an_upload_named_like_markdown_shows_as_written_on_the_page() -> None:
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    at.switch_page("views/environments.py").run()
    at.radio(key="envs_source").set_value("upload").run()
    at.file_uploader(key="envs_upload").set_value([(HOSTILE + ".jsonl", b"[1, 2]", "text/plain")]).run()
    assert not at.exception, at.exception
    (err,) = [e.value for e in at.error if "Refused" in e.value]
    assert "[click](javascript" not in err and "\\[click\\](javascript:alert(1))" in err
