"""FedHydra Fig. 6b check (ofl_core.distill.stratification.block_structure) and the figures
it needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ofl_core.distill.stratification import block_structure
from ofl_core.plots import plot_grouped_bars, plot_heatmap

#: 2c/c with m = 3, C = 6: client k owns classes 2k, 2k+1
COUNTS = np.kron(np.eye(3, dtype=int), np.ones((1, 2), dtype=int)) * 100


def test_block_diagonal_weights_are_block_structured():
    W = torch.tensor(COUNTS.T, dtype=torch.float64) / 100 * 0.9 + 0.05  # (C, m)
    out = block_structure(W, COUNTS)
    assert out["block_structured"]
    assert all(out["class_argmax_is_owner"]) and all(out["client_top_are_own"])
    assert out["owner_weight"] == pytest.approx([0.95] * 6)


def test_a_misplaced_weight_breaks_the_block():
    W = torch.tensor(COUNTS.T, dtype=torch.float64) / 100
    W[5, 0] = 2.0  # client 0 looks best at class 5 (owned by client 2)
    out = block_structure(W, COUNTS)
    assert not out["block_structured"]
    assert out["client_top_are_own"] == [False, True, True]
    assert out["class_argmax_is_owner"] == [True] * 5 + [False]
    with pytest.raises(ValueError, match="must be"):
        block_structure(W.T, COUNTS)


def test_figures_build():
    fig = plot_heatmap(np.random.rand(10, 5), "U_r", "client", "class")
    assert fig.axes
    fig = plot_grouped_bars({"α=0.1": {"AE": 40.0, "SA": 50.0}, "2c/c": {"AE": 20.0}})
    assert len(fig.axes[0].patches) == 4
