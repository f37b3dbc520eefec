"""Speed of the distillation pass over the pool with the teachers' targets kept
(:mod:`ofl_core.distill.targets`) against the same pass asking the teachers every time.

The setting is DENSE Table 1's on FashionMNIST: 5 ``cnn_mnist`` teachers (random weights: the
cost does not depend on them), a ``cnn_mnist`` student, bfloat16 autocast as the library's
default on this CPU; ``paper``: batch 128, no KD-time augmentation; ``authors_code``: batch 256,
random flips. For pools of ``--pools`` batches it times one whole pass each way (median of
``--reps`` alternating passes, after a warm-up pass), and the targets' one-time cost per pool
batch (its images, and their mirror images under flips). A DENSE run of T epochs passes over
pools of 1, 2, …, T batches, so its distillation stage costs about T(T+1)/2 batch steps;
the projection to T = ``--epochs`` (200, the papers') uses the per-batch costs of the largest
pool. Both passes are the library's own code: the one that asks the teachers is the library's
pass before the targets were kept (``Distiller.step`` per batch), not a strawman.

    OMP_NUM_THREADS=1 python benchmarks/bench_kd_targets.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ofl_core.cpu_memory import large_blocks_from_heap
from ofl_core.dense.server import Distiller
from ofl_core.distill.kernels import fuse_relu_maxpool
from ofl_core.distill.pool import ImagePool
from ofl_core.distill.teachers import TeacherBank
from ofl_core.models import build_model

PRESETS = {"paper": (128, "none", 1.0), "authors_code": (256, "flip", 20.0)}


def make_distiller(batch: int, augment: str, temperature: float, m: int, seed: int
                   ) -> Distiller:
    torch.manual_seed(seed)
    bank = TeacherBank([build_model("cnn_mnist", 10, 1, 28).eval() for _ in range(m)],
                       batched="auto", channels_last="auto")
    student = build_model("cnn_mnist", 10, 1, 28)
    if bank.channels_last:
        student = student.to(memory_format=torch.channels_last)
    fuse_relu_maxpool(student)
    student.train()
    opt = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9)
    return Distiller(bank, student, opt, temperature, augment, torch.Generator().manual_seed(1),
                     torch.device("cpu"), "auto")


def filled_pool(batches: int, batch: int, seed: int) -> ImagePool:
    g = torch.Generator().manual_seed(seed)
    pool = ImagePool()
    for _ in range(batches):
        pool.add(torch.rand(batch, 1, 28, 28, generator=g))
    return pool


def time_passes(d: Distiller, pool: ImagePool, batch: int, reps: int) -> dict[str, float]:
    def asked() -> None:
        for xb in pool.batches(batch, d.rng):
            d.step(xb)

    def kept() -> None:
        d.pool_pass(pool, batch)

    with large_blocks_from_heap():
        t0 = time.perf_counter()
        kept()  # computes the targets of the whole pool once
        first = time.perf_counter() - t0
        asked()
        runs: dict[str, list[float]] = {"asked": [], "kept": []}
        for _ in range(reps):
            for name, fn in (("asked", asked), ("kept", kept)):
                t0 = time.perf_counter()
                fn()
                runs[name].append(time.perf_counter() - t0)
    out = {k: statistics.median(v) for k, v in runs.items()}
    out["targets"] = max(first - out["kept"], 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    ap.add_argument("--pools", default="10,40", help="pool sizes in batches (10,40)")
    ap.add_argument("--reps", type=int, default=3, help="timed passes per side (3)")
    ap.add_argument("--epochs", type=int, default=200, help="epochs to project to (200)")
    ap.add_argument("--clients", type=int, default=5, help="teachers (5)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; {args.clients} cnn_mnist teachers, "
          "bfloat16 autocast")
    n_steps = args.epochs * (args.epochs + 1) // 2
    for preset, (batch, augment, temp) in PRESETS.items():
        print(f"== {preset}: batch {batch}, KD-time augmentation {augment!r}")
        print("  pool batches   asked (s)   kept (s)   ratio   targets per pool batch (s)")
        last = None
        for p in (int(v) for v in args.pools.split(",")):
            d = make_distiller(batch, augment, temp, args.clients, seed=0)
            r = time_passes(d, filled_pool(p, batch, seed=p), batch, args.reps)
            print(f"  {p:12d} {r['asked']:11.2f} {r['kept']:10.2f} {r['asked'] / r['kept']:7.2f}"
                  f" {r['targets'] / p:12.3f}")
            last = (p, r)
        p, r = last
        asked = r["asked"] / p * n_steps
        kept = r["kept"] / p * n_steps + r["targets"] / p * args.epochs
        print(f"  projected distillation stage of {args.epochs} epochs ({n_steps} batch steps): "
              f"asked {asked:.0f} s, kept {kept:.0f} s (targets included) -> "
              f"{asked - kept:.0f} s saved, {asked / kept:.2f}x")


if __name__ == "__main__":
    main()
