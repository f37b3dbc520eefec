"""The synthetic-data privacy check: nearest-real-neighbour distances (ofl_core.privacy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ofl_core.privacy import as_unit_float, distance_summary, nearest_neighbour_distances


def _train(n: int = 50, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 1, 8, 8), generator=g, dtype=torch.uint8)


def test_copy_of_a_training_image_has_distance_zero_and_its_index():
    train = _train()
    queries = as_unit_float(train[[7, 31]])  # float copies of uint8 training images
    d, idx = nearest_neighbour_distances(queries, train, chunk_size=16)
    assert d.tolist() == [0.0, 0.0]
    assert idx.tolist() == [7, 31]


def test_far_image_is_farther_and_distance_is_plain_l2_in_unit_range():
    train = torch.zeros(10, 1, 4, 4, dtype=torch.uint8)
    train[3] = 255
    near = torch.full((1, 1, 4, 4), 0.1)
    far = torch.full((1, 1, 4, 4), 0.5)
    d, idx = nearest_neighbour_distances(torch.cat([near, far]), train, chunk_size=3)
    assert d[0] == pytest.approx(math.sqrt(16 * 0.1**2), rel=1e-6)
    assert d[1] == pytest.approx(math.sqrt(16 * 0.5**2), rel=1e-6)
    assert d[1] > d[0]
    assert idx[0] == 0  # the nearest all-black image (first one)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunking_does_not_change_the_result(chunk):
    train, q = _train(40, 1), _train(13, 2)
    ref = torch.cdist(as_unit_float(q).flatten(1).double(), as_unit_float(train).flatten(1)
                      .double())
    d, idx = nearest_neighbour_distances(q, train, chunk_size=chunk)
    assert torch.allclose(d.double(), ref.min(1).values, atol=1e-6)
    assert idx.tolist() == ref.argmin(1).tolist()


def test_shape_mismatch_and_bad_dtype_are_clear_errors():
    with pytest.raises(ValueError, match="shape"):
        nearest_neighbour_distances(torch.zeros(2, 1, 4, 4), torch.zeros(3, 1, 5, 5))
    with pytest.raises(ValueError, match="uint8 or floating"):
        as_unit_float(torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="no reference"):
        nearest_neighbour_distances(torch.zeros(2, 4), torch.zeros(0, 4))


def test_distance_summary_with_baseline():
    table = distance_summary({"synthetic": np.array([0.0, 1.0, 2.0]),
                              "real test": np.arange(100, dtype=float)}, baseline="real test")
    assert table.loc["synthetic", "n"] == 3
    assert table.loc["synthetic", "min"] == 0.0
    assert table.loc["real test", "median"] == pytest.approx(49.5)
    # baseline p5 = 4.95: every synthetic distance lies below it
    assert table.loc["synthetic", "frac_below_baseline_p5"] == 1.0
    assert table.loc["real test", "frac_below_baseline_p5"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match="baseline"):
        distance_summary({"a": np.ones(2)}, baseline="b")
