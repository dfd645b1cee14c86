"""The README's screenshot: the Iteration page in headless chromium (Playwright), saved as docs/app.png.

    python tools/make_screenshot.py [--port 8612]

Serves the app of this checkout, opens the Iteration page at p = 64 on 25GbE with the default schedules, waits
for its plots and saves the top of the page (1400 x 1180 pixels).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "app.png"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8612)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_app_browser import IDLE_JS, _chromium, serve, stop
    from playwright.sync_api import sync_playwright

    proc = serve(args.port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1400, "height": 1180})
            page.set_default_timeout(120_000)
            page.goto(f"http://127.0.0.1:{args.port}/iteration?env_mode=preset&env_preset=25GbE&iter_p=64")
            page.get_by_role("heading", name="Training iteration").first.wait_for()
            page.wait_for_selector(".js-plotly-plot .main-svg")
            page.wait_for_function(IDLE_JS)
            page.wait_for_timeout(1500)
            OUT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(OUT))
            browser.close()
    finally:
        stop(proc)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
