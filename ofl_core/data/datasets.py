"""Dataset registry: every image dataset as uint8 tensors, found offline when the files exist.

SPEC §1. Images are kept as ``uint8`` tensors of shape (N, C, H, W) and converted to float in
[0, 1] per batch, with no mean/std normalisation here (DENSE's code feeds [0, 1] pixels too). A
model that needs normalised inputs applies it itself: ``input_norm`` of
:func:`~ofl_core.models.build_model` (``"half"`` = (x − 0.5)/0.5, which Co-Boosting's code
applies to every dataset; ``"mnist"``/``"fmnist"`` = the dataset's mean/std, which IntactOFL's
code applies, 0.1307/0.3081 and 0.2860/0.3530; :class:`~ofl_core.clients.LocalTrainConfig` and
the two methods' ``authors_code`` presets set it). Datasets are loaded through torchvision from
a data root; the root is, in order: the ``data_root`` argument, the ``OFL_DATA_ROOT``
environment variable, ``~/.cache/ofl/data``. MNIST and FashionMNIST are also discovered in
system folders (the Debian ``dataset-fashion-mnist`` package puts the four ``*-ubyte.gz`` files
in /usr/share/datasets/fashion-mnist) and unpacked into torchvision's layout.

``fmnist_embedded`` is a stratified FashionMNIST subset shipped inside the package (made by
``scripts/make_embedded_fmnist.py``); quick runs and tests use it, so they need no network.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import platformdirs
import torch
import torch.nn.functional as F

from .idx import DatasetFileError, check_idx_file, read_uint8_idx, unpack_idx

FMNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
MNIST_CLASSES = tuple(str(i) for i in range(10))
#: Dataset name -> (channels, native image size, number of classes).
DATASET_INFO: dict[str, tuple[int, int, int]] = {
    "mnist": (1, 28, 10),
    "fmnist": (1, 28, 10),
    "fmnist_embedded": (1, 28, 10),
    "svhn": (3, 32, 10),
    "cifar10": (3, 32, 10),
    "cifar100": (3, 32, 100),
    "tinyimagenet": (3, 64, 200),
}
DATASET_NAMES = tuple(DATASET_INFO)

#: Folders searched for the MNIST-format ``*-ubyte.gz`` files besides the data root.
SYSTEM_DIRS: dict[str, tuple[str, ...]] = {
    "fmnist": ("/usr/share/datasets/fashion-mnist", "/usr/share/fashion-mnist"),
    "mnist": ("/usr/share/datasets/mnist", "/usr/share/mnist"),
}
MNIST_FILES = (
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
)

HOW_TO_GET = {
    "fmnist": "install the Debian package (sudo apt-get install dataset-fashion-mnist), or put the "
    "four FashionMNIST *-ubyte.gz files in {root}/FashionMNIST/raw/, or pass download=True on a "
    "machine with internet",
    "mnist": "put the four MNIST *-ubyte.gz files in {root}/MNIST/raw/, or pass download=True on a "
    "machine with internet",
    "svhn": "put train_32x32.mat and test_32x32.mat in {root}/, or pass download=True",
    "cifar10": "unpack cifar-10-python.tar.gz into {root}/ (giving cifar-10-batches-py/), "
    "or pass download=True",
    "cifar100": "unpack cifar-100-python.tar.gz into {root}/ (giving cifar-100-python/), "
    "or pass download=True",
    "tinyimagenet": "download http://cs231n.stanford.edu/tiny-imagenet-200.zip and unzip it into "
    "{root}/ (giving tiny-imagenet-200/train and tiny-imagenet-200/val)",
}


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not on this machine; the message says how to get them."""


