"""FedHydra: data-free one-shot FL with stratified aggregation
(Bai et al., Algs. 1–3, Eqs. 1–19; SPEC §4 "FedHydra").

1. Model stratification (Alg. 2, Eqs. 1–7, :mod:`ofl_core.distill.stratification`): the stratified
   weights Ū_r, Ū_c (C, m) from m·C short generator trainings.
2. Every epoch (Alg. 1 lines 12–25): sample z ~ N(0, I) and uniform labels y; T_G Adam steps of
   one persistent generator G on L_Gen = CE(P, y) + λ1·L_BN + λ2·L_AD (Eq. 16), where P is the
   stratified aggregation SA(x̂, y) of the clients' logits (Eqs. 8–12,
   :func:`~ofl_core.distill.stratified_aggregation.sa_logits`),
   L_BN the BN-statistics loss (Eq. 14, as in DENSE) and L_AD = −KL(σ(P) ‖ σ(S(x̂))) (Eq. 15, no
   mask); then distil into the global model S with L_Glo = KL(σ(P) ‖ σ(S)) + β·CE(S, argmax P)
   (Eqs. 17–19), SGD.

The teachers, the BN loss, the KL, the generator and the pool are DENSE's machinery
(:mod:`ofl_core.distill`). FedHydra has no public code, so ``preset="authors_code"`` equals
the paper preset; every choice the paper leaves open is in docs/decisions/fedhydra.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from ..checkpoint import Attrs, Stateful
from ..combine import Ensemble
from ..distill.combiners import (
    Teacher,
    TeacherEnsemble,
    TeacherWeights,
    combine_teachers,
    require_given_weights,
    resolve_teacher_weights,
    stratification_stage,
)
from ..distill.config import TeacherConfig, check_teacher_config
from ..distill.generator import build_generator, generator_forward
from ..distill.loop import DistillRun, as_floats, open_run
from ..distill.losses import boundary_support_loss, kd_loss, kl_per_sample
from ..distill.pool import ImagePool
from ..distill.stratification import Stratification
from ..distill.stratified_aggregation import SAEnsemble
from ..distill.teachers import TeacherOutput
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload


@dataclass(frozen=True)
class FedHydraConfig(TeacherConfig):
    """FedHydra's server side; defaults = the paper (§4.1.4, Algs. 1–3).

    Paper values: T_g = ``epochs`` = 200, T_G = ``steps_per_epoch`` = 30, b = ``batch_size`` = 128,
    generator Adam ``g_lr`` 1e-3, λ1 = ``bn_weight`` = 1, λ2 = ``adv_weight`` = 0.5, global model
    SGD ``kd_lr`` 0.01. Stratification uses the same T_G, b and Adam (``strat_steps``,
    ``strat_batch_size``, ``strat_lr``; :class:`~ofl_core.distill.config.TeacherConfig`).

    Not given by the paper (docs/decisions/fedhydra.md): β = ``kd_ce_weight`` = 1 (Eq. 19);
    ``kd_momentum`` 0.9 and Adam ``g_betas`` (0.5, 0.999) (DENSE's values, FedHydra builds on
    DENSE); nz = 256 and the generator of SPEC §2; ``kd_data`` (the distillation regime):

    - ``"intermediate"`` (default): each epoch's T_G intermediate batches x̂_1..x̂_T_G (with the SA
      logits computed for them during the generator steps) are distilled after the generator
      stage, one SGD step each — FedHydra §2: "our strategy leverages all generated intermediate
      images" instead of selecting the best batch as DENSE does.
    - ``"replay"`` (not the paper; docs/decisions/fedhydra.md): every intermediate batch and its
      labels join a growing pool, and each epoch makes T_G SGD steps on batches of ``kd_batch_size``
      drawn from the whole pool (as many student steps as ``"intermediate"``, but old batches are
      replayed); the teacher is recomputed on the stored images.
    - ``"fresh"``: Algorithm 1 read literally — one student step per epoch on G(z) after the
      T_G generator steps (200 student steps in all).
    - ``"pool"``: DENSE's code — the lowest-loss batch of each epoch (with its labels) joins a
      growing pool and each epoch is one pass over it in batches of ``kd_batch_size``.

    ``teacher`` (default ``"sa"``: Eqs. 8–11 as written; :mod:`ofl_core.distill.combiners`):
    the prediction P of Eqs. 12–19. ``"sa_probs"`` applies the SA weights to softmax
    probabilities (not the paper; measured in docs/decisions/fedhydra.md).
    ``sa_rescale``: False = Eqs. 8–11 literally (P ≈ mean logits / C); True multiplies the
    ``"sa"`` teacher's P by C (SPEC §4). ``adv_mask``: False = Eq. 15 as written (every sample
    of the batch, SPEC §4); True keeps only the samples where P and the global model disagree,
    as DENSE's boundary-support loss does (DENSE Eq. 4) — not the paper; measured at paper scale
    in docs/decisions/paper-gaps.md#fedhydra-t1. ``student_arch``: None = the clients' architecture
    (homogeneous clients); the paper's server model for heterogeneous clients is
    ``"resnet18"``. Speed options as in DENSE: ``fast_generator``, ``batched_teachers``,
    ``channels_last``, ``amp`` (bfloat16 autocast, off by default).
    """

    teacher: Teacher = "sa"
    kd_ce_weight: float = 1.0
    sa_rescale: bool = False
    kd_data: Literal["intermediate", "replay", "fresh", "pool"] = "intermediate"
    pool_uint8: bool = True
    log_every: int = 10
    num_images: int = 64
    adv_mask: bool = False
    HASH_IF_SET: ClassVar[tuple[str, ...]] = ("adv_mask",)

    def __post_init__(self) -> None:
        check_teacher_config(self, counts=("log_every",), nonnegative=("kd_ce_weight",))


# ---------------------------------------------------------------- the losses, Eqs. 13-19


def ce_loss(P: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L_CE = CE(P, y), the SA logits against the sampled labels (FedHydra Eq. 13)."""
    return F.cross_entropy(P, y)


