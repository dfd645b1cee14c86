"""The served app in a real browser: Debian's chromium driven by Playwright (``executable_path``; no
downloaded browser). Every page of the navigation is opened, its plots must render, a control is
changed and the plot must change, and no error element may appear. Screenshots of every page, before
and after the change, go to ``$COMMSCOPE_SCREENSHOTS`` (default ``build/screenshots``) for a person to
look at. ``./dev.sh test`` installs chromium with apt when it is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the [app] extra is part of the README's test set-up")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the [dev] extra")

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("COMMSCOPE_SCREENSHOTS", ROOT / "build" / "screenshots"))
TIMEOUT_MS = 90_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, ("Debian's chromium is not installed: ./dev.sh test installs it with apt-get (needs root); "
                 "or apt-get install chromium")
    return exe


@pytest.fixture(scope="module")
def server() -> str:
    exe = shutil.which("commscope", path=str(Path(sys.executable).parent)) or shutil.which("commscope")
    assert exe, "the commscope console script is installed with the package"
    port = _free_port()
    proc = subprocess.Popen([exe, "app", "--server.port", str(port), "--server.address", "127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:  # localhost only
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.stdout else ""
                pytest.fail(f"commscope app did not come up on {url}: {out[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


PLOTS_JS = """JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(
    el => (el._fullData || el.data || []).map(t => [t.name || '', Array.from(t.x || []).slice(0, 50),
                                    Array.from(t.y || []).slice(0, 50), Array.from(t.z || []).length])))"""


def _plots_data(page) -> str:
    """The data of every rendered plotly chart (names, x, y of its traces), as JSON text."""
    return page.evaluate(f"() => {PLOTS_JS}")


def _wait_rendered(page) -> None:
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    # Streamlit shows a running indicator while a script runs; wait until it is gone
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=TIMEOUT_MS)
    page.wait_for_timeout(500)


def _download(page, button: str, tries: int = 3):
    """The file a download button gives. Its data is made on the click (a deferred download). A click that also
    reran the script could find its data gone: each rerun registers the button's callable anew and drops the old
    one, so a click still holding the old id started no download (seen in full clean-clone suite runs, and once in
    nine runs alone). The app's download buttons no longer rerun the page (``on_click="ignore"``,
    ``tests/test_app.py::test_no_download_reruns_the_page``); the click is still tried again once the page has
    settled, up to ``tries`` times, in case a rerun from elsewhere races it: the download itself must work."""
    for attempt in range(tries):
        try:
            with page.expect_download(timeout=TIMEOUT_MS // tries) as info:
                page.get_by_role("button", name=button).click()
            return info.value
        except sync_api.TimeoutError:
            if attempt == tries - 1:
                raise
            _wait_rendered(page)
    raise AssertionError("unreachable")


def _no_errors(page, where: str) -> None:
    errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
    assert errors.count() == 0, f"{where}: error element(s): {errors.all_inner_texts()}"


def _set_number(label: str, value: str) -> Callable:
    def act(page) -> None:
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
    return act


def _pick(label: str, option: str) -> Callable:
    def act(page) -> None:
        page.get_by_label(label, exact=True).first.click()  # exact: not the "Help for <label>" icon
        page.get_by_role("option", name=option, exact=True).click()
    return act


def _radio(option: str) -> Callable:
    def act(page) -> None:
        page.get_by_text(option, exact=True).first.click()
    return act


def _steps(*acts: Callable) -> Callable:
    def act(page) -> None:
        for a in acts:
            a(page)
            page.wait_for_timeout(300)
    return act


# (name of the screenshots, url path, title of the page, the control changed)
PAGES = [
    ("collectives", "", "Collective algorithms", _set_number("p (ranks)", "8")),
    ("collectives-nccl", "", "Collective algorithms", _pick("library", "nccl")),
    ("collectives-published", "", "Collective algorithms",
     _steps(_radio("measured sweep points"), _radio("published measurements (nccl-tests)"))),
    ("iteration", "iteration", "Training iteration", _set_number("p (workers)", "16")),
    ("convergence", "convergence", "Convergence bounds", _set_number("eps (target of the metric)", "0.001")),
    ("time_to_accuracy", "time_to_accuracy", "Time to accuracy", _set_number("p (workers) of the table", "64")),
    ("large_models", "large_models", "Large models", _set_number("GPUs", "512")),
    ("measured", "measured", "Predicted vs measured", _radio("the sidebar's environment")),
    ("measured-published", "measured", "Predicted vs measured", _radio("published collectives (nccl-tests tables)")),
    ("environments", "environments", "Fit an environment", _radio("median time of each record")),
]


@pytest.mark.browser
@pytest.mark.multiprocess
@pytest.mark.parametrize(("name", "path", "title", "change"), PAGES, ids=[p[0] for p in PAGES])
def test_page_in_the_browser(server: str, name: str, path: str, title: str, change: Callable) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{server}/{path}")
            page.get_by_role("heading", name=title).first.wait_for()
            _wait_rendered(page)
            _no_errors(page, name)
            before = _plots_data(page)
            assert before not in ("[]", "[[]]"), f"{name}: no plotted data"
            page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
            change(page)
            page.wait_for_function(f"(old) => {PLOTS_JS} !== old", arg=before, timeout=TIMEOUT_MS)
            _wait_rendered(page)
            _no_errors(page, f"{name} after the change")
            assert _plots_data(page) != before, f"{name}: changing the control did not change the plot"
            page.screenshot(path=str(SHOTS / f"{name}-changed.png"), full_page=True)
        finally:
            browser.close()


def _browser(pw):
    return pw.chromium.launch(executable_path=_chromium(), headless=True,
                              args=["--no-sandbox", "--disable-dev-shm-usage"])


@pytest.mark.browser
@pytest.mark.multiprocess
def test_the_exported_figure_works_offline(server: str, tmp_path: Path) -> None:
    """The Collectives page's HTML download, opened from disk with every request but the file's refused: it draws
    its plot and asks no other host for anything."""
    with sync_api.sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(server)
            page.get_by_role("heading", name="Collective algorithms").first.wait_for()
            _wait_rendered(page)
            download = _download(page, "figure (HTML, works offline)")
            assert download.suggested_filename == "allreduce_10GbE_p64.html"
            path = tmp_path / download.suggested_filename
            download.save_as(path)
            offline = browser.new_page()
            asked: list[str] = []
            offline.route("**/*", lambda route: (asked.append(route.request.url),
                                                 route.continue_() if route.request.url.startswith("file:")
                                                 else route.abort()))
            offline.goto(path.as_uri())
            offline.wait_for_selector(".js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
            traces = "() => document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length"
            assert offline.evaluate(traces) > 0
            assert [u for u in asked if not u.startswith(("file:", "data:", "blob:"))] == []
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.multiprocess
def test_the_url_carries_the_page_state(server: str) -> None:
    """A link opens the page as it was, and a change shows in the address bar."""
    with sync_api.sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{server}/iteration?iter_p=8&iter_schedules=bsp,dear&env_mode=preset&env_preset=IB-NDR")
            page.get_by_role("heading", name="Training iteration").first.wait_for()
            _wait_rendered(page)
            assert page.get_by_label("p (workers)", exact=True).input_value() == "8"
            assert "Environment IB-NDR" in page.locator('[data-testid="stMain"]').inner_text()
            _set_number("p (workers)", "16")(page)
            page.wait_for_function("() => location.search.includes('iter_p=16')", timeout=TIMEOUT_MS)
            assert "iter_schedules=bsp%2Cdear" in page.url or "iter_schedules=bsp,dear" in page.url
            _no_errors(page, "iteration from a link")
        finally:
            browser.close()
