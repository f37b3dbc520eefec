"""DENSE: data-free one-shot FL by generator training + ensemble distillation
(Zhang et al., NeurIPS 2022, Algorithm 1, Eqs. 1–6; SPEC §4).

Per epoch: sample z ~ N(0, I) and labels y; T_G Adam steps of the generator G on
L_gen = CE(D(x̂), y) + λ1·L_BN + λ2·L_div (Eq. 5); then distil the ensemble D into the student S
with L_dis = KL(σ(D/T) ‖ σ(S/T))·T² (Eq. 6), SGD with momentum. Multi-round DENSE (Table 5) is
:mod:`ofl_core.multi_round` with :func:`run_dense`'s ``student_state``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import Attrs
from ..distill.combiners import (
    WEIGHTED,
    TeacherWeights,
    combine_teachers,
    require_given_weights,
    resolve_teacher_weights,
    stratification_stage,
)
from ..distill.config import TeacherConfig, check_teacher_config
from ..distill.generator import (
    GeneratorOptimizer,
    build_generator,
    generator_forward,
    sample_latents,
)
from ..distill.kernels import autocast_context
from ..distill.loop import DistillRun, as_floats, ensemble_kd_step, open_run, pool_targets
from ..distill.losses import boundary_support_loss
from ..distill.pool import ImagePool, augment_batch, resolve_pool_augment
from ..distill.stratification import Stratification
from ..distill.targets import PoolTargets, cacheable
from ..distill.teachers import TeacherBank
from ..precision import resolve_amp
from ..presets import check_preset
from ..server import GENERATOR_BN, MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload

ABLATIONS = (None, "ce_only", "no_bn", "no_div")


@dataclass(frozen=True)
class DenseConfig(TeacherConfig):
    """DENSE's server side. Defaults = the paper (``preset="paper"``); every ⚑ field is a
    documented difference of the authors' code (``preset="authors_code"``, SPEC §4).

    Paper (§3.1.4, Alg. 1): T = ``epochs`` = 200, T_G = ``steps_per_epoch`` = 30, generator Adam
    ``g_lr`` 1e-3 with ``g_betas`` (0.5, 0.999) (betas: DENSE's code), λ1 = ``bn_weight`` = 1,
    λ2 = ``adv_weight`` = 0.5, student SGD ``kd_lr`` 0.01 momentum 0.9, ``batch_size`` b = 128
    (§3.1.4 "batch size b = 128"; Alg. 1 uses the same b for the synthetic batch), nz = 256.
    ``kd_temperature`` = 1: Eq. 6 is KL(D(x̂), f_S(x̂)) with no temperature.

    ⚑ fields (paper → authors' code): ``bn_weight`` 1 → 0 (their BN hooks are registered on a
    wrapper whose teachers live in a plain list, so L_BN is silently 0); ``adv_weight`` 0.5 → 1;
    ``kd_temperature`` 1 → 20; ``kd_lr`` 0.01 → 0.005; ``reinit_generator`` False → True and
    ``optimize_z`` False → True (generator and z re-initialised every epoch, z optimised jointly
    with G); ``sorted_labels`` False → True; ``augment`` False → True (crop pad 4 + flip of x̂
    before teachers and student; in KD the pool images are re-augmented as ``pool_augment``);
    ``batch_size``/``kd_batch_size`` 128 → 256; ``synthesis_student_mode`` "eval" →
    "train_first" (their student is in train mode while the generator trains in the first epoch
    only — BN on batch statistics, running statistics updated by the synthetic batches — and
    in eval mode from the second on, because their per-epoch test leaves it there; "train"
    keeps train mode in every epoch); ``pool_rounding`` "round" → "floor" (their pool PNGs hold
    floor(255·x)).

    ``kd_data``: ``"fresh"`` is Algorithm 1 read literally (after the T_G steps, one student step
    on G(z): 200 student steps in all). ``"pool"`` is the code: the lowest-loss batch of each
    epoch joins a growing pool (8-bit when ``pool_uint8``) and each epoch's distillation is one
    shuffled pass over the pool in batches of ``kd_batch_size`` (epoch e = ⌈e·b/kd_batch⌉
    steps). SPEC §4 recommends ``"pool"`` for the paper preset too (the paper's numbers came
    from code that does it), keeping the paper's losses, weights and hyperparameters — so both
    presets default to ``"pool"``; see docs/decisions/dense.md.

    ``ablation`` (DENSE Table 6): ``"ce_only"`` (λ1 = λ2 = 0), ``"no_bn"`` (λ1 = 0),
    ``"no_div"`` (λ2 = 0). ``student_arch``: None = the clients' architecture (homogeneous
    clients); required for heterogeneous clients (the paper uses ``"resnet18"``).
    ``label`` overrides the reported method name (e.g. ``"dense+ldam"`` for LDAM clients).

    ``teacher`` (default ``"mean_logits"`` = D, Eq. 1; docs/decisions/fedhydra.md): the teacher of
    the generator loss and of the distillation (:mod:`ofl_core.distill.combiners`). A weighted
    teacher runs FedHydra's model stratification first (the ``strat_*`` fields, same seed as
    FedHydra); a labelled one uses the sampled labels y in L_gen and its label-free form in the
    distillation (DENSE's pool keeps images only).

    Speed options (same results up to float rounding, except ``amp``): ``fast_generator``
    (exact upsample-conv as one stride-2 transposed conv), ``batched_teachers`` (vmap;
    "auto" = on CUDA), ``channels_last`` ("auto" = on CPU), ``amp`` (bfloat16 autocast;
    "auto" = where bfloat16 is native, as for local training: DENSE's accuracy was measured
    unchanged against float32 over 3 seeds at the quick scale and at β = 0.1 on the full
    FMNIST, docs/decisions/clients.md#precision; ``amp=False`` keeps the paper's float32).
    """

    kd_temperature: float = 1.0
    reinit_generator: bool = False
    amp: bool | Literal["auto"] = "auto"
    optimize_z: bool = False
    sorted_labels: bool = False
    augment: bool = False
    pool_augment: Literal["auto", "none", "flip", "crop_flip"] = "auto"
    kd_data: Literal["fresh", "pool"] = "pool"
    pool_uint8: bool = True
    pool_rounding: Literal["round", "floor"] = "round"
    synthesis_student_mode: Literal["eval", "train", "train_first"] = "eval"
    ablation: Literal["ce_only", "no_bn", "no_div"] | None = None
    label: str | None = None
    log_every: int = 10
    num_images: int = 64

    def __post_init__(self) -> None:
        check_teacher_config(self, counts=("log_every",), positive=("kd_temperature",))

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> DenseConfig:
        """The paper's DENSE, or ⚑ what DENSE's official code does (README command:
        ``--epochs 200 --lr 0.005 --batch_size 256 --synthesis_batch_size 256 --g_steps 30
        --lr_g 1e-3 --bn 1.0 --oh 1.0 --T 20 --adv 1``, with L_BN silently zero; the student's
        mode during generation and the pool's 8-bit rounding as the code has them)."""
        check_preset(preset)
        base = cls(preset=preset)
        if preset == "authors_code":
            base = replace(
                base, bn_weight=0.0, adv_weight=1.0, kd_temperature=20.0, kd_lr=0.005,
                reinit_generator=True, optimize_z=True, sorted_labels=True, augment=True,
                kd_data="pool", batch_size=256, kd_batch_size=256,
                synthesis_student_mode="train_first", pool_rounding="floor",
            )
        return replace(base, **overrides) if overrides else base

    @property
    def loss_weights(self) -> tuple[float, float, float]:
        """(CE, λ1 for L_BN, λ2 for L_div) after the ablation switch (DENSE Table 6)."""
        bn, adv = self.bn_weight, self.adv_weight
        if self.ablation in ("ce_only", "no_bn"):
            bn = 0.0
        if self.ablation in ("ce_only", "no_div"):
            adv = 0.0
        return self.ce_weight, bn, adv

    @property
    def method_name(self) -> str:
        """The name used in results (matches paper_results.csv): ``dense``,
        ``dense-ce-only``, ``dense-no-bn``, ``dense-no-div``, or ``label`` when set."""
        if self.label:
            return self.label
        return "dense" if self.ablation is None else "dense-" + self.ablation.replace("_", "-")


class DenseSynthesizer:
    """DENSE's data-generation stage (Alg. 1 lines 7–11): one generator step on
    L_gen = CE(D(x̂), y) + λ1·L_BN + λ2·L_div (Eq. 5), x̂ = G(z) (optionally augmented).

    The student is frozen for these steps (no weight gradients; eval mode unless
    ``synthesis_student_mode`` says train mode for the epoch); teachers never get weight
    gradients.
    """

    def __init__(self, gen: nn.Module, bank: TeacherBank, student: nn.Module, cfg: DenseConfig,
                 rng: torch.Generator, device: torch.device,
                 weights: TeacherWeights | None = None) -> None:
        self.gen, self.bank, self.student, self.cfg, self.rng = gen, bank, student, cfg, rng
        self.weights = weights
        self.augment = "crop_flip" if cfg.augment else "none"
        self.amp = autocast_context(device, cfg.amp)
        self.zero = torch.zeros((), device=device)

    def to_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.bank.to_input(x)

    def teacher(self, logits: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """D = (1/m) Σ_k f_k(x̂) (Eq. 1), or the configured ``teacher``."""
        if self.cfg.teacher == "mean_logits":
            return logits.mean(0)
        return combine_teachers(self.cfg.teacher, logits.float(), y, self.weights)

    def freeze_student(self, epoch: int) -> None:
        """No weight gradients for the student during epoch ``epoch``'s generator steps; train
        mode for ``"train"``, and for ``"train_first"`` in epoch 0 only (DENSE's code), else
        eval mode."""
        mode = self.cfg.synthesis_student_mode
        self.student.train(mode == "train" or (mode == "train_first" and epoch == 0))
        self.student.requires_grad_(False)

    def losses(self, z: torch.Tensor, y: torch.Tensor
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """(L_gen, its parts, x̂ = G(z)) with the autograd graph to G (and z)."""
        w_ce, w_bn, w_adv = self.cfg.loss_weights
        with self.amp:
            x = generator_forward(self.gen, z, self.cfg.fast_generator)
            xa = self.to_input(augment_batch(x, self.augment, self.rng))
            out = self.bank.forward(xa, bn=w_bn > 0)
            d = self.teacher(out.logits, y)
            loss_ce = F.cross_entropy(d.float(), y)
            loss_bn = out.bn_loss if out.bn_loss is not None else self.zero
            loss_div = (boundary_support_loss(d, self.student(xa)) if w_adv > 0
                        else self.zero)
        loss = w_ce * loss_ce + w_bn * loss_bn + w_adv * loss_div
        return loss, {"ce": loss_ce, "bn": loss_bn, "div": loss_div, "total": loss}, x

    def step(self, z: torch.Tensor, y: torch.Tensor, optimizers: Sequence[torch.optim.Optimizer]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """One Adam step of G (and z); returns the pre-step loss, its parts and x̂."""
        loss, parts, x = self.losses(z, y)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()
        return loss.detach(), {k: v.detach().float() for k, v in parts.items()}, x.detach()


class Distiller:
    """DENSE's model-distillation stage (Alg. 1 lines 12–14): one SGD step of the student on
    L_dis = KL(σ(D/T) ‖ σ(S/T))·T² (Eq. 6), teachers under ``no_grad``."""

    def __init__(self, bank: TeacherBank, student: nn.Module, opt: torch.optim.Optimizer,
                 temperature: float, augment: str, rng: torch.Generator,
                 device: torch.device, amp: bool | Literal["auto"] = False,
                 teacher: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        self.bank, self.student, self.opt, self.t = bank, student, opt, temperature
        self.augment, self.rng, self.teacher = augment, rng, teacher
        self.amp = autocast_context(device, amp)
        self.targets: PoolTargets | None = None

    def step(self, xb: torch.Tensor) -> torch.Tensor:
        """Augment ``xb`` (KD-time augmentation), then one SGD step on L_dis (Eq. 6)."""
        xb = self.bank.to_input(augment_batch(xb, self.augment, self.rng))
        return ensemble_kd_step(self.bank, self.student, self.opt, xb, self.t, self.amp,
                                self.teacher)

    def pool_pass(self, pool: ImagePool, batch_size: int) -> list[torch.Tensor]:
        """One shuffled pass over the pool, a :meth:`step` per batch; the teachers' targets of
        the pool's images are kept across passes where the augmentation allows
        (:mod:`~ofl_core.distill.targets`: the same steps, the teachers run once an image)."""
        if self.targets is None and cacheable(self.augment):
            self.targets = pool_targets(self.bank, self.amp, self.augment, batch_size,
                                        self.teacher)
        if self.targets is None:
            return [self.step(xb) for xb in pool.batches(batch_size, self.rng)]
        return [ensemble_kd_step(self.bank, self.student, self.opt, self.bank.to_input(xb),
                                 self.t, self.amp, target=t)
                for xb, t, _ in self.targets.batches(pool, batch_size, self.rng)]


def run(uploads: list[ClientUpload], cfg: DenseConfig, ctx: ServerContext) -> ServerResult:
    """DENSE Algorithm 1 on the uploaded client models; returns the distilled student."""
    return run_dense(uploads, cfg, ctx)


@dataclass
class DenseLog:
    """What DENSE records: the generator losses every ``log_every``-th step, the per-epoch
    mean KD loss, the student step count, the stage timings and the last synthetic batch."""

    steps: dict[str, list] = field(default_factory=lambda: {
        "epoch": [], "step": [], "ce": [], "bn": [], "div": [], "total": []})
    kd_losses: list[torch.Tensor] = field(default_factory=list)
    kd_steps: int = 0
    t_gen: float = 0.0
    t_kd: float = 0.0
    last_x: torch.Tensor | None = None
    last_y: torch.Tensor | None = None


def generation_stage(synth: DenseSynthesizer, z: torch.Tensor, y: torch.Tensor,
                     opt_g: torch.optim.Optimizer, cfg: DenseConfig, epoch: int, log: DenseLog,
                     keep_best: bool) -> torch.Tensor | None:
    """Alg. 1 lines 7–11: T_G Adam steps of G (⚑ and z with ``optimize_z``) on L_gen (Eq. 5).
    Returns the epoch's lowest-loss batch x̂ when ``keep_best`` (DENSE's code), kept without a
    host sync."""
    opts = [opt_g]
    if cfg.optimize_z:
        z.requires_grad_(True)
        opts.append(torch.optim.Adam([z], lr=cfg.g_lr, betas=cfg.g_betas))
    synth.freeze_student(epoch)
    best_loss = torch.full((), float("inf"), device=z.device)
    best_x = None
    for j in range(cfg.steps_per_epoch):
        loss, parts, x = synth.step(z, y, opts)
        if keep_best:
            best_x = x if best_x is None else torch.where(loss < best_loss, x, best_x)
            best_loss = torch.minimum(best_loss, loss)
        step = epoch * cfg.steps_per_epoch + j
        if step % cfg.log_every == 0:
            log.steps["epoch"].append(epoch)
            log.steps["step"].append(step)
            for k, v in parts.items():
                log.steps[k].append(v)
    return best_x


def distillation_stage(distiller: Distiller, synth: DenseSynthesizer, pool: ImagePool | None,
                       best_x: torch.Tensor | None, z: torch.Tensor, y: torch.Tensor,
                       cfg: DenseConfig, log: DenseLog) -> None:
    """Alg. 1 lines 12–14: SGD steps of the student on L_dis (Eq. 6). ``kd_data="pool"``: the
    best batch joins the pool, then one shuffled pass over it; ``"fresh"``: one step on G(z)."""
    synth.student.requires_grad_(True)
    synth.student.train()
    if pool is not None:
        pool.add(best_x)
        log.last_x, log.last_y = best_x, y
        ep_losses = distiller.pool_pass(pool, cfg.kd_batch_size)
    else:
        with torch.no_grad(), synth.amp:
            x_kd = generator_forward(synth.gen, z.detach(), cfg.fast_generator).float()
        log.last_x, log.last_y = x_kd, y
        ep_losses = [distiller.step(x_kd)]
    log.kd_steps += len(ep_losses)
    log.kd_losses.append(torch.stack(ep_losses).mean())


def run_dense(uploads: list[ClientUpload], cfg: DenseConfig, ctx: ServerContext,
              student_state: dict[str, torch.Tensor] | None = None,
              stratification: Stratification | None = None,
              teacher_weights: TeacherWeights | None = None) -> ServerResult:
    """DENSE Algorithm 1; :func:`run` with an optional initial student state (multi-round).
    With a weighted ``teacher``: an optional precomputed FedHydra :class:`Stratification`
    (else it is computed first) or explicit teacher weights (required by the diagnostic
    ``"oracle"``)."""
    run_ = open_run(uploads, cfg, ctx, "DENSE", "dense", student_state=student_state,
                    inputs={"stratification": stratification, "teacher_weights": teacher_weights})
    rng, dev = run_.rng, run_.device
    weights = dense_teacher_weights(run_, cfg, ctx, len(uploads), stratification,
                                    teacher_weights)
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    synth = DenseSynthesizer(gen, run_.bank, run_.student, cfg, rng, dev, weights)
    pool = (ImagePool(uint8=cfg.pool_uint8, device=dev, rounding=cfg.pool_rounding)
            if cfg.kd_data == "pool" else None)
    distiller = make_distiller(run_, cfg, pool is not None, synth.augment, ctx.in_channels,
                               weights)
    log = DenseLog()
    g_opt = GeneratorOptimizer(gen, cfg)
    state = {"generator": gen, "opt_g": g_opt, "opt_s": distiller.opt,
             "log": Attrs.of(log, dev), **({"pool": pool} if pool is not None else {})}
    for epoch in run_.epochs(state):  # Alg. 1 line 5: for T epochs
        t0 = time.perf_counter()
        opt_g = g_opt.for_epoch(rng, epoch)
        z, y = sample_latents(cfg, ctx.num_classes, rng, dev)
        best_x = generation_stage(synth, z, y, opt_g, cfg, epoch, log, pool is not None)
        t1 = time.perf_counter()
        distillation_stage(distiller, synth, pool, best_x, z, y, cfg, log)
        log.t_gen += t1 - t0
        log.t_kd += time.perf_counter() - t1
    return run_.result(cfg.method_name, cfg.preset, dense_extras(run_, cfg, pool, log),
                       samples=(log.last_x, log.last_y), num_images=cfg.num_images)


def dense_teacher_weights(run_: DistillRun, cfg: DenseConfig, ctx: ServerContext, m: int,
                          stratification: Stratification | None,
                          given: TeacherWeights | None) -> TeacherWeights | None:
    """The weights of a weighted ``teacher`` (None for D): given, or from FedHydra's model
    stratification (Alg. 2) of the clients."""
    if cfg.teacher not in WEIGHTED:
        return None
    require_given_weights(cfg.teacher, given, "DENSE")
    strat = None
    if given is None:
        strat = stratification_stage(run_, cfg, ctx, m, stratification)
    w = resolve_teacher_weights(cfg.teacher, strat, given, (ctx.num_classes, m), "DENSE")
    return w.to(run_.device) if w is not None else None


def make_distiller(run_: DistillRun, cfg: DenseConfig, from_pool: bool, synth_augment: str,
                   in_channels: int, weights: TeacherWeights | None = None) -> Distiller:
    """The student's SGD on L_dis (Eq. 6), with the KD-time augmentation; the configured
    ``teacher`` in its label-free form (None = D, Eq. 1)."""
    kd_aug = (resolve_pool_augment(cfg.pool_augment, cfg.augment, in_channels) if from_pool
              else synth_augment)
    opt = torch.optim.SGD(run_.student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    return Distiller(run_.bank, run_.student, opt, cfg.kd_temperature, kd_aug, run_.rng,
                     run_.device, cfg.amp, label_free_teacher(cfg.teacher, weights))


def label_free_teacher(name: str, weights: TeacherWeights | None
                       ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The teacher ``name`` without labels, as a function of the clients' logits (m, B, C);
    None for D (the mean of logits, Eq. 1: :func:`ensemble_kd_step`'s own)."""
    if name == "mean_logits":
        return None

    def teacher(logits: torch.Tensor) -> torch.Tensor:
        return combine_teachers(name, logits.float(), None, weights)

    return teacher


def dense_extras(run_: DistillRun, cfg: DenseConfig, pool: ImagePool | None,
                 log: DenseLog) -> dict:
    """DENSE's own result extras (beside :meth:`DistillRun.result`'s common ones)."""
    return {
        "loss_weights": dict(zip(("ce", "bn", "div"), cfg.loss_weights, strict=True)),
        "teacher": cfg.teacher,
        "kd_data": cfg.kd_data,
        "pool_size": len(pool) if pool is not None else 0,
        "pool_batches": pool.num_batches if pool is not None else 0,
        "kd_steps": log.kd_steps,
        "generator_steps": cfg.epochs * cfg.steps_per_epoch,
        "channels_last": run_.bank.channels_last,
        "amp": resolve_amp(cfg.amp, run_.device),
        "losses": {k: (torch.stack(v).tolist() if v and isinstance(v[0], torch.Tensor) else v)
                   for k, v in log.steps.items()},
        "kd_loss": as_floats(log.kd_losses),
        "time_generator_s": round(log.t_gen, 3),
        "time_kd_s": round(log.t_kd, 3),
    }


SPEC = MethodSpec(
    "dense", DenseConfig, run,
    MethodKind(
        "Zhang et al. NeurIPS 2022", True, 1, "per epoch: generator training → distillation", MODEL,
        GENERATOR_BN, "one model"
    ),
)


__all__ = ["SPEC", "DenseConfig", "DenseLog", "DenseSynthesizer", "Distiller", "run", "run_dense"]
