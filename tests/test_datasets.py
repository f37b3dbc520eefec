"""Dataset registry: the embedded subset, offline discovery, and clear errors."""

from __future__ import annotations

import gzip
import struct
import sys

import numpy as np
import pytest
import torch

from ofl_core.data import datasets as D


def test_embedded_fmnist_is_stratified_uint8():
    ds = D.load_dataset("fmnist_embedded")
    assert ds.x_train.dtype == torch.uint8 and ds.x_train.shape == (10000, 1, 28, 28)
    assert ds.x_test.shape == (2000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist() == [1000] * 10
    assert torch.bincount(ds.y_test).tolist() == [200] * 10
    assert ds.paper_dataset == "fmnist" and ds.num_classes == 10
    assert ds.fingerprint() == D.load_dataset("embedded").fingerprint()


def test_resize_to_32_keeps_uint8_and_labels():
    ds = D.load_dataset("fmnist_embedded", resize=32)
    assert ds.x_train.shape[-2:] == (32, 32) and ds.x_train.dtype == torch.uint8
    assert ds.paper_dataset == "fmnist"


def test_unknown_dataset_names_the_choices():
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'.*cifar10"):
        D.load_dataset("imagenet")


@pytest.mark.parametrize("name,hint", [
    ("fmnist", "dataset-fashion-mnist"),
    ("mnist", "MNIST/raw"),
    ("cifar10", "cifar-10-python.tar.gz"),
    ("cifar100", "cifar-100-python"),
    ("svhn", "train_32x32.mat"),
    ("tinyimagenet", "tiny-imagenet-200"),
])
def test_missing_dataset_says_how_to_get_it(tmp_path, monkeypatch, name, hint):
    monkeypatch.setattr(D, "SYSTEM_DIRS", {"fmnist": (), "mnist": ()})
    with pytest.raises(D.DatasetNotFoundError, match=hint) as e:
        D.load_dataset(name, tmp_path)
    assert "OFL_DATA_ROOT" in str(e.value) and str(tmp_path) in str(e.value)


def _idx_images(n: int) -> bytes:
    rng = np.random.RandomState(0)
    return struct.pack(">IIII", 2051, n, 28, 28) + rng.randint(0, 256, n * 784).astype(
        np.uint8).tobytes()


def _idx_labels(n: int) -> bytes:
    return struct.pack(">II", 2049, n) + (np.arange(n) % 10).astype(np.uint8).tobytes()


def _idx_files(train: int, test: int) -> dict[str, bytes]:
    """The four MNIST-format files of a tiny dataset, by file stem."""
    return {"train-images-idx3-ubyte": _idx_images(train),
            "train-labels-idx1-ubyte": _idx_labels(train),
            "t10k-images-idx3-ubyte": _idx_images(test),
            "t10k-labels-idx1-ubyte": _idx_labels(test)}


def test_gz_files_in_a_system_folder_are_unpacked_into_torchvision_layout(tmp_path, monkeypatch):
    sysdir = tmp_path / "usr-share" / "fashion-mnist"
    sysdir.mkdir(parents=True)
    for stem, blob in _idx_files(train=20, test=10).items():
        with gzip.open(sysdir / f"{stem}.gz", "wb") as f:
            f.write(blob)
    monkeypatch.setattr(D, "SYSTEM_DIRS", {"fmnist": (str(sysdir),), "mnist": ()})
    root = tmp_path / "root"
    ds = D.load_dataset("fmnist", root)
    assert ds.x_train.shape == (20, 1, 28, 28) and ds.x_test.shape == (10, 1, 28, 28)
    assert ds.y_train.tolist() == [i % 10 for i in range(20)]
    assert (root / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").is_file()
    assert not list((root / "FashionMNIST" / "raw").glob("*.tmp*"))


def test_without_torchvision_the_idx_files_are_read_directly(tmp_path, monkeypatch):
    """A Python with torch alone (a GPU image) reads the MNIST-format files itself: the same
    tensors as through torchvision."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for stem, blob in _idx_files(train=20, test=10).items():
        (raw / stem).write_bytes(blob)
    monkeypatch.setattr(D, "SYSTEM_DIRS", {"fmnist": (), "mnist": ()})
    ref = D.load_dataset("fmnist", tmp_path)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import torchvision fails
    got = D.load_dataset("fmnist", tmp_path)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        a, b = getattr(got, name), getattr(ref, name)
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert got.classes == ref.classes and got.num_classes == 10
    with pytest.raises(D.DatasetNotFoundError, match="torchvision"):
        D.load_dataset("mnist", tmp_path)


def test_data_root_comes_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OFL_DATA_ROOT", str(tmp_path))
    assert D.default_data_root() == tmp_path
    assert D.default_data_root("/x") == D.Path("/x")
