"""Executed notebooks stay clean.

- progress bars: ``ofl_core.progress.progress_bar`` obeys ``TQDM_DISABLE``, and every kernel
  that ``run_all.py`` starts has it (no "it/s" in an executed notebook);
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ofl_core.batch.execute import KERNEL_ENV, execute_task, task_env
from ofl_core.batch.tasks import Task

ROOT = Path(__file__).resolve().parents[1]
BAR = "from ofl_core.progress import progress_bar\nfor _ in progress_bar(range(3), {}): pass\n"


def _stderr_of(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return out.stderr


def test_progress_bar_shows_unless_hidden_or_disabled_by_the_environment():
    assert "3/3" in _stderr_of(BAR.format("desc='x'"))
    assert _stderr_of(BAR.format("desc='x'"), TQDM_DISABLE="1") == ""
    assert _stderr_of(BAR.format("show=False")) == ""
    assert "3/3" in _stderr_of(BAR.format("desc='x'"), TQDM_DISABLE="0")
    late = "import os\nos.environ['TQDM_DISABLE'] = 'true'\n" + BAR.format("desc='x'")
    assert _stderr_of(late) == ""  # read when the bar is made, not when tqdm is imported


def test_task_processes_and_their_kernels_get_tqdm_disabled():
    assert task_env(2, None, base={"PATH": "/bin"})["TQDM_DISABLE"] == "1"
    assert KERNEL_ENV == {"TQDM_DISABLE": "1"}


def _outputs_text(path: Path) -> str:
    nb = json.loads(path.read_text())
    return json.dumps([c.get("outputs", []) for c in nb["cells"]])


@pytest.mark.slow
def test_executed_notebook_has_no_progress_bars(tmp_path, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    params = nbformat.v4.new_code_cell('figures_dir = ""')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import os\nprint('TQDM_DISABLE =', os.environ.get('TQDM_DISABLE'))\n"
        + BAR.format("desc='bar'"))]
    nbformat.write(nb, tmp_path / "bars.ipynb")
    res = execute_task(Task("bars", {}), tmp_path / "out", tmp_path / "fig", tmp_path)
    assert res.status == "done", res.error
    text = _outputs_text(tmp_path / "out" / "runs" / "bars" / f"{res.run_id}.ipynb")
    assert "TQDM_DISABLE = 1" in text
    assert "it/s" not in text and "TqdmWarning" not in text
    assert "TQDM_DISABLE" not in os.environ  # set for the kernel only, then restored