def bn_loss(out: TeacherOutput, zero: torch.Tensor) -> torch.Tensor:
    """L_BN, the teachers' BN-statistics loss averaged over the m clients (FedHydra Eq. 14, as
    DENSE Eq. 3); ``zero`` when it was not computed (λ1 = 0) or the teachers have no BN."""
    return out.bn_loss if out.bn_loss is not None else zero


def adversarial_loss(P: torch.Tensor, s_out: torch.Tensor | None, zero: torch.Tensor,
                     mask: bool = False) -> torch.Tensor:
    """L_AD = −KL(σ(P) ‖ σ(S(x̂))), batch mean, no mask (FedHydra Eq. 15); ``mask``: only the
    samples where argmax P ≠ argmax S count (DENSE Eq. 4's boundary support, not FedHydra's
    text); ``zero`` when the student was not run (λ2 = 0)."""
    if s_out is None:
        return zero
    return boundary_support_loss(P, s_out) if mask else -kl_per_sample(P, s_out).mean()


def generator_loss(l_ce: torch.Tensor, l_bn: torch.Tensor, l_ad: torch.Tensor,
                   cfg: FedHydraConfig) -> torch.Tensor:
    """L_Gen = L_CE + λ1·L_BN + λ2·L_AD (FedHydra Eq. 16; ``ce_weight`` scales L_CE, 1 in the
    paper)."""
    return cfg.ce_weight * l_ce + cfg.bn_weight * l_bn + cfg.adv_weight * l_ad


