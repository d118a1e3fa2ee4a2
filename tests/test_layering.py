"""The house rules as a contract over the import graph (docs/architecture.md, "Layers").

Every import counts: top-level, inside a function, under ``TYPE_CHECKING``,
and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal
name. A rule marked transitive also follows what the imported modules import
in turn (and the packages' ``__init__`` run on the way), so a route through
a third module is caught too: ``engine -> X -> llama`` breaks "the engine
never imports llama" as surely as a direct import. Type-only imports are not
followed (they load nothing), but a direct one still counts. Cycles are
counted twice: none at all through what runs (:func:`cycles`), and none between
the modules of one package even through type-only imports (:func:`sibling_cycles`:
two modules that name each other's types are one module split in two). The
same checker runs on a deliberately bad tree in
:func:`test_each_rule_catches_its_violation`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specchat"
QT = ("PySide6", "superqt", "shiboken6", "qtawesome", "qtpy")


@dataclass(frozen=True)
class Import:
    target: str  # an absolute dotted name: a module, or a name inside one
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``


Graph = dict[str, list[Import]]


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _typing_blocks(tree: ast.AST) -> set[int]:
    """The ids of nodes under ``if TYPE_CHECKING:``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _imports(root: Path, path: Path) -> Iterator[Import]:
    """Every module ``path`` imports (absolute names), with the line."""
    module = _module_name(root, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def absolute(name: str, level: int) -> str:
        if not level:
            return name
        base = package.split(".")
        base = base[: len(base) - level + 1]
        return ".".join(base + ([name] if name else []))

    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    typing = _typing_blocks(tree)
    for node in ast.walk(tree):
        only = id(node) in typing
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno, only)
        elif isinstance(node, ast.ImportFrom):
            target = absolute(node.module or "", node.level)
            yield Import(target, node.lineno, only)
            for alias in node.names:  # ``from pkg import module`` imports a module too
                yield Import(f"{target}.{alias.name}", node.lineno, only)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.args[0].value
            called = ast.unparse(node.func)
            if isinstance(name, str) and called in ("importlib.import_module", "import_module", "__import__"):
                dots = len(name) - len(name.lstrip("."))
                yield Import(absolute(name[dots:], dots), node.lineno, only)


def build_graph(root: Path) -> Graph:
    """Module name -> its imports, for every module under ``root`` (a package folder)."""
    return {_module_name(root, p): list(_imports(root, p)) for p in sorted(root.rglob("*.py"))}


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@dataclass(frozen=True)
class Rule:
    """Modules inside ``importer`` (but not inside ``exempt``) never import anything inside ``forbidden``
    (but not inside ``allowed``)."""

    name: str
    importer: str
    forbidden: tuple[str, ...]
    transitive: bool = False
    exempt: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()

    def applies_to(self, module: str) -> bool:
        return _inside(module, self.importer) and not any(_inside(module, e) for e in self.exempt)

    def hits(self, target: str) -> bool:
        return any(_inside(target, f) for f in self.forbidden) and not any(_inside(target, a) for a in self.allowed)


def _loaded(graph: Graph, target: str) -> list[str]:
    """The modules of ``graph`` that importing ``target`` runs: it (or the module holding the name) and the
    ``__init__`` of each package above it."""
    parts = target.split(".")
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in graph]


def violations(rule: Rule, graph: Graph) -> list[str]:
    """Each way a module under the rule reaches a forbidden name, as ``a -> b:line imports X``."""
    found: list[str] = []
    for start in sorted(m for m in graph if rule.applies_to(m)):
        found += [f"{start}:{imp.line} imports {imp.target}" for imp in graph[start] if rule.hits(imp.target)]
        if not rule.transitive:
            continue
        # Breadth first over what importing ``start`` runs, remembering one route to each module.
        route = {start: [start]}
        queue = [start]
        while queue:
            module = queue.pop(0)
            for imp in graph[module]:
                if imp.typing_only:
                    continue
                for nxt in _loaded(graph, imp.target):
                    if nxt in route or _inside(nxt, rule.importer):
                        continue
                    route[nxt] = route[module] + [nxt]
                    queue.append(nxt)
                    found += [
                        f"{' -> '.join(route[nxt])}:{i.line} imports {i.target}"
                        for i in graph[nxt]
                        if not i.typing_only and rule.hits(i.target)
                    ]
    return found


