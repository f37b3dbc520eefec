"""Fed-DAFL: DAFL (Chen et al., ICCV 2019) applied to the client ensemble — DENSE's baseline
(DENSE §3.1.3; SPEC §4). No reference code exists for this baseline; every choice below is in
docs/decisions.md.

A persistent generator G (never reset) is trained with DAFL's loss on the ensemble D:
L_G = L_oh + α·L_a + β·L_ie (DAFL Eqs. 3–6) with L_oh = CE(D(x̂), argmax D(x̂)), L_a = −mean|f|
(f = the teachers' penultimate activations; the per-teacher losses are averaged), L_ie =
Σ_c p̄_c log p̄_c (p̄ = batch-mean softmax of D), α = 0.1, β = 5 (DAFL's values). Every
iteration draws a fresh z, takes one generator step and one student KD step on the same
(detached) batch, as DAFL's code does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from ..clients import ClientUpload, build_from_upload
from ..models import MODEL_NAMES
from ..presets import check_preset
from ..seeds import derive_seed
from ..synthesis import (
    EvalCurve,
    TeacherBank,
    autocast_context,
    build_generator,
    dafl_activation_loss,
    dafl_information_entropy_loss,
    dafl_onehot_loss,
    fuse_relu_maxpool,
    generator_forward,
    image_grid,
    kd_loss,
    server_student,
)
from .base import ServerContext, ServerResult


@dataclass(frozen=True)
class FedDAFLConfig:
    """Fed-DAFL. "All baseline methods use the same setting as ours" (DENSE §3.1.4): epochs
    T = 200, ``steps_per_epoch`` = T_G = 30, batch 128, generator Adam 1e-3 (betas 0.5/0.999),
    student SGD 0.01 momentum 0.9, KD temperature 1 (DENSE Eq. 6). DAFL's own loss weights:
    ``act_weight`` α = 0.1, ``ie_weight`` β = 5, ``oh_weight`` 1. No authors' code exists, so
    ``preset="authors_code"`` equals the paper preset."""

    epochs: int = 200
    steps_per_epoch: int = 30
    batch_size: int = 128
    nz: int = 256
    ngf: int = 64
    g_lr: float = 1e-3
    g_betas: tuple[float, float] = (0.5, 0.999)
    kd_lr: float = 0.01
    kd_momentum: float = 0.9
    kd_temperature: float = 1.0
    oh_weight: float = 1.0
    act_weight: float = 0.1
    ie_weight: float = 5.0
    student_arch: str | None = None
    eval_every: int = 1
    num_images: int = 64
    fast_generator: bool = True
    batched_teachers: bool | str = "auto"
    channels_last: bool | str = "auto"
    amp: bool = False
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_preset(self.preset)
        for name in ("steps_per_epoch", "batch_size", "nz", "ngf", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"FedDAFLConfig.{name} must be ≥ 1 (got {getattr(self, name)})")
        if self.epochs < 0:
            raise ValueError(f"FedDAFLConfig.epochs must be ≥ 0 (got {self.epochs})")
        for name in ("g_lr", "kd_lr", "kd_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FedDAFLConfig.{name} must be > 0 (got {getattr(self, name)})")
        if self.student_arch is not None and self.student_arch not in MODEL_NAMES:
            raise ValueError(f"FedDAFLConfig.student_arch: unknown model {self.student_arch!r}")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> FedDAFLConfig:
        check_preset(preset)
        return replace(cls(preset=preset), **overrides)

    @property
    def method_name(self) -> str:
        return "fed-dafl"


def run(uploads: list[ClientUpload], cfg: FedDAFLConfig, ctx: ServerContext) -> ServerResult:
    """Train a DAFL generator on the ensemble and distil the ensemble into a fresh student."""
    dev = torch.device(ctx.device)
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student, s_arch = server_student(uploads, cfg.student_arch, ctx.num_classes,
                                     ctx.in_channels, ctx.image_size,
                                     derive_seed(ctx.seed, "fed-dafl-student"), dev, "Fed-DAFL")
    cl = bank.channels_last
    if cl:
        student.to(memory_format=torch.channels_last)
    unfuse = fuse_relu_maxpool(student)  # exact; undone before returning
    rng = torch.Generator().manual_seed(derive_seed(ctx.seed, "fed-dafl"))
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    opt_g = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
    opt_s = torch.optim.SGD(student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    amp = autocast_context(dev, cfg.amp)
    tracker = EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every)
    g_losses, kd_losses = [], []
    x = d = None
    student.train()
    bar = tqdm(range(cfg.epochs), desc="Fed-DAFL", disable=not ctx.progress)
    for epoch in bar:
        ep_g, ep_kd = [], []
        for _ in range(cfg.steps_per_epoch):
            z = torch.randn(cfg.batch_size, cfg.nz, generator=rng).to(dev)
            with amp:
                x = generator_forward(gen, z, cfg.fast_generator)
                xi = x.contiguous(memory_format=torch.channels_last) if cl else x
                out = bank.forward(xi, features=True)
                d = out.mean_logits.float()
                loss_g = (cfg.oh_weight * dafl_onehot_loss(d)
                          + cfg.act_weight * dafl_activation_loss(out.features)
                          + cfg.ie_weight * dafl_information_entropy_loss(d))
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            with amp:
                s_out = student(xi.detach())
            loss_s = kd_loss(s_out, d.detach(), cfg.kd_temperature)
            opt_s.zero_grad(set_to_none=True)
            loss_s.backward()
            opt_s.step()
            ep_g.append(loss_g.detach())
            ep_kd.append(loss_s.detach())
        if ep_g:
            g_losses.append(torch.stack(ep_g).mean())
            kd_losses.append(torch.stack(ep_kd).mean())
        acc = tracker(epoch, student)
        if acc is not None:
            bar.set_postfix(acc=f"{acc:.2f}")
    bar.close()
    bank.close()
    unfuse()
    student.eval().to(memory_format=torch.contiguous_format)
    images, labels = (image_grid(x, d.argmax(1), cfg.num_images) if x is not None
                      else (None, None))
    extras = {
        "student_arch": s_arch,
        "teachers_batched": bank.batched,
        "curve_epochs": tracker.epochs_done,
        "g_loss": torch.stack(g_losses).tolist() if g_losses else [],
        "kd_loss": torch.stack(kd_losses).tolist() if kd_losses else [],
        "kd_steps": cfg.epochs * cfg.steps_per_epoch,
        "image_labels": labels,
    }
    return ServerResult(method=cfg.method_name, preset=cfg.preset, model=student,
                        curve=tracker.curve, last_acc=tracker.last, best_acc=tracker.best,
                        images=images, extras=extras)
