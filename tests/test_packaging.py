"""Package boundaries: pure math layers, clear messages for missing extras, the CLI entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_math_layers_import_without_torch_streamlit_or_plotly() -> None:
    """Import time is measured by bench/bench_import.py, not here (timed unit tests are flaky)."""
    out = _run("""
        import sys
        import costmodels, convergence
        print(sorted(m for m in ("torch", "streamlit", "plotly", "pandas", "scipy.optimize") if m in sys.modules))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cli_does_not_import_torch() -> None:
    out = _run("""
        import sys
        from runners.cli import main
        main(["list", "primitives", "--json"])
        print("torch" in sys.modules, file=sys.stderr)
    """)
    assert out.returncode == 0 and out.stderr.strip() == "False"


@pytest.mark.parametrize("module", ["plotly", "pandas"])
def test_app_without_its_extra_names_the_extra(module: str) -> None:
    out = _run(f"""
        import sys
        sys.modules[{module!r}] = None  # simulate the package not being installed
        try:
            import app
        except ImportError as exc:
            print(exc)
    """)
    assert "pip install 'commscope[app]'" in out.stdout and module in out.stdout


def test_commscope_app_without_streamlit_is_one_line_exit_2() -> None:
    out = _run("""
        import sys
        sys.modules["streamlit"] = None
        from runners.cli import main
        sys.exit(main(["app"]))
    """)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "commscope: error: commscope app needs streamlit, which is not installed; "
        "install it with: pip install 'commscope[app]'"
    ]


def test_require_names_the_runners_extra_for_torch() -> None:
    out = _run("""
        import sys
        sys.modules["torch"] = None
        from runners._extras import require, MissingExtraError
        try:
            require("torch", "collective sweeps")
        except MissingExtraError as exc:
            print(exc)
    """)
    assert "collective sweeps needs torch" in out.stdout and "commscope[runners]" in out.stdout


def test_every_data_file_of_the_packages_is_package_data() -> None:
    """A file the packages ship (a reference run, a profile, a published table) must match a package-data pattern,
    or an installed (non-editable) commscope lacks it: records.jsonl.gz of the shipped convergence run did."""
    import fnmatch

    import tomllib

    root = Path(__file__).resolve().parents[1]
    conf = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = conf["tool"]["setuptools"]["package-data"]["*"]
    missing = []
    for package in ("costmodels", "convergence", "runners", "app"):
        for f in (root / package).rglob("*"):
            if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts:
                if not any(fnmatch.fnmatch(f.name, pat) for pat in patterns):
                    missing.append(str(f.relative_to(root)))
    assert not missing, f"not package data: {missing}"
