"""The notebooks' one ``server`` parameter: what it passes to the methods, and the old
six-parameter spelling of shipped runs read as today's
(docs/decisions/batch.md#batch-server-sizes)."""

from __future__ import annotations

import json

import pytest

from ofl_core.batch import tasks as bt
from ofl_core.batch.report import RESULTS_DIR
from ofl_core.batch.runfiles import check_run
from ofl_core.batch.scale import LEGACY_SERVER_SIZES, current_names, run_scale
from ofl_core.experiment import configure_methods
from ofl_core.tables import STRATIFICATION, server_settings


def test_server_settings_passes_sizes_as_config_fields():
    got = server_settings({"epochs": 4, "batch_size": 64, "ngf": None, "strat_steps": 3})
    assert got == {"epochs": 4, "batch_size": 64, "kd_batch_size": 64, "strat_steps": 3}
    assert server_settings({"batch_size": 64, "kd_batch_size": 8}, num_images=16) == {
        "batch_size": 64, "kd_batch_size": 8, "num_images": 16}
    no_strat = server_settings({"epochs": 4, "strat_steps": 3, "strat_batch_size": 8},
                               stratification=False)
    assert no_strat == {"epochs": 4} and not set(no_strat) & set(STRATIFICATION)
    assert server_settings({}) == {} and server_settings(None) == {}


def test_each_notebook_default_reaches_the_configs():
    """Every key of every notebook's quick ``server`` is a field the methods take."""
    for nb in bt.list_notebooks():
        server = bt.notebook_defaults(nb).get("server")
        if server is None:
            continue
        for name, cfg, *_ in configure_methods(["dense", "fedhydra"],
                                               common=server_settings(server)):
            for k, v in server_settings(server).items():
                if hasattr(cfg, k):
                    assert getattr(cfg, k) == v, (nb, name, k)
        assert server_settings(server)["epochs"] == server["epochs"]


def test_old_names_fold_into_server():
    old = {"server_epochs": None, "steps_per_epoch": 30, "batch_size": None, "ngf": 64,
           "strat_steps": None, "strat_batch_size": None, "alphas": [0.1]}
    assert current_names(old) == {"alphas": [0.1], "server": {"steps_per_epoch": 30, "ngf": 64}}
    assert current_names({"alphas": [0.1]}) == {"alphas": [0.1]}
    assert set(LEGACY_SERVER_SIZES.values()) >= set(STRATIFICATION)


def test_a_size_left_out_and_a_none_agree_and_a_set_size_differs():
    refs = [{"server": {}, "alphas": [0.1, 0.3]}]
    assert run_scale({"server": {"epochs": None}, "alphas": [0.1]}, refs).paper
    s = run_scale({"server": {"epochs": 15}, "alphas": [0.1]}, refs)
    assert not s.paper and "server" in s.reason


def test_a_size_no_method_of_a_main_tables_run_reads_leaves_its_scale_alone():
    """``main_tables``' default ``server`` (with FedLPA's ``newton_steps``) is part of every
    run's parameters; a size counts only where a method the run runs has it."""
    refs = [{"server": {}, "methods": ["dense", "fedlpa"]}, {"server": {}, "methods": []}]
    short = {"newton_steps": 500}

    def paper(params: dict, notebook: str = "main_tables") -> bool:
        return run_scale(params, refs, notebook=notebook).paper

    assert paper({"server": short, "methods": ["dense"]})
    assert paper({"server": {**short, "epochs": 15}, "methods": []})  # FedCVAE alone: unread
    assert not paper({"server": short, "methods": ["dense", "fedlpa"]})
    assert not paper({"server": {"epochs": 15}, "methods": ["dense"]})
    s = run_scale({"server": short, "methods": ["fedlpa"]}, refs, notebook="main_tables")
    assert not s.paper and "newton_steps" in s.reason
    # an unknown method name, or another notebook (whose server may configure methods no
    # parameter names: synthetic_data always runs DENSE and FedHydra): every size counts
    assert not paper({"server": short, "methods": ["dense", "mine"]})
    assert not paper({"server": {"synthesis_student_mode": "eval"}}, "synthetic_data")
    assert not paper({"server": short, "methods": ["dense"]}, "ablations")


def test_a_grid_with_an_old_name_is_refused_with_the_new_spelling():
    with pytest.raises(ValueError, match=r"server: \{ngf: \.\.\., epochs: \.\.\.\}"):
        bt.check_parameters(bt.Task("local_epochs", {"server_epochs": 200, "ngf": 64}))


def test_shipped_runs_made_with_the_old_names_keep_their_paper_scale():
    """Shipped DENSE Table 1 runs were made when the sizes were six parameters: read through
    the alias table they are at paper scale against today's full grid."""
    refs = [bt.effective_parameters(t) for t in bt.load_grid(bt.NOTEBOOK_DIR / "grids" / "full")
            if t.notebook == "main_tables"]
    defaults, old = bt.notebook_defaults("main_tables"), []
    for path in sorted((RESULTS_DIR / "main_tables").glob("*.json")):
        raw = json.loads(path.read_text())
        if "server_epochs" in raw.get("effective_parameters", {}):
            run = check_run(raw, path, set(bt.list_notebooks()))
            assert "server_epochs" not in run["effective_parameters"]
            # as the report reads a run: a parameter added since is at its default
            old.append(run_scale({**defaults, **run["effective_parameters"]}, refs,
                                 notebook="main_tables").paper)
    assert len(old) >= 10 and all(old), old
