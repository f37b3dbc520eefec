"""Fed-ADI: Adaptive DeepInversion (Yin et al., CVPR 2020) applied to the client ensemble —
DENSE's strongest baseline (DENSE §3.1.3; SPEC §4). No reference code exists for this
baseline; every choice below is in docs/decisions.md.

Each epoch optimises a fresh batch of pixels x̂ (labels y uniform) for
``steps_per_epoch`` Adam steps on
L = CE(D(x̂'), y) + 10·L_BN(x̂') + 1e-3·TV_L1(x̂') + 1·(−JS(σ(S(x̂')/3), σ(D(x̂')/3))),
x̂' = jitter/flip(x̂) (DeepInversion Eqs. 3–8); the lowest-loss batch joins a pool, and the
student is distilled from D on one pass over the pool (as DENSE's code does for DENSE).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..clients import ClientUpload, build_from_upload
from ..models import MODEL_NAMES
from ..presets import check_preset
from ..seeds import derive_seed
from ..synthesis import (
    EvalCurve,
    ImagePool,
    TeacherBank,
    adi_competition_loss,
    autocast_context,
    fuse_relu_maxpool,
    image_grid,
    jitter_flip,
    kd_loss,
    server_student,
    total_variation_l1,
)
from .base import ServerContext, ServerResult


@dataclass(frozen=True)
class FedADIConfig:
    """Fed-ADI. From DENSE's "same setting as ours" (§3.1.4): T = 200 epochs, ``steps_per_epoch`` 30
    optimisation steps per epoch, batch 128, student SGD 0.01 momentum 0.9, KD temperature 1.
    From DeepInversion (CIFAR setting of its code): ``bn_weight`` 10, ``tv_weight`` 1e-3 (L1
    total variation), ``compete_weight`` 1 with temperature 3 (ADI's JS competition),
    ``jitter`` 2 px and random flip. The pixel learning rate ``pixel_lr`` = 0.1 (Adam, default
    betas) is not given by any paper (SPEC's stated default); pixels start ~ U(0, 1) and are
    clamped to [0, 1] after each step. No authors' code exists: both presets are equal."""

    epochs: int = 200
    steps_per_epoch: int = 30
    batch_size: int = 128
    kd_batch_size: int = 128
    pixel_lr: float = 0.1
    ce_weight: float = 1.0
    bn_weight: float = 10.0
    tv_weight: float = 1e-3
    compete_weight: float = 1.0
    compete_temperature: float = 3.0
    jitter: int = 2
    flip: bool = True
    kd_lr: float = 0.01
    kd_momentum: float = 0.9
    kd_temperature: float = 1.0
    pool_uint8: bool = True
    student_arch: str | None = None
    eval_every: int = 1
    num_images: int = 64
    batched_teachers: bool | str = "auto"
    channels_last: bool | str = "auto"
    amp: bool = False
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_preset(self.preset)
        for name in ("steps_per_epoch", "batch_size", "kd_batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"FedADIConfig.{name} must be ≥ 1 (got {getattr(self, name)})")
        if self.epochs < 0 or self.jitter < 0:
            raise ValueError("FedADIConfig.epochs and jitter must be ≥ 0")
        for name in ("pixel_lr", "kd_lr", "kd_temperature", "compete_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FedADIConfig.{name} must be > 0 (got {getattr(self, name)})")
        if self.student_arch is not None and self.student_arch not in MODEL_NAMES:
            raise ValueError(f"FedADIConfig.student_arch: unknown model {self.student_arch!r}")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> FedADIConfig:
        check_preset(preset)
        return replace(cls(preset=preset), **overrides)

    @property
    def method_name(self) -> str:
        return "fed-adi"


def run(uploads: list[ClientUpload], cfg: FedADIConfig, ctx: ServerContext) -> ServerResult:
    """Invert the ensemble into a pool of images (Adaptive DeepInversion) and distil from it."""
    dev = torch.device(ctx.device)
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student, s_arch = server_student(uploads, cfg.student_arch, ctx.num_classes,
                                     ctx.in_channels, ctx.image_size,
                                     derive_seed(ctx.seed, "fed-adi-student"), dev, "Fed-ADI")
    cl = bank.channels_last
    if cl:
        student.to(memory_format=torch.channels_last)
    unfuse = fuse_relu_maxpool(student)  # exact; undone before returning
    rng = torch.Generator().manual_seed(derive_seed(ctx.seed, "fed-adi"))
    opt_s = torch.optim.SGD(student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    pool = ImagePool(uint8=cfg.pool_uint8, device=dev)
    amp = autocast_context(dev, cfg.amp)
    tracker = EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every)
    shape = (cfg.batch_size, ctx.in_channels, ctx.image_size, ctx.image_size)
    inv_losses, kd_losses = [], []
    best_x = y = None

    def prep(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if cl else x

    bar = tqdm(range(cfg.epochs), desc="Fed-ADI", disable=not ctx.progress)
    for epoch in bar:
        x = torch.rand(shape, generator=rng).to(dev).requires_grad_(True)
        y = torch.randint(0, ctx.num_classes, (cfg.batch_size,), generator=rng).to(dev)
        opt_x = torch.optim.Adam([x], lr=cfg.pixel_lr)
        student.eval().requires_grad_(False)
        best_loss = torch.full((), float("inf"), device=dev)
        best_x = None
        for _ in range(cfg.steps_per_epoch):
            xj = prep(jitter_flip(x, cfg.jitter, cfg.flip, rng))
            with amp:
                out = bank.forward(xj, bn=cfg.bn_weight > 0)
                d = out.mean_logits.float()
                loss = (cfg.ce_weight * F.cross_entropy(d, y)
                        + cfg.tv_weight * total_variation_l1(xj))
                if out.bn_loss is not None:
                    loss = loss + cfg.bn_weight * out.bn_loss
                if cfg.compete_weight > 0:
                    loss = loss + cfg.compete_weight * adi_competition_loss(
                        student(xj), d, cfg.compete_temperature)
            lower = loss.detach() < best_loss
            best_x = (x.detach().clone() if best_x is None
                      else torch.where(lower, x.detach(), best_x))
            best_loss = torch.minimum(best_loss, loss.detach())
            opt_x.zero_grad(set_to_none=True)
            loss.backward()
            opt_x.step()
            with torch.no_grad():
                x.clamp_(0.0, 1.0)
        inv_losses.append(best_loss)
        pool.add(best_x)
        student.train().requires_grad_(True)
        ep = []
        for xb in pool.batches(cfg.kd_batch_size, rng):
            xb = prep(xb)
            with torch.no_grad(), amp:
                t_out = bank(xb)
            with amp:
                s_out = student(xb)
            loss_s = kd_loss(s_out, t_out, cfg.kd_temperature)
            opt_s.zero_grad(set_to_none=True)
            loss_s.backward()
            opt_s.step()
            ep.append(loss_s.detach())
        kd_losses.append(torch.stack(ep).mean())
        acc = tracker(epoch, student)
        if acc is not None:
            bar.set_postfix(acc=f"{acc:.2f}")
    bar.close()
    bank.close()
    unfuse()
    student.eval().to(memory_format=torch.contiguous_format)
    images, labels = (image_grid(best_x, y, cfg.num_images) if best_x is not None
                      else (None, None))
    extras = {
        "student_arch": s_arch,
        "teachers_batched": bank.batched,
        "curve_epochs": tracker.epochs_done,
        "pool_size": len(pool),
        "inversion_loss": torch.stack(inv_losses).tolist() if inv_losses else [],
        "kd_loss": torch.stack(kd_losses).tolist() if kd_losses else [],
        "image_labels": labels,
    }
    return ServerResult(method=cfg.method_name, preset=cfg.preset, model=student,
                        curve=tracker.curve, last_acc=tracker.last, best_acc=tracker.best,
                        images=images, extras=extras)
