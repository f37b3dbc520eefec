"""The notebooks executed with papermill at tiny settings, through run_all.py's code path.

Also: the committed .ipynb files carry no outputs and match their jupytext .py twins.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

import jupytext
import pytest

import run_all
from ofl_core.batch import tasks as bt
from ofl_core.batch.coverage import PLANNERS, Cell
from ofl_core.batch.execute import execute_task
from ofl_core.results import alpha_key, read_records

GRIDS = bt.NOTEBOOK_DIR / "grids"
TINY = {t.notebook: t.parameters for t in bt.load_grid(GRIDS / "tiny")}
#: notebooks that publish no accuracy records (figures and tables only)
NO_RECORDS = {"partitions"}


def cells_of_records(records: Iterable[dict]) -> set[Cell]:
    """The cells these records' keys name (paper cells or not)."""
    return {(r["paper"], r["table"], r["dataset"], r["method"], alpha_key(r.get("alpha")),
             r["partition"], int(r["num_clients"]), r.get("setting") or "") for r in records}


def check_paired(ipynb_path: Path, py_path: Path) -> None:
    """The .ipynb and its jupytext .py hold the same cells, one of them tagged 'parameters'
    (whatever outputs the .ipynb carries)."""
    ipynb, py = jupytext.read(ipynb_path), jupytext.read(py_path)
    assert [c.source for c in ipynb.cells] == [c.source for c in py.cells], "run jupytext --sync"
    params = [c for c in ipynb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{ipynb_path.name}: needs exactly one cell tagged 'parameters'"


def committed_text(path: Path) -> str:
    """``path`` as git stores it (the index: after nbstripout's clean filter), or the file
    itself outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    rel = path.resolve().relative_to(root).as_posix()
    try:
        return subprocess.run(["git", "show", f":{rel}"], cwd=root, capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return path.read_text()


@pytest.mark.parametrize("nb", sorted(p.stem for p in bt.NOTEBOOK_DIR.glob("*.ipynb")))
def test_notebook_is_paired_and_committed_without_outputs(nb):
    check_paired(bt.NOTEBOOK_DIR / f"{nb}.ipynb", bt.NOTEBOOK_DIR / f"{nb}.py")
    # a local copy may hold outputs (saved from JupyterLab); git's copy may not
    for c in json.loads(committed_text(bt.NOTEBOOK_DIR / f"{nb}.ipynb"))["cells"]:
        assert not c.get("outputs"), f"{nb}: commit notebooks without outputs (nbstripout)"


def test_every_notebook_has_tiny_and_full_grids_with_known_parameters():
    notebooks = set(bt.list_notebooks())
    full = bt.load_grid(GRIDS / "full")
    assert set(TINY) == notebooks, "add notebooks/grids/tiny/<notebook>.yaml"
    assert {t.notebook for t in full} == notebooks, "add notebooks/grids/full/<notebook>.yaml"
    for t in [*full, *(bt.Task(nb, p) for nb, p in TINY.items())]:
        bt.check_parameters(t)


@pytest.mark.slow
@pytest.mark.parametrize("nb", sorted(TINY))
def test_notebook_runs_at_tiny_settings_and_publishes_records(nb, tmp_path):
    task = bt.Task(nb, TINY[nb])
    res = execute_task(task, tmp_path, tmp_path / "figures" / nb)
    assert res.status == "done", res.error
    assert list((tmp_path / "figures" / nb).glob("*.png")), "every notebook saves a figure"
    recs = read_records(tmp_path / "runs" / nb / f"{res.run_id}.ipynb")
    if nb in NO_RECORDS:
        return
    assert recs, f"{nb} published no records"
    # the dry run's planner (coverage) names exactly the table cells the notebook filled
    planner = PLANNERS.get(nb)
    filled = {c for c in cells_of_records([r.to_dict() for r in recs]) if c[1].startswith("T")}
    assert filled == (planner(bt.effective_parameters(task)) if planner else set())
    for r in recs:
        assert 0.0 <= r.last_acc <= 100.0 and r.best_acc >= r.last_acc - 1e-6
        assert r.paper in ("dense", "fedhydra", "fedcvae")
        assert r.table.startswith(("T", "Fig")), r.table
        assert r.data_source
    if nb == "ablations":  # Table 6 on both initialisations under both readings, each labelled
        assert {r.preset for r in recs if (r.paper, r.table) == ("fedcvae", "T6")} \
            == {"paper", "shared_init=true", "authors_code", "authors_code+shared_init=true"}


def test_unknown_parameters_and_notebooks_are_rejected():
    with pytest.raises(ValueError, match="has no parameter.*'bogus'.*its parameters are"):
        bt.check_parameters(bt.Task("main_tables", {"bogus": 1}))
    with pytest.raises(ValueError, match="unknown notebook 'nope'"):
        bt.check_parameters(bt.Task("nope"))
    with pytest.raises(ValueError, match="set by the runner"):
        bt.check_parameters(bt.Task("main_tables", {"figures_dir": "x"}))


@pytest.mark.parametrize("params, message", [
    ({"local_epochs": "ten"}, "parameter 'local_epochs' must be int, got 'ten' \\(str\\)"),
    ({"local_epochs": 2.5}, "'local_epochs' must be int"),
    ({"local_epochs": True}, "'local_epochs' must be int"),
    ({"alphas": 0.1}, "'alphas' must be a list of float"),
    ({"alphas": [0.1, "x"]}, "'alphas' must be a list of float"),
    ({"server": 5}, "'server' must be dict"),
    ({"cvae_epochs": "5"}, "'cvae_epochs' must be int or null"),
    ({"data_root": 3}, "'data_root' must be str or null"),
])
def test_grid_values_are_checked_against_the_parameters_types(params, message):
    with pytest.raises(ValueError, match=f"main_tables: (parameter )?{message}"):
        bt.check_parameters(bt.Task("main_tables", params))
    good = {"local_epochs": 3, "alphas": [1, 0.5], "cvae_epochs": None, "data_root": "/d"}
    bt.check_parameters(bt.Task("main_tables", good))  # ints are floats, None where Optional


def test_every_parameter_of_every_notebook_has_a_type():
    for nb in bt.list_notebooks():
        for name, info in bt.notebook_parameters(bt.NOTEBOOK_DIR / f"{nb}.ipynb").items():
            assert info["inferred_type_name"] != "None", f"{nb}: annotate {name!r}"


def test_an_interactive_run_never_writes_the_reports_figures():
    """Run in JupyterLab, a notebook writes its figures to figures_interactive/<notebook>, not
    to figures/<notebook> (the batch runner's, which the report shows): re-running a notebook
    by hand cannot replace what the report shows. The runner always passes its own."""
    for nb in bt.list_notebooks():
        default = bt.notebook_parameters(bt.NOTEBOOK_DIR / f"{nb}.ipynb")["figures_dir"]["default"]
        assert default.strip("'\"") == f"../figures_interactive/{nb}", nb


def test_grid_with_a_wrong_type_fails_before_running(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text("main_tables:\n  - local_epochs: ten\n")
    assert run_all.main(["--grid", str(grid), "--out", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("error: main_tables: parameter 'local_epochs' must be int, got "
                           "'ten' (str)")
    assert not (tmp_path / "runs").exists()


def test_grid_file_expands_products(tmp_path):
    g = tmp_path / "g.yaml"
    g.write_text("main_tables:\n  - grid: {seeds: [[1], [2]], alphas: [[0.1], [0.5]]}\n"
                 "    local_epochs: 1\npartitions:\n")
    tasks = bt.load_grid(g)
    assert len(tasks) == 5
    assert tasks[0].parameters == {"local_epochs": 1, "seeds": [1], "alphas": [0.1]}
    assert len({t.run_id() for t in tasks}) == 5


@pytest.mark.slow
def test_run_all_executes_resumes_reports_and_survives_a_failure(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({
        "partitions": [TINY["partitions"]],
        "main_tables": [{"local_epochs": 1, "methods": ["fedavg", "fedoneshot", "ensemble"],
                         "presets": ["paper", "authors_code"],
                         "method_presets": {"fedoneshot": ["paper"]}, "fedcvae_methods": []},
                        # passes the runner's checks, fails in its kernel: no MNIST files
                        {"dataset": "mnist", "data_root": str(tmp_path / "no_data")}],
    }))
    out = tmp_path / "out"
    rc = run_all.main(["--grid", str(grid), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1, text
    assert "3 tasks: 2 ran, 0 skipped (already done), 1 failed" in text
    assert "dataset 'mnist' not found under" in text

    runs = sorted(p for p in (out / "runs" / "main_tables").glob("*.json")
                  if not p.name.endswith(".failed.json"))
    assert len(list((out / "runs" / "main_tables").glob("*.failed.json"))) == 1  # kept
    assert len(runs) == 1
    recs = read_records(runs[0].with_suffix(".ipynb"))
    # `method_presets` gives FedOneShot its own presets; the others run under `presets`
    assert {(r.method, r.preset) for r in recs} == {
        ("fedavg", "paper"), ("fedavg", "authors_code"), ("ensemble", "paper"),
        ("ensemble", "authors_code"), ("fedoneshot", "paper")}
    side = json.loads(runs[0].read_text())
    assert [r["method"] for r in side["records"]] == [r.method for r in recs]
    assert side["code_version"].startswith("ofl_core ")  # which code made it (+ git commit)
    for r in recs:
        assert r.dataset == "fmnist" and r.data_source == "fmnist_embedded"
        assert r.num_clients == 5 and 0.0 <= r.last_acc <= 100.0
    assert list((out / "figures" / "partitions").glob("*.png"))
    # two main_tables tasks in one batch: each run's figures in its own folder
    assert len(list((out / "figures" / "main_tables").rglob("dense_t1_paper_vs_ours.png"))) == 1
    index = (out / "report" / "index.html").read_text()
    assert 'id="dense-T1"' in index and "paper <b>41.69</b>" in index
    assert "Failed runs" in index and "not found under" in index

    rc = run_all.main(["--grid", str(grid), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 1
    assert "3 tasks: 0 ran, 2 skipped (already done), 1 failed" in text


def test_committed_reference_notebooks_exist():
    ref = Path(__file__).parent / "reference"
    for nb in ("partitions", "main_tables"):
        assert (ref / f"{nb}.ipynb").is_file(), "run scripts/make_reference_notebooks.py"
