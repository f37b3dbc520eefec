"""ofl_core.distill.losses: the papers' losses on hand-made tensors (KD, boundary support,
DAFL, DeepInversion) and the BN-statistics term with its fused backward."""

from __future__ import annotations

import math

import pytest
import torch

from ofl_core.distill.losses import (
    ShiftedMoments,
    adi_competition_loss,
    bn_statistics_term,
    boundary_support_loss,
    dafl_activation_loss,
    dafl_information_entropy_loss,
    dafl_onehot_loss,
    js_divergence,
    kd_loss,
    kl_per_sample,
    total_variation_l1,
)
from ofl_core.distill.pool import jitter_flip

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- distillation / boundary


def test_kd_loss_hand_computed() -> None:
    d = torch.tensor([[0.0, 0.0]])                      # teacher: p = (1/2, 1/2)
    s = torch.tensor([[0.0, math.log(3.0)]])            # student: q = (1/4, 3/4)
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert kd_loss(s, d).item() == pytest.approx(expected, rel=1e-5)
    # T² scaling: KL(σ(D/T) ‖ σ(S/T))·T²
    t = 4.0
    p = torch.softmax(d / t, 1)
    q = torch.softmax(s / t, 1)
    exp_t = (p * (p / q).log()).sum().item() * t * t
    assert kd_loss(s, d, t).item() == pytest.approx(exp_t, rel=1e-5)
    assert kd_loss(d, d).item() == pytest.approx(0.0, abs=1e-7)


def test_boundary_support_loss_zero_when_argmax_agrees() -> None:
    d = torch.tensor([[3.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    s = torch.tensor([[1.0, 0.5, 0.0], [0.0, 9.0, 1.0]])  # different distributions, same argmax
    assert kl_per_sample(d, s).min() > 0
    assert boundary_support_loss(d, s).item() == 0.0


def test_boundary_support_loss_masks_and_averages_over_batch() -> None:
    d = torch.tensor([[3.0, 0.0], [0.0, 2.0]])
    s = torch.tensor([[0.0, 1.0], [0.0, 5.0]])  # sample 0 disagrees, sample 1 agrees
    kl0 = kl_per_sample(d[:1], s[:1]).item()
    assert boundary_support_loss(d, s).item() == pytest.approx(-kl0 / 2, rel=1e-6)


# ---------------------------------------------------------------- DAFL / DeepInversion


def test_dafl_losses() -> None:
    logits = torch.tensor([[10.0, 0.0, 0.0], [0.0, 0.0, 10.0]])
    assert dafl_onehot_loss(logits).item() < 1e-3
    assert dafl_onehot_loss(torch.zeros(2, 3)).item() == pytest.approx(math.log(3), rel=1e-6)
    f = torch.tensor([[1.0, -3.0], [0.0, 2.0]])
    assert dafl_activation_loss(f).item() == pytest.approx(-1.5)
    assert dafl_activation_loss([f, torch.full((2, 5), 2.0)]).item() == pytest.approx(-1.75)
    # information entropy Σ p̄ log p̄: −log C for a class-balanced batch, 0 for a one-class batch
    balanced = torch.eye(4) * 50.0
    assert dafl_information_entropy_loss(balanced).item() == pytest.approx(-math.log(4), 1e-5)
    one_class = torch.tensor([[50.0, 0, 0, 0]] * 4)
    assert dafl_information_entropy_loss(one_class).item() == pytest.approx(0.0, abs=1e-5)


def test_total_variation_and_jitter() -> None:
    assert total_variation_l1(torch.full((2, 1, 5, 5), 0.3)).item() == 0.0
    x = torch.zeros(1, 1, 4, 4)
    x[..., ::2, :] = 1.0  # horizontal stripes: vertical and diagonal neighbours differ
    assert total_variation_l1(x).item() == pytest.approx(3.0)
    img = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a, b = jitter_flip(img, 2, True, g1), jitter_flip(img, 2, True, g2)
    assert torch.equal(a, b) and a.shape == img.shape
    assert torch.equal(a.flatten().sort().values, img.flatten().sort().values)  # a permutation
    assert torch.equal(jitter_flip(img, 0, False), img)


def test_js_divergence_and_competition() -> None:
    a = torch.tensor([[2.0, 0.0, -1.0]])
    b = torch.tensor([[-1.0, 0.5, 3.0]])
    assert js_divergence(a, a).item() == pytest.approx(0.0, abs=1e-7)
    assert js_divergence(a, b).item() == pytest.approx(js_divergence(b, a).item(), rel=1e-6)
    assert 0 < js_divergence(a * 100, b * 100).item() <= math.log(2) + 1e-6
    assert adi_competition_loss(a, b, 3.0).item() == pytest.approx(
        -js_divergence(a, b, 3.0).item())


# ---------------------------------------------------------------- BN statistics loss


def test_bn_term_zero_iff_statistics_match() -> None:
    x = torch.randn(8, 3, 5, 5) * torch.tensor([1.0, 2.0, 0.5]).view(1, 3, 1, 1) + 1.0
    mean = x.mean((0, 2, 3))
    var = x.var((0, 2, 3), unbiased=False)
    assert bn_statistics_term(x, mean, var).item() == pytest.approx(0.0, abs=1e-5)
    shifted = bn_statistics_term(x, mean + torch.tensor([0.3, 0.0, 0.4]), var)
    assert shifted.item() == pytest.approx(0.5, rel=1e-4)  # ‖(0.3, 0, 0.4)‖₂


def test_bn_term_gradient_matches_autograd_of_the_formula() -> None:
    """The fused one-pass backward of the shifted moments against plain autograd, float64."""
    torch.manual_seed(0)
    x = (torch.randn(6, 3, 4, 5, dtype=torch.float64) * 1.5 + 0.7).requires_grad_(True)
    rm = torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64)
    rv = torch.tensor([2.0, 0.7, 1.3], dtype=torch.float64)

    def reference(x: torch.Tensor) -> torch.Tensor:
        xs = x - rm.view(1, -1, 1, 1)
        m1 = xs.mean((0, 2, 3))
        var = (xs * xs).mean((0, 2, 3)) - m1 * m1
        return torch.linalg.vector_norm(m1) + torch.linalg.vector_norm(var - rv)

    def fused(x: torch.Tensor) -> torch.Tensor:
        m1, var = ShiftedMoments.apply(x, rm)
        return torch.linalg.vector_norm(m1) + torch.linalg.vector_norm(var - rv)

    (g_ref,) = torch.autograd.grad(reference(x), x)
    (g_new,) = torch.autograd.grad(fused(x), x)
    torch.testing.assert_close(g_new, g_ref)
    assert torch.autograd.gradcheck(fused, (x,))
    # channels-last input (the teachers' layout on the CPU) gives the same gradient
    xc = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_(True)
    (g_cl,) = torch.autograd.grad(fused(xc), xc)
    torch.testing.assert_close(g_cl, g_ref)
