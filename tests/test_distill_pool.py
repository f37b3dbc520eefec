"""ofl_core.distill.pool: the image pool and the batch augmentations."""

from __future__ import annotations

import pytest
import torch

from ofl_core.distill.pool import ImagePool, augment_batch

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- pool / augmentation


def test_image_pool_uint8_round_trip_and_growth() -> None:
    pool = ImagePool(uint8=True)
    batches = [torch.rand(5, 3, 8, 8) for _ in range(7)]  # grows past the initial capacity
    for b in batches:
        pool.add(b)
    assert len(pool) == 35 and pool.num_batches == 7
    assert pool.stored().dtype == torch.uint8
    allx = pool.all()
    assert allx.dtype == torch.float32 and allx.shape == (35, 3, 8, 8)
    assert (allx - torch.cat(batches)).abs().max().item() <= 1 / 255
    seen = torch.cat(list(pool.batches(8, torch.Generator().manual_seed(0))))
    assert seen.shape == allx.shape and pool.num_steps(8) == 5
    torch.testing.assert_close(seen.sum(0), allx.sum(0))  # a permutation of the pool
    with pytest.raises(ValueError, match="does not match"):
        pool.add(torch.rand(2, 1, 8, 8))


def test_image_pool_float_is_exact() -> None:
    pool = ImagePool(uint8=False)
    b = torch.rand(4, 1, 6, 6)
    pool.add(b)
    assert torch.equal(pool.all(), b)
    with pytest.raises(ValueError, match="empty"):
        ImagePool().all()


def test_augment_batch_modes() -> None:
    x = torch.rand(6, 3, 8, 8)
    assert augment_batch(x, "none") is x
    y = augment_batch(x, "flip", torch.Generator().manual_seed(0))
    for i in range(6):
        assert torch.equal(y[i], x[i]) or torch.equal(y[i], x[i].flip(-1))
    assert augment_batch(x, "crop_flip", torch.Generator().manual_seed(0)).shape == x.shape
    with pytest.raises(ValueError, match="augmentation"):
        augment_batch(x, "rotate")