@dataclass(frozen=True, eq=False)
class ImageDataset:
    """Train and test images as uint8 (N, C, H, W) tensors with int64 labels."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    classes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        """Images and labels must agree (a truncated or mismatched file must not load)."""
        for split, x, y in (("training", self.x_train, self.y_train),
                            ("test", self.x_test, self.y_test)):
            if x.dim() != 4 or y.dim() != 1 or len(x) != len(y):
                raise ValueError(
                    f"dataset {self.name!r}: {len(x)} {split} images (shape {tuple(x.shape)}) but "
                    f"{len(y)} labels (shape {tuple(y.shape)}); the files are truncated or do "
                    "not belong together: delete and re-download (or reinstall) them")
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
                raise ValueError(f"dataset {self.name!r}: {split} labels outside 0..."
                                 f"{self.num_classes - 1}; the label file is corrupt")

    @property
    def channels(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        return int(self.x_train.shape[-1])

    @property
    def paper_dataset(self) -> str:
        """The dataset name used in the papers' tables (the embedded subset is FMNIST)."""
        return "fmnist" if self.name.startswith("fmnist") else self.name.split("@")[0]

    def fingerprint(self) -> str:
        """A short hash of the exact training/test content (part of every cache key)."""
        h = hashlib.sha256()
        for t in (self.x_train, self.y_train, self.x_test, self.y_test):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def resized(self, size: int) -> ImageDataset:
        """Bilinear resize of every image (FedCVAE resizes MNIST/FMNIST to 32×32), kept uint8."""
        if size == self.image_size:
            return self
        return ImageDataset(
            name=f"{self.name}@{size}",
            x_train=_resize_uint8(self.x_train, size),
            y_train=self.y_train,
            x_test=_resize_uint8(self.x_test, size),
            y_test=self.y_test,
            num_classes=self.num_classes,
            classes=self.classes,
        )


def _resize_uint8(x: torch.Tensor, size: int, chunk: int = 4096) -> torch.Tensor:
    out = []
    for i in range(0, len(x), chunk):
        xf = x[i : i + chunk].float()
        y = F.interpolate(xf, size=(size, size), mode="bilinear", align_corners=False)
        out.append(y.round().clamp_(0, 255).to(torch.uint8))
    return torch.cat(out) if out else x.new_zeros((0, x.shape[1], size, size))


def default_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $OFL_DATA_ROOT, else ``<user cache dir>/ofl/data``
    (``~/.cache/ofl/data`` on Linux; platformdirs' cache folder elsewhere)."""
    if data_root is not None:
        return Path(data_root).expanduser()
    env = os.environ.get("OFL_DATA_ROOT")
    if env:
        return Path(env).expanduser()
    return platformdirs.user_cache_path("ofl") / "data"


def canonical_dataset(name: str) -> str:
    """The dataset's name in :data:`DATASET_NAMES` (``"FashionMNIST"``, ``"fashion"`` →
    ``"fmnist"``; ``"cifar-10"`` → ``"cifar10"``), or ``ValueError`` naming the known ones."""
    key = name.lower().replace("-", "").replace("_", "")
    aliases = {"fashionmnist": "fmnist", "fashion": "fmnist", "fmnistembedded": "fmnist_embedded",
               "embedded": "fmnist_embedded", "tinyimagenet200": "tinyimagenet"}
    canonical = aliases.get(key, key)
    if canonical not in DATASET_INFO:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASET_NAMES)}")
    return canonical


def load_dataset(
    name: str,
    data_root: str | os.PathLike | None = None,
    *,
    download: bool = False,
    resize: int | None = None,
) -> ImageDataset:
    """Load a dataset by name as uint8 tensors; see the module docstring for where files are found.

    Raises ``ValueError`` for an unknown name and ``DatasetNotFoundError`` (with the way to get
    the files) when they are missing and ``download`` is False or downloading fails.
    """
    canonical = canonical_dataset(name)
    if resize is not None and resize not in (28, 32, 64):
        raise ValueError(f"resize must be 28, 32 or 64 (got {resize})")
    if canonical == "fmnist_embedded":
        ds = load_embedded_fmnist()
    else:
        root = default_data_root(data_root)
        loader = {
            "mnist": _load_mnist_like,
            "fmnist": _load_mnist_like,
            "svhn": _load_svhn,
            "cifar10": _load_cifar,
            "cifar100": _load_cifar,
            "tinyimagenet": _load_tinyimagenet,
        }[canonical]
        ds = loader(canonical, root, download)
    return ds.resized(resize) if resize else ds


def _missing(name: str, root: Path, detail: str = "") -> DatasetNotFoundError:
    how = HOW_TO_GET[name].format(root=root)
    extra = f" ({detail})" if detail else ""
    return DatasetNotFoundError(
        f"dataset {name!r} not found under {root}{extra}. To get it: {how}. "
        f"Set the data root with data_root=... or the OFL_DATA_ROOT environment variable; "
        f"for offline quick runs use the shipped 'fmnist_embedded' dataset."
    )


