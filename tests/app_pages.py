"""Helpers the app's AppTest tests share: open a page of the multipage app, read its charts."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

MAIN = str(Path(__file__).resolve().parent.parent / "app" / "main.py")


def open_page(path: str) -> AppTest:
    """The app run once, then switched to ``path`` (e.g. ``"views/measured.py"``), with no exception."""
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    assert not at.exception, at.exception
    at.switch_page(path).run()
    assert not at.exception, at.exception
    return at


def chart_specs(at: AppTest) -> list[dict]:
    """The plotly spec of every chart on the page, in order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def values(array: object) -> list:
    """A trace's data array from a chart spec as a list: plotly writes numeric arrays as typed arrays
    (``{"dtype": "f8", "bdata": <base64>}``), others as JSON lists."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array or [])
