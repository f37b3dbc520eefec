"""Bad input at the library's and the runner's edges: each case names the field to change,
where it used to end in a torch or numpy traceback, a wrong name, or silence."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from ofl_core.batch.config import make_config, memory_gb, walltime_minutes
from ofl_core.batch.tasks import load_grid
from ofl_core.checkpoint.state import CheckpointMismatch, capture, restore
from ofl_core.clients import LocalTrainConfig
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.upload_cache import file_lock


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "gpu"}, "ServerContext.device must be one of cpu, cuda"),
    ({"device": "auto"}, "not 'auto': resolve it first"),
    ({"seed": -1}, r"ServerContext.seed must be an int in \[0, 9,223,372,036,854,775,807\]"),
    ({"num_classes": 0}, "ServerContext.num_classes must be an int ≥ 1, got 0"),
])
def test_a_server_context_refuses_what_no_server_can_run_on(kwargs, message):
    args = {"num_classes": 10, "in_channels": 1, "image_size": 28, **kwargs}
    with pytest.raises(ValueError, match=message):
        ServerContext(**args)


def test_run_method_names_a_config_of_another_method_and_uploads_of_another_type():
    ctx = ServerContext(10, 1, 28)
    with pytest.raises(TypeError, match=r"fedavg needs a FedAvgConfig \(method_config\('fedavg'"
                                        r", preset\)\), got DenseConfig"):
        run_method("fedavg", [], method_config("dense"), ctx)
    with pytest.raises(TypeError, match=r"uploads must be ofl_core.uploads.ClientUpload objects, "
                                        r"got \['dict'\]"):
        run_method("fedavg", [{"arch": "cnn_mnist"}], method_config("fedavg"), ctx)


def test_a_checkpoint_that_does_not_fit_names_the_piece_that_refused_it():
    """The roll-back loop reused the loop's name: the message named the last piece."""
    pieces = {"student": nn.Linear(2, 2), "generator": nn.Linear(3, 3)}
    with pytest.raises(CheckpointMismatch, match="^student: "):
        restore(pieces, capture({"student": nn.Linear(5, 5), "generator": nn.Linear(3, 3)}))


@pytest.mark.parametrize("text, line", [
    ("main_tables:\n  - {seeds: [1]}\nmain_tables:\n  - {seeds: [2]}\n", 3),
    ("main_tables:\n  - num_clients: 3\n    num_clients: 7\n", 3),
])
def test_a_key_named_twice_in_a_grid_is_refused_not_silently_dropped(tmp_path, text, line):
    """YAML keeps the last of two equal keys: a second `main_tables:` section silently dropped
    the first one's tasks."""
    (tmp_path / "g.yaml").write_text(text)
    with pytest.raises(ValueError, match=f"line {line}: key '.*' appears twice in one mapping"):
        load_grid(tmp_path / "g.yaml")


def test_a_grid_that_is_not_text_names_the_file(tmp_path):
    (tmp_path / "g.yaml").write_bytes(b"main_tables:\n  - \xd0\xff\n")
    with pytest.raises(ValueError, match="g.yaml: not valid YAML"):
        load_grid(tmp_path / "g.yaml")


@pytest.mark.parametrize("call, message", [
    (lambda: make_config({}, {"job_directives": 5}, {}), "job_directives must be a string or a "
                                                         "list of strings"),
    (lambda: memory_gb("1.2.3GB"), "memory '1.2.3GB': use e.g. 16GB"),
    (lambda: memory_gb(0), "must be more than 0 \\(SLURM reads 0 as all"),
    (lambda: memory_gb("-3GB"), "memory '-3GB': use e.g."),
    (lambda: walltime_minutes("-1"), "walltime '-1': use a SLURM time"),
    (lambda: walltime_minutes(-5), "a number of minutes must be > 0"),
    (lambda: walltime_minutes("0:00"), "must be longer than 0"),
])
def test_executor_settings_that_slurm_would_misread_are_refused(call, message):
    """`--mem=0` is all of a node's memory to SLURM, `--time=-1` became one minute, and a
    number as job_directives was a traceback."""
    with pytest.raises(ValueError, match=message):
        call()


def test_local_training_settings_that_cannot_train_are_refused():
    with pytest.raises(ValueError, match=r"LocalTrainConfig.momentum must be a finite float in "
                                         r"\[0, 1\), got 5"):
        LocalTrainConfig(momentum=5.0)
    with pytest.raises(ValueError, match=r"LocalTrainConfig: unknown field\(s\) \['bogus'\]"):
        LocalTrainConfig.for_preset("paper", bogus=1)


def test_a_lock_path_that_is_a_folder_says_how_to_fix_it(tmp_path: Path):
    lock = tmp_path / "entry.lock"
    lock.mkdir()
    with pytest.raises(OSError, match="is a folder, not a file: remove it"), file_lock(lock):
        pass


def test_an_experiment_without_methods_says_so_before_training_clients():
    from ofl_core.experiment import ExperimentConfig, run_experiment

    with pytest.raises(ValueError, match="run_experiment got no methods: .*setup_experiment"):
        run_experiment(ExperimentConfig(), [])
