"""Marks the app's in-process page tests, which ``./dev.sh test`` runs on two workers (see dev.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROCESS_MARKS = ("multiprocess", "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``app_inprocess``: a test of an app module (tests/test_app*.py) that starts no process: Streamlit's
    AppTest and pure functions only, nothing timed against another process."""
    for item in items:
        if Path(str(item.fspath)).name.startswith("test_app") and not any(
                item.get_closest_marker(m) for m in PROCESS_MARKS):
            item.add_marker(pytest.mark.app_inprocess)