def discover_mnist_files(name: str, root: Path) -> Path | None:
    """Find the four MNIST-format files for ``name`` and unpack them into torchvision's layout.

    Returns the torchvision ``raw`` folder when all four files are present (after unpacking
    ``.gz`` copies found in the data root or a system folder), else None.
    """
    folder = {"fmnist": "FashionMNIST", "mnist": "MNIST"}[name]
    raw = root / folder / "raw"
    if all((raw / f).is_file() for f in MNIST_FILES):
        for f in MNIST_FILES:
            check_idx_file(raw / f)  # a truncated file names itself, not "not found"
        return raw
    candidates = [raw, root / name, root, *map(Path, SYSTEM_DIRS[name])]
    for cand in candidates:
        if all((cand / f).is_file() or (cand / f"{f}.gz").is_file() for f in MNIST_FILES):
            raw.mkdir(parents=True, exist_ok=True)
            for f in MNIST_FILES:
                if (raw / f).is_file():
                    check_idx_file(raw / f)
                else:
                    unpack_idx(cand / f if (cand / f).is_file() else cand / f"{f}.gz", raw / f)
            return raw
    return None


def _load_mnist_like(name: str, root: Path, download: bool) -> ImageDataset:
    try:
        from torchvision import datasets as tvd
    except ImportError:  # a bare torch (a GPU image): read the idx files, as torchvision does
        raw = discover_mnist_files(name, root)
        if raw is None:
            raise _missing(name, root, "torchvision, which downloads, is not installed") from None
        x_train, y_train, x_test, y_test = (read_uint8_idx(raw / f) for f in MNIST_FILES)
        return ImageDataset(name=name, x_train=x_train.unsqueeze(1).contiguous(),
                            y_train=y_train.long(), x_test=x_test.unsqueeze(1).contiguous(),
                            y_test=y_test.long(), num_classes=10,
                            classes=FMNIST_CLASSES if name == "fmnist" else MNIST_CLASSES)

    cls = {"fmnist": tvd.FashionMNIST, "mnist": tvd.MNIST}[name]
    if discover_mnist_files(name, root) is None and not download:
        raise _missing(name, root)
    try:
        train = cls(str(root), train=True, download=download)
        test = cls(str(root), train=False, download=download)
    except (RuntimeError, OSError) as e:  # torchvision says "Dataset not found" or network fails
        raise _missing(name, root, detail=str(e).splitlines()[0]) from None
    classes = FMNIST_CLASSES if name == "fmnist" else MNIST_CLASSES
    return ImageDataset(
        name=name,
        x_train=train.data.unsqueeze(1).contiguous(),
        y_train=train.targets.long(),
        x_test=test.data.unsqueeze(1).contiguous(),
        y_test=test.targets.long(),
        num_classes=10,
        classes=classes,
    )


def _load_svhn(name: str, root: Path, download: bool) -> ImageDataset:
    from torchvision import datasets as tvd

    try:
        train = tvd.SVHN(str(root), split="train", download=download)
        test = tvd.SVHN(str(root), split="test", download=download)
    except (RuntimeError, OSError) as e:
        raise _missing(name, root, detail=str(e).splitlines()[0]) from None
    return ImageDataset(
        name=name,
        x_train=torch.from_numpy(train.data).contiguous(),
        y_train=torch.from_numpy(train.labels).long(),
        x_test=torch.from_numpy(test.data).contiguous(),
        y_test=torch.from_numpy(test.labels).long(),
        num_classes=10,
        classes=MNIST_CLASSES,
    )


def _load_cifar(name: str, root: Path, download: bool) -> ImageDataset:
    from torchvision import datasets as tvd

    cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
    try:
        train = cls(str(root), train=True, download=download)
        test = cls(str(root), train=False, download=download)
    except (RuntimeError, OSError) as e:
        raise _missing(name, root, detail=str(e).splitlines()[0]) from None

    def hwc(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).permute(0, 3, 1, 2).contiguous()

    return ImageDataset(
        name=name,
        x_train=hwc(train.data),
        y_train=torch.tensor(train.targets, dtype=torch.long),
        x_test=hwc(test.data),
        y_test=torch.tensor(test.targets, dtype=torch.long),
        num_classes=len(train.classes),
        classes=tuple(train.classes),
    )


