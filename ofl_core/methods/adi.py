"""Fed-ADI: Adaptive DeepInversion (Yin et al., CVPR 2020) applied to the client ensemble —
DENSE's strongest baseline (DENSE §3.1.3; SPEC §4). No reference code exists for this
baseline; every choice below is in docs/decisions/dense-baselines.md.

Each epoch optimises a fresh batch of pixels x̂ (labels y uniform) for ``steps_per_epoch`` Adam
steps on L = CE(D(x̂'), y) + 10·L_BN(x̂') + 1e-3·TV_L1(x̂') + 1·(−JS(σ(S(x̂')/3), σ(D(x̂')/3))),
x̂' = jitter/flip(x̂) (DeepInversion Eqs. 3–8); the lowest-loss batch joins a pool, and the
student is distilled from D on one pass over the pool (as DENSE's code does for DENSE).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..checkpoint import Attrs
from ..distill.config import DistillConfig, check_distill_config
from ..distill.loop import (
    DistillRun,
    SynthesisLog,
    as_floats,
    distil_pool,
    open_run,
    pool_targets,
)
from ..distill.losses import adi_competition_loss, total_variation_l1
from ..distill.pool import ImagePool, jitter_flip, keep_lowest
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload


@dataclass(frozen=True)
class FedADIConfig(DistillConfig):
    """Fed-ADI. From DENSE's "same setting as ours" (§3.1.4): T = 200 epochs,
    ``steps_per_epoch`` 30 optimisation steps per epoch, batch 128, student SGD 0.01 momentum
    0.9, KD temperature 1.
    From DeepInversion (CIFAR setting of its code): ``bn_weight`` 10, ``tv_weight`` 1e-3 (L1
    total variation), ``compete_weight`` 1 with temperature 3 (ADI's JS competition),
    ``jitter`` 2 px and random flip. The pixel learning rate ``pixel_lr`` = 0.1 (Adam, default
    betas) is not given by any paper (SPEC's stated default); pixels start ~ U(0, 1) and are
    clamped to [0, 1] after each step. No authors' code exists: both presets are equal."""

    kd_batch_size: int = 128
    pixel_lr: float = 0.1
    ce_weight: float = 1.0
    bn_weight: float = 10.0
    tv_weight: float = 1e-3
    compete_weight: float = 1.0
    compete_temperature: float = 3.0
    jitter: int = 2
    flip: bool = True
    kd_temperature: float = 1.0
    pool_uint8: bool = True
    num_images: int = 64

    def __post_init__(self) -> None:
        check_distill_config(self, counts=("kd_batch_size",),
                             positive=("pixel_lr", "kd_temperature", "compete_temperature"),
                             nonnegative=("ce_weight", "bn_weight", "tv_weight",
                                          "compete_weight", "jitter"))

    @property
    def method_name(self) -> str:
        return "fed-adi"


def adi_loss(run_: DistillRun, xj: torch.Tensor, y: torch.Tensor,
             cfg: FedADIConfig) -> torch.Tensor:
    """Adaptive DeepInversion's loss on the jittered batch x̂' (Yin et al. 2020, Eqs. 3–8):
    CE(D(x̂'), y) + α_tv·TV_L1(x̂') + α_f·L_BN(x̂') + α_c·(−JS(σ(S/3), σ(D/3)))."""
    with run_.amp:
        out = run_.bank.forward(xj, bn=cfg.bn_weight > 0)
        d = out.mean_logits.float()
        loss = (cfg.ce_weight * F.cross_entropy(d, y)
                + cfg.tv_weight * total_variation_l1(xj))
        if out.bn_loss is not None:
            loss = loss + cfg.bn_weight * out.bn_loss
        if cfg.compete_weight > 0:
            loss = loss + cfg.compete_weight * adi_competition_loss(
                run_.student(xj), d, cfg.compete_temperature)
    return loss


def invert_batch(run_: DistillRun, cfg: FedADIConfig, num_classes: int, image_size: int,
                 in_channels: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One epoch's inversion: pixels x̂ ~ U(0, 1), labels y uniform, ``steps_per_epoch`` Adam
    steps on :func:`adi_loss` (pixels clamped to [0, 1]); returns the lowest-loss batch (kept
    without a host sync), its loss and y."""
    rng, dev, student = run_.rng, run_.device, run_.student
    shape = (cfg.batch_size, in_channels, image_size, image_size)
    x = torch.rand(shape, generator=rng).to(dev).requires_grad_(True)
    y = torch.randint(0, num_classes, (cfg.batch_size,), generator=rng).to(dev)
    opt_x = torch.optim.Adam([x], lr=cfg.pixel_lr)
    student.eval().requires_grad_(False)
    best_loss = torch.full((), float("inf"), device=dev)
    best_x = None
    for _ in range(cfg.steps_per_epoch):
        xj = run_.to_input(jitter_flip(x, cfg.jitter, cfg.flip, rng))
        loss = adi_loss(run_, xj, y, cfg)
        best_x, best_loss = keep_lowest(best_x, best_loss, x, loss)
        opt_x.zero_grad(set_to_none=True)
        loss.backward()
        opt_x.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    return best_x, best_loss, y


def run(uploads: list[ClientUpload], cfg: FedADIConfig, ctx: ServerContext) -> ServerResult:
    """Invert the ensemble into a pool of images (Adaptive DeepInversion) and distil from it:
    every epoch the lowest-loss inverted batch joins the pool, then one KD pass over it."""
    run_ = open_run(uploads, cfg, ctx, "Fed-ADI", "fed-adi")
    opt_s = torch.optim.SGD(run_.student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    pool = ImagePool(uint8=cfg.pool_uint8, device=run_.device)
    targets = pool_targets(run_.bank, run_.amp, "none", cfg.kd_batch_size)
    log = SynthesisLog()
    state = {"opt_s": opt_s, "pool": pool, "log": Attrs.of(log, run_.device)}
    for _epoch in run_.epochs(state):
        log.x, best_loss, log.y = invert_batch(run_, cfg, ctx.num_classes, ctx.image_size,
                                               ctx.in_channels)
        log.synth_losses.append(best_loss)
        pool.add(log.x)
        log.kd_losses.append(distil_pool(run_, pool, opt_s, cfg.kd_batch_size,
                                          cfg.kd_temperature, targets))
    extras = {"pool_size": len(pool), "inversion_loss": as_floats(log.synth_losses),
              "kd_loss": as_floats(log.kd_losses)}
    return run_.result(cfg.method_name, cfg.preset, extras, samples=(log.x, log.y),
                       num_images=cfg.num_images)


SPEC = MethodSpec(
    "fed-adi", FedADIConfig, run,
    MethodKind(
        "Yin et al. 2020 (DENSE baseline)", True, 1,
        "per epoch: pixel optimisation → pool → distillation", MODEL,
        "the clients' BN statistics (inside the models)", "one model"
    ),
)
