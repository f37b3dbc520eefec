"""Notebooks are prose plus calls (d2l's rule): a parameters cell, a few calls into ofl_core, a
table beside the paper, a figure. Checked on the jupytext pairs.

- at most 10 code cells;
- no code cell over 25 lines (blank lines and comments not counted), the parameters cell aside;
- no ``def``/``class`` and no ``for``/``while`` statements: bookkeeping loops belong in the
  library, and a comprehension is the only loop a cell may hold.
"""

from __future__ import annotations

import ast

import jupytext
import pytest

from ofl_core.batch.tasks import NOTEBOOK_DIR

MAX_CODE_CELLS = 10
MAX_CELL_LINES = 25
FORBIDDEN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor,
             ast.While)


def code_lines(source: str) -> int:
    return sum(1 for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#"))


@pytest.mark.parametrize("nb", sorted(p.stem for p in NOTEBOOK_DIR.glob("*.py")))
def test_notebook_is_prose_plus_calls(nb: str) -> None:
    cells = [c for c in jupytext.read(NOTEBOOK_DIR / f"{nb}.py").cells if c.cell_type == "code"]
    assert len(cells) <= MAX_CODE_CELLS, f"{nb}: {len(cells)} code cells (at most 10)"
    for i, c in enumerate(cells, 1):
        if "parameters" in c.metadata.get("tags", []):
            continue
        n = code_lines(c.source)
        assert n <= MAX_CELL_LINES, f"{nb}, code cell {i}: {n} lines (at most 25)"
        bad = [type(x).__name__ for x in ast.walk(ast.parse(c.source)) if isinstance(x, FORBIDDEN)]
        assert not bad, f"{nb}, code cell {i}: {bad} (move the logic into ofl_core)"


def test_the_rule_catches_a_loop_and_a_def() -> None:
    src = "def f():\n    pass\nfor i in range(3):\n    f()\nx = [i for i in range(3)]\n"
    found = [type(x).__name__ for x in ast.walk(ast.parse(src)) if isinstance(x, FORBIDDEN)]
    assert found == ["FunctionDef", "For"]
    assert code_lines("# comment\n\nx = 1\n  # indented comment\ny = 2\n") == 2