def cycles(graph: Graph, *, typing: bool = False, siblings: bool = False) -> list[list[str]]:
    """Import cycles between modules (a module importing its own package's ``__init__`` is not one).

    ``typing``: type-only imports count too; ``siblings``: only imports between modules of one package.
    """

    def parent(name: str) -> str:
        return name.rpartition(".")[0]

    edges = {
        mod: sorted(
            {
                t
                for imp in imps
                if typing or not imp.typing_only
                for t in _loaded(graph, imp.target)
                if t != mod and not _inside(mod, t) and (not siblings or parent(t) == parent(mod))
            }
        )
        for mod, imps in graph.items()
    }
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for mod in sorted(edges):
        if mod not in state:
            visit(mod, [mod])
    return found


def sibling_cycles(graph: Graph) -> list[list[str]]:
    """Cycles between the modules of one package, counting every import: type-only and inside functions too."""
    return cycles(graph, typing=True, siblings=True)


LLAMA = "specchat.core.llama"
ENGINE = "specchat.core.engine"
RULES = (
    Rule("core never imports Qt", "specchat.core", QT, transitive=True),
    Rule("core never imports the window's package", "specchat.core", ("specchat.ui", "specchat.app"), transitive=True),
    Rule("only core.llama imports llama_cpp", "specchat", ("llama_cpp",), exempt=(LLAMA,)),
    Rule("the engine never reaches llama.cpp", "specchat.core.engine", (LLAMA, "llama_cpp"), transitive=True),
    Rule(
        "core.llama never imports what is built on it",
        LLAMA,
        (
            "specchat.core.engine",
            "specchat.core.chat",
            "specchat.core.runtime",
            "specchat.core.advise",
            "specchat.ui",
            "specchat.cli",
            "specchat.server",
        ),
        transitive=True,
    ),
    Rule("the window's package never imports core.llama", "specchat.ui", (LLAMA,)),
    Rule("conversations never import core.llama", "specchat.core.chat", (LLAMA,)),
    Rule("the terminal never imports core.llama", "specchat.cli", (LLAMA,)),
    Rule(
        "the terminal never reaches Qt or the window",
        "specchat.cli",
        (*QT, "specchat.ui", "specchat.app"),
        transitive=True,
    ),
    Rule(
        "the server never reaches Qt or the window",
        "specchat.server",
        (*QT, "specchat.ui", "specchat.app"),
        transitive=True,
    ),
    Rule("the server never reaches llama.cpp", "specchat.server", (LLAMA, "llama_cpp"), transitive=True),
    Rule(
        "the server never imports the engine's internals",
        "specchat.server",
        (ENGINE,),
        allowed=(f"{ENGINE}.registry", f"{ENGINE}.depth"),
    ),
    Rule("the runtime never reaches core.chat", "specchat.core.runtime", ("specchat.core.chat",), transitive=True),
    Rule("core.llama never reaches core.models", LLAMA, ("specchat.core.models",), transitive=True),
    Rule(
        "the engine never reaches the runtime, core.chat, core.models or the registry's consumers",
        ENGINE,
        (
            "specchat.core.runtime",
            "specchat.core.chat",
            "specchat.core.models",
            "specchat.core.advise",
            "specchat.core.settings",
            "specchat.ui",
            "specchat.cli",
            "specchat.server",
            "specchat.app",
        ),
        transitive=True,
    ),
)

GRAPH = build_graph(PACKAGE)


def test_the_graph_covers_the_package() -> None:
    assert {
        "specchat.core.engine.speculative",
        "specchat.ui.main_window",
        "specchat.cli.chat",
        "specchat.core.runtime.runtime",
        "specchat.core.llama.rpc.target",
    } <= set(GRAPH)


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_rule_holds(rule: Rule) -> None:
    assert violations(rule, GRAPH) == []


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_no_import_cycles_between_sibling_modules_even_type_only() -> None:
    assert sibling_cycles(GRAPH) == []


