"""ofl_core.distill.generator: the exact fast generator and its seeded construction."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ofl_core.distill.generator import (
    build_generator,
    conv3x3_narrow,
    generator_forward,
    upsample_conv3x3,
)
from ofl_core.models import Generator
from ofl_core.seeds import derive_seed

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- generator


@pytest.mark.parametrize(("size", "channels"), [(28, 1), (32, 3)])
def test_fast_generator_equals_module(size: int, channels: int) -> None:
    g1 = build_generator(32, 8, size, channels, torch.Generator().manual_seed(3))
    g2 = copy.deepcopy(g1)
    z = torch.randn(5, 32, generator=torch.Generator().manual_seed(0))  # not the global RNG
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
