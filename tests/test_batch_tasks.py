"""Tasks: grid files (lists and ``grid:`` products), run ids, the finished check, TaskSpec."""

from __future__ import annotations

import ast
import json

import nbformat
import pytest

from ofl_core.batch.tasks import (
    NOTEBOOK_DIR,
    RUNNER_PARAMETERS,
    Task,
    TaskResult,
    TaskSpec,
    is_finished,
    load_grid,
    notebook_defaults,
    result_from_dict,
    result_to_dict,
    task_id,
    task_paths,
)


def test_load_grid_expands_products_and_reads_folders(tmp_path):
    (tmp_path / "a.yaml").write_text("nb1:\n  - {x: 1}\n  - grid: {y: [1, 2]}\n    z: 0\n")
    (tmp_path / "b.yaml").write_text("nb2:\n")
    assert load_grid(tmp_path) == [Task("nb1", {"x": 1}), Task("nb1", {"z": 0, "y": 1}),
                                   Task("nb1", {"z": 0, "y": 2}), Task("nb2", {})]
    (tmp_path / "bad.yaml").write_text("- 1\n")
    with pytest.raises(ValueError, match="maps notebook names"):
        load_grid(tmp_path / "bad.yaml")


def test_run_id_follows_cells_and_parameters_not_outputs(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    rid = task_id(path, {"a": 1})
    assert rid != task_id(path, {"a": 2}) and len(rid) == 12
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", text="1")]
    nbformat.write(nb, path)
    assert task_id(path, {"a": 1}) == rid
    nb.cells[0].source = "x = 2"
    nbformat.write(nb, path)
    assert task_id(path, {"a": 1}) != rid


def test_finished_needs_a_done_sidecar_and_the_notebook(tmp_path):
    t = Task("nb", {})
    nb, js = task_paths(tmp_path, t, "r1")
    nb.parent.mkdir(parents=True)
    js.write_text(json.dumps({"status": "done"}))
    assert not is_finished(tmp_path, t, "r1")  # no notebook
    nb.write_text('{"cells": []}')
    assert is_finished(tmp_path, t, "r1")
    js.write_text('{"status": "do')
    assert not is_finished(tmp_path, t, "r1")


def test_spec_and_result_round_trip_through_json():
    spec = TaskSpec(Task("partitions", {"alphas": [0.1]}), "abc", "/o", "/o/f", threads=2)
    assert TaskSpec.from_json(spec.to_json()) == spec
    res = TaskResult(spec.task, "abc", "failed", 1.5, "boom")
    assert result_from_dict(json.loads(json.dumps(result_to_dict(res)))) == res


@pytest.mark.parametrize("nb", sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")))
def test_every_parameter_of_a_notebook_is_read_by_papermill(nb):
    """papermill skips a parameters-cell line it cannot parse (e.g. an annotated assignment with
    a trailing comment) with only a log line; the report's scale and coverage would then miss
    that parameter's default."""
    cell = next(c for c in nbformat.read(NOTEBOOK_DIR / f"{nb}.ipynb", as_version=4).cells
                if "parameters" in c.metadata.get("tags", []))
    assigned = {t.target.id if isinstance(t, ast.AnnAssign) else t.targets[0].id
                for t in ast.parse(cell.source).body if isinstance(t, ast.AnnAssign | ast.Assign)}
    assert assigned - set(RUNNER_PARAMETERS) == set(notebook_defaults(nb))
