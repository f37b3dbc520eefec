"""Client-side speed: local-training throughput and cold vs cached client training.

    python benchmarks/bench_clients.py [--threads N]

Prints (1) samples/s of one local SGD epoch-equivalent at batch 128 for cnn_mnist (1×28×28) and
resnet18 (3×32×32) on random data, and (2) the time to train 5 quick clients on the embedded
FMNIST cold vs loading them from the upload cache, and their ratio, measured in the same run.
The machine may be shared and noisy: compare ratios, not absolute seconds across runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, train_local
from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.upload_cache import UploadCache


def throughput(arch: str, channels: int, size: int, n: int, epochs: int = 1) -> float:
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(n, channels, size, size, generator=g) * 255).to(torch.uint8)
    y = torch.randint(0, 10, (n,), generator=g)
    cfg = LocalTrainConfig(arch=arch, epochs=1, batch_size=128)
    train_local(x[:256], y[:256], cfg, 10, seed=0, progress=False)  # warm-up
    t0 = time.perf_counter()
    train_local(x, y, LocalTrainConfig(arch=arch, epochs=epochs, batch_size=128), 10, seed=0,
                progress=False)
    return n * epochs / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, device cpu")
    for arch, c, s, n in [("cnn_mnist", 1, 28, 4096), ("resnet18", 3, 32, 512)]:
        print(f"local training {arch:9s} batch 128: {throughput(arch, c, s, n):8.0f} samples/s")

    ds = load_dataset("fmnist_embedded")
    part = make_partition(ds.y_train.numpy(), 5, "dirichlet", alpha=0.1, seed=1)
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=2)
    with tempfile.TemporaryDirectory() as d:
        cache = UploadCache(d)
        t0 = time.perf_counter()
        train_clients(ds, part, cfg, seed=1, cache=cache, workers=1, progress=False)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        train_clients(ds, part, cfg, seed=1, cache=cache, workers=1, progress=False)
        warm = time.perf_counter() - t0
    print(f"5 quick clients (embedded FMNIST, 2 epochs): cold {cold:.2f}s, "
          f"from cache {warm:.3f}s, ratio {cold / warm:.0f}x")


if __name__ == "__main__":
    main()
