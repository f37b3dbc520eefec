"""The table-spec layer: each experiment runs once, its records labelled for every table."""

from __future__ import annotations

import pytest

from ofl_core import tables as tables_mod
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.registry import method_config
from ofl_core.tables import Run, Serves, run_tables


def experiment(tmp_path, **kw) -> ExperimentConfig:
    return ExperimentConfig(dataset="tiny", partition="iid", alpha=None, num_clients=2,
                            local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path),
                            progress=False, workers=1, experiment="t", **kw)


def test_one_run_per_experiment_labelled_for_every_table(tiny_dataset, tmp_path, monkeypatch):
    calls = []
    real = tables_mod.run_one
    monkeypatch.setattr(tables_mod, "run_one", lambda s, n, c: calls.append(n) or real(s, n, c))
    methods = (("fedavg", method_config("fedavg")), ("ensemble", method_config("ensemble")))
    runs = [
        Run(experiment(tmp_path, setting="local_epochs=1"), methods,
            (Serves("dense", "T1"), Serves("fedhydra", "T1", methods=("fedavg",)),
             Serves("fedhydra", "T9", setting="E={local_epochs}",
                    rename=(("ensemble", "ens"),)))),
        # the same experiment and method again (another table): no new setup, no new run
        Run(experiment(tmp_path, setting="local_epochs=1"),
            (("fedavg", method_config("fedavg"), "labelled"),), (Serves("dense", "T3"),)),
    ]
    t = run_tables(runs, verbose=False, dataset=tiny_dataset)
    assert calls == ["fedavg", "ensemble"] and len(t.setups) == 1
    got = {(r.paper, r.table, r.method, r.preset, r.setting) for r in t.records}
    assert got == {
        ("dense", "T1", "fedavg", "paper", "local_epochs=1"),
        ("dense", "T1", "ensemble", "paper", "local_epochs=1"),
        ("fedhydra", "T1", "fedavg", "paper", "local_epochs=1"),
        ("fedhydra", "T9", "fedavg", "paper", "E=1"),
        ("fedhydra", "T9", "ens", "paper", "E=1"),
        ("dense", "T3", "fedavg", "labelled", "local_epochs=1"),
    }
    fedavg = {r.last_acc for r in t.records if r.method == "fedavg"}
    assert len(fedavg) == 1  # one computation behind every label
    assert t.result("fedavg").method == "fedavg" and t.result("fedavg (labelled)")
    assert set(t.compare("dense", "T1")["method"]) == {"fedavg", "ensemble"}


def test_partition_seed_and_seed_from_partition(tiny_dataset, tmp_path):
    run = Run(experiment(tmp_path, seed=3), (("fedavg", method_config("fedavg")),),
              (Serves("fedcvae", "T2"), Serves("fedcvae", "T5", seed_from_partition=True)),
              partition_seed=1693)
    t = run_tables([run], verbose=False, dataset=tiny_dataset)
    assert {(r.table, r.seed) for r in t.records} == {("T2", 3), ("T5", 1693)}


def test_configure_methods_rejects_unknown_common_keys():
    with pytest.raises(ValueError, match=r"\['g_steps'\] are fields of no method.*'dense'"):
        configure_methods(["dense"], common={"g_steps": 3})
    with pytest.raises(ValueError, match="unknown method"):
        configure_methods(["densee"])
    # a setting of an unselected method (kd_epochs: FedCVAE-KD) is not used, not an error
    (_, cfg), = configure_methods(["fedcvae-ens"], common={"kd_epochs": 2, "num_samples": 7})
    assert cfg.num_samples == 7
