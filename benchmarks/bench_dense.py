"""Speed of DENSE's server side: ofl_core's implementation vs a straightforward one.

For 5 ``cnn_mnist`` teachers (1×28×28) and 5 ``cnn_cifar`` teachers (3×32×32), batch 256, the
DENSE paper preset's losses (CE + L_BN + 0.5·L_div), this prints seconds per generator step
and per KD step of

- **ours**: ``ofl_core.methods.dense.DenseSynthesizer`` / ``Distiller`` — the code ``run`` uses
  (frozen teachers without weight gradients in a
  :class:`~ofl_core.distill.teachers.TeacherBank`, frozen student, exact upsample+conv pairs as
  stride-2 transposed convolutions, channels-last
  generator activations and a 1×1-tap last convolution on the CPU, channels-last teachers
  whose first convolutions take their input gradient as tap maps + fold, float32
  shifted-moment BN statistics with a fused backward, no host syncs, in-memory uint8 pool
  with batched augmentation), float32, inside
  :func:`~ofl_core.cpu_memory.large_blocks_from_heap` as ``run_method`` runs every server
  method on the CPU (large activations reused from the heap instead of fresh, page-faulted
  mmaps; same values). The same code on glibc's default malloc is printed beside it;
- **straightforward**: written below the way DENSE's code does it — an ``nn.Module`` ensemble
  calling the teachers one after another with their weight gradients kept, DeepInversion-style
  BN hooks, a student that also collects weight gradients, ``loss.item()`` every step for the
  best-batch bookkeeping, and a KD pass that re-reads the pool from PNG files each epoch
  (PIL + torchvision transforms + a DataLoader with ``num_workers=0``, as the official code
  does but without its 4 worker processes);

measured alternately in the same run (median of the repetitions), then the optional bfloat16
autocast (``amp=True``; not the default), vmap vs loop teachers, and server time per generator
step for m = 5, 10, 20, 50 teachers. The last line is the geometric mean over the two
architectures of the float32 generator-step speedup.

Run: ``python benchmarks/bench_dense.py`` (≈ 2–3 minutes on 2 CPU cores; ``--threads``,
``--reps``).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from torchvision import transforms

from ofl_core.cpu_memory import large_blocks_from_heap
from ofl_core.distill.generator import build_generator
from ofl_core.distill.kernels import fuse_relu_maxpool
from ofl_core.distill.pool import ImagePool
from ofl_core.distill.teachers import TeacherBank
from ofl_core.methods.dense import DenseConfig, DenseSynthesizer, Distiller
from ofl_core.models import build_model

SETUPS = (("cnn_mnist", 1, 28), ("cnn_cifar", 3, 32))


def make_teachers(arch: str, m: int, channels: int, size: int, seed: int = 0) -> list[nn.Module]:
    """Randomly initialised teachers with non-trivial BN running statistics."""
    torch.manual_seed(seed)
    models = []
    for _ in range(m):
        mdl = build_model(arch, 10, channels, size)
        for mod in mdl.modules():
            if isinstance(mod, nn.BatchNorm2d):
                with torch.no_grad():
                    mod.running_mean.uniform_(-0.5, 0.5)
                    mod.running_var.uniform_(0.5, 2.0)
        models.append(mdl.eval())
    return models


# ------------------------------------------------------------------ the straightforward version


class NaiveEnsemble(nn.Module):
    """Teachers in a list, called one after another (DENSE's ``Ensemble_A``)."""

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        self.models = models

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = 0
        for mdl in self.models:
            total = total + mdl(x)
        return total / len(self.models)


class DeepInversionHook:
    """DENSE's/DeepInversion's BN hook: permute + contiguous copy, separate mean and var."""

    def __init__(self, module: nn.BatchNorm2d) -> None:
        self.hook = module.register_forward_hook(self.hook_fn)

    def hook_fn(self, module, inputs, output) -> None:
        x = inputs[0]
        nch = x.shape[1]
        mean = x.mean([0, 2, 3])
        var = x.permute(1, 0, 2, 3).contiguous().view([nch, -1]).var(1, unbiased=False)
        self.r_feature = (torch.norm(module.running_var.data - var, 2)
                          + torch.norm(module.running_mean.data - mean, 2))


def naive_kldiv(logits: torch.Tensor, targets: torch.Tensor, t: float = 1.0,
                reduction: str = "batchmean") -> torch.Tensor:
    q = F.log_softmax(logits / t, dim=1)
    p = F.softmax(targets / t, dim=1)
    return F.kl_div(q, p, reduction=reduction) * (t * t)


class NaiveDense:
    def __init__(self, teachers: list[nn.Module], student: nn.Module, gen: nn.Module,
                 nz: int) -> None:
        self.ens = NaiveEnsemble(teachers)  # teachers keep requires_grad=True
        self.hooks = [DeepInversionHook(mod) for t in teachers for mod in t.modules()
                      if isinstance(mod, nn.BatchNorm2d)]
        self.student, self.gen, self.nz = student, gen, nz
        self.opt_g = torch.optim.Adam(gen.parameters(), 1e-3, betas=(0.5, 0.999))
        self.opt_s = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9)
        self.best_cost, self.best_inputs = 1e6, None

    def generator_step(self, z: torch.Tensor, y: torch.Tensor) -> None:
        self.student.eval()
        self.opt_g.zero_grad()
        inputs = self.gen(z)
        t_out = self.ens(inputs)
        loss_bn = sum(h.r_feature for h in self.hooks) / len(self.ens.models)
        loss_oh = F.cross_entropy(t_out, y)
        s_out = self.student(inputs)
        mask = (s_out.max(1)[1] != t_out.max(1)[1]).float()
        loss_adv = -(naive_kldiv(s_out, t_out, reduction="none").sum(1) * mask).mean()
        loss = loss_oh + 1.0 * loss_bn + 0.5 * loss_adv
        if self.best_cost > loss.item() or self.best_inputs is None:
            self.best_cost = loss.item()
            self.best_inputs = inputs.data
        loss.backward()
        self.opt_g.step()

    def kd_pass(self, loader) -> int:
        self.student.train()
        steps = 0
        total = 0.0
        for images in loader:
            self.opt_s.zero_grad()
            with torch.no_grad():
                t_out = self.ens(images)
            s_out = self.student(images.detach())
            loss = naive_kldiv(s_out, t_out.detach())
            loss.backward()
            self.opt_s.step()
            total += loss.detach().item()
            steps += 1
        return steps


