"""Fed-DAFL: DAFL (Chen et al., ICCV 2019) applied to the client ensemble — DENSE's baseline
(DENSE §3.1.3; SPEC §4). No reference code exists for this baseline; every choice below is in
docs/decisions/dense-baselines.md.

A persistent generator G (never reset) is trained with DAFL's loss on the ensemble D:
L_G = L_oh + α·L_a + β·L_ie (DAFL Eqs. 3–6) with L_oh = CE(D(x̂), argmax D(x̂)), L_a = −mean|f|
(f = the teachers' penultimate activations; the per-teacher losses are averaged), L_ie =
Σ_c p̄_c log p̄_c (p̄ = batch-mean softmax of D), α = 0.1, β = 5 (DAFL's values).
``kd_data="fresh"`` (the paper preset): every iteration draws a fresh z, takes one generator
step and one student KD step on the same (detached) batch, as DAFL's code does. ``"pool"``:
DENSE's distillation stage with DAFL's generator — the lowest-L_G batch of each epoch joins a
pool and the student takes one pass over it (another reading of DENSE §3.1.4's "same
setting").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ..checkpoint import Attrs
from ..devices import to_device
from ..distill.config import GeneratorConfig, check_distill_config
from ..distill.generator import build_generator, generator_forward
from ..distill.loop import SynthesisLog, as_floats, distil_pool, open_run, pool_targets
from ..distill.losses import (
    dafl_activation_loss,
    dafl_information_entropy_loss,
    dafl_onehot_loss,
    kd_loss,
)
from ..distill.pool import ImagePool, keep_lowest
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload


@dataclass(frozen=True)
class FedDAFLConfig(GeneratorConfig):
    """Fed-DAFL. "All baseline methods use the same setting as ours" (DENSE §3.1.4): epochs
    T = 200, ``steps_per_epoch`` = T_G = 30, batch 128, generator Adam 1e-3 (betas 0.5/0.999),
    student SGD 0.01 momentum 0.9, KD temperature 1 (DENSE Eq. 6). DAFL's own loss weights:
    ``act_weight`` α = 0.1, ``ie_weight`` β = 5, ``oh_weight`` 1. No authors' code exists, so
    ``preset="authors_code"`` equals the paper preset.
    ``kd_data``: ``"fresh"`` = DAFL's loop (a student step on every generator batch: 6000 KD
    steps); ``"pool"`` = DENSE's distillation stage (each epoch's lowest-L_G batch joins an
    8-bit pool when ``pool_uint8``, then one shuffled pass over it in batches of
    ``kd_batch_size``: ≈ 20 000 KD steps at T = 200); see docs/decisions/paper-gaps.md."""

    kd_temperature: float = 1.0
    oh_weight: float = 1.0
    act_weight: float = 0.1
    ie_weight: float = 5.0
    kd_data: Literal["fresh", "pool"] = "fresh"
    kd_batch_size: int = 128
    pool_uint8: bool = True
    num_images: int = 64

    def __post_init__(self) -> None:
        check_distill_config(self, counts=("nz", "ngf", "kd_batch_size"),
                             positive=("g_lr", "kd_temperature"),
                             nonnegative=("oh_weight", "act_weight", "ie_weight"))

    @property
    def method_name(self) -> str:
        return "fed-dafl"


def dafl_generator_loss(d: torch.Tensor, features: list[torch.Tensor],
                        cfg: FedDAFLConfig) -> torch.Tensor:
    """L_G = L_oh + α·L_a + β·L_ie on the ensemble logits D(x̂) and the teachers' penultimate
    features (DAFL Eqs. 3–6)."""
    return (cfg.oh_weight * dafl_onehot_loss(d)
            + cfg.act_weight * dafl_activation_loss(features)
            + cfg.ie_weight * dafl_information_entropy_loss(d))


def run(uploads: list[ClientUpload], cfg: FedDAFLConfig, ctx: ServerContext) -> ServerResult:
    """Train a DAFL generator on the ensemble and distil the ensemble into a fresh student:
    every step one generator step on L_G and one student KD step (DENSE Eq. 6) on the same
    detached batch."""
    run_ = open_run(uploads, cfg, ctx, "Fed-DAFL", "fed-dafl")
    bank, student, rng, dev, amp = run_.bank, run_.student, run_.rng, run_.device, run_.amp
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    opt_g = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
    opt_s = torch.optim.SGD(student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    log = SynthesisLog()
    pool = ImagePool(uint8=cfg.pool_uint8, device=dev) if cfg.kd_data == "pool" else None
    targets = (pool_targets(bank, amp, "none", cfg.kd_batch_size) if pool is not None
               else None)
    state = {"generator": gen, "opt_g": opt_g, "opt_s": opt_s, "log": Attrs.of(log, dev),
             **({"pool": pool} if pool is not None else {})}
    student.train()
    for _epoch in run_.epochs(state):
        ep_g, ep_kd = [], []
        best_x, best_loss = None, torch.full((), float("inf"), device=dev)
        for _ in range(cfg.steps_per_epoch):
            z = to_device(torch.randn(cfg.batch_size, cfg.nz, generator=rng), dev)
            with amp:
                x = generator_forward(gen, z, cfg.fast_generator)
                xi = run_.to_input(x)
                out = bank.forward(xi, features=True)
                d = out.mean_logits.float()
                loss_g = dafl_generator_loss(d, out.features, cfg)
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            ep_g.append(loss_g.detach())
            log.x, log.y = x.detach(), d.detach()
            if pool is not None:  # the batch joins the pool if it is the epoch's best so far
                best_x, best_loss = keep_lowest(best_x, best_loss, x, loss_g)
                continue
            with amp:
                s_out = student(xi.detach())
            loss_s = kd_loss(s_out, d.detach(), cfg.kd_temperature)
            opt_s.zero_grad(set_to_none=True)
            loss_s.backward()
            opt_s.step()
            ep_kd.append(loss_s.detach())
        if pool is not None and best_x is not None:
            pool.add(best_x)
            ep_kd.append(distil_pool(run_, pool, opt_s, cfg.kd_batch_size, cfg.kd_temperature,
                                     targets))
        if ep_g:
            log.synth_losses.append(torch.stack(ep_g).mean())
            log.kd_losses.append(torch.stack(ep_kd).mean())
    extras = {"g_loss": as_floats(log.synth_losses), "kd_loss": as_floats(log.kd_losses),
              "kd_data": cfg.kd_data, "pool_size": len(pool) if pool is not None else 0,
              "kd_steps": (cfg.epochs * cfg.steps_per_epoch if pool is None
                           else sum(-(-cfg.batch_size * e // cfg.kd_batch_size)
                                    for e in range(1, cfg.epochs + 1)))}
    return run_.result(cfg.method_name, cfg.preset, extras,
                       samples=(log.x, log.y.argmax(1) if log.y is not None else None),
                       num_images=cfg.num_images)


SPEC = MethodSpec(
    "fed-dafl", FedDAFLConfig, run,
    MethodKind(
        "Chen et al. 2019 (DENSE baseline)", True, 1,
        "per epoch: generator step → distillation step", MODEL, "a generator", "one model"
    ),
)
