"""Bad values at every config boundary (docs/decisions/reliability.md#reliability-validation): each
is a ``ValueError`` at construction that names the class, the field, what it must be and what it
got."""

from __future__ import annotations

import dataclasses
import math
import os
import re

import pytest
import torch

from ofl_core.registry import METHODS, method_config

INF, NAN = math.inf, math.nan


def _cfg(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


BAD_CONFIGS = [
    # (config class, field, bad value, what the message must say)
    ("ofl_core.experiment.ExperimentConfig", "num_clients", "5",
     r"ExperimentConfig\.num_clients must be an int ≥ 1, got '5' \(str\)"),
    ("ofl_core.experiment.ExperimentConfig", "num_clients", True, r"num_clients .*got True"),
    ("ofl_core.experiment.ExperimentConfig", "num_clients", 2.0, r"num_clients .*got 2\.0"),
    ("ofl_core.experiment.ExperimentConfig", "seed", "1", r"ExperimentConfig\.seed must be an int"),
    ("ofl_core.experiment.ExperimentConfig", "alpha", NAN, r"ExperimentConfig\.alpha .*finite"),
    ("ofl_core.experiment.ExperimentConfig", "alpha", "0.1", r"ExperimentConfig\.alpha"),
    ("ofl_core.experiment.ExperimentConfig", "subset", 0.0,
     r"ExperimentConfig\.subset must be a finite float in \(0, 1\]"),
    ("ofl_core.experiment.ExperimentConfig", "device", "gpu",
     r"ExperimentConfig\.device must be one of cpu, cuda, cuda:N, mps or auto, got 'gpu'"),
    ("ofl_core.experiment.ExperimentConfig", "workers", "many",
     r"ExperimentConfig\.workers must be an int ≥ 1 or 'auto'"),
    ("ofl_core.experiment.ExperimentConfig", "workers", 0, r"ExperimentConfig\.workers"),
    ("ofl_core.experiment.ExperimentConfig", "local", {"epochs": 1},
     r"ExperimentConfig\.local must be a LocalTrainConfig"),
    ("ofl_core.experiment.ExperimentConfig", "progress", "no",
     r"ExperimentConfig\.progress must be a bool"),
    ("ofl_core.experiment.ExperimentConfig", "cache_dir", 3, r"ExperimentConfig\.cache_dir"),
    ("ofl_core.clients.LocalTrainConfig", "lr", INF,
     r"LocalTrainConfig\.lr must be a finite float > 0, got inf"),
    ("ofl_core.clients.LocalTrainConfig", "lr", -0.1, r"LocalTrainConfig\.lr .*> 0, got -0\.1"),
    ("ofl_core.clients.LocalTrainConfig", "lr", "0.01", r"LocalTrainConfig\.lr .*got '0\.01'"),
    ("ofl_core.clients.LocalTrainConfig", "momentum", NAN, r"LocalTrainConfig\.momentum"),
    ("ofl_core.clients.LocalTrainConfig", "epochs", "5",
     r"LocalTrainConfig\.epochs must be an int ≥ 0, got '5' \(str\)"),
    ("ofl_core.clients.LocalTrainConfig", "batch_size", 0, r"LocalTrainConfig\.batch_size"),
    ("ofl_core.clients.LocalTrainConfig", "model_kwargs", {"conv_relu": True},
     r"LocalTrainConfig\.model_kwargs must be a tuple of \(a str, any value\) pairs"),
    ("ofl_core.distill.config.GeneratorConfig", "g_betas", (0.5, 1.0),
     r"GeneratorConfig\.g_betas must be a tuple of 2 finite floats in \[0, 1\)"),
    ("ofl_core.dense.server.DenseConfig", "batched_teachers", "yes",
     r"DenseConfig\.batched_teachers must be a bool or 'auto'"),
    ("ofl_core.dense.server.DenseConfig", "adv_weight", INF, r"DenseConfig\.adv_weight"),
    ("ofl_core.methods.dafl.FedDAFLConfig", "ie_weight", -1.0,
     r"FedDAFLConfig\.ie_weight must be a finite float ≥ 0"),
    ("ofl_core.methods.adi.FedADIConfig", "tv_weight", NAN, r"FedADIConfig\.tv_weight"),
    ("ofl_core.fedhydra.server.FedHydraConfig", "strat_group", "2",
     r"FedHydraConfig\.strat_group must be an int ≥ 1 or 'auto'"),
    ("ofl_core.methods.fedavg.FedAvgConfig", "weighted", "yes",
     r"FedAvgConfig\.weighted must be a bool"),
    ("ofl_core.methods.fedoneshot.FedOneShotConfig", "combine", "max",
     r"FedOneShotConfig\.combine must be one of \('mean_softmax', 'vote', 'mean_logits'\)"),
    ("ofl_core.methods.ot_fusion.OTFusionConfig", "anchor", 1.5,
     r"OTFusionConfig\.anchor must be an int ≥ 0 or 'largest'"),
    ("ofl_core.fedcvae.clients.CVAETrainConfig", "prior_mean", (0.0, NAN),
     r"CVAETrainConfig\.prior_mean must be a tuple of finite floats or None"),
    ("ofl_core.fedcvae.clients.CVAETrainConfig", "latent_dim", "10",
     r"CVAETrainConfig\.latent_dim must be an int ≥ 1"),
    ("ofl_core.fedcvae.clients.CVAETrainConfig", "label_noise_seed", 1.0,
     r"CVAETrainConfig\.label_noise_seed must be an int or None"),
    ("ofl_core.fedcvae.server.FedCVAEEnsConfig", "trunc_width", INF,
     r"FedCVAEEnsConfig\.trunc_width must be a finite float > 0 or None"),
    ("ofl_core.fedcvae.server.FedCVAEKDConfig", "kd_epochs", "7",
     r"FedCVAEKDConfig\.kd_epochs must be an int ≥ 0 or None, got '7'"),
    ("ofl_core.fedcvae.security.FedCVAESecurityConfig", "bounds", (1.0, -10.0),
     r"FedCVAESecurityConfig\.bounds must be a tuple of finite floats > 0"),
    ("ofl_core.batch.config.ExecutorConfig", "jobs", "4",
     r"ExecutorConfig\.jobs must be an int ≥ 1, got '4' \(str\)"),
    ("ofl_core.batch.config.ExecutorConfig", "task_timeout", NAN,
     r"ExecutorConfig\.task_timeout must be a finite float > 0 or None"),
]


@pytest.mark.parametrize("cls, field, value, message", BAD_CONFIGS,
                         ids=[f"{c.rsplit('.', 1)[1]}.{f}={v!r}" for c, f, v, _ in BAD_CONFIGS])
def test_a_bad_config_value_is_refused_at_construction_naming_the_field(cls, field, value,
                                                                        message):
    with pytest.raises(ValueError, match=message):
        _cfg(cls)(**{field: value})


def test_fedcvae_hparams_are_checked_too():
    from ofl_core.fedcvae.hparams import FEDCVAE_HPARAMS, FedCVAEHParams

    good = dataclasses.asdict(FEDCVAE_HPARAMS["mnist"])
    with pytest.raises(ValueError, match=r"FedCVAEHParams\.kd_trunc_width must be a finite "
                                         r"float > 0, got -1\.0"):
        FedCVAEHParams(**{**good, "kd_trunc_width": -1.0})


SERVER_EPOCHS = [(name, f) for name in sorted(METHODS) for f in ("epochs", "classifier_epochs")
                 if f in {x.name for x in dataclasses.fields(METHODS[name].config)}]


@pytest.mark.parametrize("name, field", SERVER_EPOCHS)
@pytest.mark.parametrize("value", ["5", 5.0, -1, True])
def test_server_epochs_of_every_method_must_be_an_int(name, field, value):
    cls = METHODS[name].config.__name__
    with pytest.raises(ValueError, match=re.escape(f"{cls}.{field} must be an int ≥ 0")
                       + f".*got {re.escape(repr(value))}"):
        method_config(name, **{field: value})


def _fields(name: str) -> set[str]:
    return {f.name for f in dataclasses.fields(METHODS[name].config)}


BAD_SERVER_VALUES = [(name, field, value) for name in sorted(METHODS)
                     for field, value in [("kd_lr", INF), ("kd_lr", NAN), ("kd_lr", -1e-3),
                                          ("g_lr", INF), ("classifier_lr", NAN), ("preset", 1)]
                     if field in _fields(name)]


@pytest.mark.parametrize("name, field, value", BAD_SERVER_VALUES)
def test_server_learning_rates_must_be_finite_and_positive_and_presets_str(name, field, value):
    cls = METHODS[name].config.__name__
    with pytest.raises(ValueError, match=re.escape(f"{cls}.{field} must be a ")
                       + f".*, got {re.escape(repr(value))} \\({type(value).__name__}\\)"):
        METHODS[name].config(**{field: value})


def test_every_default_config_and_preset_still_builds():
    from ofl_core.batch.config import ExecutorConfig
    from ofl_core.experiment import ExperimentConfig
    from ofl_core.fedcvae.clients import CVAETrainConfig
    from ofl_core.fedcvae.security import FedCVAESecurityConfig

    for name in METHODS:
        for preset in ("paper", "authors_code"):
            method_config(name, preset)
    for make in (ExperimentConfig, CVAETrainConfig, FedCVAESecurityConfig, ExecutorConfig):
        make()
    # what callers pass that is not the annotated type but means the same stays accepted
    import numpy as np

    ExperimentConfig(num_clients=np.int64(3), alpha=1, subset=np.float32(0.5), cache_dir=None,
                     archs=["cnn_mnist"] * 3, workers=2, device="cuda:0")
    ExecutorConfig(walltime=60, memory=8, job_directives=("--qos=x",))


# ------------------------------------------------------------------ partitions: no empty client


@pytest.mark.parametrize("labels, kw, message", [
    (list(range(40)), dict(num_clients=30, scheme="dirichlet_fedcvae", alpha=0.5, seed=3),
     r"client 4 \(and 5 more\) of 30 gets 0 samples \(scheme='dirichlet_fedcvae', alpha=0\.5, "
     r"seed=3, subset=1\.0\).*larger alpha, fewer clients.*another seed"),
    ([0, 0, 1, 1], dict(num_clients=2, scheme="classes_per_client", seed=0),
     r"client 1 of 2 gets 0 samples \(scheme='classes_per_client', seed=0.*fewer clients"),
])
def test_a_partition_that_leaves_a_client_empty_is_refused(labels, kw, message):
    import numpy as np

    from ofl_core.data.partition import make_partition

    y = np.asarray(labels) % 4
    with pytest.raises(ValueError, match=message):
        make_partition(y, kw.pop("num_clients"), kw.pop("scheme"), num_classes=4, **kw)


def test_an_empty_client_never_reaches_training(tiny_dataset, monkeypatch):
    import numpy as np

    from ofl_core import client_training
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import Partition

    part = Partition(client_indices=(np.arange(10), np.arange(0)),
                     counts=np.array([[10, 0, 0, 0], [0, 0, 0, 0]]), scheme="iid", seed=0)
    monkeypatch.setattr(client_training, "train_local", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match="client 1 of 2 gets 0 samples"):
        client_training.train_clients(tiny_dataset, part, LocalTrainConfig(epochs=1), seed=0,
                                      workers=1, progress=False)


# ------------------------------------------------------------------ FedCVAE decoder uploads


@pytest.mark.parametrize("counts, message", [
    ((1e308, 10, 10, 10), r"label_counts\[0\] must be an integer ≥ 0 and ≤ 1e\+12 .*got 1e\+308 "
                          r"\(float\)"),
    ((10, 10**13, 10, 10), r"label_counts\[1\] must be an integer.*got 10000000000000 \(int\)"),
    ((10, 10, -1, 10), r"label_counts\[2\] must be an integer ≥ 0.*got -1 \(int\)"),
    ((10, 10, 10, 2.5), r"label_counts\[3\] .*got 2\.5 \(float\)"),
    ((NAN, 10, 10, 10), r"label_counts\[0\] .*got nan \(float\)"),
    ((True, 10, 10, 10), r"label_counts\[0\] .*got True \(bool\)"),
    (("10", 10, 10, 10), r"label_counts\[0\] .*got '10' \(str\)"),
    ((10, 10, 10), r"label_counts must give one count per class \(4\), got \(10, 10, 10\)"),
    ("1234", r"label_counts must give one count per class \(4\), got '1234'"),
    (None, r"label_counts must give one count per class \(4\), got None"),
])
def test_fedcvae_label_counts_are_integer_counts(counts, message):
    from ofl_core.models.cvae import build_decoder
    from ofl_core.uploads import ClientUpload, UploadError, validate_upload

    up = ClientUpload(client_id=3, arch="cvae", num_classes=4, in_channels=1, image_size=32,
                      state_dict=build_decoder("cvae", 4, 1, 32, 2).state_dict(),
                      num_samples=40, model_kwargs={"latent_dim": 2}, label_counts=counts,
                      kind="decoder")
    with pytest.raises(UploadError, match=f"client 3: {message}"):
        validate_upload(up, "decoder")
    validate_upload(dataclasses.replace(up, label_counts=(10, 0, 20, 10)), "decoder")


# ------------------------------------------------------------------ the client cache


@pytest.mark.parametrize("how", ["env", "cache_dir", "under a file"])
def test_a_cache_folder_that_is_a_file_is_a_clear_error(tmp_path, monkeypatch, how):
    from ofl_core.upload_cache import UploadCache

    f = tmp_path / "cache.txt"
    f.write_text("not a folder")
    if how == "env":
        monkeypatch.setenv("OFL_CACHE_DIR", str(f))
        with pytest.raises(ValueError, match=f"{re.escape(str(f))} \\(from \\$OFL_CACHE_DIR\\) "
                                             "is a file, not a folder"):
            UploadCache()
    elif how == "cache_dir":
        with pytest.raises(ValueError, match=f"{re.escape(str(f))} \\(from cache_dir\\) is a "
                                             "file"):
            UploadCache(f)
    else:
        with pytest.raises(ValueError, match=f"is under {re.escape(str(f))}, which is a file"):
            UploadCache(f / "clients")


def _train(dataset, cache, **kw):
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import make_partition

    part = make_partition(dataset.y_train.numpy(), 2, "iid", seed=0)
    return train_clients(dataset, part, LocalTrainConfig(epochs=1), seed=0, cache=cache,
                         workers=1, progress=False, **kw)


def test_a_read_only_cache_that_holds_every_entry_just_works(tmp_path, monkeypatch,
                                                            tiny_dataset):
    import errno
    import warnings

    from ofl_core import client_training, upload_cache
    from ofl_core.upload_cache import UploadCache

    first = _train(tiny_dataset, UploadCache(tmp_path))
    for p in tmp_path.glob("*.lock"):
        p.unlink()

    def read_only(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    # what a read-only folder refuses: creating a lock file, writing, removing
    monkeypatch.setattr(upload_cache.FileLock, "acquire", read_only)
    monkeypatch.setattr(upload_cache.torch, "save", read_only)
    monkeypatch.setattr(client_training, "train_local", lambda *a, **k: pytest.fail("trained"))
    cache = UploadCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = _train(tiny_dataset, cache)
    assert cache.hits == 2 and all(
        torch.equal(a.state_dict[k], b.state_dict[k]) for a, b in zip(first, again, strict=True)
        for k in a.state_dict)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes through read-only permissions")
def test_a_chmod_read_only_cache_folder_is_read_without_locks(tmp_path, tiny_dataset):
    import warnings

    from ofl_core.upload_cache import UploadCache

    _train(tiny_dataset, UploadCache(tmp_path / "c"))
    for p in (tmp_path / "c").glob("*.lock"):
        p.unlink()
    (tmp_path / "c").chmod(0o555)
    try:
        cache = UploadCache(tmp_path / "c")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _train(tiny_dataset, cache)
        assert cache.hits == 2
    finally:
        (tmp_path / "c").chmod(0o755)


def test_a_cache_entry_with_missing_or_wrong_tensors_is_corrupt_and_retrained(tmp_path,
                                                                             tiny_dataset):
    from ofl_core.upload_cache import UploadCache

    cache = UploadCache(tmp_path)
    _train(tiny_dataset, cache)
    a, b = sorted(tmp_path.glob("*.pt"))
    for path, change in ((a, lambda s: s.pop("fc.bias")),
                         (b, lambda s: s.update({"fc.weight": torch.zeros(2, 2)}))):
        obj = torch.load(path, weights_only=True)
        change(obj["state"])
        torch.save(obj, path)
    cache = UploadCache(tmp_path)
    with pytest.warns(UserWarning, match=r"cache entry .*\.pt is not a valid client \(client "
                                         r"\d: .*(missing \['fc\.bias'\]|has shape \(2, 2\))"
                                         r".*\): removed, the client is trained again"):
        ups = _train(tiny_dataset, cache)
    assert cache.misses == 2 and cache.hits == 0 and len(ups) == 2
    fresh = UploadCache(tmp_path)
    _train(tiny_dataset, fresh)
    assert fresh.hits == 2  # the retrained clients were stored again


# ------------------------------------------------------------------ dataset files


def _idx(n: int, images: bool) -> bytes:
    import struct

    import numpy as np

    if not images:
        return struct.pack(">II", 2049, n) + (np.arange(n) % 10).astype(np.uint8).tobytes()
    pixels = np.random.RandomState(0).randint(0, 256, n * 784).astype(np.uint8).tobytes()
    return struct.pack(">IIII", 2051, n, 28, 28) + pixels


FMNIST_FILES = {"train-images-idx3-ubyte": (20, True), "train-labels-idx1-ubyte": (20, False),
                "t10k-images-idx3-ubyte": (10, True), "t10k-labels-idx1-ubyte": (10, False)}


@pytest.mark.parametrize("where, damage, message", [
    ("raw", lambda b: b[:5000], r"FashionMNIST/raw/train-images-idx3-ubyte is truncated or "
                                r"corrupt \(5000 bytes, its header says 15696\): delete it and "
                                r"fetch it again"),
    ("raw", lambda b: b"<html>404</html>", r"train-images-idx3-ubyte is truncated or corrupt "
                                           r"\(not an idx file \(bad header\)\)"),
    ("gz", lambda b: __import__("gzip").compress(b)[:3000],
     r"train-images-idx3-ubyte\.gz is truncated or corrupt \(Compressed file ended"),
    ("gz", lambda b: __import__("gzip").compress(b[:-10]),
     r"train-images-idx3-ubyte\.gz is truncated or corrupt \(15686 bytes, its header says "
     r"15696\)"),
])
def test_a_truncated_idx_or_gz_file_names_the_file_and_leaves_nothing(tmp_path, monkeypatch,
                                                                      where, damage, message):
    import gzip

    from ofl_core.data import datasets as D
    from ofl_core.data.idx import DatasetFileError

    monkeypatch.setattr(D, "SYSTEM_DIRS", {"fmnist": (), "mnist": ()})
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for stem, (n, images) in FMNIST_FILES.items():
        blob = _idx(n, images)
        if where == "raw":
            (raw / stem).write_bytes(damage(blob) if stem.startswith("train-images") else blob)
        else:
            (tmp_path / f"{stem}.gz").write_bytes(
                damage(blob) if stem.startswith("train-images") else gzip.compress(blob))
    with pytest.raises(DatasetFileError, match=message):
        D.load_dataset("fmnist", tmp_path)
    assert not [p.name for p in raw.iterdir() if ".tmp" in p.name]
    if where == "gz":
        assert not (raw / "train-images-idx3-ubyte").exists()


def _tiny_imagenet(root):
    from PIL import Image

    base = root / "tiny-imagenet-200"
    for w in ("n01", "n02"):
        (base / "train" / w / "images").mkdir(parents=True)
        Image.new("RGB", (64, 64)).save(base / "train" / w / "images" / f"{w}_0.JPEG")
    (base / "val" / "images").mkdir(parents=True)
    Image.new("RGB", (64, 64)).save(base / "val" / "images" / "val_0.JPEG")
    (base / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn02\t0\t0\t64\t64\n")


@pytest.mark.parametrize("content", [b"PK\x03\x04 cut short", "missing keys"])
def test_a_corrupt_tinyimagenet_cache_is_rebuilt_or_named(tmp_path, content):
    from ofl_core.data.datasets import load_dataset
    from ofl_core.data.idx import DatasetFileError

    cache = tmp_path / "tinyimagenet_uint8.pt"
    if isinstance(content, bytes):
        cache.write_bytes(content)
    else:
        torch.save({"x_train": torch.zeros(1, 3, 64, 64, dtype=torch.uint8)}, cache)
    with pytest.raises(DatasetFileError, match=f"dataset cache {re.escape(str(cache))} is "
                                               "corrupt .*delete it and put tiny-imagenet-200/"):
        load_dataset("tinyimagenet", tmp_path)
    _tiny_imagenet(tmp_path)
    with pytest.warns(UserWarning, match="tinyimagenet_uint8.pt is corrupt.*rebuilt"):
        ds = load_dataset("tinyimagenet", tmp_path)
    assert len(ds.y_train) == 2 and ds.classes == ("n01", "n02")
    assert not list(tmp_path.glob("*.tmp*"))


# ------------------------------------------------------- run_all.py: --out, --cluster-config


def _run_all(argv, monkeypatch, capsys):
    import run_all

    monkeypatch.setattr(run_all, "run_grid", lambda *a, **k: pytest.fail("a task ran"))
    rc = run_all.main(["--quick", "--only", "partitions", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_out_that_is_a_file_is_one_error_line(tmp_path, monkeypatch, capsys):
    f = tmp_path / "out.txt"
    f.write_text("")
    err = _run_all(["--out", str(f)], monkeypatch, capsys)
    assert f"--out {f} is a file, not a folder" in err
    err = _run_all(["--out", str(f / "sub")], monkeypatch, capsys)
    assert f"--out {f / 'sub'}: cannot write there" in err


def test_out_that_cannot_be_written_is_one_error_line(tmp_path, monkeypatch, capsys):
    import errno

    import run_all

    def read_only(*a, **k):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(run_all.tempfile, "TemporaryFile", read_only)
    err = _run_all(["--out", str(tmp_path)], monkeypatch, capsys)
    assert f"--out {tmp_path}: cannot write there (Read-only file system)" in err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes through read-only permissions")
def test_out_in_a_chmod_read_only_folder_is_one_error_line(tmp_path, monkeypatch, capsys):
    tmp_path.chmod(0o555)
    try:
        err = _run_all(["--out", str(tmp_path)], monkeypatch, capsys)
    finally:
        tmp_path.chmod(0o755)
    assert "cannot write there (Permission denied)" in err


@pytest.mark.parametrize("text, message", [
    (None, r"--cluster-config: executor config file .*cluster\.yaml not found"),
    ("jobs: [1, 2", r"--cluster-config .*cluster\.yaml: not valid YAML"),
    ("jobs: four", r"ExecutorConfig\.jobs must be an int ≥ 1, got 'four' \(str\)"),
])
def test_a_bad_cluster_config_file_is_one_error_line(tmp_path, monkeypatch, capsys, text,
                                                     message):
    path = tmp_path / "cluster.yaml"
    if text is not None:
        path.write_text(text)
    err = _run_all(["--out", str(tmp_path / "out"), "--cluster-config", str(path)],
                   monkeypatch, capsys)
    assert re.search(message, err), err
