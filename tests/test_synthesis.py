"""Tests of the shared generator machinery (ofl_core.synthesis): losses on hand-made tensors,
the teacher bank (vmap vs loop, L_BN, gradients), the image pool, the exact fast generator."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from ofl_core.models import Generator, build_model
from ofl_core.seeds import derive_seed
from ofl_core.synthesis import (
    ImagePool,
    NarrowInputConv2d,
    TeacherBank,
    adi_competition_loss,
    augment_batch,
    bn_statistics_term,
    boundary_support_loss,
    build_generator,
    conv3x3_narrow,
    dafl_activation_loss,
    dafl_information_entropy_loss,
    dafl_onehot_loss,
    fuse_relu_maxpool,
    generator_forward,
    jitter_flip,
    js_divergence,
    kd_loss,
    kl_per_sample,
    narrow_input_conv_grad,
    narrow_input_convs,
    total_variation_l1,
    upsample_conv3x3,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: these tiny models only lose time to threading on a shared CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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
    from ofl_core.synthesis import ShiftedMoments

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
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-6)
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


def _assert_same_function_and_gradients(ref: nn.Module, new: nn.Module,
                                        x: torch.Tensor) -> None:
    """Same outputs, input gradients and parameter gradients of a squared-sum loss."""
    x1 = x.detach().clone().requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    a, b = ref(x1), new(x2)
    torch.testing.assert_close(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    for p, q in zip(ref.parameters(), new.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("arch", ["cnn_mnist", "lenet"])
def test_fuse_relu_maxpool_is_exact_and_undoable(arch: str) -> None:
    torch.manual_seed(0)
    ref = build_model(arch, 10, 1, 28)
    fused = copy.deepcopy(ref)
    restore = fuse_relu_maxpool(fused)
    assert any(type(m).__name__ == "MaxPoolReLU" for m in fused.modules())
    assert list(fused.state_dict()) == list(ref.state_dict())
    _assert_same_function_and_gradients(ref, fused, torch.randn(4, 1, 28, 28))
    restore()
    assert repr(fused) == repr(ref)


@pytest.mark.parametrize(("c_in", "c_out", "k", "pad"),
                         [(3, 16, 3, 0), (1, 6, 5, 2), (3, 8, 3, 1), (2, 5, 3, 1)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_narrow_input_conv_grad_is_the_conv_input_gradient(c_in: int, c_out: int, k: int,
                                                           pad: int, channels_last: bool) -> None:
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(3, c_in, 9, 11, dtype=torch.float64).contiguous(memory_format=fmt)
    w = torch.randn(c_out, c_in, k, k, dtype=torch.float64)
    y = torch.nn.functional.conv2d(x.requires_grad_(True), w, padding=pad)
    g = torch.randn_like(y).contiguous(memory_format=fmt)
    (ref,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(narrow_input_conv_grad(g, w, (9, 11), (pad, pad)), ref)


@pytest.mark.parametrize("arch", ["cnn_mnist", "cnn_cifar", "lenet"])
def test_narrow_input_convs_is_exact_and_undoable(arch: str) -> None:
    """Values and input, weight and bias gradients as the stock model (float64), same
    state_dict and parameters, and only the convolutions where the rewrite pays change."""
    torch.manual_seed(0)
    c, size = (3, 32) if arch == "cnn_cifar" else (1, 28)
    ref = build_model(arch, 10, c, size).double()
    new = copy.deepcopy(ref)
    before = dict(new.named_parameters())
    restore = narrow_input_convs(new)
    rewritten = [n for n, m in new.named_modules() if isinstance(m, NarrowInputConv2d)]
    assert len(rewritten) == 1  # the first convolution (1 or 3 input channels)
    assert list(new.state_dict()) == list(ref.state_dict())
    assert all(before[k] is p for k, p in new.named_parameters())
    _assert_same_function_and_gradients(
        ref, new, torch.randn(4, c, size, size, dtype=torch.float64))
    restore()
    assert not any(isinstance(m, NarrowInputConv2d) for m in new.modules())


def test_narrow_input_conv_under_bf16_autocast() -> None:
    """The rewrite keeps working under CPU autocast (bfloat16 forward, float32 gradients)."""
    torch.manual_seed(0)
    ref = build_model("cnn_mnist", 10, 1, 28)
    new = copy.deepcopy(ref)
    narrow_input_convs(new)
    x1 = torch.randn(4, 1, 28, 28, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    for model, x in ((ref, x1), (new, x2)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.float().square().sum().backward()
    assert x2.grad.dtype == torch.float32
    torch.testing.assert_close(x2.grad, x1.grad, rtol=0.05, atol=0.05 * x1.grad.abs().max().item())


# ---------------------------------------------------------------- generator


@pytest.mark.parametrize(("size", "channels"), [(28, 1), (32, 3)])
def test_fast_generator_equals_module(size: int, channels: int) -> None:
    g1 = build_generator(32, 8, size, channels, torch.Generator().manual_seed(3))
    g2 = copy.deepcopy(g1)
    z = torch.randn(5, 32)
    a, b = g1(z), generator_forward(g2, z, fast=True)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    a.square().sum().backward()
    b.square().sum().backward()
    for (n, p1), p2 in zip(g1.named_parameters(), g2.parameters(), strict=True):
        rel = ((p1.grad - p2.grad).norm() / p1.grad.norm()).item()
        assert rel < 1e-4, (n, rel)  # float32 summation order only (channels-last BN on CPU)
    for b1, b2 in zip(g1.buffers(), g2.buffers(), strict=True):  # same BN running stats
        torch.testing.assert_close(b1, b2)


def test_upsample_conv3x3_matches_reference() -> None:
    x = torch.randn(2, 4, 5, 6)
    w = torch.randn(7, 4, 3, 3)
    bias = torch.randn(7)
    up = nn.functional.interpolate(x, scale_factor=2, mode="nearest")
    ref = nn.functional.conv2d(up, w, bias, padding=1)
    torch.testing.assert_close(upsample_conv3x3(x, w, bias), ref, rtol=1e-4, atol=1e-5)


def test_generator_init_is_seeded_and_leaves_global_rng() -> None:
    state = torch.random.get_rng_state()
    a = build_generator(16, 8, 28, 1, torch.Generator().manual_seed(7))
    b = build_generator(16, 8, 28, 1, torch.Generator().manual_seed(7))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert isinstance(a, Generator)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert derive_seed(1, "dense") == derive_seed(1, "dense") != derive_seed(2, "dense")


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


@pytest.mark.parametrize("channels_last", [False, True])
def test_upsample_conv3x3_keeps_layout_values_and_gradients(channels_last: bool) -> None:
    x1 = torch.randn(3, 5, 4, 6, dtype=torch.float64)
    if channels_last:
        x1 = x1.contiguous(memory_format=torch.channels_last)
    x1.requires_grad_()
    w1 = torch.randn(2, 5, 3, 3, dtype=torch.float64, requires_grad=True)
    b1 = torch.randn(2, dtype=torch.float64, requires_grad=True)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x1, w1, b1))
    ref = nn.functional.conv2d(nn.functional.interpolate(x1, scale_factor=2, mode="nearest"),
                               w1, b1, padding=1)
    out = upsample_conv3x3(x2, w2, b2)
    torch.testing.assert_close(out, ref)  # float64: the same function, not just close
    assert out.is_contiguous(memory_format=torch.channels_last) == channels_last
    g = torch.randn_like(ref)
    (ref * g).sum().backward()
    (out * g).sum().backward()
    for a, b in ((x1, x2), (w1, w2), (b1, b2)):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize("c_out", [1, 3])
def test_conv3x3_narrow_matches_conv2d_values_and_gradients(c_out: int) -> None:
    x1 = torch.randn(2, 6, 7, 5, requires_grad=True)
    w1 = torch.randn(c_out, 6, 3, 3, requires_grad=True)
    b1 = torch.randn(c_out, requires_grad=True)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x1, w1, b1))
    ref = nn.functional.conv2d(x1, w1, b1, padding=1)
    out = conv3x3_narrow(x2, w2, b2)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(ref)
    (ref * g).sum().backward()
    (out * g).sum().backward()
    for a, b in ((x1, x2), (w1, w2), (b1, b2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)
