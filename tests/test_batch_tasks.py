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
    check_parameters,
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


def test_a_grid_product_beyond_the_cap_is_refused_before_it_is_built(tmp_path):
    """Four lists of 60 values are 12,960,000 tasks: refused at once, naming the lists (the
    runner used to build them all, gigabytes, before checking the first)."""
    values = list(range(1, 61))
    (tmp_path / "g.yaml").write_text(json.dumps({"main_tables": [{"grid": {
        k: values for k in ("num_clients", "local_epochs", "seeds", "fedcvae_num_clients")}}]}))
    with pytest.raises(ValueError, match=r"expands to 12,960,000 tasks \(60 num_clients × 60 "
                                         r"local_epochs × 60 seeds × 60 fedcvae_num_clients\)"):
        load_grid(tmp_path / "g.yaml")


@pytest.mark.parametrize("parameters, message", [
    ({"num_clients": -3}, "'num_clients': must be at least 1, got -3"),
    ({"alphas": [0.1, -0.5]}, "'alphas': must be above 0, got -0.5"),
    ({"seeds": []}, "'seeds' is empty"),
    ({"seeds": [2**32]}, "'seeds': seeds must be in 0"),
    ({"local_epochs": -1}, "'local_epochs': must be at least 0"),
    ({"methods": ["fedavg", "densee"]}, r"'methods': unknown method\(s\) \['densee'\]"),
    ({"presets": ["paperr"]}, "'presets': preset must be one of"),
    ({"method_presets": {"dense": ["nope"]}}, "'method_presets': preset must be one of"),
    ({"dataset": "fmnistt"}, "'dataset': unknown dataset 'fmnistt'; choose one of"),
    ({"arch": "resnet999"}, r"'arch': unknown model\(s\) \['resnet999'\]"),
    ({"device": "gpu0"}, "'device': the device must be one of cpu, cuda"),
    ({"server": {"epochs": -1}}, "'methods' / .*'server': .*epochs must be an int ≥ 0, got -1"),
    ({"server": {"bogus": 3}}, r"'methods' / .*'server': common setting\(s\) \['bogus'\] are "
     "fields of no"),
    ({"baseline_presets": ["paper+conv_relu=false"]}, "'methods' / 'presets' / "
     "'baseline_presets' / .*fedavg under 'paper.conv_relu=false'"),
    ({"dataset": "FashionMNIST", "mean_scale": 0}, None),
    ({"local_options": {"lr": 0}}, "'local_options': LocalTrainConfig.lr must be"),
    ({"methods": ["dense"], "presets": ["paper+no_such_field=1"]},
     "'methods' / 'presets' / .*dense under 'paper.no_such_field=1': dense: unknown config "
     "field"),
])
def test_a_value_the_notebook_cannot_run_is_refused_with_the_parameters_name(parameters, message):
    """run_all.py (and --dry-run) refuse these before any task starts; before, they passed as
    a normal plan (an unknown method lowered the cell count) and failed in every task's
    kernel, or, for ``seeds: []``, finished with no records and were skipped ever after."""
    if message is None:  # what a notebook runs, or the library accepts, passes
        nb = "cvae_security_shift" if "mean_scale" in parameters else "main_tables"
        check_parameters(Task(nb, parameters))
        return
    with pytest.raises(ValueError, match=f"main_tables: parameters? {message}"):
        check_parameters(Task("main_tables", parameters))


@pytest.mark.parametrize("grid", ["results/grids", "notebooks/grids/full", "notebooks/grids/tiny"])
def test_every_grid_the_project_ships_passes_the_value_checks(grid):
    """The checks refuse nothing a shipped grid runs (their zero-epoch CVAEs, empty α lists
    that skip a part, readings, FedLPA's own setting)."""
    for task in load_grid(NOTEBOOK_DIR.parent / grid):
        check_parameters(task)
