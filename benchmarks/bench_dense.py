"""Speed of DENSE's server side: ofl_core's implementation vs a straightforward one.

The straightforward one is written the way DENSE's public code (zj-jayzhang/DENSE,
``loop_df_fl.py --type=kd_train``) runs it.

**The straightforward version** (:class:`StraightforwardDense`, below) is DENSE's server loop
for the ``authors_code`` setting as that code executes it, written from scratch in plain
PyTorch (docs/decisions/authors-code.md#dense-public-code lists the
15 points of that loop; the numbers below refer to that table). It follows:

- the teachers in a plain Python list, called one after another and their logits averaged
  (their ``Ensemble``), in eval mode (#9), with their weights still requiring gradients, so
  every generator step also computes and accumulates the teachers' weight gradients (#15);
- no BN hooks: their hooks are registered on ``Ensemble_A(model_list).modules()``, which cannot
  see teachers in a plain list, so L_BN is inert (bn weight 0); the loss is CE (oh 1) +
  adv 1 · L_div (mask of argmax disagreement between student and teachers, per-sample KL, mean
  over the batch) (#10);
- per epoch: the generator re-initialised as their ``reset_model`` (conv/linear N(0, 0.02),
  biases 0, BN γ N(1, 0.02), β 0), fresh z ~ N(0, I) optimised jointly with G by a new Adam
  (1e-3, (0.5, 0.999)), sorted uniform labels (#7); their generator's LeakyReLUs in place;
- in every generator step, per image, a differentiable random crop (padding 4) + horizontal
  flip of G(z) (their kornia "global view"), and the unused "local view" (random resized crop,
  scale 0.25–1, + flip) also computed and thrown away, as their ``MultiTransform`` does (#4).
  Written in torch the way kornia 0.6.8 does it: padding of the batch, then a per-image loop
  of slice copies into a new tensor (kornia's ``crop_by_indices``; the resized crop with one
  bilinear ``interpolate`` per image), the flip as ``clone`` + ``index_put`` of the flipped
  selected images. Measured on this CPU (1 thread, 128 × 1 × 28 × 28, forward of both views +
  backward of the global one): 9–10 ms per step vs kornia 0.6.8's 16 ms (kornia's parameter
  sampling and transform matrices are left out), ≈ 0.2 s per 30-step epoch less than theirs;
- ``loss.item()`` every step for the best-batch bookkeeping (strict <, pre-augmentation G(z))
  and again for the progress text (#3); the student in train mode during the generator steps
  of the first epoch and in eval mode from then on, because the per-epoch test leaves it there
  (#1); its weights also requiring gradients there (#15);
- after the generator steps, the best batch written as a normalised image grid (their
  ``vutils.save_image(..., '1.png')``) and as one PNG file per image of floor(255·x) into the
  pool folder (#2);
- the KD pass: one shuffled pass over ALL PNGs in the folder, re-listed (``os.walk``) and
  re-read each epoch through PIL and torchvision transforms (FMNIST: ``RandomHorizontalFlip`` +
  ``ToTensor``; CIFAR: ``RandomCrop(32, padding=4)`` in front) and a ``DataLoader`` with
  ``num_workers=0`` (the worker count the authors' time was measured with), batch 128, last
  partial batch kept; teachers under ``no_grad``; KL·T² with T = 20, batch mean; student SGD
  lr 0.005 momentum 0.9, one optimiser for the run; ``loss.item()`` and the argmax agreement
  counted every step (#5, #8);
- after every epoch, a test pass over 10 000 images in eval mode, batch 256, through a
  ``DataLoader`` (``num_workers=0``) over a dataset that turns each uint8 image into a PIL image
  and back with ``ToTensor`` (what torchvision's ``FashionMNIST`` does), summing the CE loss
  and the correct count with ``.item()`` per batch; the student saved with ``torch.save`` when
  its accuracy improved (#12). The test images are random uint8 tensors of FMNIST's shape
  (10000 × 1 × 28 × 28) with random labels, so no dataset is needed; both sides use the same.

Left out, with the reason: their ``tqdm`` progress bars and wandb logging (wandb is stubbed
out in their measured run; tqdm costs microseconds per step); ``pin_memory=True`` on their
pool loader (a no-op without CUDA); their launch-time work (data partition, the two test
passes of the FedAvg model and the ensemble before the loop, loading the teachers); kornia's
bookkeeping (above). Everything left out costs the straightforward version less time than
their code, so the ratios below are, if anything, in the straightforward version's favour.

**Ours** is ``ofl_core``'s real DENSE server, ``run_method("dense", ...)`` with the
``authors_code`` preset, the code ``run_method`` runs (teachers from client uploads in a
:class:`~ofl_core.distill.teachers.TeacherBank` without weight gradients, frozen student,
exact stride-2 transposed convolutions for upsample+conv, channels-last activations and
teachers, fused ReLU/max-pool, in-memory uint8 pool with batched augmentation, no host syncs,
inside :func:`~ofl_core.cpu_memory.large_blocks_from_heap`), evaluated by
:func:`~ofl_core.evaluate.accuracy` on the same test tensors after every epoch.

Sections (``--section``, default ``all``):

- ``steps``: seconds per generator step and per KD step (one pass over a 2-batch pool,
  including reading it) for 5 ``cnn_mnist`` (1 × 28 × 28) and 5 ``cnn_cifar`` (3 × 32 × 32)
  teachers, batch ``--batch`` (256, the README command's), ``authors_code`` losses, the student
  in eval mode (epochs 2…T), measured alternately (median of ``--reps``); ours also with
  glibc's default malloc and with bfloat16 autocast (``amp=True``; DENSE's default where
  bfloat16 is native — the float32 figure is the like-for-like one: the authors' code is
  float32);
- ``epoch``: whole epochs at the stage setting (5 random-init ``cnn_mnist`` teachers, FMNIST
  shape, batch 128 for the synthetic and the KD batch, ``--g-steps`` 30 generator steps per
  epoch, ``--epochs`` E = 2): seconds per epoch of both, split into generator steps, KD pass and
  test, beside the authors' measured 685 s / 30 epochs = 22.8 s per epoch. The first epoch of
  each side is a warm-up (printed, not in the ratios). The KD pass grows by one pool batch per
  epoch, so the authors' per-epoch mean covers pools of 1…30 batches; the comparison with their
  figure is therefore made on a projection of each side to their budget (30 epochs × 30 steps:
  30 × (fixed per-epoch time, the generator part scaled to 30 steps) + (1 + … + 30) × KD time
  per pool batch), printed beside the measured epochs. ``--epochs 30`` measures the whole run;
- ``scaling``: seconds per generator step of ours (loop path, the CPU default; vmap for m = 5
  and 20) and of the straightforward version for m = 5, 10, 20, 50, 100 ``cnn_mnist`` teachers
  (batch ``--scaling-batch`` 64), the time per teacher and per added teacher, and the log-log
  slope of step time against m, from which the line says whether the time is linear or better.

Run (one process, one thread, an otherwise idle machine)::

    OMP_NUM_THREADS=1 python benchmarks/bench_dense.py                     # all, ≈ 3–4 min
    OMP_NUM_THREADS=1 python benchmarks/bench_dense.py --section steps     # ≈ 1–1.5 min
    OMP_NUM_THREADS=1 python benchmarks/bench_dense.py --section epoch     # ≈ 1 min
    OMP_NUM_THREADS=1 python benchmarks/bench_dense.py --section epoch --epochs 30  # ≈ 17 min
    OMP_NUM_THREADS=1 python benchmarks/bench_dense.py --section scaling   # ≈ 0.5–1 min

(from the repository root with ``PYTHONPATH=.``; times extrapolated from reduced-size runs
on the 2-core CPU; ``--threads``, ``--reps``, ``--batch``, ``--g-steps``, ``--epoch-batch``,
``--clients``, ``--scaling-batch``, ``--scaling-ms`` change the sizes, e.g. a smoke run:
``--section epoch --epochs 2 --g-steps 3``.)
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
from torchvision.utils import save_image

import ofl_core.dense.server as dense_module
from ofl_core.cpu_memory import large_blocks_from_heap
from ofl_core.dense.server import DenseConfig, DenseSynthesizer, Distiller
from ofl_core.distill.generator import build_generator, sample_latents
from ofl_core.distill.kernels import fuse_relu_maxpool
from ofl_core.distill.pool import ImagePool, resolve_pool_augment
from ofl_core.distill.teachers import TeacherBank
from ofl_core.evaluate import accuracy
from ofl_core.models import build_model
from ofl_core.models.generator import Generator
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload

SETUPS = (("cnn_mnist", 1, 28), ("cnn_cifar", 3, 32))

#: the authors' code on this CPU at one thread: DENSE server, FMNIST, 5 × cnn_mnist teachers,
#: 30 epochs × 30 generator steps, batch 128, KD from the pool (benchmarks/bench_stages.py)
AUTHORS_SERVER_S, AUTHORS_EPOCHS, AUTHORS_G_STEPS = 685.0, 30, 30


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


class ListEnsemble(nn.Module):
    """The mean of the teachers' logits, the teachers called one after another. They sit in a
    plain list (not registered submodules), so ``.modules()``, ``.eval()`` and hooks never see
    them, as in DENSE's code."""

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        self.models = models  # a list attribute: nn.Module does not register its contents

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = 0
        for mdl in self.models:
            total += mdl(x)
        return total / len(self.models)


