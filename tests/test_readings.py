"""Readings: a preset with named field changes (``"paper+kd_data=pool"``), configured, labelled
on the records and judged at the scale of their preset."""

from __future__ import annotations

import pytest

from ofl_core.batch.scale import run_scale
from ofl_core.batch.tasks import NOTEBOOK_DIR, effective_parameters, load_grid
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.presets import split_reading
from ofl_core.registry import method_config
from ofl_core.tables import Run, Serves, run_tables


def test_split_reading_reads_yaml_scalars() -> None:
    assert split_reading("paper") == ("paper", {})
    assert split_reading("authors_code+adv_weight=0+adv_mask=true+teacher=sa_no_uc") == (
        "authors_code", {"adv_weight": 0, "adv_mask": True, "teacher": "sa_no_uc"})


@pytest.mark.parametrize("label, message", [
    ("papr+kd_data=pool", "preset must be one of"),
    ("paper+kd_data", "is not <field>=<value>"),
    ("paper+kd_data=", "is not <field>=<value>"),
    ("paper+kd_data=pool+kd_data=fresh", "sets kd_data twice"),
    ("paper+epochs=20", "sets epochs, a size of the run"),
])
def test_bad_readings_are_refused_with_what_to_change(label: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_reading(label)


def test_configure_methods_applies_a_reading_and_labels_it() -> None:
    pairs = configure_methods(["fedhydra"], ["paper", "paper+teacher=sa_no_uc+kd_data=pool"],
                              common={"epochs": 3})
    (name, plain), (name2, read, label) = pairs
    assert name == name2 == "fedhydra" and label == "paper+teacher=sa_no_uc+kd_data=pool"
    assert (read.teacher, read.kd_data, read.epochs, read.preset) == ("sa_no_uc", "pool", 3,
                                                                     "paper")
    assert read == method_config("fedhydra", epochs=3, teacher="sa_no_uc", kd_data="pool")
    assert (plain.teacher, plain.kd_data) == (method_config("fedhydra").teacher,
                                              method_config("fedhydra").kd_data)


@pytest.mark.parametrize("label, message", [
    ("paper+no_such_field=1", r"fedhydra under 'paper\+no_such_field=1': .*unknown config"),
    ("paper+teacher=nonsense", r"fedhydra under 'paper\+teacher=nonsense': .*teacher"),
])
def test_configure_methods_names_the_method_and_reading_of_a_bad_field(label, message) -> None:
    with pytest.raises(ValueError, match=message):
        configure_methods(["fedhydra"], [label])


def test_a_reading_labels_its_records(tiny_dataset, tmp_path) -> None:
    exp = ExperimentConfig(dataset="tiny", partition="iid", alpha=None, num_clients=2,
                           local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path),
                           progress=False, workers=1, experiment="t")
    methods = configure_methods(["fedavg"], ["paper", "paper+weighted=false"])
    t = run_tables([Run(exp, tuple(methods), (Serves("dense", "T1"),))], verbose=False,
                   dataset=tiny_dataset)
    assert {r.preset for r in t.records} == {"paper", "paper+weighted=false"}


def test_a_reading_runs_at_the_scale_of_its_preset() -> None:
    full = [effective_parameters(t) for t in load_grid(NOTEBOOK_DIR / "grids" / "full")
            if t.notebook == "main_tables"]
    reading = {**full[0], "presets": ["paper+kd_data=pool"]}
    assert run_scale(reading, full, notebook="main_tables").paper
    other = {**full[0], "presets": ["nonsense+kd_data=pool"]}
    assert not run_scale(other, full, notebook="main_tables").paper
