"""The library stays small-moduled and readable: no module over 450 lines, no function over 80
lines, and no module imports another module's private (``_name``) names."""

from __future__ import annotations

import ast
from pathlib import Path

import ofl_core

ROOT = Path(ofl_core.__file__).parent
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_over_450_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these modules: {long}"


def test_no_function_is_over_80_lines() -> None:
    long = {}
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.name}"] = n
    assert not long, f"split these functions: {long}"


def test_no_private_name_is_imported_across_modules() -> None:
    bad = []
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom):
                bad += [f"{p.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, f"make these public or keep them in one module: {bad}"


def _ofl_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every ``from ofl_core... import name`` / ``import ofl_core...``."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ofl_core"):
            found += [(node.module, a.name) for a in node.names]  # type: ignore[misc]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("ofl_core")]
    return found


def test_scripts_and_benchmarks_import_only_what_the_library_has() -> None:
    """The evidence scripts and benchmarks run rarely and by hand: a moved name must fail here,
    not hours into a background measurement."""
    import importlib

    top = ROOT.parent
    files = sorted([*top.glob("scripts/**/*.py"), *top.glob("benchmarks/*.py"), top / "run_all.py"])
    assert files, "no scripts found beside the package"
    missing = []
    for f in files:
        for module, name in _ofl_imports(f):
            mod = importlib.import_module(module)
            if name is not None and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{f.relative_to(top)}: {module}.{name}")
    assert not missing, f"these imports no longer resolve: {missing}"
