"""Bad inputs and faults that used to hang or give silently wrong results
(docs/decisions/reliability.md): each must now be a clear error or correct behaviour."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from ofl_core.data.datasets import ImageDataset

UNGUARDED = textwrap.dedent("""
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.experiment import ExperimentConfig, setup_experiment

    cfg = ExperimentConfig(dataset="fmnist_embedded", num_clients=2, seed=1, workers=2,
                           local=LocalTrainConfig(epochs=1), cache_dir={cache!r}, progress=False)
    setup_experiment(cfg)
    print("finished")
""")


@pytest.mark.slow
def test_an_unguarded_script_with_a_worker_pool_fails_clearly_instead_of_hanging(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.format(cache=str(tmp_path / "cache")))
    try:
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=240, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("the unguarded script hung")
    assert run.returncode != 0 and "finished" not in run.stdout
    assert 'if __name__ == "__main__":' in run.stderr and "workers=1" in run.stderr


def test_a_dataset_whose_labels_do_not_match_its_images_is_refused():
    x = torch.zeros(10, 1, 28, 28, dtype=torch.uint8)
    y = torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match="10 training images .* but 9 labels.*re-download"):
        ImageDataset("mnist", x, y[:9], x, y, num_classes=10)
    with pytest.raises(ValueError, match="test labels outside 0...9"):
        ImageDataset("mnist", x, y, x, y + 10, num_classes=10)


def _upload(**kw):
    from ofl_core.models import build_model
    from ofl_core.uploads import ClientUpload

    state = build_model("cnn_mnist", 10, 1, 28).state_dict()
    base = dict(client_id=0, arch="cnn_mnist", state_dict=state, num_classes=10, in_channels=1,
                image_size=28, num_samples=100)
    return ClientUpload(**{**base, **kw})


def _ctx():
    from ofl_core.server import ServerContext

    return ServerContext(num_classes=10, in_channels=1, image_size=28, progress=False)


@pytest.mark.parametrize("case, change, message", [
    ("int64 weights", lambda sd: {**sd, "fc.weight": sd["fc.weight"].long() + 7},
     "dtype torch.int64, expected torch.float32"),
    ("float64 weights", lambda sd: {**sd, "fc.weight": sd["fc.weight"].double()},
     "dtype torch.float64"),
    ("complex weights", lambda sd: {**sd, "fc.weight": sd["fc.weight"].to(torch.complex64)},
     "dtype torch.complex64"),
    ("bool weights", lambda sd: {**sd, "fc.weight": sd["fc.weight"] > 0}, "dtype torch.bool"),
    ("scaled by 1e30", lambda sd: {k: v * 1e30 if v.is_floating_point() else v
                                   for k, v in sd.items()}, "beyond any trained model"),
])
def test_uploads_with_wrong_dtypes_or_magnitudes_are_refused(case, change, message):
    from ofl_core.registry import method_config, run_method
    from ofl_core.uploads import UploadError

    good = _upload()
    bad = _upload(client_id=1, state_dict=change(good.state_dict))
    with pytest.raises(UploadError, match=f"client 1: .*{message}"):
        run_method("fedavg", [good, bad], method_config("fedavg"), _ctx())


@pytest.mark.parametrize("header, message", [
    ({"num_samples": -150}, "num_samples must be a positive integer"),
    ({"num_samples": 0}, "num_samples must be a positive integer"),
    ({"num_classes": 300_000}, "300000 classes.*the task has 10 classes"),
    ({"num_classes": 11}, "11 classes.*the task has 10 classes"),
    ({"image_size": 32}, "1×32² images, but the task has 10 classes, 1×28²"),
])
def test_an_upload_header_is_checked_against_the_task_before_a_model_is_built(
        header, message, monkeypatch):
    from ofl_core import clients
    from ofl_core.registry import method_config, run_method
    from ofl_core.uploads import UploadError

    def no_build(*a, **k):
        raise AssertionError("a model was built from an unchecked header")

    bad = _upload(client_id=2, **header)
    monkeypatch.setattr(clients, "build_model", no_build)
    for name in ("fedavg", "ensemble", "fedoneshot"):
        with pytest.raises(UploadError, match=f"client 2: .*{message}"):
            run_method(name, [bad], method_config(name), _ctx())


@pytest.mark.parametrize("name", ["../tests/reference/partitions",
                                  "/tmp/../{root}/notebooks/partitions", "grids/../partitions"])
def test_notebook_names_from_a_grid_are_names_not_paths(name):
    from ofl_core.batch.tasks import NOTEBOOK_DIR, Task, check_parameters

    name = name.format(root=str(NOTEBOOK_DIR.parent).lstrip("/"))
    with pytest.raises(ValueError, match="unknown notebook"):
        check_parameters(Task(name))


def test_a_cache_entry_copied_over_another_key_is_not_trusted(tmp_path):
    from ofl_core.upload_cache import UploadCache

    cache = UploadCache(tmp_path)
    a, b = {"client_id": 0}, {"client_id": 1}
    cache.put(a, {"w": torch.zeros(2)})
    cache.path(a).replace(cache.path(b))  # a valid entry under the wrong key
    with pytest.warns(UserWarning, match="for another key.*removed"):
        assert cache.get(b) is None
    assert not cache.path(b).exists()
    torch.save({"state": {"w": "not a tensor"}, "meta": "{}"}, cache.path(a))
    with pytest.warns(UserWarning, match="not a dict of tensors"):
        assert cache.get(a) is None


def test_a_failed_cache_write_leaves_nothing_behind_and_loses_nothing(tmp_path, monkeypatch,
                                                                      tiny_dataset):
    import errno

    from ofl_core import upload_cache
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import make_partition
    from ofl_core.upload_cache import UploadCache

    cache = UploadCache(tmp_path)
    cache.put({"k": 1}, {"w": torch.ones(3)})
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        real_save({"partial": torch.zeros(1)}, f)  # some bytes reach the temp file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(upload_cache.torch, "save", full_disk)
    with pytest.warns(UserWarning, match="could not write cache entry.*not cached"):
        assert cache.put({"k": 1}, {"w": torch.zeros(3)}) is None
    assert not list(tmp_path.glob(".*.tmp")), "a temp file was left behind"
    monkeypatch.setattr(upload_cache.torch, "save", real_save)
    assert torch.equal(cache.get({"k": 1})["w"], torch.ones(3))  # the stored entry survives
    monkeypatch.setattr(upload_cache.torch, "save", full_disk)
    part = make_partition(tiny_dataset.y_train.numpy(), 2, "iid", seed=0)
    with pytest.warns(UserWarning, match="could not write"):
        ups = train_clients(tiny_dataset, part, LocalTrainConfig(epochs=1), seed=0, cache=cache,
                            workers=1, progress=False)
    assert len(ups) == 2  # the trained clients are used, only not cached


@pytest.mark.parametrize("text, message", [
    (None, "grid file .* not found"),
    ("main_tables: [ {seeds: [1] ", "not valid YAML"),
    ("main_tables: [3]", "each entry must be a mapping"),
    ("main_tables:\n  - grid: {seeds: 3}", "'grid' must map parameters to lists"),
    ("{}", "no tasks to run"),
])
def test_bad_grid_files_are_one_clear_line(tmp_path, capsys, text, message):
    import run_all

    grid = tmp_path / "grid.yaml"
    if text is not None:
        grid.write_text(text)
    rc = run_all.main(["--grid", str(grid), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert __import__("re").search(message, err), err


def test_names_reaching_the_report_are_escaped_and_it_is_written_whole(tmp_path):
    import json

    import nbformat

    from ofl_core.batch.report import build_report

    runs = tmp_path / "runs" / "partitions"
    runs.mkdir(parents=True)
    for rid in ("aaa", "bbb"):
        (runs / f"{rid}.json").write_text(json.dumps(
            {"status": "done", "notebook": "partitions", "run_id": rid, "records": []}))
    nbformat.write(nbformat.v4.new_notebook(), runs / "aaa.ipynb")
    (runs / "bbb.ipynb").write_text('{"cells": [')  # truncated: a listed failure, not a crash
    figs = tmp_path / "figures" / "partitions"
    figs.mkdir(parents=True)
    (figs / "<svg onload=alert(1)>.png").write_bytes(b"")
    index = build_report(tmp_path)
    page = index.read_text()
    assert "<svg onload" not in page and "&lt;svg onload=alert(1)&gt;" in page
    assert "bbb: its executed notebook could not be read" in page
    assert "aaa.html" in page and not list(index.parent.glob(".*.tmp"))