class PNGPool(torch.utils.data.Dataset):
    """DENSE's ImagePool: every batch saved as PNG files, the folder re-read every epoch."""

    def __init__(self, root: str, transform) -> None:
        self.root, self.transform = root, transform
        self._idx = 0

    def add(self, imgs: torch.Tensor) -> None:
        arr = (imgs.detach().clamp(0, 1).cpu().numpy() * 255).astype("uint8")
        for i, img in enumerate(arr):
            pic = Image.fromarray(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0))
            pic.save(os.path.join(self.root, f"{self._idx}-{i}.png"))
        self._idx += 1

    def files(self) -> list[str]:
        return [os.path.join(d, f) for d, _, fs in os.walk(self.root) for f in fs
                if f.endswith(".png")]

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(Image.open(self._files[i]))

    def __len__(self) -> int:
        return len(self._files)

    def loader(self, batch_size: int):
        self._files = self.files()
        return torch.utils.data.DataLoader(self, batch_size=batch_size, shuffle=True,
                                           num_workers=0)


# ------------------------------------------------------------------ measurement


def timed(fn) -> float:
    """Seconds ``fn()`` took, or what it returns if that is a :class:`SelfTimed` time."""
    t0 = time.perf_counter()
    out = fn()
    return out.seconds if isinstance(out, SelfTimed) else time.perf_counter() - t0


