"""The examples people read first run as written: the package docstring and the README's API block."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import costmodels

README = Path(__file__).resolve().parent.parent / "README.md"


def test_costmodels_docstring_example() -> None:
    result = doctest.testmod(costmodels, verbose=False)
    assert result.attempted >= 2 and result.failed == 0


def test_readme_starts_with_exactly_two_commands() -> None:
    text = README.read_text()
    first_block = re.match(r"```bash\n(.*?)```", text, re.S)
    assert first_block, "README must open with a bash block"
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert [c.split("#")[0].strip() for c in commands] == ["./dev.sh app", "./dev.sh test"]


def test_readme_python_api_example_runs(capsys) -> None:
    block = re.search(r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README has a Python API example"
    assert len(block.group(1).strip().splitlines()) <= 12
    exec(compile(block.group(1), "README.md", "exec"), {})  # the README's own code, not user input
    assert "GB/s" in capsys.readouterr().out


def test_readme_iteration_example_runs(tmp_path, monkeypatch) -> None:
    text = README.read_text()
    block = re.search(r"## Iteration time of a training schedule\n\n```python\n(.*?)```", text, re.S)
    assert block, "README has an iteration-time example"
    monkeypatch.chdir(tmp_path)  # it writes dear.json
    scope: dict = {}
    exec("import numpy as np\nimport costmodels as cm\n" + block.group(1), scope)  # the README's own code
    assert (tmp_path / "dear.json").exists()
    assert scope["s"].scaling_efficiency.shape == (1, 100, 6)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "exec ./dev.sh test" in ci


def test_readme_convergence_and_time_to_accuracy_examples_run() -> None:
    text = README.read_text()
    for title in ("Convergence bounds", "Time to accuracy"):
        block = re.search(rf"## {title}\n\n```python\n(.*?)```", text, re.S)
        assert block, f"README has a {title} example"
        scope: dict = {}
        exec(compile(block.group(1), "README.md", "exec"), scope)  # the README's own code, not user input
    assert (scope["m"].time.shape[1:3]) == (100, 100)


def test_readme_library_example_runs(capsys) -> None:
    block = re.search(r"## What the collective library runs\n\n.*?```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README has a collective-library example"
    exec(compile(block.group(1), "README.md", "exec"), {})  # the README's own code, not user input
    out = capsys.readouterr().out
    assert "'ring', 'LL'" in out and "tree" in out and "fat tree 2:1" in out


def test_readme_quick_start_comes_first_with_its_screenshot() -> None:
    text = README.read_text()
    headings = re.findall(r"^#{1,2} (.+)$", text, re.M)
    assert headings[:2] == ["commscope", "Quick start"]  # right after the set-up block and the title
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", quick)
    assert len(images) == 1 and (README.parent / images[0]).is_file()
    assert "./dev.sh app" in quick and "five minutes" in quick
