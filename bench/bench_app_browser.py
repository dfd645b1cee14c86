"""Benchmark of the app in a real browser: control change -> plot updated, per page.

    python bench/bench_app_browser.py [--changes 10] [--port 8611] [--label after] [--json]

Serves the app (``streamlit run app/main.py`` on ``--port``, headless), opens every page in Debian's
chromium driven by Playwright, and changes one control of the page ``--changes`` times (a number input
walks through distinct values, so each change is a computation the caches have not seen; a radio
alternates between two options). For each change it measures, from the moment the control is touched:

- ``plot_s``: until the data of the page's plots (trace names, x, y, z, axis types) differ from before;
- ``rerun_s``: until Streamlit's running indicator is gone (the whole script has run).

Goal (issue 19 item 6): p50 of ``plot_s`` < 0.5 s on every page. The host is shared, so the load
average (``/proc/loadavg``) is recorded before and after each page beside the numbers. ``--json``
merges the run, under ``--label``, into bench/results/bench_app_browser.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TIMEOUT_MS = 120_000

# what a plot shows: every chart's traces (name, first 50 x and y, length of z) and its axis types
PLOTS_JS = """JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => [
    (el._fullData || el.data || []).map(t => [t.name || '', Array.from(t.x || []).slice(0, 50),
                                              Array.from(t.y || []).slice(0, 50), Array.from(t.z || []).length]),
    el.layout && el.layout.xaxis ? el.layout.xaxis.type : '', el.layout && el.layout.yaxis ? el.layout.yaxis.type : '',
    el.layout && el.layout.title ? JSON.stringify(el.layout.title.text || el.layout.title) : '']))"""
IDLE_JS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def _number(label: str, values: list[str]) -> Callable:
    """Set the number input ``label`` to the i-th value (cycling)."""
    def act(page, i: int) -> None:
        box = page.get_by_label(label, exact=True)
        box.fill(values[i % len(values)])
        box.press("Enter")
    return act


def _radio(options: list[str]) -> Callable:
    """Click the i-th option (cycling) of a radio by its text."""
    def act(page, i: int) -> None:
        page.get_by_text(options[i % len(options)], exact=True).first.click()
    return act


# (page, url path, heading, control, what it changes)
CASES: list[tuple[str, str, str, Callable, str]] = [
    ("collectives", "", "Collective algorithms",
     _number("p (ranks)", ["8", "16", "32", "128", "256", "512", "1024", "2048", "4096", "24", "48", "96"]),
     "p (ranks)"),
    ("iteration", "iteration", "Training iteration",
     _number("p (workers)", ["16", "32", "128", "256", "8", "512", "1024", "24", "48", "96", "192", "384"]),
     "p (workers) of one iteration"),
    ("convergence", "convergence", "Convergence bounds",
     _number("eps (target of the metric)", ["0.001", "0.003", "0.03", "0.0003", "0.005", "0.0005", "0.002",
                                            "0.02", "0.0002", "0.004", "0.04", "0.006"]),
     "eps"),
    ("time_to_accuracy", "time_to_accuracy", "Time to accuracy",
     _number("p (workers) of the table", ["64", "16", "128", "8", "256", "48", "512", "24", "96", "1024", "12",
                                          "192"]),
     "p of the table"),
    ("large_models", "large_models", "Large models",
     _number("GPUs", ["512", "2048", "256", "768", "1536", "384", "3072", "4096", "192", "128", "64", "8192"]),
     "GPUs"),
    ("measured", "measured", "Predicted vs measured",
     _radio(["linear", "log"]), "axes (log / linear)"),
    ("environments", "environments", "Fit an environment",
     _radio(["linear", "log"]), "time axis (log / linear)"),
]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise SystemExit("Debian's chromium is not installed (apt-get install chromium)")
    return exe


def serve(port: int, root: Path = ROOT) -> subprocess.Popen:
    """The app of the checkout ``root`` on 127.0.0.1:``port`` (its own process group), once it answers its health
    check."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(root / "app" / "main.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:  # localhost
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
        if proc.poll() is not None:
            break
    stop(proc)
    raise SystemExit(f"the app did not come up on port {port}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _quantile(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    k = (len(ys) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (k - lo)


def measure_page(browser, url: str, path: str, heading: str, act: Callable, changes: int, warm: bool = False
                 ) -> dict:
    """Open the page, then ``changes`` times: touch the control, wait for the plots' data to change (plot_s)
    and for the run to end (rerun_s). ``warm``: the control goes back and forth between its first two values
    (after two changes not counted), so that every computation is already cached and what is left is Streamlit's
    rerun and the browser's drawing."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    t0 = time.perf_counter()
    page.goto(f"{url}/{path}")
    page.get_by_role("heading", name=heading).first.wait_for()
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.wait_for_function(IDLE_JS)
    first_load = time.perf_counter() - t0
    page.wait_for_timeout(500)
    plot, rerun = [], []
    for i in range(-2 if warm else 0, changes):
        before = page.evaluate(f"() => {PLOTS_JS}")
        t0 = time.perf_counter()
        act(page, i % 2 if warm else i)
        page.wait_for_function(f"(old) => {PLOTS_JS} !== old", arg=before, polling="raf")
        t_plot = time.perf_counter() - t0
        page.wait_for_function(IDLE_JS, polling="raf")
        if i >= 0:
            plot.append(t_plot)
            rerun.append(time.perf_counter() - t0)
        page.wait_for_timeout(300)
    errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').count()
    page.close()
    return {"first_load_s": first_load, "plot_s": plot, "rerun_s": rerun, "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=10)
    ap.add_argument("--port", type=int, default=8611)
    ap.add_argument("--label", default="after", help="the key the run is stored under (e.g. before, after-warm)")
    ap.add_argument("--pages", default="", help="comma-separated subset of the pages")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout whose app is served (e.g. an export of an older commit, to compare with)")
    ap.add_argument("--json", action="store_true", help="merge into bench/results/bench_app_browser.json")
    ap.add_argument("--warm", action="store_true", help="revisit two values (cached computations) instead of new ones")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    chosen = [c for c in CASES if not args.pages or c[0] in args.pages.split(",")]
    proc = serve(args.port, args.root.resolve())
    out: dict[str, dict] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=_chromium(), headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                for name, path, heading, act, control in chosen:
                    load0 = _load()
                    r = measure_page(browser, f"http://127.0.0.1:{args.port}", path, heading, act, args.changes,
                                     args.warm)
                    r.update(control=control, load_before=load0, load_after=_load(),
                             plot_p50_s=statistics.median(r["plot_s"]), plot_p90_s=_quantile(r["plot_s"], 0.9),
                             rerun_p50_s=statistics.median(r["rerun_s"]), rerun_p90_s=_quantile(r["rerun_s"], 0.9))
                    out[name] = r
                    print(f"{name:>17} ({control}): plot p50 {r['plot_p50_s']:.3f} s, p90 {r['plot_p90_s']:.3f} s; "
                          f"rerun p50 {r['rerun_p50_s']:.3f} s, p90 {r['rerun_p90_s']:.3f} s; first load "
                          f"{r['first_load_s']:.1f} s; load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}"
                          + (f"; {r['errors']} ERROR element(s)" if r["errors"] else ""))
            finally:
                browser.close()
    finally:
        stop(proc)
    if args.json:
        path = RESULTS / "bench_app_browser.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        run = data.setdefault("runs", {}).setdefault(args.label, {"pages": {}})  # pages run apart are merged
        run.update(date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), cpus=os.cpu_count(), root=str(args.root),
                   changes=args.changes, values="revisited (warm caches)" if args.warm else "new each change (cold)",
                   goal="plot_p50_s < 0.5 on every page")
        run["pages"].update(out)
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {path} ({args.label})")


if __name__ == "__main__":
    main()
