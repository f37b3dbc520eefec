"""The synthetic-image generator G: exact faster evaluation of the stock
:class:`~ofl_core.models.Generator` (:func:`generator_forward`), seeded construction, its
optimiser and its latents (:func:`generator_optimizer`, :func:`sample_latents`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..devices import to_device
from ..models.generator import Generator

# 3 taps of a 3×3 kernel -> 4 taps of the stride-2 transposed convolution (one dimension);
# a host tensor, copied to the weight's device without a stream sync at each use
_UPSAMPLE_TAPS = torch.tensor(((0.0, 0.0, 1.0), (0.0, 1.0, 1.0), (1.0, 1.0, 0.0),
                               (1.0, 0.0, 0.0)))


def upsample_transposed_kernel(w: torch.Tensor) -> torch.Tensor:
    """The 4×4 kernel (C_in, C_out, 4, 4) of ``conv_transpose2d(stride=2, padding=1)`` that
    equals "nearest ×2 upsample, then 3×3 conv (padding 1)" with kernel ``w`` (C_out, C_in, 3, 3).

    Output row 2i+a reads upsampled rows 2i+a−1..2i+a+1, i.e. input rows (i−1, i) with weights
    (w0, w1+w2) for a = 0 and rows (i, i+1) with (w0+w1, w2) for a = 1. The transposed
    convolution gives output row y the input row i through tap t = y − 2i + 1, so its taps are
    (w2, w1+w2, w0+w1, w0); the same for columns."""
    a = to_device(_UPSAMPLE_TAPS, w.device).to(w.dtype)
    return torch.einsum("tr,oirq,uq->iotu", a, w, a)


def upsample_conv3x3(x: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """``conv3x3(upsample_nearest_2x(x), padding=1)`` computed exactly on the low-resolution
    input as one stride-2 transposed convolution with a 4×4 kernel
    (:func:`upsample_transposed_kernel`): 16/36 of the multiply-adds, no upsampled copy. The
    result has ``x``'s memory layout. Gradients reach ``x``, ``weight`` and ``bias`` as through
    the original pair (``benchmarks/bench_generator_kernels.py``)."""
    return F.conv_transpose2d(x, upsample_transposed_kernel(weight), bias, stride=2, padding=1)


def conv3x3_narrow(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``conv3x3(x, padding=1)`` for very few output channels, exactly: one 1×1 convolution
    to 9·C_out tap maps, then the nine maps summed with their shifts. On the CPU, for the
    generator's 64 → 1 last layer at 28 px, forward + backward, it is 1.8× faster than
    ``F.conv2d`` on the same channels-last input (3.7× than on NCHW); for 64 → 3 at 32 px it is
    slower than the channels-last ``F.conv2d``, so :func:`generator_forward` uses it for one
    output channel only (``benchmarks/bench_generator_kernels.py``)."""
    _, c_in, h, w = x.shape
    c_out = weight.shape[0]
    taps = F.conv2d(x, weight.permute(2, 3, 0, 1).reshape(9 * c_out, c_in, 1, 1))
    taps = F.pad(taps, (1, 1, 1, 1))
    out = None
    for i in range(3):
        for j in range(3):
            t = taps[:, (3 * i + j) * c_out : (3 * i + j + 1) * c_out, i : i + h, j : j + w]
            out = t if out is None else out + t
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out.contiguous()


def _is_stock_generator(g: nn.Module) -> bool:
    if type(g) is not Generator or len(g.conv_blocks) != 11:
        return False
    kinds = [type(m) for m in g.conv_blocks]
    return kinds == [nn.BatchNorm2d, nn.Upsample, nn.Conv2d, nn.BatchNorm2d, nn.LeakyReLU,
                     nn.Upsample, nn.Conv2d, nn.BatchNorm2d, nn.LeakyReLU, nn.Conv2d,
                     nn.Sigmoid] and all(
        g.conv_blocks[i].scale_factor in (2, 2.0) and g.conv_blocks[i].mode == "nearest"
        for i in (1, 5)) and all(
        g.conv_blocks[i].kernel_size == (3, 3) and g.conv_blocks[i].padding == (1, 1)
        and g.conv_blocks[i].stride == (1, 1) for i in (2, 6))


