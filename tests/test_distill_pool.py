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


def test_image_pool_floor_rounding_as_denses_code() -> None:
    """``rounding="floor"`` stores floor(255·x) (DENSE's code: ``(x·255).astype(uint8)`` before
    the PNG); the default rounds to nearest."""
    x = torch.tensor([0.0, 0.3 / 255, 0.7 / 255, 1.6 / 255, 254.6 / 255, 1.0]).view(1, 1, 1, 6)
    floor, near = ImagePool(rounding="floor"), ImagePool()
    floor.add(x)
    near.add(x)
    assert floor.stored().flatten().tolist() == [0, 0, 0, 1, 254, 255]
    assert near.stored().flatten().tolist() == [0, 0, 1, 2, 255, 255]
    with pytest.raises(ValueError, match="rounding"):
        ImagePool(rounding="ceil")  # type: ignore[arg-type]


def test_image_pool_float_is_exact() -> None:
    pool = ImagePool(uint8=False)
    b = torch.rand(4, 1, 6, 6)
    pool.add(b)
    assert torch.equal(pool.all(), b)
    with pytest.raises(ValueError, match="empty"):
        ImagePool().all()


def test_image_pool_labels_follow_their_images() -> None:
    """Co-Boosting keeps each synthetic image's label: labelled batches come out in the same
    order as unlabelled ones for the same generator state, each image with its label."""
    pool = ImagePool(uint8=False)
    for k in range(3):
        x = torch.rand(4, 1, 6, 6)
        x[:, 0, 0, 0] = k  # the label written into the image
        pool.add(x, torch.full((4,), k))
    assert pool.labels().tolist() == [0] * 4 + [1] * 4 + [2] * 4
    pairs = list(pool.labelled_batches(5, torch.Generator().manual_seed(1)))
    plain = list(pool.batches(5, torch.Generator().manual_seed(1)))
    assert [len(y) for _, y in pairs] == [5, 5, 2]
    for (xb, yb), xp in zip(pairs, plain, strict=True):
        assert torch.equal(xb, xp) and torch.equal(xb[:, 0, 0, 0].long(), yb)
    with pytest.raises(ValueError, match="every batch or with none"):
        pool.add(torch.rand(4, 1, 6, 6))
    with pytest.raises(ValueError, match="labels for"):
        pool.add(torch.rand(4, 1, 6, 6), torch.zeros(3))
    with pytest.raises(ValueError, match="no labels"):
        ImagePool().labels()


def test_augment_batch_modes() -> None:
    x = torch.rand(6, 3, 8, 8)
    assert augment_batch(x, "none") is x
    y = augment_batch(x, "flip", torch.Generator().manual_seed(0))
    for i in range(6):
        assert torch.equal(y[i], x[i]) or torch.equal(y[i], x[i].flip(-1))
    assert augment_batch(x, "crop_flip", torch.Generator().manual_seed(0)).shape == x.shape
    with pytest.raises(ValueError, match="augmentation"):
        augment_batch(x, "rotate")