class SelfTimed:
    """A duration a benchmarked function measured itself (see :func:`in_heap`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


def in_heap(fn: Callable[[], object]) -> Callable[[], SelfTimed]:
    """``fn`` as ``run_method`` executes it on the CPU: inside
    :func:`~ofl_core.cpu_memory.large_blocks_from_heap`. A real run enters the block once for
    thousands of steps, so each call makes one untimed step (which refills the heap after the
    previous exit gave it back) and times the next one."""

    def call() -> SelfTimed:
        with large_blocks_from_heap():
            fn()
            t0 = time.perf_counter()
            fn()
            return SelfTimed(time.perf_counter() - t0)

    return call


def median_alternating(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Warm each function up once, then time them alternately ``reps`` times each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            times[k].append(timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def ours_synth(teachers, arch, channels, size, batch, amp=False, batched="auto"):
    cfg = DenseConfig.for_preset("paper", batch_size=batch, amp=amp, batched_teachers=batched)
    bank = TeacherBank(teachers, batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student = build_model(arch, 10, channels, size)
    if bank.channels_last:
        student.to(memory_format=torch.channels_last)
    fuse_relu_maxpool(student)  # as run_dense does
    rng = torch.Generator().manual_seed(0)
    gen = build_generator(cfg.nz, cfg.ngf, size, channels, rng).train()
    synth = DenseSynthesizer(gen, bank, student, cfg, rng, torch.device("cpu"))
    synth.freeze_student(epoch=0)
    opt = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
    z = torch.randn(batch, cfg.nz, generator=rng)
    y = torch.randint(0, 10, (batch,), generator=rng)
    state = {"best": torch.tensor(float("inf")), "x": None}

    def step() -> None:
        loss, _, x = synth.step(z, y, [opt])
        state["x"] = x if state["x"] is None else torch.where(loss < state["best"], x, state["x"])
        state["best"] = torch.minimum(state["best"], loss)

    return step, bank, student, gen


def bench_setup(arch: str, channels: int, size: int, batch: int, m: int, reps: int,
                pool_batches: int) -> dict[str, float]:
    rng = torch.Generator().manual_seed(1)
    # ---- generator steps
    ours_step, bank, student, gen = ours_synth(make_teachers(arch, m, channels, size), arch,
                                               channels, size, batch)
    amp_step, *_ = ours_synth(make_teachers(arch, m, channels, size), arch, channels, size,
                              batch, amp=True)
    naive_teachers = make_teachers(arch, m, channels, size)
    for t in naive_teachers:
        t.requires_grad_(True)
    naive_gen = build_generator(256, 64, size, channels, torch.Generator().manual_seed(0))
    naive = NaiveDense(naive_teachers, build_model(arch, 10, channels, size), naive_gen, 256)
    z = torch.randn(batch, 256, generator=rng)
    y = torch.randint(0, 10, (batch,), generator=rng)
    g = median_alternating({"naive": lambda: naive.generator_step(z, y),
                            "ours_malloc": ours_step, "ours": in_heap(ours_step),
                            "ours_amp": in_heap(amp_step)}, reps)
    # ---- KD steps: one pass over a pool of ``pool_batches`` batches
    images = [torch.rand(batch, channels, size, size, generator=rng) for _ in range(pool_batches)]
    pool = ImagePool(uint8=True)
    for b in images:
        pool.add(b)
    aug = "crop_flip" if arch == "cnn_cifar" else "flip"
    student.requires_grad_(True).train()
    distiller = Distiller(bank, student, torch.optim.SGD(student.parameters(), lr=0.01,
                                                         momentum=0.9), 1.0, aug, rng,
                          torch.device("cpu"))
    tf = ([transforms.RandomCrop(size, padding=4)] if arch == "cnn_cifar" else []) + [
        transforms.RandomHorizontalFlip(), transforms.ToTensor()]
    with tempfile.TemporaryDirectory() as tmp:
        png = PNGPool(tmp, transforms.Compose(tf))
        for b in images:
            png.add(b)
        k = median_alternating({
            "naive": lambda: naive.kd_pass(png.loader(batch)),
            "ours": in_heap(lambda: [distiller.step(xb) for xb in pool.batches(batch, rng)]),
        }, 1)
    bank.close()
    return {"gen_naive": g["naive"], "gen_ours": g["ours"], "gen_amp": g["ours_amp"],
            "gen_ours_malloc": g["ours_malloc"],
            "kd_naive": k["naive"] / pool_batches, "kd_ours": k["ours"] / pool_batches}


def bench_scaling(ms: tuple[int, ...], batch: int, vmap_ms: tuple[int, ...]
                  ) -> list[tuple[int, float, float | None]]:
    """Seconds per generator step of ours with m cnn_mnist teachers: the loop path (the CPU
    default) and, for ``vmap_ms``, the vmapped path."""
    rows = []
    for m in ms:
        fns = {}
        loop_step, b1, *_ = ours_synth(make_teachers("cnn_mnist", m, 1, 28), "cnn_mnist", 1,
                                       28, batch, batched=False)
        fns["loop"] = in_heap(loop_step)
        if m in vmap_ms:
            vmap_step, b2, *_ = ours_synth(make_teachers("cnn_mnist", m, 1, 28), "cnn_mnist",
                                           1, 28, batch, batched=True)
            fns["vmap"] = in_heap(vmap_step)
        t = median_alternating(fns, 1)
        rows.append((m, t["loop"], t.get("vmap")))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per variant (3)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--scaling-batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}, batch {args.batch}, "
          f"5 teachers, DENSE paper losses (CE + L_BN + 0.5 L_div), median of {args.reps}")
    ratios, amp_ratios, malloc_ratios = [], [], []
    for arch, c, s in SETUPS:
        r = bench_setup(arch, c, s, args.batch, 5, args.reps, pool_batches=2)
        gen_x, kd_x = r["gen_naive"] / r["gen_ours"], r["kd_naive"] / r["kd_ours"]
        ratios.append(gen_x)
        amp_ratios.append(r["gen_naive"] / r["gen_amp"])
        malloc_ratios.append(r["gen_naive"] / r["gen_ours_malloc"])
        print(f"{arch:9s} generator step: straightforward {r['gen_naive']:.3f} s, "
              f"ours {r['gen_ours']:.3f} s -> {gen_x:.2f}x  |  ours with glibc's default "
              f"malloc (as the straightforward one) {r['gen_ours_malloc']:.3f} s -> "
              f"{malloc_ratios[-1]:.2f}x  |  ours+bf16 autocast "
              f"{r['gen_amp']:.3f} s -> {r['gen_naive'] / r['gen_amp']:.2f}x (amp=True, "
              "not the default)")
        print(f"{arch:9s} KD step:        straightforward {r['kd_naive']:.3f} s, "
              f"ours {r['kd_ours']:.3f} s -> {kd_x:.2f}x  (one pass over a 2-batch pool, "
              "incl. reading it)")
    print(f"server time per generator step vs m (ours, cnn_mnist, batch {args.scaling_batch}):")
    print("     m   loop (s)   vmap (s)   loop s/teacher")
    for m, t_loop, t_vmap in bench_scaling((5, 10, 20, 50), args.scaling_batch, (5, 20)):
        vm = f"{t_vmap:8.3f}" if t_vmap is not None else "       -"
        print(f"  {m:4d}   {t_loop:8.3f}   {vm}   {t_loop / m:8.4f}")
    print(f"total benchmark time {time.perf_counter() - t_start:.0f} s; per-architecture "
          f"generator-step speedups {', '.join(f'{x:.2f}x' for x in ratios)} (float32)")
    malloc_geo = math.exp(float(np.mean(np.log(malloc_ratios))))
    print(f"ours without large_blocks_from_heap (both on glibc's default malloc): "
          f"generator-step speedup {malloc_geo:.2f}x")
    amp_geo = math.exp(float(np.mean(np.log(amp_ratios))))
    print(f"with bfloat16 autocast (amp=True, changes numerics; not the default): "
          f"generator-step speedup {amp_geo:.2f}x")
    geo = math.exp(float(np.mean(np.log(ratios))))
    print(f"generator-step speedup: {geo:.2f}x")


if __name__ == "__main__":
    main()