def kl_loss(s_out: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """L_KL = KL(σ(P) ‖ σ(S(x̂))), batch mean (FedHydra Eq. 17)."""
    return kd_loss(s_out, P)


def pseudo_label_loss(s_out: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """L_ĈE = CE(S(x̂), H[P]) with H[P] = argmax P the hard SA label (FedHydra Eq. 18)."""
    return F.cross_entropy(s_out, P.argmax(1))


def global_loss(l_kl: torch.Tensor, l_ce: torch.Tensor, beta: float) -> torch.Tensor:
    """L_Glo = L_KL + β·L_ĈE (FedHydra Eq. 19; β = ``kd_ce_weight``, not given by the paper)."""
    return l_kl + beta * l_ce


# ---------------------------------------------------------------- the server, Alg. 1


@dataclass(eq=False)
class Hydra:
    """One FedHydra server run: the shared scaffold, the teacher's weights (Ū_r/Ū_c), G, the
    optimisers, the pool (``kd_data`` "replay"/"pool"), the logs, the last distilled batch."""

    run: DistillRun
    cfg: FedHydraConfig
    weights: TeacherWeights
    gen: torch.nn.Module
    opt_g: torch.optim.Optimizer
    opt_s: torch.optim.Optimizer
    zero: torch.Tensor
    pool: ImagePool | None = None
    pool_labels: list[torch.Tensor] = field(default_factory=list)
    log: dict[str, list] = field(default_factory=lambda: {
        "epoch": [], "step": [], "ce": [], "bn": [], "ad": [], "total": []})
    kd_log: dict[str, list[torch.Tensor]] = field(default_factory=lambda: {"kl": [], "ce": []})
    kd_steps: int = 0
    t_gen: float = 0.0
    t_kd: float = 0.0
    last_x: torch.Tensor | None = None
    last_y: torch.Tensor | None = None

    def checkpoint_state(self) -> dict[str, Stateful]:
        """What a checkpoint keeps (beside the scaffold's student, RNGs and curve): G, both
        optimisers, the pool, the logs and the last distilled batch."""
        return {"generator": self.gen, "opt_g": self.opt_g, "opt_s": self.opt_s,
                **({"pool": self.pool} if self.pool is not None else {}),
                "log": Attrs(self, ("pool_labels", "log", "kd_log", "kd_steps", "t_gen",
                                    "t_kd", "last_x", "last_y"), self.run.device)}

    def sa(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """P = SA(x̂, y) from the teachers' logits (m, B, C) (FedHydra Eq. 12, Eqs. 8–11), or
        the configured ``teacher`` (:func:`~ofl_core.distill.combiners.combine_teachers`)."""
        return combine_teachers(self.cfg.teacher, logits.float(), y, self.weights,
                                self.cfg.sa_rescale)

    def sa_teacher(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        """P for images ``xb`` labelled ``yb``, without gradients (the distillation target)."""
        with torch.no_grad():
            with self.run.amp:
                logits = self.run.bank.logits(self.run.to_input(xb))
            return self.sa(logits, yb)


def generator_step(h: Hydra, z: torch.Tensor, y: torch.Tensor, step: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Alg. 1 lines 17–20: x̂ = G(z), P = SA(x̂, y) (Eq. 12), L_Gen (Eqs. 13–16), one Adam step
    of G. Returns x̂, P and L_Gen (before the step)."""
    cfg, run_ = h.cfg, h.run
    with run_.amp:
        x = generator_forward(h.gen, z, cfg.fast_generator)
        xa = run_.to_input(x)
        out = run_.bank.forward(xa, bn=cfg.bn_weight > 0)
        s_out = run_.student(xa) if cfg.adv_weight > 0 else None
    P = h.sa(out.logits, y)
    l_ce, l_bn = ce_loss(P, y), bn_loss(out, h.zero)
    l_ad = adversarial_loss(P, s_out, h.zero, cfg.adv_mask)
    loss = generator_loss(l_ce, l_bn, l_ad, cfg)
    if step % cfg.log_every == 0:
        h.log["epoch"].append(step // cfg.steps_per_epoch)
        h.log["step"].append(step)
        for k, v in (("ce", l_ce), ("bn", l_bn), ("ad", l_ad), ("total", loss)):
            h.log[k].append(v.detach().float())
    return x, P, loss


def generation_stage(h: Hydra, z: torch.Tensor, y: torch.Tensor, epoch: int
                     ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """Alg. 1 lines 15–21: T_G generator steps. Keeps, per ``kd_data``, every intermediate
    batch with its P (``"intermediate"``, ``"replay"``) or the lowest-loss batch
    (``"pool"``)."""
    cfg = h.cfg
    h.run.student.eval().requires_grad_(False)
    inter: list[tuple[torch.Tensor, torch.Tensor]] = []
    best_loss = torch.full((), float("inf"), device=h.run.device)
    best_x = None
    for t in range(cfg.steps_per_epoch):
        x, P, loss = generator_step(h, z, y, epoch * cfg.steps_per_epoch + t)
        if cfg.kd_data in ("intermediate", "replay"):
            inter.append((x.detach().float(), P.detach()))
        elif cfg.kd_data == "pool":
            lower = loss.detach() < best_loss
            best_x = x.detach() if best_x is None else torch.where(lower, x.detach(), best_x)
            best_loss = torch.minimum(best_loss, loss.detach())
        h.opt_g.zero_grad(set_to_none=True)
        loss.backward()
        h.opt_g.step()
    return inter, best_x


def kd_step(h: Hydra, xb: torch.Tensor, pb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step of the global model on L_Glo (Eqs. 17–19); returns (L_KL, L_ĈE)."""
    with h.run.amp:
        s_out = h.run.student(h.run.to_input(xb)).float()
    l_kl = kl_loss(s_out, pb)
    l_ce = pseudo_label_loss(s_out, pb) if h.cfg.kd_ce_weight > 0 else h.zero
    loss = global_loss(l_kl, l_ce, h.cfg.kd_ce_weight)
    h.opt_s.zero_grad(set_to_none=True)
    loss.backward()
    h.opt_s.step()
    return l_kl.detach(), l_ce.detach()


def distil_pool(h: Hydra, best_x: torch.Tensor, y: torch.Tensor
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``kd_data="pool"``: the best batch and its labels join the pool, then one shuffled pass
    over it, P recomputed for each stored batch."""
    pool, cfg, dev = h.pool, h.cfg, h.run.device
    assert pool is not None
    pool.add(best_x)
    h.pool_labels.append(y)
    labels = torch.cat(h.pool_labels)
    stored = pool.stored()
    order = torch.randperm(len(pool), generator=h.run.rng).to(dev)
    parts = []
    for i in range(0, len(pool), cfg.kd_batch_size):
        idx = order[i : i + cfg.kd_batch_size]
        xb = stored[idx].float().div_(255.0) if pool.uint8 else stored[idx].float()
        parts.append(kd_step(h, xb, h.sa_teacher(xb, labels[idx])))
    return parts


def distil_replay(h: Hydra, inter: list[tuple[torch.Tensor, torch.Tensor]], y: torch.Tensor
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``kd_data="replay"`` (not the paper): every intermediate batch of the epoch and its
    labels join the pool, then T_G SGD steps on batches of ``kd_batch_size`` drawn uniformly
    (with replacement) from the whole pool, P recomputed for the stored images."""
    pool, cfg, dev = h.pool, h.cfg, h.run.device
    assert pool is not None
    for xb, _ in inter:
        pool.add(xb)
        h.pool_labels.append(y)
    labels = torch.cat(h.pool_labels)
    stored = pool.stored()
    draws = torch.randint(0, len(pool), (len(inter), cfg.kd_batch_size),
                          generator=h.run.rng).to(dev)
    parts = []
    for idx in draws:
        xb = stored[idx].float().div_(255.0) if pool.uint8 else stored[idx].float()
        parts.append(kd_step(h, xb, h.sa_teacher(xb, labels[idx])))
    return parts


def distillation_stage(h: Hydra, z: torch.Tensor, y: torch.Tensor,
                       inter: list[tuple[torch.Tensor, torch.Tensor]],
                       best_x: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 1 lines 22–24: SGD steps of the global model on L_Glo (Eq. 19), per ``kd_data``.
    Returns the batch shown in the image grid and its labels."""
    cfg = h.cfg
    h.run.student.train().requires_grad_(True)
    if cfg.kd_data == "intermediate":
        parts = [kd_step(h, xb, pb) for xb, pb in inter]
        last = inter[-1][0], y
    elif cfg.kd_data == "replay":
        parts = distil_replay(h, inter, y)
        last = inter[-1][0], y
    elif cfg.kd_data == "fresh":
        with torch.no_grad(), h.run.amp:
            x_kd = generator_forward(h.gen, z, cfg.fast_generator).float()
        parts = [kd_step(h, x_kd, h.sa_teacher(x_kd, y))]
        last = x_kd, y
    else:
        assert best_x is not None
        parts = distil_pool(h, best_x, y)
        last = best_x.float(), y
    h.kd_steps += len(parts)
    h.kd_log["kl"].append(torch.stack([p[0] for p in parts]).mean())
    h.kd_log["ce"].append(torch.stack([p[1] for p in parts]).mean())
    return last


def run(uploads: list[ClientUpload], cfg: FedHydraConfig, ctx: ServerContext) -> ServerResult:
    """FedHydra Algorithm 1 on the uploaded client models; returns the distilled global model."""
    return run_fedhydra(uploads, cfg, ctx)


def run_fedhydra(
    uploads: list[ClientUpload],
    cfg: FedHydraConfig,
    ctx: ServerContext,
    student_state: dict[str, torch.Tensor] | None = None,
    stratification: Stratification | None = None,
    teacher_weights: TeacherWeights | None = None,
) -> ServerResult:
    """:func:`run` with an optional initial global-model state (multi-round), an optional
    precomputed :class:`Stratification` (e.g. to compare ``sa_rescale`` settings without
    repeating the m·C generator trainings; it must come from the same uploads) and optional
    teacher weights instead of the stratification's (required by the diagnostic
    ``teacher="oracle"``: :func:`~ofl_core.distill.combiners.oracle_weights`)."""
    require_given_weights(cfg.teacher, teacher_weights, "FedHydra")
    run_ = open_run(uploads, cfg, ctx, "FedHydra", "fedhydra", student_state=student_state,
                    fuse_student=False, inputs={"stratification": stratification,
                                                "teacher_weights": teacher_weights})
    dev = run_.device
    t0 = time.perf_counter()
    strat = stratification_stage(run_, cfg, ctx, len(uploads), stratification)
    t_strat = time.perf_counter() - t0
    weights = resolve_teacher_weights(cfg.teacher, strat, teacher_weights,
                                      tuple(strat.U.shape), "FedHydra")
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, run_.rng,
                          dev).train()
    h = Hydra(run=run_, cfg=cfg, weights=(weights or TeacherWeights(strat.U_r, strat.U_c))
              .to(dev), gen=gen,
              opt_g=torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas),
              opt_s=torch.optim.SGD(run_.student.parameters(), lr=cfg.kd_lr,
                                    momentum=cfg.kd_momentum),
              zero=torch.zeros((), device=dev),
              pool=ImagePool(uint8=cfg.pool_uint8, device=dev)
              if cfg.kd_data in ("pool", "replay") else None)
    for epoch in run_.epochs(h.checkpoint_state()):  # Alg. 1 line 12: for T_g epochs
        t1 = time.perf_counter()
        z = torch.randn(cfg.batch_size, cfg.nz, generator=run_.rng).to(dev)  # lines 13-14
        y = torch.randint(0, ctx.num_classes, (cfg.batch_size,), generator=run_.rng).to(dev)
        inter, best_x = generation_stage(h, z, y, epoch)
        t2 = time.perf_counter()
        h.last_x, h.last_y = distillation_stage(h, z, y, inter, best_x)
        h.t_gen += t2 - t1
        h.t_kd += time.perf_counter() - t2
    run_.finish()
    extras = fedhydra_extras(h, strat, len(uploads), ctx.num_classes, t_strat)
    if ctx.evaluate is not None:  # Fig. 8: label-free SA ensemble vs the mean ensemble (AE)
        models = run_.bank.models
        space = "probs" if cfg.teacher == "sa_probs" else "logits"
        extras["sa_ensemble_acc"] = float(ctx.evaluate(
            SAEnsemble(models, strat.U_r, strat.U_c, cfg.sa_rescale, space)))
        extras["mean_ensemble_acc"] = float(ctx.evaluate(Ensemble(models)))
        extras["teacher_acc"] = float(ctx.evaluate(
            TeacherEnsemble(models, cfg.teacher, weights, cfg.sa_rescale)))
    return run_.result("fedhydra", cfg.preset, extras, samples=(h.last_x, h.last_y),
                       num_images=cfg.num_images)


def fedhydra_extras(h: Hydra, strat: Stratification, m: int, num_classes: int,
                    t_strat: float) -> dict:
    """FedHydra's own result extras (beside :meth:`DistillRun.result`'s common ones)."""
    cfg = h.cfg
    return {
        **strat.to_lists(),
        "strat_losses": strat.losses.tolist(),
        "sa_rescale": cfg.sa_rescale,
        "teacher": cfg.teacher,
        "strat_u": cfg.strat_u,
        "kd_data": cfg.kd_data,
        "loss_weights": {"ce": cfg.ce_weight, "bn": cfg.bn_weight, "ad": cfg.adv_weight,
                         "kd_ce": cfg.kd_ce_weight},
        "kd_steps": h.kd_steps,
        "generator_steps": cfg.epochs * cfg.steps_per_epoch,
        "strat_generator_steps": m * num_classes * cfg.strat_steps,
        "pool_size": len(h.pool) if h.pool is not None else 0,
        "losses": {k: (torch.stack(v).tolist() if v and isinstance(v[0], torch.Tensor) else v)
                   for k, v in h.log.items()},
        "kd_loss": {k: as_floats(v) for k, v in h.kd_log.items()},
        "time_stratification_s": round(t_strat, 3),
        "time_generator_s": round(h.t_gen, 3),
        "time_kd_s": round(h.t_kd, 3),
    }


SPEC = MethodSpec(
    "fedhydra", FedHydraConfig, run,
    MethodKind(
        "FedHydra (Bai et al.)", True, 1,
        "stratification (m·C generator runs), then per epoch: generator → distillation", MODEL,
        "a generator; the clients' BN statistics", "one model"
    ),
)


__all__ = ["SPEC", "FedHydraConfig", "Hydra", "adversarial_loss", "bn_loss", "ce_loss",
           "generator_loss", "global_loss", "kl_loss", "pseudo_label_loss", "run",
           "run_fedhydra"]
