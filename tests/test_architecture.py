"""The library's rooms stand on floors (docs/extending.md): no import cycle between the rooms of
``ofl_core`` (a room = a top-level subpackage or module), counting every import — at module
level, inside a function or under ``if TYPE_CHECKING`` — and no ``TYPE_CHECKING`` guard, whose
only use here would be to hide a cycle."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import ofl_core

ROOT = Path(ofl_core.__file__).parent


def module_name(path: Path) -> str:
    parts = path.with_suffix("").relative_to(ROOT.parent).parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """Every ``ofl_core`` module ``path`` imports, wherever the import statement is."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                full = f"{target}.{a.name}"
                out.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m == "ofl_core" or m.startswith("ofl_core.")}


def room_graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    known = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = defaultdict(set)
    for p in paths:
        src = room(module_name(p))
        for target in imported_modules(p, known):
            if room(target) not in ("", src):
                graph[src].add(room(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_rooms() -> None:
    graph = room_graph()
    assert len(graph) > 10  # the check sees the library's imports
    assert not cycles(graph), f"rooms importing each other in a cycle: {cycles(graph)}"


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: the method rooms: one paper or one group of baselines each (floor 5)
METHOD_ROOMS = {"methods", "dense", "fedhydra", "fedcvae", "coboosting", "fedlpa", "intactofl"}


def test_the_server_api_imports_no_method() -> None:
    graph = room_graph()
    methods = METHOD_ROOMS | {"registry"}
    assert not graph["server"] & methods
    assert not graph["distill"] & methods and not graph["checkpoint"] & methods


def test_no_method_room_imports_another() -> None:
    """What two methods share (e.g. Co-Boosting's and IntactOFL's ODS step) lives on a floor
    below them, in distill/ or server/."""
    graph = room_graph()
    assert METHOD_ROOMS <= set(graph)
    crossing = {room: sorted(graph[room] & (METHOD_ROOMS - {room})) for room in METHOD_ROOMS}
    assert not any(crossing.values()), crossing


def test_no_type_checking_guard() -> None:
    guarded = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
               if "TYPE_CHECKING" in p.read_text()]
    assert not guarded, f"import the names directly (a guard hides a cycle): {guarded}"
