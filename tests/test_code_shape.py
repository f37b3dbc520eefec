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
