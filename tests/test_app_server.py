"""`commscope app` serves the Streamlit app on a local port (what the README's first command runs)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:  # localhost only
        return r.status, r.read().decode("utf-8", "replace")


@pytest.mark.multiprocess
def test_commscope_app_serves_the_page_and_passes_streamlit_flags() -> None:
    exe = shutil.which("commscope", path=str(Path(sys.executable).parent)) or shutil.which("commscope")
    assert exe, "the commscope console script is installed with the package"
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "app", "--server.port", str(port), "--server.address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"},
    )
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"commscope app exited with {proc.returncode}: {proc.stdout.read()}")
            try:
                health = _get(f"http://127.0.0.1:{port}/_stcore/health")
                break
            except OSError:
                time.sleep(0.5)
        assert health == (200, "ok"), "the server did not answer within 90 s"
        status, page = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "<html" in page.lower()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
