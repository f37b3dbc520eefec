"""A plain (non-editable) ``pip install .`` finds the checkout's notebooks, grids and shipped
results (``ofl_core.project``): from a folder inside the checkout, and from anywhere with
``$OFL_PROJECT_DIR``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ofl_core

ROOT = Path(ofl_core.__file__).resolve().parents[1]
PROBE = """
import json, ofl_core
from ofl_core.batch.report import shipped_runs
from ofl_core.batch.tasks import NOTEBOOK_DIR, list_notebooks, load_grid
print(json.dumps({"package": ofl_core.__file__, "notebooks": str(NOTEBOOK_DIR),
                  "n_notebooks": len(list_notebooks()),
                  "full_tasks": len(load_grid(NOTEBOOK_DIR / "grids" / "full")),
                  "shipped": len(shipped_runs())}))
"""


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("plain")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                           "--no-build-isolation", "--target", str(target), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"pip cannot build the package here: {done.stderr[-300:]}")
    return target


def _probe(plain: Path, cwd: Path, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "OFL_PROJECT_DIR"}
    full.update(PYTHONPATH=str(plain), **env)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=full, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("where", ["inside", "elsewhere"])
def test_a_plain_install_finds_the_checkouts_data(plain, tmp_path, where):
    if where == "inside":
        got = _probe(plain, ROOT / "notebooks")
    else:
        got = _probe(plain, tmp_path, OFL_PROJECT_DIR=str(ROOT))
    assert Path(got["package"]).is_relative_to(plain)  # the installed copy, not the checkout
    assert Path(got["notebooks"]) == ROOT / "notebooks"
    assert got["n_notebooks"] == len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert got["full_tasks"] > 0
    assert got["shipped"] == len([p for p in (ROOT / "results").glob("*/*.json")
                                  if (ROOT / "notebooks" / f"{p.parent.name}.ipynb").is_file()])
