"""Test-wide settings: no progress bars, a private client cache, a non-interactive backend."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
if "OFL_CACHE_DIR" not in os.environ:
    os.environ["OFL_CACHE_DIR"] = tempfile.mkdtemp(prefix="ofl-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def tiny_dataset():
    """A 4-class 28×28 synthetic dataset that a small CNN learns in a few epochs."""
    from ofl_core.data.datasets import ImageDataset

    g = torch.Generator().manual_seed(0)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % 4
        x = torch.rand(n, 1, 28, 28, generator=g) * 60
        for c in range(4):  # class c = a bright square in quadrant c
            r, q = divmod(c, 2)
            x[y == c, :, r * 14 + 3 : r * 14 + 11, q * 14 + 3 : q * 14 + 11] += 180
        return x.clamp(0, 255).to(torch.uint8), y

    xtr, ytr = make(400)
    xte, yte = make(200)
    return ImageDataset("tiny", xtr, ytr, xte, yte, num_classes=4,
                        classes=("a", "b", "c", "d"))
