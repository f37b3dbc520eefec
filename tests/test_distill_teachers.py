"""ofl_core.distill.teachers: the teacher bank (vmap vs loop, L_BN, gradients)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ofl_core.distill.generator import (
    build_generator,
    generator_forward,
)
from ofl_core.distill.losses import (
    boundary_support_loss,
)
from ofl_core.distill.teachers import TeacherBank
from ofl_core.models import build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def _teachers(archs: list[str], seed: int = 0, num_classes: int = 10) -> list[nn.Module]:
    """Zoo models with non-trivial BN running statistics (as trained teachers have)."""
    torch.manual_seed(seed)
    models = []
    for a in archs:
        m = build_model(a, num_classes, 1, 28)
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                with torch.no_grad():
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 2.0)
        models.append(m)
    return models


class _BNFirst(nn.Module):
    """BN on the raw input, then a linear head (so L_BN compares the input's own statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: torch.Tensor, return_features: bool = False):
        f = torch.flatten(self.bn(x), 1)
        return (self.fc(f), f) if return_features else self.fc(f)


@pytest.mark.parametrize("batched", [False, True])
def test_bank_bn_loss_zero_when_batch_stats_equal_running(batched: bool) -> None:
    torch.manual_seed(0)
    x = torch.rand(6, 2, 4, 4) * 3
    teachers = [_BNFirst(), _BNFirst()]
    for t in teachers:
        t.bn.running_mean.copy_(x.mean((0, 2, 3)))
        t.bn.running_var.copy_(x.var((0, 2, 3), unbiased=False))
    bank = TeacherBank(teachers, batched=batched, channels_last=False)
    assert bank.batched == batched
    assert bank.forward(x, bn=True).bn_loss.item() == pytest.approx(0.0, abs=1e-5)
    # one teacher's running mean off by 0.6 in channel 0 → L_BN = 0.6 / m
    teachers[1].bn.running_mean[0] += 0.6
    bank = TeacherBank(teachers, batched=batched, channels_last=False)
    assert bank.forward(x, bn=True).bn_loss.item() == pytest.approx(0.3, rel=1e-4)


def test_bank_bn_loss_is_zero_for_bn_free_teachers() -> None:
    bank = TeacherBank(_teachers(["lenet", "lenet"]), batched=False)
    out = bank.forward(torch.rand(4, 1, 28, 28), bn=True)
    assert not bank.has_bn and out.bn_loss.item() == 0.0


# ---------------------------------------------------------------- teacher bank


@pytest.mark.parametrize("archs", [["cnn_mnist"] * 3, ["cnn_mnist", "lenet", "cnn_mnist"]])
def test_vmap_and_loop_paths_agree(archs: list[str]) -> None:
    models = _teachers(archs)
    vm = TeacherBank(copy.deepcopy(models), batched=True, channels_last=False)
    # same memory layout for both: max-pool near-ties may resolve differently across layouts
    lp = TeacherBank(copy.deepcopy(models), batched=False, channels_last=False)
    assert vm.batched and not lp.batched
    x1 = torch.rand(16, 1, 28, 28, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    o1 = vm.forward(x1, bn=True, features=True)
    o2 = lp.forward(x2, bn=True, features=True)
    assert o1.logits.shape == (len(archs), 16, 10)
    torch.testing.assert_close(o1.logits, o2.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(o1.bn_loss, o2.bn_loss, rtol=1e-5, atol=1e-5)
    assert o1.bn_loss.item() > 1.0
    for f1, f2 in zip(o1.features, o2.features, strict=True):
        torch.testing.assert_close(f1, f2, rtol=1e-4, atol=1e-5)
    (o1.mean_logits.square().sum() + o1.bn_loss).backward()
    (o2.mean_logits.square().sum() + o2.bn_loss).backward()
    # a max-pool near-tie that the two paths' conv rounding resolves differently routes one
    # pixel's gradient elsewhere (seen on an AVX2-only CPU: 15 of 12,544 pixels); all others agree
    close = torch.isclose(x1.grad, x2.grad, rtol=1e-4, atol=1e-6)
    assert close.float().mean() > 0.995, f"{int((~close).sum())} of {close.numel()} differ"
    assert (x1.grad - x2.grad).abs().max() < 1e-3
    stacked = [p for g in vm.groups if g.batched for p in g.params.values()]
    assert stacked and all(not p.requires_grad and p.grad is None for p in stacked)
    # the loop path agrees with calling the models directly, in the given order
    with torch.no_grad():
        direct = torch.stack([m.eval()(x1) for m in models])
    torch.testing.assert_close(o2.logits, direct, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vm(x1.detach()), direct.mean(0), rtol=1e-4, atol=1e-5)
    # channels-last loop: same logits and L_BN
    cl = TeacherBank(copy.deepcopy(models), batched=False, channels_last=True)
    o3 = cl.forward(x1.detach(), bn=True)
    torch.testing.assert_close(o3.logits, direct, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(o3.bn_loss, o2.bn_loss.detach(), rtol=1e-5, atol=1e-5)


def test_gradients_reach_generator_not_teachers() -> None:
    gen = build_generator(16, 8, 28, 1, torch.Generator().manual_seed(1))
    teachers = _teachers(["cnn_mnist", "cnn_mnist"])
    bank = TeacherBank(teachers)
    student = build_model("cnn_mnist", 10, 1, 28).eval().requires_grad_(False)
    z = torch.randn(8, 16)
    y = torch.randint(0, 10, (8,))
    x = generator_forward(gen, z)
    out = bank.forward(x, bn=True)
    d = out.mean_logits
    loss = (nn.functional.cross_entropy(d, y) + out.bn_loss
            + boundary_support_loss(d, student(x) + torch.randn(8, 10)))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in gen.parameters())
    for t in teachers:
        assert not t.training
        assert all(not p.requires_grad and p.grad is None for p in t.parameters())
    assert all(p.grad is None for p in student.parameters())


@pytest.mark.parametrize("batched", [False, True])
def test_bank_takes_a_bfloat16_input_under_autocast(batched: bool) -> None:
    """Under bfloat16 autocast a generator hands the teachers a bfloat16 batch. vmap's
    convolution rule runs below autocast, so the vmapped path must cast it back (without the
    cast: "Input type (c10::BFloat16) and bias type (float) should be the same"); both paths
    then agree with the float32 logits to bfloat16's rounding."""
    models = _teachers(["cnn_mnist"] * 3)
    bank = TeacherBank(copy.deepcopy(models), batched=batched, channels_last=False)
    x = torch.rand(8, 1, 28, 28)
    ref = bank.forward(x).logits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = bank.forward(x.to(torch.bfloat16), bn=True)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.bn_loss)
    scale = ref.abs().max().item()
    assert (out.logits.float() - ref).abs().max().item() <= 0.05 * scale
