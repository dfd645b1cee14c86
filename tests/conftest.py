"""Marks the app's in-process page tests, which ``./dev.sh test`` runs on two workers (see dev.sh), and holds
them to it: such a test that starts a process fails, naming the mark it lacks."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)  # tests/test_architecture.py runs the guard below on test files of its own
PROCESS_MARKS = ("multiprocess", "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``app_inprocess``: a test of an app module (tests/test_app*.py) that starts no process: Streamlit's
    AppTest and pure functions only, nothing timed against another process."""
    for item in items:
        if Path(str(item.fspath)).name.startswith("test_app") and not any(
                item.get_closest_marker(m) for m in PROCESS_MARKS):
            item.add_marker(pytest.mark.app_inprocess)


class _NoProcess(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs) -> None:
        raise AssertionError(f"an app_inprocess test started a process ({args!r}): mark it "
                             "@pytest.mark.multiprocess (or browser) so that ./dev.sh test runs it serially")


@pytest.fixture(autouse=True)
def _app_inprocess_starts_no_process(request: pytest.FixtureRequest,
                                     monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("app_inprocess"):
        import platform

        platform.uname().processor  # noqa: B018 -- Python asks `uname -p` once, lazily; a record's run info may
        monkeypatch.setattr(subprocess, "Popen", _NoProcess)  # be the first to: ask before the guard, not a test
    yield
