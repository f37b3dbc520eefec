"""ofl_core.distill.kernels: the exact CPU kernels (ReLU/max-pool fusion, tap-map input
gradients of narrow-input convolutions)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ofl_core.distill.kernels import (
    NarrowInputConv2d,
    fuse_relu_maxpool,
    narrow_input_conv_grad,
    narrow_input_convs,
)
from ofl_core.models import build_model

pytestmark = pytest.mark.usefixtures("one_thread")


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
