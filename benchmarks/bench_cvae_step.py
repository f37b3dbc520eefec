"""One FedCVAE client step (``cvae``, FMNIST at 32 px, batch 32, Adam) and its convolutions.

Prints the milliseconds of a whole training step (channels-last, fused Adam: the library's
defaults) in float32, under bfloat16 autocast and, with ``--compile``, with the loss compiled
by ``torch.compile``; then forward + backward of each convolution alone, in NCHW and
channels-last, with its GFLOP/s. Run on an idle machine:

    OMP_NUM_THREADS=1 python benchmarks/bench_cvae_step.py --threads 1 [--compile]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

from ofl_core.models.cvae import build_cvae

B = 32
#: the ``cvae`` variant's convolutions at 32 px: (name, layer, input channels, input size)
LAYERS = [
    ("enc1", nn.Conv2d(1, 32, 4, 2, 1), 1, 32), ("enc2", nn.Conv2d(32, 32, 4, 2, 1), 32, 16),
    ("enc3", nn.Conv2d(32, 64, 4, 2, 1), 32, 8), ("enc4", nn.Conv2d(64, 64, 4, 2, 1), 64, 4),
    ("dec1", nn.ConvTranspose2d(64, 64, 4, 2, 1), 64, 2),
    ("dec2", nn.ConvTranspose2d(64, 32, 4, 2, 1), 64, 4),
    ("dec3", nn.ConvTranspose2d(32, 32, 4, 2, 1), 32, 8),
    ("dec4", nn.ConvTranspose2d(32, 1, 4, 2, 1), 32, 16),
]


def ms_per_call(f: Callable[[], None], n: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


def step_ms(amp: bool, compiled: bool, n: int) -> float:
    torch.manual_seed(0)
    model = build_cvae("cvae", 10, 1, 32, 10, True, None).train()
    model.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    x = torch.rand(B, 1, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (B,))
    g = torch.Generator().manual_seed(0)

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            return model.loss(x, y, 1.0, g)[0]

    fn = torch.compile(loss_fn) if compiled else loss_fn

    def step() -> None:
        loss = fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return ms_per_call(step, n)


def layer_rows(n: int) -> list[str]:
    rows = []
    for cl in (False, True):
        for name, layer, c, s in LAYERS:
            mod = layer.to(memory_format=torch.channels_last) if cl else layer
            x = torch.randn(B, c, s, s)
            if cl:
                x = x.contiguous(memory_format=torch.channels_last)
            x.requires_grad_(name != "enc1")  # the images need no gradient
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as fc:
                mod(x).sum().backward()
            ms = ms_per_call(lambda mod=mod, x=x: mod(x).sum().backward(), n)
            rows.append(f"  {'channels-last' if cl else 'NCHW':13s} {name}  {ms:6.3f} ms  "
                        f"{fc.get_total_flops() / ms / 1e6:6.1f} GFLOP/s")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--compile", action="store_true", help="also time the compiled loss")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), batch {B}")
    print(f"step, float32:            {step_ms(False, False, args.steps):6.2f} ms")
    print(f"step, bfloat16 autocast:  {step_ms(True, False, args.steps):6.2f} ms")
    if args.compile:
        print(f"step, torch.compile loss: {step_ms(False, True, args.steps):6.2f} ms")
    print("convolutions, forward + backward:")
    print("\n".join(layer_rows(200)))


if __name__ == "__main__":
    main()
