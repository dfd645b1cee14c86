"""The house rules of ARCHITECTURE.md, checked on the source with ``ast``: no import circle among the project's
modules, imports only run downhill (costmodels <- convergence <- runners <- app), the pure packages import no
torch, streamlit or plotly, and no module grows past about 400 lines without a stated reason."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from import_graph import circles, import_graph, imported_names, project_modules

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"costmodels": 0, "convergence": 1, "runners": 2, "app": 3}  # a package imports only lower or equal layers
PURE = ("costmodels", "convergence")
HEAVY = ("torch", "streamlit", "plotly")
MAX_LINES = 400
# modules allowed over MAX_LINES, each with the reason its docstring gives (splitting would cut one algorithm in two)
LONG_MODULES: dict[str, str] = {}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_no_import_circle_among_the_project_modules() -> None:
    graph = import_graph(project_modules(ROOT))
    assert len(graph) > 100  # the walk found the project
    assert circles(graph) == []


def test_the_circle_check_finds_a_lazy_circle_and_ignores_parent_packages(tmp_path: Path) -> None:
    _write(tmp_path, {
        "runners/__init__.py": "",
        "runners/cli/__init__.py": "from .entry import main\n",
        "runners/cli/entry.py": "from . import fit\n\ndef main():\n    pass\n",
        "runners/cli/fit.py": "from .common import UsageError\n",
        "runners/cli/common.py": "class UsageError(Exception):\n    pass\n",
    })
    modules = project_modules(tmp_path, ("runners",))
    assert circles(import_graph(modules)) == []  # a package's __init__ importing its own submodules is no circle
    _write(tmp_path, {"runners/cli/fit.py": "def run():\n    from runners.cli import main\n"})
    graph = import_graph(project_modules(tmp_path, ("runners",)))
    assert circles(graph) == [["runners.cli", "runners.cli.entry", "runners.cli.fit"]]


def test_imports_run_downhill_only() -> None:
    graph = import_graph(project_modules(ROOT))
    uphill = sorted(f"{src} imports {dst}" for src, deps in graph.items() for dst in deps
                    if LAYERS[dst.split(".")[0]] > LAYERS[src.split(".")[0]])
    assert uphill == []


def heavy_imports(root: Path, package: str) -> list[str]:
    """Each import of torch, streamlit or plotly anywhere in ``package`` (inside functions too)."""
    found = []
    for name, path in project_modules(root, (package,)).items():
        for module, _member in imported_names(name, path):
            if module.split(".")[0] in HEAVY:
                found.append(f"{name} imports {module}")
    return sorted(found)


@pytest.mark.parametrize("package", PURE)
def test_pure_packages_never_import_heavy_dependencies(package: str) -> None:
    assert heavy_imports(ROOT, package) == []


def test_the_heavy_import_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    _write(tmp_path, {"costmodels/__init__.py": "import numpy as np\n",
                      "costmodels/x.py": "def f():\n    import torch.nn as nn\n    from plotly import graph_objects\n"})
    assert heavy_imports(tmp_path, "costmodels") == ["costmodels.x imports plotly", "costmodels.x imports torch.nn"]


def test_no_module_is_over_about_400_lines_without_a_reason() -> None:
    long = {}
    for name, path in project_modules(ROOT).items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            long[name] = lines
    assert sorted(long) == sorted(LONG_MODULES), long
    for name in LONG_MODULES:  # the reason is written where a reader of the module sees it
        doc = project_modules(ROOT)[name].read_text()
        assert "one algorithm" in doc or "cut" in doc, name


def test_every_package_says_what_lives_there() -> None:
    for name, path in project_modules(ROOT).items():
        if path.name == "__init__.py":
            text = path.read_text().lstrip()
            assert text.startswith(('"""', "'''")), f"{name}/__init__.py has no docstring"


def test_an_app_test_that_starts_a_process_without_its_mark_fails(pytester: pytest.Pytester) -> None:
    # ./dev.sh test runs app_inprocess tests two at a time; tests/conftest.py fails one that starts a process
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    multiprocess: x\n    browser: x\n    app_inprocess: x\n")
    pytester.makepyfile(test_app_guard="""
        import subprocess, sys
        import pytest

        def test_unmarked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        @pytest.mark.multiprocess
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_pure():
            assert True
    """, test_other="""
        import subprocess, sys

        def test_outside_the_app_modules():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked*", "*an app_inprocess test started a process*"])
    assert pytester.runpytest("-m", "app_inprocess", "--co", "-q").stdout.str().count("test_app_guard.py::") == 2