def _load_tinyimagenet(name: str, root: Path, download: bool) -> ImageDataset:
    """Tiny-ImageNet-200 from its ImageFolder layout; the 10k val images serve as the test set.

    Decoding 110k JPEGs is slow, so the tensors are cached once as ``tinyimagenet_uint8.pt``.
    """
    base = root / "tiny-imagenet-200"
    cache = root / "tinyimagenet_uint8.pt"
    have_images = (base / "train").is_dir() and (base / "val").is_dir()
    if cache.is_file():
        try:
            return tinyimagenet_from_cache(name, cache)
        except Exception as e:  # noqa: BLE001 - truncated, not a dict, wrong keys or tensors
            if not have_images:
                raise DatasetFileError(
                    f"dataset cache {cache} is corrupt ({type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}): delete it and put "
                    f"tiny-imagenet-200/ in {root} to rebuild it") from None
            warnings.warn(f"dataset cache {cache} is corrupt ({type(e).__name__}); it is "
                          "rebuilt from tiny-imagenet-200/", stacklevel=3)
    if not have_images:
        raise _missing(name, root)
    from PIL import Image

    wnids = sorted(p.name for p in (base / "train").iterdir() if p.is_dir())
    index = {w: i for i, w in enumerate(wnids)}

    def read(paths: Sequence[Path]) -> torch.Tensor:
        arr = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths])
        return torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()

    train_paths, train_labels = [], []
    for w in wnids:
        for p in sorted((base / "train" / w / "images").glob("*.JPEG")):
            train_paths.append(p)
            train_labels.append(index[w])
    val_paths, val_labels = [], []
    for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
        parts = line.split("\t")
        val_paths.append(base / "val" / "images" / parts[0])
        val_labels.append(index[parts[1]])
    d = {
        "x_train": read(train_paths),
        "y_train": torch.tensor(train_labels),
        "x_test": read(val_paths),
        "y_test": torch.tensor(val_labels),
    }
    ds = ImageDataset(name=name, num_classes=200, classes=tuple(wnids), **d)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    try:
        torch.save({**d, "classes": list(wnids)}, tmp)
        os.replace(tmp, cache)
    except (OSError, RuntimeError) as e:  # read-only data root or full disk: not cached
        warnings.warn(f"could not write the dataset cache {cache} ({e})", stacklevel=3)
    finally:
        tmp.unlink(missing_ok=True)
    return ds


def tinyimagenet_from_cache(name: str, cache: Path) -> ImageDataset:
    """Tiny-ImageNet from its tensor cache; raises if the file is unreadable, lacks a key or
    holds tensors that do not make a 200-class dataset."""
    d = torch.load(cache, weights_only=True)
    keys = {"x_train", "y_train", "x_test", "y_test", "classes"}
    if not isinstance(d, dict) or set(d) != keys:
        raise ValueError(f"keys {sorted(d) if isinstance(d, dict) else type(d).__name__}, "
                         f"expected {sorted(keys)}")
    if not all(isinstance(d[k], torch.Tensor) for k in keys - {"classes"}) or any(
            d[k].dtype != torch.uint8 for k in ("x_train", "x_test")) or len(d["classes"]) != 200:
        raise ValueError("wrong tensors")
    return ImageDataset(name=name, num_classes=200, classes=tuple(d.pop("classes")), **d)


def load_embedded_fmnist() -> ImageDataset:
    """The stratified FashionMNIST subset shipped in the package (see its LICENSE notice)."""
    ref = resources.files("ofl_core.data") / "embedded" / "fmnist_subset.npz"
    with resources.as_file(ref) as path, np.load(path) as z:
        return ImageDataset(
            name="fmnist_embedded",
            x_train=torch.from_numpy(z["x_train"]).unsqueeze(1).contiguous(),
            y_train=torch.from_numpy(z["y_train"]).long(),
            x_test=torch.from_numpy(z["x_test"]).unsqueeze(1).contiguous(),
            y_test=torch.from_numpy(z["y_test"]).long(),
            num_classes=10,
            classes=FMNIST_CLASSES,
        )
