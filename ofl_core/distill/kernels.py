"""Exact CPU kernels for the frozen teachers and the student: ReLU after max-pooling
(:func:`fuse_relu_maxpool`), the tap-map input gradient of narrow-input convolutions
(:func:`narrow_input_convs`), and the bfloat16 autocast switch (:func:`autocast_context`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..precision import Amp, resolve_amp


class MaxPoolReLU(nn.Module):
    """``relu(maxpool(x))``, which equals ``maxpool(relu(x))`` (ReLU is monotone) in value and
    in gradient, with the ReLU on the pooled, 4× smaller tensor."""

    def __init__(self, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.pool(x))


def fuse_relu_maxpool(model: nn.Module) -> Callable[[], None]:
    """Rewrite every ``ReLU, MaxPool2d`` pair of an ``nn.Sequential`` in ``model`` into
    ``Identity, MaxPoolReLU`` in place (same function and gradients, parameters and state_dict
    untouched). Returns a function that undoes the rewrite."""
    undo = []
    for seq in list(model.modules()):
        if not isinstance(seq, nn.Sequential):
            continue
        names = list(seq._modules)
        for a, b in zip(names, names[1:], strict=False):
            relu, pool = seq._modules[a], seq._modules[b]
            if (type(relu) is nn.ReLU and type(pool) is nn.MaxPool2d
                    and not pool.return_indices):
                seq._modules[a] = nn.Identity()
                seq._modules[b] = MaxPoolReLU(pool)
                undo.append((seq, a, relu, b, pool))

    def restore() -> None:
        for seq, a, relu, b, pool in undo:
            seq._modules[a], seq._modules[b] = relu, pool

    return restore


def narrow_input_conv_grad(grad_out: torch.Tensor, weight: torch.Tensor,
                           input_size: Sequence[int], padding: Sequence[int]) -> torch.Tensor:
    """∂L/∂x of a stride-1, zero-padded ``conv2d(x, weight)`` from ∂L/∂y, exactly: one 1×1
    convolution of ``grad_out`` to the C_in·k_h·k_w tap maps, then ``F.fold`` (col2im) adds
    each tap map at its shift. For few input channels this reads the large ``grad_out`` once
    through a dense GEMM, where oneDNN's backward-data kernel for a 1- or 3-channel output is
    slow (``benchmarks/bench_teacher_kernels.py``)."""
    c_out, c_in, kh, kw = weight.shape
    taps_w = weight.reshape(c_out, c_in * kh * kw).t().reshape(c_in * kh * kw, c_out, 1, 1)
    taps = F.conv2d(grad_out, taps_w).contiguous()
    n, k, ho, wo = taps.shape
    return F.fold(taps.view(n, k, ho * wo), tuple(input_size), (kh, kw),
                  padding=tuple(padding))


class _NarrowInputConvFn(torch.autograd.Function):
    """``F.conv2d(x, w, b, padding)`` whose input gradient is :func:`narrow_input_conv_grad`;
    weight and bias gradients (when needed) come from ATen's own backward."""

    @staticmethod
    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                padding: tuple[int, int]) -> torch.Tensor:
        return F.conv2d(x, weight, bias, padding=padding)

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: torch.Tensor) -> None:
        x, weight, bias, padding = inputs
        ctx.padding, ctx.has_bias = padding, bias is not None
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        dt = grad_out.dtype  # the forward's compute dtype (bfloat16 under autocast)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = narrow_input_conv_grad(grad_out, weight.to(dt), x.shape[-2:],
                                        ctx.padding).to(x.dtype)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            _, gw, gb = torch.ops.aten.convolution_backward(
                grad_out, x.to(dt), weight.to(dt), [weight.shape[0]] if ctx.has_bias else None,
                [1, 1], list(ctx.padding), [1, 1], False, [0, 0], 1,
                [False, ctx.needs_input_grad[1], ctx.needs_input_grad[2]])
            gw = gw.to(weight.dtype) if gw is not None else None
            gb = gb.to(weight.dtype) if gb is not None else None
        return gx, gw, gb, None


class NarrowInputConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` (same parameters, same state_dict) whose input gradient is computed
    by :func:`narrow_input_conv_grad`; made by :func:`narrow_input_convs`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NarrowInputConvFn.apply(x, self.weight, self.bias, self.padding)


def narrow_input_pays(conv: nn.Conv2d) -> bool:
    """Where the tap-map input gradient measured faster than oneDNN's on the CPU
    (``benchmarks/bench_teacher_kernels.py``): one input channel, or at least twice as many
    output channels as tap maps (3→64 and 3→128 3×3 yes; 3→32 3×3 and 3→16 5×5 no)."""
    c_out, c_in, kh, kw = conv.weight.shape
    return (type(conv) is nn.Conv2d and conv.stride == (1, 1) and conv.dilation == (1, 1)
            and conv.groups == 1 and conv.padding_mode == "zeros"
            and not isinstance(conv.padding, str)
            and (c_in == 1 or c_out >= 2 * c_in * kh * kw))


def narrow_input_convs(model: nn.Module) -> Callable[[], None]:
    """Give every convolution of ``model`` whose input gradient is faster as tap maps + fold
    (:func:`narrow_input_pays`; in practice the first convolution of image classifiers) that
    input gradient, in place (exact up to float rounding; parameters shared, state_dict
    unchanged). For the CPU. Returns a function that undoes the rewrite."""
    undo = []
    for parent in list(model.modules()):
        for name, mod in list(parent._modules.items()):
            if isinstance(mod, nn.Conv2d) and narrow_input_pays(mod):
                new = NarrowInputConv2d.__new__(NarrowInputConv2d)
                new.__dict__ = mod.__dict__.copy()  # the same Parameter objects
                parent._modules[name] = new
                undo.append((parent, name, mod))

    def restore() -> None:
        for parent, name, mod in undo:
            parent._modules[name] = mod

    return restore


def autocast_context(device: str | torch.device, enabled: Amp) -> torch.autocast:
    """bfloat16 autocast on ``device`` when ``enabled`` (True, or "auto" where bfloat16 is
    native: a CPU with AMX/AVX512-BF16, or CUDA)."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=resolve_amp(enabled, device))


__all__ = ["MaxPoolReLU", "NarrowInputConv2d", "autocast_context", "fuse_relu_maxpool",
           "narrow_input_conv_grad", "narrow_input_convs", "narrow_input_pays"]
