"""MNIST-format (idx) files: check that one is whole before torchvision reads it, and unpack a
``.gz`` copy without leaving a partial file, so a truncated download is an error that names the
file and the fix instead of a reshape error about "a dataset not found"."""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path

import torch

#: idx element types: code → bytes per element
IDX_SIZES = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}


class DatasetFileError(ValueError):
    """A dataset file on this machine is truncated or corrupt; the message names it and says
    what to do."""


def _fix(path: Path) -> str:
    if str(path).startswith("/usr/"):
        return ("it came from a system package: reinstall it (e.g. sudo apt-get install "
                "--reinstall dataset-fashion-mnist)")
    return "delete it and fetch it again (copy the *-ubyte.gz files again, or download=True)"


def idx_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole idx file (None when it is): its header and its size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(4)
        if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in IDX_SIZES or not head[3]:
            return "not an idx file (bad header)"
        dims = f.read(4 * head[3])
    if len(dims) < 4 * head[3]:
        return "its header is cut short"
    n = IDX_SIZES[head[2]]
    for i in range(head[3]):
        n *= int.from_bytes(dims[4 * i : 4 * i + 4], "big")
    expected = 4 + 4 * head[3] + n
    if size != expected:
        return f"{size} bytes, its header says {expected}"
    return None


def check_idx_file(path: Path, source: Path | None = None) -> None:
    """Raise :class:`DatasetFileError` naming ``path`` (or the ``source`` it was unpacked from)
    when it is not a whole idx file."""
    problem = idx_problem(path)
    if problem is not None:
        bad = source or path
        raise DatasetFileError(f"dataset file {bad} is truncated or corrupt ({problem}): "
                               f"{_fix(bad)}")


def unpack_idx(src: Path, dst: Path) -> None:
    """Copy or gunzip ``src`` (``*-ubyte`` or ``*-ubyte.gz``) to ``dst`` atomically, checking
    the result; on any failure no temporary or partial file is left."""
    tmp = dst.with_name(f"{dst.name}.tmp{os.getpid()}")
    try:
        if src.suffix == ".gz":
            try:
                with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            except (EOFError, zlib.error, gzip.BadGzipFile) as e:
                raise DatasetFileError(f"dataset file {src} is truncated or corrupt "
                                       f"({e}): {_fix(src)}") from None
        else:
            shutil.copyfile(src, tmp)
        check_idx_file(tmp, source=src)
        os.replace(tmp, dst)  # atomic: a concurrent reader never sees half a file
    finally:
        tmp.unlink(missing_ok=True)


__all__ = ["DatasetFileError", "check_idx_file", "idx_problem", "unpack_idx"]


def read_uint8_idx(path: Path) -> torch.Tensor:
    """An unsigned-byte idx file (MNIST's images and labels) as a uint8 tensor of its shape,
    checked whole first: what torchvision's MNIST reader returns for these files, for a Python
    without torchvision (``load_dataset`` falls back to it)."""
    check_idx_file(path)
    data = path.read_bytes()
    if data[2] != 0x08:
        raise DatasetFileError(f"dataset file {path} holds idx type {data[2]:#x}, not bytes")
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape)
