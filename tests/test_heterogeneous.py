"""Heterogeneous clients: ExperimentConfig.archs, local-<arch> records, FedAvg/OT refusal."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, run_methods, setup_experiment
from ofl_core.heterogeneous import (
    client_records,
    heterogeneous_settings,
    local_method_name,
    paper_arch_name,
)
from ofl_core.registry import method_config
from ofl_core.results import paper_results


def test_archs_validation_and_per_client_configs():
    local = LocalTrainConfig(arch="cnn_mnist", epochs=3)
    cfg = ExperimentConfig(num_clients=3, archs=["cnn1", "lenet", "cnn1"], local=local)
    assert cfg.archs == ("cnn1", "lenet", "cnn1")  # a list becomes a tuple (hashable config)
    cfgs = cfg.client_configs()
    assert [c.arch for c in cfgs] == ["cnn1", "lenet", "cnn1"]
    assert all(c.epochs == 3 for c in cfgs)
    assert ExperimentConfig(local=local).client_configs() is local
    with pytest.raises(ValueError, match="3 architectures for 5 clients"):
        ExperimentConfig(archs=("cnn1", "lenet", "cnn1"))
    with pytest.raises(ValueError, match="unknown model.*'nope'"):
        ExperimentConfig(num_clients=1, archs=("nope",))


def test_homogeneous_hash_is_unchanged_by_the_archs_field():
    cfg = ExperimentConfig()
    d = dataclasses.asdict(cfg)
    for k in ("device", "workers", "progress", "cache_dir", "data_root", "archs", "experiment",
              "paper", "table", "setting", "checkpoint_every"):  # what runs where, and record
        d.pop(k)  # labels, are not hashed
    d["local"].pop("shared_init")  # nor the shared-init default (a later field, likewise)
    d["local"].pop("input_norm")  # nor the raw-input default (a later field, likewise)
    old = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]
    assert cfg.hash() == old
    assert ExperimentConfig(archs=("cnn_mnist",) * 5).hash() != old


def test_paper_names_match_paper_results():
    local_rows = set(paper_results().method)
    for arch in ("resnet18", "cnn1", "cnn_cifar", "wrn16_1", "wrn40_1", "googlenet", "lenet"):
        assert local_method_name(arch) in local_rows
    assert paper_arch_name("cnn_cifar") == "cnn2"
    local_setting, server_setting = heterogeneous_settings("resnet18")
    settings = set(paper_results("dense", "T2").setting)
    assert {local_setting, server_setting} == settings


def test_heterogeneous_setup_records_and_fedavg_refusal(tiny_dataset, tmp_path):
    cfg = ExperimentConfig(
        dataset="tiny", partition="iid", alpha=None, num_clients=2, archs=("lenet", "cnn1"),
        local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path), progress=False,
        workers=1, paper="dense", table="T2", setting="models=heterogeneous;server=lenet",
    )
    setup = setup_experiment(cfg, dataset=tiny_dataset)
    assert [u.arch for u in setup.uploads] == ["lenet", "cnn1"]
    recs = client_records(setup, setting="models=heterogeneous")
    assert [r.method for r in recs] == ["local-lenet", "local-cnn1"]
    assert [r.last_acc for r in recs] == [round(a, 4) for a in setup.client_accs]
    assert all(r.setting == "models=heterogeneous" and r.table == "T2" for r in recs)
    with pytest.raises(ValueError, match="same architecture.*mix"):
        run_methods(setup, {"fedavg": method_config("fedavg")})
    recs, res = run_methods(setup, {"feddf": method_config(
        "feddf", epochs=1, steps_per_epoch=1, batch_size=8, student_arch="lenet")})
    assert recs[0].setting == "models=heterogeneous;server=lenet"
    assert res["feddf"].extras["student_arch"] == "lenet"
