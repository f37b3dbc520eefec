"""ofl_core.distill.stratification: Eqs. 1–7, the zero-loss guards, grouping independence,
and 2c/c teachers (trained on the synthetic 6-class bars of tests/conftest.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.clients import init_model
from ofl_core.distill.stratification import (
    exact_cross_entropy,
    guidance_capability,
    stratified_weights,
    stratify,
)
from ofl_core.uploads import build_from_upload

pytestmark = pytest.mark.usefixtures("one_thread")

C6 = 6


# ---------------------------------------------------------------- stratification


def test_guidance_capability_eq2_and_zero_min_guard() -> None:
    L = torch.tensor([[3.0, 2.0, 1.0],      # ordinary: (3 − 1)/1 = 2
                      [0.5, 0.0, 0.0],      # min 0: guarded, huge but finite
                      [0.0, 0.0, 0.0],      # 0 throughout: no guidance, u = 0
                      [0.25, 0.25, 0.25]])  # constant: u = 0
    u = guidance_capability(L)
    assert u.dtype == torch.float64 and bool(torch.isfinite(u).all())
    assert u[0] == 2.0 and u[2] == 0.0 and u[3] == 0.0
    assert u[1] == pytest.approx(0.5 / 1e-300, rel=1e-12)
    assert guidance_capability(L, min_loss_floor=1e-3)[1] == pytest.approx(500.0)
    # the guarded client takes its whole class row
    U_r, _ = stratified_weights(torch.stack([u[0:2], u[0:2]]))
    assert U_r[0, 1] == pytest.approx(1.0) and U_r[0, 0] < 1e-200
    with pytest.raises(ValueError, match="min_loss_floor"):
        guidance_capability(L, min_loss_floor=0.0)


def test_exact_cross_entropy_keeps_tiny_losses() -> None:
    g = torch.Generator().manual_seed(0)
    logits, t = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    torch.testing.assert_close(exact_cross_entropy(logits, t).float(),
                               F.cross_entropy(logits, t, reduction="none"))
    big = torch.tensor([[60.0, 0.0, -3.0]])
    assert F.cross_entropy(big, torch.tensor([0])) == 0.0  # float32 rounds it away
    assert exact_cross_entropy(big, torch.tensor([0])).item() == pytest.approx(
        math.exp(-60) + math.exp(-63), rel=1e-9)


class _Brightness(nn.Module):
    """A two-class 'teacher': logit of class 0 = scale·(mean pixel − 0.55), class 1 = the
    opposite. A fresh generator's images have mean ≈ 0.5, so with a large scale class 1's loss
    is ≈ 0 (and flat: no gradient) from the start and class 0's reaches exactly 0 once the
    images are bright."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.scale * (x.mean((1, 2, 3)) - 0.55)
        return torch.stack([s, -s], 1)


def test_stratify_guards_losses_that_reach_zero() -> None:
    teachers = [_Brightness(1e4), _Brightness(2.0)]
    s = stratify(teachers, 2, 1, 28, steps=20, batch_size=8, nz=8, ngf=4, lr=0.05, seed=0)
    assert s.losses.shape == (2, 2, 20) and s.U.shape == (2, 2)
    L = s.losses[0]
    assert L[0, 0] > 100 and float(L[0].amin()) == 0.0  # class 0: from large to exactly 0
    assert float(L[1].max()) < 1e-200 and bool((L[1] == L[1, 0]).all())  # class 1: ≈ 0, flat
    assert bool(torch.isfinite(s.U).all() & torch.isfinite(s.U_r).all())
    assert s.U[0, 0] > 1e250 and s.U[1, 0] == 0.0  # guarded: huge; no change: 0
    assert s.U_r[0, 0] > 0.999 and s.U_r[1, 1] == 1.0
    torch.testing.assert_close(s.U_r.sum(1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(s.U_c.sum(0), torch.ones(2, dtype=torch.float64))


def test_stratify_result_does_not_depend_on_grouping() -> None:
    models = [init_model("lenet", 3, 1, 28, seed=k) for k in range(2)]
    kw = dict(steps=3, batch_size=4, nz=8, ngf=4, seed=7)
    ref = stratify(models, 3, 1, 28, group=1, **kw)
    for group in (4, 6, "auto"):
        other = stratify(models, 3, 1, 28, group=group, **kw)
        torch.testing.assert_close(other.losses, ref.losses, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(other.U_r, ref.U_r, rtol=1e-3, atol=1e-6)
    # the loss sequences differ between clients and classes (each has its own generator)
    assert ref.losses.flatten(0, 1).unique(dim=0).shape[0] == 6
    with pytest.raises(ValueError, match="group"):
        stratify(models, 3, 1, 28, group=0, **kw)


def test_stratification_of_2c_per_client_favours_each_clients_own_classes(two_per_client
                                                                          ) -> None:
    uploads, _ = two_per_client
    models = [build_from_upload(u) for u in uploads]
    s = stratify(models, C6, 1, 28, steps=8, batch_size=16, nz=32, ngf=16, seed=1)
    owner = torch.arange(C6) // 2
    assert torch.equal(s.U_r.argmax(1), owner), s.U_r  # each class: its owner's weight is top
    assert bool((s.U_r[torch.arange(C6), owner] > 0.8).all()), s.U_r
    for k in range(3):  # each client: its two classes have its two largest weights
        assert set(s.U_c[:, k].topk(2).indices.tolist()) == {2 * k, 2 * k + 1}, s.U_c
    torch.testing.assert_close(s.U_r.sum(1), torch.ones(C6, dtype=torch.float64))
    torch.testing.assert_close(s.U_c.sum(0), torch.ones(3, dtype=torch.float64))
    # every loss curve is recorded before each of the T_G updates and is finite
    assert s.losses.shape == (3, C6, 8) and bool(torch.isfinite(s.losses).all())