def kl_loss(logits: torch.Tensor, targets: torch.Tensor, t: float = 1.0,
            reduction: str = "batchmean") -> torch.Tensor:
    """KL(σ(targets/T) ‖ σ(logits/T))·T²."""
    return F.kl_div(F.log_softmax(logits / t, dim=1), F.softmax(targets / t, dim=1),
                    reduction=reduction) * (t * t)


def flip_some(x: torch.Tensor) -> torch.Tensor:
    """Horizontal flip of each image with probability 1/2: clone + ``index_put`` of the
    flipped selection (kornia's partial-batch path)."""
    sel = torch.rand(x.shape[0]) < 0.5
    return x.clone().index_put((sel,), x[sel].flip(-1))


def crop_flip_view(x: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """Per-image random crop of the zero-padded batch back to its size, then a random flip;
    differentiable. A per-image loop of slice copies, as kornia's ``RandomCrop``."""
    b, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    out = x.new_empty(b, c, h, w)
    for i, (oy, ox) in enumerate(torch.randint(0, 2 * pad + 1, (b, 2)).tolist()):
        out[i] = padded[i, :, oy:oy + h, ox:ox + w]
    return flip_some(out)


def resized_crop_flip_view(x: torch.Tensor, scale: tuple[float, float] = (0.25, 1.0),
                           ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> torch.Tensor:
    """Per-image random resized crop (area fraction ``scale``, aspect ``ratio``) back to the
    image size (bilinear), then a random flip: kornia's ``RandomResizedCrop`` as DENSE's
    "local view", which their generator step computes and discards."""
    b, c, h, w = x.shape
    area = torch.empty(b).uniform_(*scale) * (h * w)
    r = torch.exp(torch.empty(b).uniform_(math.log(ratio[0]), math.log(ratio[1])))
    cw = torch.sqrt(area * r).round().clamp(1, w).long().tolist()
    ch = torch.sqrt(area / r).round().clamp(1, h).long().tolist()
    out = x.new_empty(b, c, h, w)
    for i in range(b):
        y0 = int(torch.randint(0, h - ch[i] + 1, ()))
        x0 = int(torch.randint(0, w - cw[i] + 1, ()))
        patch = x[i:i + 1, :, y0:y0 + ch[i], x0:x0 + cw[i]]
        out[i] = F.interpolate(patch, size=(h, w), mode="bilinear", align_corners=True)[0]
    return flip_some(out)


class PNGPool:
    """The synthetic pool as DENSE's code keeps it: every added batch written as one PNG per
    image (floor(255·x)); :meth:`dataset` lists the folder anew and reads the files lazily."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.batches_added = 0

    def add(self, imgs: torch.Tensor) -> None:
        arr = (imgs.detach().clamp(0, 1).cpu().numpy() * 255).astype("uint8")
        for i, img in enumerate(arr):
            pic = Image.fromarray(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0))
            pic.save(os.path.join(self.root, f"{self.batches_added}-{i}.png"))
        self.batches_added += 1

    def dataset(self, transform: Callable) -> PNGFiles:
        return PNGFiles(self.root, transform)


class PNGFiles(torch.utils.data.Dataset):
    """Every image file under ``root`` (walked once, at construction), opened per item."""

    def __init__(self, root: str, transform: Callable) -> None:
        self.transform = transform
        self.files = [os.path.join(d, f) for d, _, names in os.walk(root)
                      for ext in ("png", "jpg", "jpeg", "JPEG") for f in names if f.endswith(ext)]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(Image.open(self.files[i]))


class PILTestSet(torch.utils.data.Dataset):
    """uint8 test images served as torchvision's ``FashionMNIST`` serves them: each item
    through a PIL image and ``ToTensor``, the label as an int."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x = x[:, 0] if x.shape[1] == 1 else x.permute(0, 2, 3, 1)
        self.y = y
        self.to_tensor = transforms.ToTensor()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.to_tensor(Image.fromarray(self.x[i].numpy())), int(self.y[i])


class StraightforwardDense:
    """DENSE's server loop as its public code runs it for the ``authors_code`` setting (see
    the module docstring for what it follows and leaves out). Uses torch's global RNG."""

    def __init__(self, teachers: list[nn.Module], arch: str, channels: int, size: int,
                 workdir: str, batch: int = 128, g_steps: int = 30, num_classes: int = 10,
                 nz: int = 256, lr_g: float = 1e-3, kd_lr: float = 0.005, t: float = 20.0,
                 oh: float = 1.0, adv: float = 1.0, bn: float = 0.0,
                 test_set: torch.utils.data.Dataset | None = None) -> None:
        self.teachers = teachers  # eval mode, weights still requiring gradients
        self.ensemble = ListEnsemble(teachers)
        self.student = build_model(arch, num_classes, channels, size)
        self.student.train()  # as their global_model.train() before the epochs
        self.gen = Generator(nz=nz, ngf=64, img_size=size, channels=channels).train()
        for mod in self.gen.modules():
            if isinstance(mod, nn.LeakyReLU):
                mod.inplace = True  # their generator's activations
        self.batch, self.g_steps, self.num_classes, self.nz = batch, g_steps, num_classes, nz
        self.lr_g, self.t, self.oh, self.adv, self.bn = lr_g, t, oh, adv, bn
        self.opt_s = torch.optim.SGD(self.student.parameters(), lr=kd_lr, momentum=0.9)
        self.pool = PNGPool(os.path.join(workdir, "pool"))
        self.grid_path = os.path.join(workdir, "best_batch.png")
        self.ckpt_path = os.path.join(workdir, "student.pth")
        crop = [transforms.RandomCrop(size, padding=4)] if channels == 3 else []
        self.kd_transform = transforms.Compose(crop + [transforms.RandomHorizontalFlip(),
                                                       transforms.ToTensor()])
        self.test_loader = (torch.utils.data.DataLoader(test_set, batch_size=256, shuffle=False,
                                                        num_workers=0)
                            if test_set is not None else None)
        self.best_acc = -1.0

    # ---- data synthesis
    def start_synthesis(self) -> None:
        """What precedes the generator steps of an epoch: the generator re-initialised, fresh
        z and sorted labels, a new Adam over G and z, the (hook-less) ensemble wrapper."""
        self.best_cost, self.best_inputs = 1e6, None
        self.z = torch.randn(self.batch, self.nz).requires_grad_(True)
        self.y = torch.randint(0, self.num_classes, (self.batch,)).sort()[0]
        self.gen.init_weights()  # their reset_model: N(0, 0.02) / BN γ N(1, 0.02), rest 0
        self.opt_g = torch.optim.Adam([{"params": self.gen.parameters()}, {"params": [self.z]}],
                                      self.lr_g, betas=(0.5, 0.999))
        self.net = ListEnsemble(self.teachers).eval()
        # their BN hooks go on the wrapper's modules: the teachers in a list are not among them
        self.bn_modules = [m for m in self.net.modules() if isinstance(m, nn.BatchNorm2d)]

    def generator_step(self) -> None:
        self.opt_g.zero_grad()
        inputs = self.gen(self.z)
        global_view = crop_flip_view(inputs)
        resized_crop_flip_view(inputs)  # their "local view": computed, never used
        t_out = self.net(global_view)
        loss_bn = sum(0.0 for _ in self.bn_modules)  # no hooks, so 0 (and bn weight 0)
        loss_oh = F.cross_entropy(t_out, self.y)
        s_out = self.student(global_view)
        mask = (s_out.max(1)[1] != t_out.max(1)[1]).float()
        loss_adv = -(kl_loss(s_out, t_out, reduction="none").sum(1) * mask).mean()
        loss = self.bn * loss_bn + self.oh * loss_oh + self.adv * loss_adv
        if self.best_cost > loss.item() or self.best_inputs is None:
            self.best_cost = loss.item()
            self.best_inputs = inputs.data
        loss.backward()
        self.opt_g.step()
        self.progress_text = f"loss:{loss.item()}"

    def finish_synthesis(self) -> None:
        save_image(self.best_inputs.clone(), self.grid_path, normalize=True, scale_each=True,
                   nrow=10)
        self.pool.add(self.best_inputs)

    # ---- distillation, test
    def kd_pass(self) -> int:
        """One shuffled pass over every PNG in the pool folder; returns the step count."""
        self.student.train()
        loader = torch.utils.data.DataLoader(self.pool.dataset(self.kd_transform),
                                             batch_size=self.batch, shuffle=True, num_workers=0)
        total_loss, correct, steps = 0.0, 0.0, 0
        for images in loader:
            self.opt_s.zero_grad()
            with torch.no_grad():
                t_out = self.ensemble(images)
            s_out = self.student(images.detach())
            loss = kl_loss(s_out, t_out.detach(), self.t)
            loss.backward()
            self.opt_s.step()
            total_loss += loss.detach().item()
            correct += s_out.argmax(1).eq(t_out.argmax(1)).sum().item()
            steps += 1
        return steps

    def test(self) -> float:
        self.student.eval()
        loss, correct = 0.0, 0
        with torch.no_grad():
            for data, target in self.test_loader:
                out = self.student(data)
                loss += F.cross_entropy(out, target, reduction="sum").item()
                correct += out.max(1)[1].eq(target).sum().item()
        acc = 100.0 * correct / len(self.test_loader.dataset)
        if acc > self.best_acc:
            self.best_acc = acc
            torch.save({"state_dict": self.student.state_dict(), "best_acc": acc},
                       self.ckpt_path)
        return acc

    def epoch(self) -> dict[str, float]:
        """One server epoch; seconds of its generator part (incl. the re-initialisation and
        writing the PNGs; ``gen_steps``: the steps alone), KD pass and test, and the KD step
        count."""
        t0 = time.perf_counter()
        self.start_synthesis()
        ts = time.perf_counter()
        for _ in range(self.g_steps):
            self.generator_step()
        ts = time.perf_counter() - ts
        self.finish_synthesis()
        t1 = time.perf_counter()
        kd_steps = self.kd_pass()
        t2 = time.perf_counter()
        self.test()
        t3 = time.perf_counter()
        return {"gen": t1 - t0, "gen_steps": ts, "kd": t2 - t1, "test": t3 - t2,
                "total": t3 - t0, "kd_steps": kd_steps}


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
    """One generator step of ours as ``run_dense`` makes it (``authors_code``: crop+flip, CE +
    L_div, z optimised with G), the student frozen in eval mode (epochs 2…T)."""
    cfg = DenseConfig.for_preset("authors_code", batch_size=batch, kd_batch_size=batch,
                                 amp=amp, batched_teachers=batched)
    bank = TeacherBank(teachers, batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student = build_model(arch, 10, channels, size)
    if bank.channels_last:
        student.to(memory_format=torch.channels_last)
    fuse_relu_maxpool(student)  # as run_dense does
    rng = torch.Generator().manual_seed(0)
    gen = build_generator(cfg.nz, cfg.ngf, size, channels, rng).train()
    synth = DenseSynthesizer(gen, bank, student, cfg, rng, torch.device("cpu"))
    synth.freeze_student(epoch=1)
    z, y = sample_latents(cfg, 10, rng, torch.device("cpu"))
    z.requires_grad_(True)
    opts = [torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas),
            torch.optim.Adam([z], lr=cfg.g_lr, betas=cfg.g_betas)]
    state = {"best": torch.tensor(float("inf")), "x": None}

    def step() -> None:
        loss, _, x = synth.step(z, y, opts)
        state["x"] = x if state["x"] is None else torch.where(loss < state["best"], x, state["x"])
        state["best"] = torch.minimum(state["best"], loss)

    return step, bank, student, cfg


def straightforward_synth(arch: str, m: int, channels: int, size: int, batch: int,
                          workdir: str) -> StraightforwardDense:
    """The straightforward version ready for generator steps, the student in eval mode (as
    in their epochs 2…T)."""
    sf = StraightforwardDense(make_teachers(arch, m, channels, size), arch, channels, size,
                              workdir, batch=batch)
    sf.student.eval()
    sf.start_synthesis()
    return sf


def bench_steps(arch: str, channels: int, size: int, batch: int, m: int, reps: int,
                pool_batches: int) -> dict[str, float]:
    rng = torch.Generator().manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        # ---- generator steps
        ours_step, bank, student, cfg = ours_synth(make_teachers(arch, m, channels, size), arch,
                                                   channels, size, batch)
        amp_step, amp_bank, *_ = ours_synth(make_teachers(arch, m, channels, size), arch,
                                            channels, size, batch, amp=True)
        sf = straightforward_synth(arch, m, channels, size, batch, tmp)
        g = median_alternating({"naive": sf.generator_step,
                                "ours_malloc": ours_step, "ours": in_heap(ours_step),
                                "ours_amp": in_heap(amp_step)}, reps)
        amp_bank.close()
        # ---- KD steps: one pass over a pool of ``pool_batches`` batches
        images = [torch.rand(batch, channels, size, size, generator=rng)
                  for _ in range(pool_batches)]
        pool = ImagePool(uint8=True, rounding=cfg.pool_rounding)
        for b in images:
            pool.add(b)
            sf.pool.add(b)
        student.requires_grad_(True).train()
        aug = resolve_pool_augment(cfg.pool_augment, cfg.augment, channels)
        distiller = Distiller(bank, student, torch.optim.SGD(student.parameters(), lr=cfg.kd_lr,
                                                             momentum=cfg.kd_momentum),
                              cfg.kd_temperature, aug, rng, torch.device("cpu"))
        k = median_alternating({
            "naive": sf.kd_pass,
            "ours": in_heap(lambda: [distiller.step(xb)
                                     for xb in pool.batches(cfg.kd_batch_size, rng)]),
        }, 1)
    bank.close()
    return {"gen_naive": g["naive"], "gen_ours": g["ours"], "gen_amp": g["ours_amp"],
            "gen_ours_malloc": g["ours_malloc"],
            "kd_naive": k["naive"] / pool_batches, "kd_ours": k["ours"] / pool_batches}


def section_steps(args: argparse.Namespace) -> None:
    print(f"== per step: batch {args.batch}, 5 teachers, DENSE authors_code losses (CE + L_div, "
          f"L_BN inert), student in eval mode, median of {args.reps}")
    ratios, amp_ratios, malloc_ratios = [], [], []
    for arch, c, s in SETUPS:
        r = bench_steps(arch, c, s, args.batch, 5, args.reps, pool_batches=2)
        gen_x, kd_x = r["gen_naive"] / r["gen_ours"], r["kd_naive"] / r["kd_ours"]
        ratios.append(gen_x)
        amp_ratios.append(r["gen_naive"] / r["gen_amp"])
        malloc_ratios.append(r["gen_naive"] / r["gen_ours_malloc"])
        print(f"{arch:9s} generator step: straightforward {r['gen_naive']:.3f} s, "
              f"ours {r['gen_ours']:.3f} s -> {gen_x:.2f}x  |  ours with glibc's default "
              f"malloc (as the straightforward one) {r['gen_ours_malloc']:.3f} s -> "
              f"{malloc_ratios[-1]:.2f}x  |  ours+bf16 autocast "
              f"{r['gen_amp']:.3f} s -> {r['gen_naive'] / r['gen_amp']:.2f}x (amp=True)")
        print(f"{arch:9s} KD step:        straightforward {r['kd_naive']:.3f} s, "
              f"ours {r['kd_ours']:.3f} s -> {kd_x:.2f}x  (one pass over a 2-batch pool, "
              "incl. reading it)")
    geo = math.exp(float(np.mean(np.log(ratios))))
    malloc_geo = math.exp(float(np.mean(np.log(malloc_ratios))))
    amp_geo = math.exp(float(np.mean(np.log(amp_ratios))))
    print(f"generator-step speedup (geometric mean over the two architectures): {geo:.2f}x "
          f"(float32); ours on glibc's default malloc {malloc_geo:.2f}x; with bfloat16 "
          f"autocast (amp=True, changes numerics; DENSE's default where native) "
          f"{amp_geo:.2f}x")


# ------------------------------------------------------------------ whole epochs


def random_test_set(n: int = 10_000, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Random uint8 test images of FMNIST's shape (n × 1 × 28 × 28) and random labels."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (n,), generator=g))


def run_straightforward_epochs(m: int, epochs: int, g_steps: int, batch: int,
                               x_test: torch.Tensor, y_test: torch.Tensor
                               ) -> list[dict[str, float]]:
    torch.manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        sf = StraightforwardDense(make_teachers("cnn_mnist", m, 1, 28), "cnn_mnist", 1, 28, tmp,
                                  batch=batch, g_steps=g_steps,
                                  test_set=PILTestSet(x_test, y_test))
        return [sf.epoch() for _ in range(epochs)]


def run_ours_epochs(m: int, epochs: int, g_steps: int, batch: int, x_test: torch.Tensor,
                    y_test: torch.Tensor) -> list[dict[str, float]]:
    """ofl's DENSE server (``run_method``, ``authors_code``) on uploads of the random teachers;
    per-epoch times from the evaluation callback (which ends every epoch) and a timing wrapper
    around ``dense.distillation_stage`` (restored afterwards)."""
    uploads = [ClientUpload(client_id=k, arch="cnn_mnist", state_dict=t.state_dict(),
                            num_classes=10, in_channels=1, image_size=28, num_samples=1)
               for k, t in enumerate(make_teachers("cnn_mnist", m, 1, 28))]
    ends: list[float] = []
    eval_s: list[float] = []
    kd_s: list[float] = []

    def evaluate(model: nn.Module) -> float:
        t0 = time.perf_counter()
        acc = accuracy(model, x_test, y_test)
        ends.append(time.perf_counter())
        eval_s.append(ends[-1] - t0)
        return acc

    stage = dense_module.distillation_stage

    def timed_stage(*a, **kw) -> None:
        t0 = time.perf_counter()
        stage(*a, **kw)
        kd_s.append(time.perf_counter() - t0)

    ctx = ServerContext(num_classes=10, in_channels=1, image_size=28, seed=1,
                        evaluate=evaluate, progress=False)
    cfg = method_config("dense", "authors_code", epochs=epochs, steps_per_epoch=g_steps,
                        batch_size=batch, kd_batch_size=batch, amp=False)  # float32, as theirs
    dense_module.distillation_stage = timed_stage
    try:
        start = time.perf_counter()
        res = run_method("dense", uploads, cfg, ctx)
    finally:
        dense_module.distillation_stage = stage
    bounds = [start] + ends
    out = []
    for e in range(epochs):
        total = bounds[e + 1] - bounds[e]
        out.append({"gen": total - kd_s[e] - eval_s[e], "kd": kd_s[e], "test": eval_s[e],
                    "total": total, "kd_steps": e + 1})
    assert res.extras["kd_steps"] == sum(r["kd_steps"] for r in out)
    return out


def projected_run(rows: list[dict[str, float]], g_steps: int) -> float:
    """Seconds of the authors' budget (30 epochs × 30 generator steps) from measured epochs:
    30 × (generator part with its steps scaled to 30 + test) + (1 + … + 30) × KD seconds per
    pool batch (means over the given epochs). Where the steps were not timed alone (ours),
    the whole generator part is scaled, which overstates it when ``g_steps`` < 30."""
    steps = statistics.mean(r.get("gen_steps", r["gen"]) for r in rows)
    gen = statistics.mean(r["gen"] for r in rows) + steps * (AUTHORS_G_STEPS / g_steps - 1)
    test = statistics.mean(r["test"] for r in rows)
    kd_per_batch = statistics.mean(r["kd"] / r["kd_steps"] for r in rows)
    n = AUTHORS_EPOCHS
    return n * (gen + test) + n * (n + 1) / 2 * kd_per_batch


def section_epoch(args: argparse.Namespace) -> None:
    m, e_n, steps, b = args.clients, args.epochs, args.g_steps, args.epoch_batch
    print(f"== whole epochs: {m} random-init cnn_mnist teachers, FMNIST shape, batch {b} "
          f"(synthetic and KD), {steps} generator steps per epoch, {e_n} epoch(s), test pass "
          "over 10 000 images after each; the straightforward loop first, then ours")
    x_test, y_test = random_test_set()
    sides = {"straightforward": run_straightforward_epochs(m, e_n, steps, b, x_test, y_test),
             "ours": run_ours_epochs(m, e_n, steps, b, x_test, y_test)}
    authors_epoch = AUTHORS_SERVER_S / AUTHORS_EPOCHS
    print("  side              epoch  pool batches   gen (s)    KD (s)  test (s)  total (s)")
    for name, rows in sides.items():
        for e, r in enumerate(rows):
            note = "  (warm-up)" if e == 0 and e_n > 1 else ""
            print(f"  {name:16s} {e + 1:6d} {r['kd_steps']:13d} {r['gen']:9.2f} {r['kd']:9.3f} "
                  f"{r['test']:9.3f} {r['total']:10.2f}{note}")
    timed_rows = {k: (v[1:] if e_n > 1 else v) for k, v in sides.items()}
    which = f"epochs 2–{e_n}" if e_n > 1 else "epoch 1 (no warm-up epoch)"
    per_epoch = {k: statistics.mean(r["total"] for r in v) for k, v in timed_rows.items()}
    proj = {k: projected_run(v, steps) for k, v in timed_rows.items()}
    sf, ours = per_epoch["straightforward"], per_epoch["ours"]
    print(f"seconds per epoch ({which}, pools of {timed_rows['ours'][0]['kd_steps']}–"
          f"{timed_rows['ours'][-1]['kd_steps']} batches): straightforward {sf:.2f} s, "
          f"ours {ours:.2f} s -> ours {sf / ours:.2f}x faster; authors' code "
          f"{authors_epoch:.1f} s per epoch on average over its 30 epochs "
          f"({AUTHORS_SERVER_S:.0f} s / {AUTHORS_EPOCHS}; pools of 1–30 batches)")
    scaled = "" if steps == AUTHORS_G_STEPS else f", generator steps scaled ×{30 / steps:g}"
    print(f"projected to the authors' budget (30 epochs × 30 steps, pool growing to 30 batches"
          f"{scaled}): straightforward {proj['straightforward']:.0f} s "
          f"({proj['straightforward'] / AUTHORS_SERVER_S:.2f}x the authors' measured "
          f"{AUTHORS_SERVER_S:.0f} s), ours {proj['ours']:.0f} s -> ours vs straightforward "
          f"{proj['straightforward'] / proj['ours']:.2f}x, ours vs the authors' code "
          f"{AUTHORS_SERVER_S / proj['ours']:.2f}x")
    if e_n == AUTHORS_EPOCHS and steps == AUTHORS_G_STEPS:
        tot = {k: sum(r["total"] for r in v) for k, v in sides.items()}
        print(f"measured whole run ({e_n} epochs incl. the first): straightforward "
              f"{tot['straightforward']:.0f} s, ours {tot['ours']:.0f} s, authors' code "
              f"{AUTHORS_SERVER_S:.0f} s -> ours vs straightforward "
              f"{tot['straightforward'] / tot['ours']:.2f}x, ours vs the authors' code "
              f"{AUTHORS_SERVER_S / tot['ours']:.2f}x")


# ------------------------------------------------------------------ scaling with m


def bench_scaling(ms: tuple[int, ...], batch: int, vmap_ms: tuple[int, ...]
                  ) -> list[tuple[int, float, float | None, float]]:
    """Seconds per generator step with m cnn_mnist teachers: ours on the loop path (the CPU
    default), ours vmapped for ``vmap_ms``, and the straightforward version."""
    rows = []
    for m in ms:
        with tempfile.TemporaryDirectory() as tmp:
            fns = {}
            loop_step, b1, *_ = ours_synth(make_teachers("cnn_mnist", m, 1, 28), "cnn_mnist",
                                           1, 28, batch, batched=False)
            fns["loop"] = in_heap(loop_step)
            b2 = None
            if m in vmap_ms:
                vmap_step, b2, *_ = ours_synth(make_teachers("cnn_mnist", m, 1, 28),
                                               "cnn_mnist", 1, 28, batch, batched=True)
                fns["vmap"] = in_heap(vmap_step)
            fns["naive"] = straightforward_synth("cnn_mnist", m, 1, 28, batch,
                                                 tmp).generator_step
            t = median_alternating(fns, 1)
            for bank in (b1, b2):
                if bank is not None:
                    bank.close()
        rows.append((m, t["loop"], t.get("vmap"), t["naive"]))
    return rows


def loglog_slope(ms: list[int], ts: list[float]) -> float:
    return float(np.polyfit(np.log(ms), np.log(ts), 1)[0])


def section_scaling(args: argparse.Namespace) -> None:
    ms = tuple(int(v) for v in args.scaling_ms.split(","))
    print(f"== server time per generator step vs m (cnn_mnist, batch {args.scaling_batch}, "
          "authors_code losses)")
    rows = bench_scaling(ms, args.scaling_batch, (5, 20))
    print("     m   ours loop (s)  ours vmap (s)  ours s/teacher  ours s/added teacher"
          "  straightforward (s)  its s/teacher")
    prev = None
    for m, t_loop, t_vmap, t_naive in rows:
        vm = f"{t_vmap:13.3f}" if t_vmap is not None else "            -"
        added = (f"{(t_loop - prev[1]) / (m - prev[0]):20.4f}" if prev is not None
                 else "                   -")
        print(f"  {m:4d}   {t_loop:13.3f}  {vm}  {t_loop / m:14.4f}  {added}  "
              f"{t_naive:19.3f}  {t_naive / m:13.4f}")
        prev = (m, t_loop)
    if len(rows) < 2:
        return
    m_all = [r[0] for r in rows]
    slope = loglog_slope(m_all, [r[1] for r in rows])
    slope_naive = loglog_slope(m_all, [r[3] for r in rows])
    first, last = rows[0], rows[-1]
    per_first, per_last = first[1] / first[0], last[1] / last[0]
    change = per_last / per_first
    verdict = "linear or better" if slope <= 1.05 else "worse than linear"
    flat = ("flat" if abs(change - 1) <= 0.15 else
            ("falling" if change < 1 else "rising"))
    why = ("; the fixed generator and student cost spreads over more teachers"
           if flat == "falling" else "")
    print(f"ours: step time ∝ m^{slope:.2f} over m = {m_all[0]}…{m_all[-1]} -> {verdict}; "
          f"time per teacher {per_first * 1e3:.1f} ms at m = {first[0]} -> "
          f"{per_last * 1e3:.1f} ms at m = {last[0]} ({change:.2f}x: {flat}{why}). "
          f"Straightforward: ∝ m^{slope_naive:.2f}; ours {last[3] / last[1]:.2f}x faster at "
          f"m = {last[0]}")


# ------------------------------------------------------------------ main

SECTIONS = {"steps": section_steps, "epoch": section_epoch, "scaling": section_scaling}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--section", choices=("all", *SECTIONS), default="all")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    ap.add_argument("--reps", type=int, default=3,
                    help="steps: timed repetitions per variant (3)")
    ap.add_argument("--batch", type=int, default=256, help="steps: batch (256)")
    ap.add_argument("--epochs", type=int, default=2, help="epoch: server epochs per side (2)")
    ap.add_argument("--g-steps", type=int, default=30,
                    help="epoch: generator steps per epoch (30)")
    ap.add_argument("--epoch-batch", type=int, default=128,
                    help="epoch: synthetic and KD batch (128)")
    ap.add_argument("--clients", type=int, default=5, help="epoch: teachers (5)")
    ap.add_argument("--scaling-batch", type=int, default=64, help="scaling: batch (64)")
    ap.add_argument("--scaling-ms", default="5,10,20,50,100",
                    help="scaling: teacher counts (5,10,20,50,100)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    for name, fn in SECTIONS.items():
        if args.section in ("all", name):
            fn(args)
    print(f"total benchmark time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
