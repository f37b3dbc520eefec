"""CPU kernels behind DENSE's generator step, each against the plain PyTorch op it replaces.

Forward + backward, float32, measured alternately in the same run (median of ``--reps``):

- the generator's last 3×3 convolution (64 → C channels, 28/32 px, batch 256):
  ``F.conv2d`` (NCHW and channels-last input) vs :func:`ofl_core.distill.generator.conv3x3_narrow`;
- one BN layer's term of L_BN on a teacher's first BN input (256×16×28×28, channels-last):
  the previous float64 raw-moment version vs :func:`ofl_core.distill.losses.bn_statistics_term`;
- one "upsample ×2 → conv 3×3" pair of the generator (channels-last, batch 256): the stock
  two ops, the previous exact version (four 2×2 phase convolutions, interleaved) and
  :func:`ofl_core.distill.generator.upsample_conv3x3` (one stride-2 transposed convolution);
- the whole generator (batch 256): the stock module vs
  :func:`ofl_core.distill.generator.generator_forward` (transposed-conv upsample+conv,
  channels-last, narrow last conv).

    python benchmarks/bench_generator_kernels.py [--threads 1] [--reps 5]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_dense import median_alternating  # same folder: run as a script

from ofl_core.distill.generator import (
    build_generator,
    conv3x3_narrow,
    generator_forward,
    upsample_conv3x3,
)
from ofl_core.distill.losses import bn_statistics_term


def bn_term_float64(x: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> torch.Tensor:
    """The previous implementation: raw moments accumulated in float64."""
    n = x.numel() // x.shape[1]
    mean = x.sum((0, 2, 3), dtype=torch.float64) / n
    var = ((x * x).sum((0, 2, 3), dtype=torch.float64) / n - mean * mean).clamp_min(0.0)
    return (torch.linalg.vector_norm((mean - rm.double()).float())
            + torch.linalg.vector_norm((var - rv.double()).float()))


def phase_upsample_conv3x3(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The previous exact version: one 2×2 convolution per output phase (a, c) on the
    low-resolution input, then the four phases interleaved (channels-last)."""
    rows = (torch.stack([w[:, :, 0], w[:, :, 1] + w[:, :, 2]], 2),
            torch.stack([w[:, :, 0] + w[:, :, 1], w[:, :, 2]], 2))
    ks = [k for r in rows for k in (torch.stack([r[..., 0], r[..., 1] + r[..., 2]], -1),
                                    torch.stack([r[..., 0] + r[..., 1], r[..., 2]], -1))]
    n, _, h, wd = x.shape
    ys = [F.conv2d(F.pad(x, (1 - c, c, 1 - a, a)), ks[2 * a + c]).permute(0, 2, 3, 1)
          for a in (0, 1) for c in (0, 1)]
    out = torch.stack([torch.stack(ys[:2], 3), torch.stack(ys[2:], 3)], 2)
    return out.view(n, 2 * h, 2 * wd, -1).permute(0, 3, 1, 2) + b.view(1, -1, 1, 1)


def fwd_bwd(fn: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        leaves = [t.detach().requires_grad_() for t in tensors]
        out = fn(*leaves)
        out.sum().backward() if out.dim() == 0 else (out * out).mean().backward()
    return run


def report(title: str, t: dict[str, float], base: str) -> None:
    print(title)
    for k, v in t.items():
        print(f"  {k:38s} {v * 1000:8.1f} ms   {t[base] / v:5.2f}x vs {base}")


def parse_args(doc: str) -> argparse.Namespace:
    """``--threads`` (default 1) and ``--reps`` (default 5); sets the thread count and seed."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return args


def main() -> None:
    args = parse_args(__doc__)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, median of {args.reps}, forward + backward")
    for c_out, size in ((1, 28), (3, 32)):
        x = torch.randn(256, 64, size, size)
        xcl = x.contiguous(memory_format=torch.channels_last)
        w, b = torch.randn(c_out, 64, 3, 3) * 0.02, torch.zeros(c_out)
        t = median_alternating({
            "F.conv2d, NCHW input": fwd_bwd(lambda a, k, c: F.conv2d(a, k, c, padding=1), x, w, b),
            "F.conv2d, channels-last input": fwd_bwd(
                lambda a, k, c: F.conv2d(a, k, c, padding=1), xcl, w, b),
            "conv3x3_narrow, channels-last input": fwd_bwd(conv3x3_narrow, xcl, w, b),
        }, args.reps)
        report(f"last conv 64 -> {c_out}, {size} px, batch 256:", t, "F.conv2d, NCHW input")
    x = (torch.randn(256, 16, 28, 28) * 1.5 + 0.7).contiguous(memory_format=torch.channels_last)
    rm, rv = torch.randn(16) * 0.3, torch.rand(16) + 0.5
    t = median_alternating({
        "float64 raw moments (previous)": fwd_bwd(lambda a: bn_term_float64(a, rm, rv), x),
        "bn_statistics_term (shifted, float32)": fwd_bwd(
            lambda a: bn_statistics_term(a, rm, rv), x),
    }, args.reps)
    report("L_BN term of one BN layer, input 256x16x28x28 (channels-last):", t,
           "float64 raw moments (previous)")
    for c_in, c_out, h in ((128, 128, 7), (128, 64, 14)):
        x = torch.randn(256, c_in, h, h).contiguous(memory_format=torch.channels_last)
        w, b = torch.randn(c_out, c_in, 3, 3) * 0.05, torch.zeros(c_out)
        t = median_alternating({
            "upsample + F.conv2d (stock)": fwd_bwd(lambda a, k, c: F.conv2d(
                F.interpolate(a, scale_factor=2, mode="nearest"), k, c, padding=1), x, w, b),
            "four 2x2 phase convs (previous)": fwd_bwd(phase_upsample_conv3x3, x, w, b),
            "upsample_conv3x3 (transposed conv)": fwd_bwd(upsample_conv3x3, x, w, b),
        }, args.reps)
        report(f"upsample x2 + conv 3x3, {c_in} -> {c_out}, {h} -> {2 * h} px, batch 256:", t,
               "upsample + F.conv2d (stock)")
    for channels, size in ((1, 28), (3, 32)):
        g = build_generator(256, 64, size, channels, torch.Generator().manual_seed(0)).train()
        z = torch.randn(256, 256)
        grad = torch.randn(256, channels, size, size)

        def stock(g=g, z=z, grad=grad) -> None:
            g.zero_grad()
            (g(z) * grad).sum().backward()

        def ours(g=g, z=z, grad=grad) -> None:
            g.zero_grad()
            (generator_forward(g, z) * grad).sum().backward()

        t = median_alternating({"stock Generator module": stock,
                                "generator_forward (ours)": ours}, args.reps)
        report(f"whole generator, {channels}x{size}x{size}, batch 256:", t,
               "stock Generator module")


if __name__ == "__main__":
    main()
