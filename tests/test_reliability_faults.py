"""Faults and untrusted inputs at the batch runner, the client cache, the report and the
uploads: each must be a clear error (naming what is wrong) or correct behaviour, never a hang,
a stale result or a value taken at its word
(docs/decisions/reliability.md#reliability-no-hang-on-a-full)."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest
import torch

import run_all
from ofl_core.batch import grid
from ofl_core.batch.tasks import TaskResult


def _full_disk_under(monkeypatch, root: Path) -> None:
    """Every write under ``root`` fails as on a full disk, after creating the (empty) file."""
    real = Path.write_text

    def write_text(self, *a, **k):
        if str(self.resolve()).startswith(str(root.resolve())):
            self.touch()
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_full_disk_under_out_ends_the_batch_with_one_clear_line(tmp_path, monkeypatch,
                                                                   capsys, jobs):
    out = tmp_path / "out"
    out.mkdir()

    def failing_task(spec):  # every task fails, so its failure record must be written
        return TaskResult(spec.task, spec.run_id, "failed", 0.1, error="boom")

    monkeypatch.setattr(grid, "run_task_spec", failing_task)
    _full_disk_under(monkeypatch, out)
    rc: list[int] = []
    t = threading.Thread(target=lambda: rc.append(run_all.main(
        ["--quick", "--only", "partitions,local_epochs", "--jobs", jobs, "--out", str(out)])),
        daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the batch hung on a failed bookkeeping write"
    assert rc and rc[0] != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "No space left" in err[0], err
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def _train(dataset, cache_dir):
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import make_partition
    from ofl_core.upload_cache import UploadCache

    part = make_partition(dataset.y_train.numpy(), 2, "iid", seed=0,
                          num_classes=dataset.num_classes)
    cache = UploadCache(cache_dir)
    ups = train_clients(dataset, part, LocalTrainConfig(epochs=1, batch_size=64), 0, cache=cache,
                        workers=1, progress=False, trainer="sequential")
    return ups, cache


def test_cached_clients_of_other_training_code_are_trained_again(tiny_dataset, tmp_path,
                                                                  monkeypatch):
    from ofl_core import client_training

    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert cache.misses == 2
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (2, 0)  # the same code: the cache is used
    # an edit of the clients' training code (e.g. the learning rate of train_local)
    monkeypatch.setattr(client_training, "source_digest", lambda files, root=None: "edited")
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (0, 2)
    # pinned on purpose: the edited code reuses the entries of the pinned version
    monkeypatch.setenv("OFL_CLIENT_CODE", "edited")
    monkeypatch.setattr(client_training, "source_digest", lambda files, root=None: "again")
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (2, 0)
    assert client_training.client_code_version(client_training.CLASSIFIER) == (
        "edited", "edited (pinned; code again)")


def test_the_client_code_version_covers_client_training_and_nothing_else(tmp_path):
    import shutil

    import ofl_core
    from ofl_core.client_training import _SHARED_CODE, CLASSIFIER, source_digest
    from ofl_core.fedcvae.clients import DECODER

    root = tmp_path / "ofl_core"
    shutil.copytree(Path(ofl_core.__file__).parent, root,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pt", "embedded"))

    def version(kind):
        source_digest.cache_clear()
        return source_digest(tuple(sorted({*_SHARED_CODE, *kind.code})), root)

    before = {k.name: version(k) for k in (CLASSIFIER, DECODER)}
    for edited, changes in [("dense/server.py", set()), ("batch/report.py", set()),
                            ("clients.py", {"clients", "CVAE clients"}),
                            ("grouped_training.py", {"clients"}),
                            ("models/cnn.py", {"clients"}),
                            ("fedcvae/clients.py", {"CVAE clients"})]:
        p = root / edited
        p.write_text(p.read_text() + "\n# edited\n")
        now = {k.name: version(k) for k in (CLASSIFIER, DECODER)}
        assert {n for n in now if now[n] != before[n]} == changes, edited
        before = now
    source_digest.cache_clear()


def test_records_name_the_client_training_code(tiny_dataset, tmp_path):
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.experiment import ExperimentConfig, run_one, setup_experiment

    cfg = ExperimentConfig(dataset="tiny", num_clients=2, partition="iid", seed=0,
                           local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path),
                           workers=1, progress=False)
    setup = setup_experiment(cfg, dataset=tiny_dataset)
    from ofl_core.methods.fedavg import FedAvgConfig

    rec, _ = run_one(setup, "fedavg", FedAvgConfig())
    assert len(rec.client_code) == 16


def _shipped_file(results: Path, name: str, body: str, folder: str = "main_tables") -> None:
    d = results / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.json").write_text(body)


def _sidecar(rid: str, **change) -> dict:
    rec = {"experiment": "main_tables", "paper": "dense", "table": "T1", "dataset": "fmnist",
           "partition": "dirichlet", "alpha": 0.1, "num_clients": 5, "seed": 1,
           "method": "dense", "preset": "paper", "last_acc": 49.0, "best_acc": 50.0,
           "ensemble_acc": 50.0, "wall_time_s": 1.0, "config_hash": "h", "version": "0",
           "setting": "", "data_source": "fmnist"}
    rec.update(change.pop("record", {}))
    d = {"status": "done", "notebook": "main_tables", "run_id": rid, "parameters": {},
         "seconds": 9.0, "records": [rec], "machine": {"host": "h", "cores": 2}}
    d.update(change)
    return d


_BAD_SHIPPED = [  # (case, the file's text, what the problem names)
    ("last_acc NaN", '{"last_acc": NaN}', "NaN"),
    ("last_acc null", {"record": {"last_acc": None}}, "records[0].last_acc"),
    ("last_acc inf", '{"last_acc": Infinity}', "Infinity"),
    ("last_acc 1e308", {"record": {"last_acc": 1e308}}, "records[0].last_acc"),
    ("last_acc 250", {"record": {"last_acc": 250}}, "[0, 100]"),
    ("last_acc -50", {"record": {"last_acc": -50}}, "[0, 100]"),
    ("last_acc a string", {"record": {"last_acc": "49"}}, "records[0].last_acc"),
    ("seed missing", {"record": {"seed": "DROP"}}, "records[0].seed is missing"),
    ("seed a float", {"record": {"seed": 1.5}}, "records[0].seed"),
    ("num_clients 0", {"record": {"num_clients": 0}}, "records[0].num_clients"),
    ("method a list", {"record": {"method": ["dense"]}}, "records[0].method"),
    ("machine a string", {"machine": "vm"}, "machine must be a mapping"),
    ("parameters null", {"parameters": None}, "parameters must be a mapping"),
    ("records a dict", {"records": {"a": 1}}, "records must be a list"),
    ("seconds a string", {"seconds": "9"}, "seconds"),
    ("notebook a path", {"notebook": "../../.."}, "notebook must be one of"),
    ("notebook javascript:", {"notebook": "javascript:alert(1)"}, "notebook must be one of"),
    ("notebook of another folder", {"notebook": "partitions"}, "not the folder"),
    ("run_id a path", {"run_id": "../x"}, "run_id must be a plain name"),
    ("run_id another file's", {"run_id": "other"}, "not the file's name"),
    ("status not done", {"status": "running"}, "status"),
    ("not JSON", "{oops", "not valid JSON"),
    ("a list", "[1, 2]", "must be a JSON object"),
]


@pytest.mark.parametrize("case, change, problem", _BAD_SHIPPED, ids=[c[0] for c in _BAD_SHIPPED])
def test_a_bad_shipped_record_is_one_listed_problem_and_the_rest_of_the_report_stays(
        tmp_path, case, change, problem):
    import json

    from bs4 import BeautifulSoup

    from ofl_core.batch.report import build_report

    results = tmp_path / "results"
    _shipped_file(results, "good", json.dumps(_sidecar("good")))
    if isinstance(change, dict):
        d = _sidecar("bad", **change)
        if d["records"] and isinstance(d["records"], list):
            d["records"][0] = {k: v for k, v in d["records"][0].items() if v != "DROP"}
        text = json.dumps(d)
    elif change.startswith('{"last_acc"'):  # a non-JSON constant inside a record
        text = json.dumps(_sidecar("bad")).replace('"last_acc": 49.0', change[1:-1])
    else:
        text = change
    _shipped_file(results, "bad", text)
    out = tmp_path / "out"
    index = build_report(out, results=results)
    soup = BeautifulSoup(index.read_text(), "html.parser")
    items = soup.find(id="problems").find_next("ul").find_all("li")
    assert len(items) == 1 and "results/main_tables/bad.json" in items[0].text
    assert problem in items[0].text, items[0].text
    assert soup.find(id="run-good") is not None and soup.find(id="run-bad") is None
    ours = soup.find(id="dense-T1").find_next("table").find(class_="ours")
    assert "49.00\xa0n=1" in ours.text  # the bad file is not counted
    assert not any(a.get("href", "").lower().startswith("javascript:")
                   for a in soup.find_all("a"))
    assert {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*.html")} == {"out"}


@pytest.mark.parametrize("kind, text", [
    ("a run", '{"status": "done", "notebook": "../../../escape", "run_id": "r1"}'),
    ("a failure", '{"status": "failed", "notebook": "../../../escape", "run_id": "r1"}'),
    ("a failure's error a list", '{"notebook": "main_tables", "run_id": "r1", "error": [1]}'),
])
def test_a_bad_sidecar_in_out_is_one_listed_problem(tmp_path, kind, text):
    from ofl_core.batch.report import build_report

    d = tmp_path / "runs" / "main_tables"
    d.mkdir(parents=True)
    name = "r1.failed.json" if "failure" in kind else "r1.json"
    (d / name).write_text(text)
    html = build_report(tmp_path, results=None).read_text()
    assert f"runs/main_tables/{name}" in html
    assert not (tmp_path.parent / "escape").exists()


def test_a_broken_gaps_file_is_a_listed_problem_and_stops_run_all_before_any_task(
        tmp_path, monkeypatch, capsys):
    from ofl_core.batch.report import build_report

    results = tmp_path / "results"
    _shipped_file(results, "good", __import__("json").dumps(_sidecar("good")))
    (results / "gaps.yaml").write_text("- paper: dense\n  why: [unclosed\n")
    html = build_report(tmp_path / "out", results=results).read_text()
    assert "gaps.yaml" in html and "not valid YAML" in html and 'id="run-good"' in html

    def no_run(*a, **k):
        raise AssertionError("a task ran before gaps.yaml was checked")

    monkeypatch.setattr(run_all, "RESULTS_DIR", results)
    monkeypatch.setattr(run_all, "run_grid", no_run)
    assert run_all.main(["--quick", "--only", "partitions", "--out", str(tmp_path / "o")]) == 2
    assert "gaps.yaml" in capsys.readouterr().err


def _decoder_upload(**change):
    import dataclasses

    from ofl_core.models.cvae import build_decoder
    from ofl_core.uploads import ClientUpload

    dec = build_decoder("cvae_small", 10, 1, 32, 10)
    up = ClientUpload(client_id=3, arch="cvae_small", state_dict=dec.state_dict(),
                      num_classes=10, in_channels=1, image_size=32, num_samples=100,
                      model_kwargs={"latent_dim": 10}, label_counts=(10,) * 10, kind="decoder")
    return dataclasses.replace(up, **change)


def _classifier_upload(**change):
    import dataclasses

    from ofl_core.models import build_model
    from ofl_core.uploads import ClientUpload

    m = build_model("cnn_mnist", 10, 1, 28)
    up = ClientUpload(client_id=3, arch="cnn_mnist", state_dict=m.state_dict(), num_classes=10,
                      in_channels=1, image_size=28, num_samples=100)
    return dataclasses.replace(up, **change)


_OVERSIZED = [  # (case, upload, what the message names)
    ("decoder latent_dim 10**6", lambda: _decoder_upload(model_kwargs={"latent_dim": 10**6}),
     "latent_dim"),
    ("decoder latent_dim not its fc's", lambda: _decoder_upload(model_kwargs={"latent_dim": 900}),
     "does not match"),
    ("decoder latent_dim a float", lambda: _decoder_upload(model_kwargs={"latent_dim": 10.0}),
     "latent_dim"),
    ("decoder image_size 16000", lambda: _decoder_upload(image_size=16000), "image_size"),
    ("decoder num_classes 10**6", lambda: _decoder_upload(num_classes=10**6), "num_classes"),
    ("classifier num_classes 10**7", lambda: _classifier_upload(num_classes=10**7),
     "num_classes"),
    ("classifier image_size 4096", lambda: _classifier_upload(image_size=4096), "image_size"),
    ("classifier in_channels 1000", lambda: _classifier_upload(in_channels=1000), "in_channels"),
    ("classifier num_samples 10**30", lambda: _classifier_upload(num_samples=10**30),
     "num_samples"),
    ("classifier num_samples 0", lambda: _classifier_upload(num_samples=0), "num_samples"),
    ("decoder label_counts all 0", lambda: _decoder_upload(label_counts=(0,) * 10),
     "label_counts are all 0"),
    ("classifier option not a switch",
     lambda: _classifier_upload(model_kwargs={"conv_relu": 10**9}), "model_kwargs"),
]


@pytest.mark.parametrize("case, make, names", _OVERSIZED, ids=[c[0] for c in _OVERSIZED])
def test_every_size_field_of_an_upload_is_bounded_before_anything_is_built(
        monkeypatch, case, make, names):
    from ofl_core import uploads as clients  # where the validator builds models
    from ofl_core.uploads import UploadError, validate_upload

    upload = make()

    def no_build(*a, **k):
        raise AssertionError("a model was built from an unchecked header")

    monkeypatch.setattr(clients, "build_model", no_build)
    monkeypatch.setattr(clients, "build_decoder", no_build)
    with pytest.raises(UploadError, match="client 3") as e:
        validate_upload(upload, None)
    assert names in str(e.value)


def test_a_cvae_is_not_built_beyond_its_bounds():
    from ofl_core.models.cvae import build_cvae, build_decoder

    for kw in ({"latent_dim": 10**6}, {"image_size": 16 * 1000}, {"num_classes": 10**6}):
        with pytest.raises(ValueError, match="must be an integer in 1"):
            build_decoder("cvae", **{"num_classes": 10, "image_size": 32, **kw})
        with pytest.raises(ValueError, match="must be an integer in 1"):
            build_cvae("cvae", **{"num_classes": 10, "image_size": 32, **kw})


_BOMB = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
                  + [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]"
                     for p, c in zip("abcdefgh", "bcdefghi", strict=True)]) + "\n"


@pytest.mark.parametrize("loader", ["grid", "cluster-config", "gaps"])
@pytest.mark.parametrize("text, message", [
    (_BOMB, "expands to more than"),
    ("a: &a [*a]\n", "recursive"),
])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, loader, text, message):
    import time

    from ofl_core.batch.config import load_config_file
    from ofl_core.batch.gaps import load_gaps
    from ofl_core.batch.tasks import load_grid

    f = tmp_path / "x.yaml"
    f.write_text(text)
    load = {"grid": load_grid, "cluster-config": load_config_file, "gaps": load_gaps}[loader]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        load(f)
    assert time.perf_counter() - t0 < 5


def test_run_all_dry_run_refuses_an_alias_bomb_in_a_grid(tmp_path, capsys):
    f = tmp_path / "bomb.yaml"
    f.write_text(_BOMB)
    assert run_all.main(["--grid", str(f), "--dry-run"]) == 2
    assert "expands to more than" in capsys.readouterr().err


def _with_state(up, change):
    import dataclasses

    sd = dict(up.state_dict)
    change(sd)
    return dataclasses.replace(up, state_dict=sd)


_BAD_STATES = [  # (case, change of the state dict, what the message names)
    ("meta tensor", lambda sd: sd.update({"fc1.bias": torch.empty(50, device="meta")}), "meta"),
    ("sparse tensor", lambda sd: sd.update({"fc1.bias": torch.zeros(50).to_sparse()}),
     "sparse"),
    ("mixed keys", lambda sd: sd.update({0: torch.zeros(1)}), "key 0"),
    ("a list for a tensor", lambda sd: sd.update({"fc1.bias": [0.0] * 50}), "not a tensor"),
]


@pytest.mark.parametrize("case, change, names", _BAD_STATES, ids=[c[0] for c in _BAD_STATES])
def test_a_malformed_state_dict_is_an_upload_error_naming_the_client(case, change, names):
    from ofl_core.uploads import UploadError, validate_upload

    with pytest.raises(UploadError, match="client 3") as e:
        validate_upload(_with_state(_classifier_upload(), change))
    assert names in str(e.value)


def test_label_counts_as_a_numpy_array_reach_the_fedcvae_server_as_a_tuple(fedcvae_tiny):
    import dataclasses

    import numpy as np

    from ofl_core.fedcvae.server import FedCVAEEnsConfig, run_ens

    ups = [dataclasses.replace(u, label_counts=np.asarray(u.label_counts))
           for u in fedcvae_tiny["uploads"]]
    assert all(type(u.label_counts) is tuple for u in ups)
    res = run_ens(ups, FedCVAEEnsConfig(num_samples=40, classifier_epochs=1),
                          fedcvae_tiny["context"]())
    assert res.model is not None


def test_a_large_grid_inspects_each_notebook_once(tmp_path, monkeypatch, capsys):
    import papermill

    from ofl_core.batch import tasks

    calls: list[str] = []
    real = papermill.inspect_notebook

    def counting(path, *a, **k):
        calls.append(path)
        return real(path, *a, **k)

    monkeypatch.setattr(papermill, "inspect_notebook", counting)
    tasks._inspect.cache_clear()
    grid = tmp_path / "g.yaml"
    grid.write_text("partitions:\n  - grid: {alphas: [" + ", ".join(
        f"[{0.001 * (i + 1):.3f}]" for i in range(300)) + "]}\n")
    assert run_all.main(["--grid", str(grid), "--dry-run", "--out", str(tmp_path)]) == 0
    assert "# 300 tasks" in capsys.readouterr().out
    assert len(calls) == 1


def test_a_relative_cache_dir_is_resolved_against_the_callers_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OFL_CACHE_DIR", "rel/cache")
    monkeypatch.setenv("OFL_DATA_ROOT", "~/data")
    monkeypatch.setattr(run_all, "run_grid", lambda *a, **k: [])
    monkeypatch.setattr(run_all, "build_report", lambda *a, **k: tmp_path / "index.html")
    run_all.main(["--quick", "--only", "partitions", "--out", str(tmp_path / "o")])
    import os

    assert os.environ["OFL_CACHE_DIR"] == str(tmp_path / "rel" / "cache")
    assert os.environ["OFL_DATA_ROOT"] == "~/data"  # the user's home: not relative


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_checkpoint_write_killed_midway_leaves_nothing_after_the_next_write(tmp_path):
    import os

    from ofl_core.checkpoint.store import CheckpointFile

    store = CheckpointFile(tmp_path, {"k": 1})
    tmp_path.mkdir(exist_ok=True)
    dead = tmp_path / f".{store.key}.{_dead_pid()}.1.tmp"
    live = tmp_path / f".{store.key}.{os.getppid()}.1.tmp"  # a running process's write
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    assert store.write(1, {"x": torch.ones(2)})
    assert not dead.exists() and live.exists()


def test_a_full_disk_is_named_as_such_not_as_torchs_unexpected_pos(tmp_path, monkeypatch):
    import builtins
    import errno

    from ofl_core.checkpoint.store import CheckpointFile
    from ofl_core.upload_cache import UploadCache

    real_open = builtins.open

    class FullFile:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        return FullFile(f) if "w" in mode and str(path).endswith(".tmp") else f

    monkeypatch.setattr(builtins, "open", full_open)
    with pytest.warns(UserWarning, match="No space left on device"):
        assert not CheckpointFile(tmp_path / "s", {"k": 1}).write(1, {"x": torch.ones(2)})
    with pytest.warns(UserWarning, match="No space left on device"):
        assert UploadCache(tmp_path / "c").put({"k": 1}, {"x": torch.ones(2)}) is None
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.parametrize("notebook_text, sidecar_version, expect", [
    ('{"cells": []}', "CURRENT", "skipped"),
    ('{"cells": []}', "ofl_core 0.0.9, git 0123456789ab", "skipped stale"),
    ('{"cells": []}', None, "skipped stale"),
    ("{not json", "CURRENT", "rerun"),
    ('{"no": "cells"}', "CURRENT", "rerun"),
])
def test_a_rerun_says_which_runs_are_stale_and_redoes_unreadable_ones(
        tmp_path, monkeypatch, capsys, notebook_text, sidecar_version, expect):
    import json

    from ofl_core.batch.config import ExecutorConfig
    from ofl_core.batch.execute import code_version
    from ofl_core.batch.grid import run_grid
    from ofl_core.batch.tasks import NOTEBOOK_DIR, Task, task_paths

    t = Task("partitions", {"alphas": [0.1]})
    nb, js = task_paths(tmp_path, t, t.run_id(NOTEBOOK_DIR))
    nb.parent.mkdir(parents=True)
    nb.write_text(notebook_text)
    side = {"status": "done"}
    if sidecar_version is not None:
        side["code_version"] = code_version() if sidecar_version == "CURRENT" \
            else sidecar_version
    js.write_text(json.dumps(side))
    ran = []

    def fake(spec):
        ran.append(spec.run_id)
        return TaskResult(spec.task, spec.run_id, "done", 0.1)

    monkeypatch.setattr(grid, "run_task_spec", fake)
    res = run_grid([t], tmp_path, ExecutorConfig(), log=True)
    out = capsys.readouterr().out
    if expect == "rerun":
        assert ran and res[0].status == "done"
    else:
        assert not ran and res[0].status == "skipped"
        assert ("stale" in out) == (expect == "skipped stale"), out


@pytest.mark.parametrize("aggregation, moved", [("mean", True), ("median", False),
                                                ("trimmed_mean", False)])
def test_robust_fedavg_is_not_decided_by_one_scaled_client(aggregation, moved):
    import dataclasses

    from ofl_core.methods.fedavg import FedAvgConfig, run
    from ofl_core.models import build_model
    from ofl_core.server import ServerContext

    torch.manual_seed(0)
    base = build_model("cnn_mnist", 10, 1, 28).state_dict()
    ups = []
    for k in range(5):
        sd = {n: (v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v.clone())
              for n, v in base.items()}
        if k == 4:  # one client scales its head ×10⁴: under the magnitude limit
            last = [n for n in sd if n.endswith("weight")][-1]
            sd[last] = sd[last] * 1e4
        ups.append(dataclasses.replace(_classifier_upload(), client_id=k, state_dict=sd))
    cfg = FedAvgConfig(aggregation=aggregation, trim_fraction=0.2)
    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=0)
    got = run(ups, cfg, ctx).model.state_dict()
    last = [n for n in base if n.endswith("weight")][-1]
    far = float((got[last] - base[last]).abs().max()) > 1.0
    assert far == moved


def test_robust_aggregation_is_off_by_default_flagged_when_on_and_keeps_old_hashes():
    from ofl_core.experiment import ExperimentConfig, config_hash, robust_label
    from ofl_core.methods.fedavg import FedAvgConfig

    cfg = ExperimentConfig()
    assert FedAvgConfig().aggregation == "mean" and robust_label(FedAvgConfig()) == ""
    old = __import__("hashlib").sha256(__import__("json").dumps(
        {"exp": cfg.hash(), "method": {"weighted": True, "preset": "paper"}},
        sort_keys=True).encode()).hexdigest()[:12]
    assert config_hash(cfg, FedAvgConfig()) == old
    on = FedAvgConfig(aggregation="trimmed_mean", trim_fraction=0.2)
    assert robust_label(on) == "trimmed_mean(0.2)" and config_hash(cfg, on) != old
    with pytest.raises(ValueError, match="trim_fraction"):
        FedAvgConfig(aggregation="trimmed_mean", trim_fraction=0.5)


@pytest.mark.parametrize("normalize, winner", [(False, 1), (True, 0)])
def test_logit_normalisation_keeps_one_scaled_client_from_deciding_the_ensemble(normalize,
                                                                                   winner):
    from ofl_core.combine import Ensemble

    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.register_buffer("logits", torch.tensor(logits))

        def forward(self, x):
            return self.logits.expand(len(x), -1)

    honest = [Fixed([1.0, 0.0, 0.0]) for _ in range(4)]
    scaled = Fixed([0.0, 1e4, 0.0])  # one client's head × 10⁴
    ens = Ensemble([*honest, scaled], normalize_logits=normalize)
    assert int(ens(torch.zeros(2, 1)).argmax(1)[0]) == winner


def test_ensemble_logit_normalisation_is_off_by_default_and_flagged_when_on():
    from ofl_core.experiment import ExperimentConfig, config_hash, robust_label
    from ofl_core.methods.ensemble import EnsembleConfig

    cfg = ExperimentConfig()
    old = __import__("hashlib").sha256(__import__("json").dumps(
        {"exp": cfg.hash(), "method": {"preset": "paper"}}, sort_keys=True).encode()
    ).hexdigest()[:12]
    assert config_hash(cfg, EnsembleConfig()) == old and robust_label(EnsembleConfig()) == ""
    assert robust_label(EnsembleConfig(normalize_logits=True)) == "normalized_logits"