def generator_forward(g: nn.Module, z: torch.Tensor, fast: bool = True,
                      cpu_kernels: bool = True) -> torch.Tensor:
    """G(z). For the stock :class:`~ofl_core.models.Generator` and ``fast=True`` each
    "upsample ×2 → conv 3×3" pair is computed by :func:`upsample_conv3x3` (same function, same
    parameters, same BN updates; about half the generator's convolution work) and a
    one-channel last conv by :func:`conv3x3_narrow`; on the CPU the activations are kept
    channels-last (faster oneDNN convolutions). The result is a contiguous (N, C, H, W) tensor
    either way. ``cpu_kernels=False`` skips the two CPU-only steps (needed under
    ``torch.vmap``, which cannot change memory formats). Any other module is simply called."""
    if not (fast and _is_stock_generator(g)):
        return g(z)
    cb = g.conv_blocks
    out = g.l1(z).view(z.shape[0], g.ngf * 2, g.init_size, g.init_size)
    cpu = cpu_kernels and out.device.type == "cpu"
    if cpu:
        out = out.contiguous(memory_format=torch.channels_last)
    out = cb[0](out)
    out = upsample_conv3x3(out, cb[2].weight, cb[2].bias)
    out = F.leaky_relu(cb[3](out), cb[4].negative_slope)
    out = upsample_conv3x3(out, cb[6].weight, cb[6].bias)
    out = F.leaky_relu(cb[7](out), cb[8].negative_slope)
    if cpu and cb[9].out_channels == 1:
        return torch.sigmoid(conv3x3_narrow(out, cb[9].weight, cb[9].bias))
    return torch.sigmoid(cb[9](out)).contiguous()  # NCHW also after channels-last activations


def build_generator(nz: int, ngf: int, img_size: int, channels: int,
                    generator: torch.Generator, device: str | torch.device = "cpu") -> Generator:
    """A :class:`Generator` initialised from ``generator`` only (torch's global RNG untouched)."""
    with torch.random.fork_rng(devices=[]):
        g = Generator(nz=nz, ngf=ngf, img_size=img_size, channels=channels)
    g.init_weights(generator)
    return g.to(device)


def reinit_generator(g: Generator, generator: torch.Generator) -> None:
    """Re-initialise ``g`` in place from ``generator`` (works for a module on any device; keeps
    the Parameter objects, so optimisers holding them stay valid)."""
    fresh = build_generator(g.nz, g.ngf, g.img_size, g.channels, generator, "cpu")
    with torch.no_grad():
        for (_, p), (_, q) in zip(g.named_parameters(), fresh.named_parameters(), strict=True):
            p.copy_(q)


def generator_optimizer(gen: nn.Module, opt_g: torch.optim.Optimizer | None, cfg: Any,
                        rng: torch.Generator, epoch: int) -> torch.optim.Optimizer:
    """G's Adam (``cfg.g_lr``, ``cfg.g_betas``), made once (DENSE Alg. 1 line 4); with
    ``cfg.reinit_generator`` (DENSE's and Co-Boosting's codes) G is re-initialised and gets a
    fresh Adam every epoch."""
    if cfg.reinit_generator and epoch > 0:
        reinit_generator(gen, rng)
    if opt_g is None or cfg.reinit_generator:
        opt_g = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
    return opt_g


class GeneratorOptimizer:
    """G's optimiser across the epochs (:func:`generator_optimizer`), as a piece of checkpoint
    state: Adam's moments when G keeps one optimiser, None before the first epoch."""

    def __init__(self, gen: nn.Module, cfg: Any) -> None:
        self.gen, self.cfg = gen, cfg
        self.opt: torch.optim.Optimizer | None = None

    def for_epoch(self, rng: torch.Generator, epoch: int) -> torch.optim.Optimizer:
        """The optimiser of 0-based ``epoch`` (re-initialising G first when configured)."""
        self.opt = generator_optimizer(self.gen, self.opt, self.cfg, rng, epoch)
        return self.opt

    def state_dict(self) -> dict[str, Any]:
        return {"adam": None if self.opt is None else self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.opt = None
        if state["adam"] is not None:
            self.opt = torch.optim.Adam(self.gen.parameters(), lr=self.cfg.g_lr,
                                        betas=self.cfg.g_betas)
            self.opt.load_state_dict(state["adam"])


def sample_latents(cfg: Any, num_classes: int, rng: torch.Generator,
                   dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """DENSE Alg. 1 line 6: z ~ N(0, I) (``cfg.batch_size``, ``cfg.nz``) and labels y uniform
    over the C classes (sorted with ``cfg.sorted_labels``, as DENSE's code)."""
    z = torch.randn(cfg.batch_size, cfg.nz, generator=rng).to(dev)
    y = torch.randint(0, num_classes, (cfg.batch_size,), generator=rng)
    if cfg.sorted_labels:
        y = y.sort().values
    return z, y.to(dev)


__all__ = ["GeneratorOptimizer", "build_generator", "conv3x3_narrow", "generator_forward",
           "generator_optimizer", "reinit_generator", "sample_latents", "upsample_conv3x3",
           "upsample_transposed_kernel"]
