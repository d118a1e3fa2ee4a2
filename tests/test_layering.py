"""The house rules as a contract over the import graph (every import, top-level or inside a function).

- ``specchat.core`` never imports Qt (PySide6, superqt);
- only ``specchat.core.llama`` imports ``llama_cpp``;
- ``specchat.ui``, ``specchat.cli`` and ``specchat.core.engine`` never import ``specchat.core.llama``
  (the composition roots ``specchat.app`` and ``specchat.__main__`` hand them what they need);
- no import cycles between specchat's modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specchat"
QT = ("PySide6", "superqt", "shiboken6")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (absolute names), with the line."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:  # ``from pkg import module`` imports a module too
                yield f"{target}.{alias.name}", node.lineno


def _graph() -> dict[str, list[tuple[str, int]]]:
    return {_module_name(p): list(_imports(p)) for p in sorted(PACKAGE.rglob("*.py"))}


GRAPH = _graph()


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _violations(importer: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{mod}:{line} imports {target}"
        for mod, targets in GRAPH.items() if _inside(mod, importer)
        for target, line in targets if any(_inside(target, f) for f in forbidden)
    ]


def test_the_graph_covers_the_package() -> None:
    assert {"specchat.core.engine.speculative", "specchat.ui.main_window", "specchat.cli.chat"} <= set(GRAPH)


def test_core_never_imports_qt() -> None:
    assert _violations("specchat.core", QT) == []


def test_server_never_imports_qt() -> None:
    assert _violations("specchat.server", QT) == []


def test_only_core_llama_imports_llama_cpp() -> None:
    found = [v for v in _violations("specchat", ("llama_cpp",)) if not _inside(v.split(":")[0], "specchat.core.llama")]
    assert found == []


@pytest.mark.parametrize("layer", ["specchat.ui", "specchat.cli", "specchat.core.engine", "specchat.server"])
def test_layer_never_imports_core_llama(layer: str) -> None:
    assert _violations(layer, ("specchat.core.llama",)) == []


def test_no_import_cycles() -> None:
    edges = {mod: sorted({t for t, _ in targets if t in GRAPH and t != mod}) for mod, targets in GRAPH.items()}
    # A package's __init__ is imported on the way to its modules, but that is not a dependency of theirs.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if _inside(node, nxt):  # a module importing its own package's __init__
                continue
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for mod in sorted(edges):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The rules are not vacuous: a core module importing Qt and a cycle are both caught."""
    bad = tmp_path / "specchat"
    (bad / "core").mkdir(parents=True)
    (bad / "__init__.py").write_text("")
    (bad / "core" / "__init__.py").write_text("")
    (bad / "core" / "a.py").write_text("from PySide6.QtCore import QObject\nfrom . import b\n")
    (bad / "core" / "b.py").write_text("def f():\n    from specchat.core import a\n")
    global PACKAGE
    saved = PACKAGE
    PACKAGE = bad
    try:
        graph = {_module_name(p): list(_imports(p)) for p in sorted(bad.rglob("*.py"))}
    finally:
        PACKAGE = saved
    assert ("PySide6.QtCore", 1) in graph["specchat.core.a"]
    assert ("specchat.core.b", 2) in graph["specchat.core.a"]
    assert ("specchat.core.a", 2) in graph["specchat.core.b"]
