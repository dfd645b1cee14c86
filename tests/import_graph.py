"""The import graph of the project's packages, read with ``ast`` (nothing is imported or executed).

Every ``import`` and ``from ... import`` counts, at module level and inside functions alike: a lazy import
that closes a circle is still a circle in the design. ``from pkg import name`` is an edge to the module
``pkg.name`` where that is a module, else to ``pkg`` (its ``__init__``). The implicit import of a module's
parent packages is not an edge (a package's ``__init__`` importing its own submodules is not a circle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGES = ("costmodels", "convergence", "runners", "app")


def project_modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imported_names(name: str, path: Path) -> set[tuple[str, str | None]]:
    """Every import of the module, anywhere in its body, as (absolute module, imported name or None) with
    relative imports resolved: ``import a.b`` is ``("a.b", None)``, ``from a import b`` is ``("a", "b")``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[tuple[str, str | None]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update((a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.update((module, a.name) for a in node.names)
    return out


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (its own name left out)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for module, member in imported_names(name, path):
            target = f"{module}.{member}" if member and f"{module}.{member}" in modules else module
            while target and target not in modules:  # ``import pkg.mod.thing`` -> ``pkg.mod``
                target = target.rpartition(".")[0]
            if target:
                deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
