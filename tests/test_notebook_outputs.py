"""Executed notebooks stay clean, and stored outputs change nothing the tests check.

- progress bars: ``ofl_core.progress.progress_bar`` obeys ``TQDM_DISABLE``, and every kernel
  that ``run_all.py`` starts has it (no "it/s" in an executed notebook);
- a notebook saved *with* outputs (JupyterLab, before nbstripout's git filter strips them) is
  still paired with its .py, executes the same, and its stale outputs never reach the executed
  copy (papermill clears them), so no stale record is read back;
- git strips outputs from ``notebooks/*.ipynb`` (nbstripout filter) but keeps the nbval
  reference notebooks' outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ofl_core.batch.execute import KERNEL_ENV, execute_task, task_env
from ofl_core.batch.tasks import NOTEBOOK_DIR, Task, load_grid
from ofl_core.results import RECORDS_MIME, read_records

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


def with_stale_outputs(src: Path, dst: Path) -> None:
    """``src`` as JupyterLab saves it after a run: every code cell with an execution count, a
    stream output and a (stale) records output."""
    nb = nbformat.read(src, as_version=4)
    stale = [{"experiment": "stale", "paper": "dense", "table": "T1", "dataset": "fmnist",
              "partition": "dirichlet", "alpha": 0.1, "num_clients": 5, "seed": 1,
              "method": "stale", "preset": "paper", "last_acc": 1.0, "best_acc": 1.0,
              "ensemble_acc": 1.0, "wall_time_s": 0.0, "config_hash": "x", "version": "0"}]
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = i + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="STALE OUTPUT\n"),
                        nbformat.v4.new_output("display_data",
                                               data={RECORDS_MIME: stale, "text/plain": ""})]
    nbformat.write(nb, dst)


@pytest.mark.slow
def test_a_notebook_saved_with_outputs_changes_nothing(tmp_path):
    from tests.test_notebooks import check_paired

    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    shutil.copy(NOTEBOOK_DIR / "partitions.py", nbdir / "partitions.py")
    with_stale_outputs(NOTEBOOK_DIR / "partitions.ipynb", nbdir / "partitions.ipynb")
    assert read_records(nbdir / "partitions.ipynb")  # the stale record is there ...
    check_paired(nbdir / "partitions.ipynb", nbdir / "partitions.py")

    tiny = {t.notebook: t.parameters for t in load_grid(NOTEBOOK_DIR / "grids" / "tiny")}
    res = execute_task(Task("partitions", tiny["partitions"]), tmp_path / "out",
                       tmp_path / "fig", nbdir)
    assert res.status == "done", res.error
    executed = tmp_path / "out" / "runs" / "partitions" / f"{res.run_id}.ipynb"
    assert read_records(executed) == []  # ... and not in the executed copy
    assert "STALE OUTPUT" not in _outputs_text(executed)
    assert list((tmp_path / "fig").glob("*.png"))


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def _in_git_work_tree() -> bool:
    try:
        return _git("rev-parse", "--is-inside-work-tree").strip() == "true"
    except (OSError, subprocess.CalledProcessError):
        return False


@pytest.mark.skipif(not _in_git_work_tree(), reason="not a git checkout")
def test_git_strips_notebook_outputs_but_keeps_the_reference_notebooks():
    out = _git("check-attr", "filter", "diff", "--", "notebooks/main_tables.ipynb",
               "tests/reference/main_tables.ipynb")
    assert "notebooks/main_tables.ipynb: filter: nbstripout" in out
    assert "notebooks/main_tables.ipynb: diff: ipynb" in out
    assert "tests/reference/main_tables.ipynb: filter: unset" in out
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "id: nbstripout" in hooks and "tests/reference" in hooks