BAD_TREE = {
    "__init__.py": "",
    "app.py": "",
    "core/__init__.py": "",
    "core/qt_user.py": "from PySide6.QtCore import QObject\n",  # core never imports Qt
    "core/shows.py": "def f():\n    import specchat.ui.view\n",  # core never imports the window's package
    "core/binding_here.py": "import llama_cpp\n",  # only core.llama imports llama_cpp
    "core/remote.py": "from specchat.core.llama import model\n",
    "core/engine/__init__.py": "",
    "core/engine/loop.py": "from specchat.core import remote\n",  # engine -> remote -> llama: indirect
    "core/llama/__init__.py": "",
    "core/llama/model.py": "import llama_cpp\n",
    "core/llama/observer.py": "from specchat.core.engine import loop\n",  # llama never imports the engine
    "core/chat/__init__.py": "",
    "core/chat/talk.py": "import importlib\nimportlib.import_module('specchat.core.llama.model')\n",
    "ui/__init__.py": "",
    "ui/view.py": "from ..core.llama import model\n",  # relative: ui never imports core.llama
    "cli/__init__.py": "",
    "cli/run.py": "from specchat.core.llama.model import Model\nfrom specchat.core import shows\n",
    "server/__init__.py": "",
    "server/http.py": "import llama_cpp\nfrom specchat.core import qt_user\nfrom specchat.core import remote\n",
    "server/queue.py": (
        "from specchat.core.engine.registry import entry\nfrom specchat.core.engine.depth import knob\n"
        "from specchat.core.engine.loop import generate\n"
    ),  # the registry and depth knob only
    "core/runtime/__init__.py": "",
    "core/runtime/run.py": "from specchat.core.models import shapes\n",  # runtime -> models -> chat: indirect
    "core/models/__init__.py": "",
    "core/models/shapes.py": "from specchat.core.chat import talk\n",
    "core/llama/heads.py": "def check():\n    from specchat.core.models import shapes\n",  # llama never reaches models
    "core/engine/pick.py": "from specchat.core import helpers\n",  # engine -> helpers -> runtime: indirect
    "core/helpers.py": "from specchat.core.runtime import run\n",
    "core/a.py": "from . import b\n",  # a cycle, one side inside a function
    "core/b.py": "def f():\n    from specchat.core import a\n",
    "core/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specchat.core import c\n",
    "core/c.py": "from specchat.core import typed\n",  # a type-only cycle: only between siblings it counts
}


def test_each_rule_catches_its_violation(tmp_path: Path) -> None:
    """The checker run on a bad tree reports each rule's violation; the type-only pair is a cycle between siblings."""
    root = tmp_path / "specchat"
    for name, text in BAD_TREE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    graph = build_graph(root)
    expected = {
        "core never imports Qt": "specchat.core.qt_user:1 imports PySide6.QtCore",
        "core never imports the window's package": "specchat.core.shows:2 imports specchat.ui.view",
        "only core.llama imports llama_cpp": "specchat.core.binding_here:1 imports llama_cpp",
        "the engine never reaches llama.cpp": "specchat.core.engine.loop -> specchat.core.remote:1 imports specchat.core.llama",  # noqa: E501
        "core.llama never imports what is built on it": "specchat.core.llama.observer:1 imports specchat.core.engine",
        "the window's package never imports core.llama": "specchat.ui.view:1 imports specchat.core.llama",
        "conversations never import core.llama": "specchat.core.chat.talk:2 imports specchat.core.llama.model",
        "the terminal never imports core.llama": "specchat.cli.run:1 imports specchat.core.llama.model",
        "the terminal never reaches Qt or the window": "specchat.cli.run -> specchat.core.shows:2 imports specchat.ui.view",  # noqa: E501
        "the server never reaches Qt or the window": "specchat.server.http -> specchat.core.qt_user:1 imports PySide6.QtCore",  # noqa: E501
        "the server never reaches llama.cpp": "specchat.server.http -> specchat.core.remote:1 imports specchat.core.llama",  # noqa: E501
        "the server never imports the engine's internals": "specchat.server.queue:3 imports specchat.core.engine.loop",
        "the runtime never reaches core.chat": "specchat.core.runtime.run -> specchat.core.models.shapes:1 imports specchat.core.chat",  # noqa: E501
        "core.llama never reaches core.models": "specchat.core.llama.heads:2 imports specchat.core.models",
        "the engine never reaches the runtime, core.chat, core.models or the registry's consumers": "specchat.core.engine.pick -> specchat.core.helpers:1 imports specchat.core.runtime",  # noqa: E501
    }
    assert set(expected) == {rule.name for rule in RULES}  # every rule is tried
    for rule in RULES:
        assert expected[rule.name] in violations(rule, graph), (rule.name, violations(rule, graph))
    internals = next(rule for rule in RULES if rule.name == "the server never imports the engine's internals")
    assert not any("registry" in v or "depth" in v for v in violations(internals, graph))  # what the server may use
    assert cycles(graph) == [["specchat.core.a", "specchat.core.b", "specchat.core.a"]]
    assert sibling_cycles(graph) == [
        ["specchat.core.a", "specchat.core.b", "specchat.core.a"],
        ["specchat.core.c", "specchat.core.typed", "specchat.core.c"],
    ]
