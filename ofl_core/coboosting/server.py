"""Co-Boosting: data and ensemble boosted together for one-shot FL (Dai et al., "Enhancing
One-Shot Federated Learning Through Data and Ensemble Co-Boosting", ICLR 2024; public code
``rong-dai/Co-Boosting``). No paper text is in this repository: the three steps are the
method as the paper's abstract states it; every formula and number below comes from the code
(docs/decisions/coboosting.md says which).

Per epoch e, with the weighted ensemble A_w(x) = Σ_k w_k f_k(x) / Σ_k w_k (w = 1/m at first):
1. Hard-sample synthesis: z ~ N(0, I), uniform labels y; T_G Adam steps of the generator on
   L_G = L_H + λ_A·L_A (:func:`~ofl_core.coboosting.losses.hard_sample_loss`,
   :func:`~ofl_core.coboosting.losses.adversarial_loss`; + λ_BN·L_BN, 0 in both presets); the
   lowest-loss batch joins a labelled pool.
2. Ensemble boosting: one pass over the pool, a gradient-sign step of w per batch on
   CE(A_w(x̂), y) with step μ·γ^e (:func:`~ofl_core.coboosting.losses.ensemble_weight_step`).
3. Distillation: one pass over the pool; each batch is perturbed by ODS
   (:func:`~ofl_core.distill.losses.diversify`), then one SGD step of the server model on
   KL(σ(A_w/T) ‖ σ(S/T))·T².

The teachers, generator, pool and KD loss are the shared machinery of :mod:`ofl_core.distill`;
the generator's optimiser and latents are DENSE's (:mod:`ofl_core.distill.generator`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from torch.optim.lr_scheduler import LRScheduler

from ..checkpoint import Attrs, Stateful
from ..combine import Ensemble
from ..distill.config import SynthesisConfig, check_distill_config
from ..distill.generator import (
    GeneratorOptimizer,
    build_generator,
    generator_forward,
    sample_latents,
)
from ..distill.loop import DistillRun, as_floats, open_run
from ..distill.losses import kd_loss
from ..distill.pool import ImagePool, augment_batch
from ..distill.targets import PoolTargets, cacheable
from ..models import check_input_norm
from ..presets import check_preset
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload
from .losses import (
    WeightedEnsemble,
    adversarial_loss,
    diversify,
    ensemble_weight_step,
    hard_sample_loss,
    weighted_logits,
)


@dataclass(frozen=True)
class CoBoostingConfig(SynthesisConfig):
    """Co-Boosting's server side. Defaults = ``preset="paper"``; every ⚑ field is a documented
    difference of the authors' code (``preset="authors_code"``, docs/decisions/coboosting.md).

    Shared with DENSE (the code's README command ``co_boosting.sh``): ``epochs`` 200,
    ``steps_per_epoch`` T_G = 30, ``batch_size`` = ``kd_batch_size`` = 128, generator Adam
    ``g_lr`` 1e-3 betas (0.5, 0.999), student SGD ``kd_lr`` 0.01 momentum 0.9, nz 256.
    Co-Boosting's (values from the code's defaults): L_H weight ``ce_weight`` 1 and hardness β =
    ``hardness`` 1; L_A weight ``adv_weight`` 1 at ``adv_temperature`` 3; ``bn_weight`` 0 (the
    code's ``--bn 0``); ensemble-weight step μ = ``weight_lr`` 0.01 decayed by
    ``weight_lr_decay`` 0.99 per epoch, ``weight_passes`` 1 pass over the pool per epoch; ODS
    ``perturb_temperature`` 4; KD ``kd_temperature`` 4 (the code's ``--kd_T`` default).

    ⚑ fields (paper → authors' code): ``perturb_eps`` 8/255 → 4/255 (the code's 8/255 acts on
    inputs normalised with std 0.5, i.e. 4/255 in [0, 1] pixels); ``weights_include_new`` True
    → False (the code updates w before the epoch's new batch joins the pool, so not at epoch
    0); ``reinit_generator``/``optimize_z`` False → True (a fresh generator and z every epoch,
    z optimised with G); ``grad_clip`` None → 10 (max-norm of the generator's and the student's
    gradients); ``kd_weight_decay`` 0 → 1e-4; ``kd_lr_schedule`` "constant" → "cosine" (over
    ``epochs``); ``pool_augment`` "none" → "auto" (crop+flip for RGB — the code's CIFAR
    transform — none for grayscale; set "none" for SVHN, whose code transform has none);
    ``input_norm`` "none" → "half" (the code feeds every network (x − 0.5)/0.5: here the
    student's own normalisation, :data:`~ofl_core.models.base.INPUT_NORMS`; the teachers apply
    the one their uploads name, so clients trained as the code trains them need
    ``LocalTrainConfig(input_norm="half")``; G still makes [0, 1] images, the pool and the ODS
    step stay in [0, 1] pixels); ``pool_rounding`` "round" → "floor" (its pool PNGs hold
    ``(255·x).astype(uint8)``, as DENSE's code's).

    Ablations by value: ``hardness=0`` (plain CE), ``weight_lr=0`` (fixed uniform ensemble),
    ``perturb_eps=0`` (no perturbation), ``adv_weight=0``.
    """

    bn_weight: float = 0.0
    adv_weight: float = 1.0
    hardness: float = 1.0
    adv_temperature: float = 3.0
    kd_temperature: float = 4.0
    weight_lr: float = 0.01
    weight_lr_decay: float = 0.99
    weight_passes: int = 1
    perturb_eps: float = 8 / 255
    perturb_temperature: float = 4.0
    weights_include_new: bool = True
    reinit_generator: bool = False
    optimize_z: bool = False
    sorted_labels: bool = False
    grad_clip: float | None = None
    kd_weight_decay: float = 0.0
    kd_lr_schedule: Literal["constant", "cosine"] = "constant"
    pool_augment: Literal["auto", "none", "flip", "crop_flip"] = "none"
    pool_uint8: bool = True
    pool_rounding: Literal["round", "floor"] = "round"
    input_norm: str = "none"
    log_every: int = 10
    num_images: int = 64

    def __post_init__(self) -> None:
        check_distill_config(
            self, counts=("kd_batch_size", "nz", "ngf", "log_every", "weight_passes"),
            positive=("g_lr", "kd_temperature", "adv_temperature", "perturb_temperature",
                      "grad_clip"),
            nonnegative=("ce_weight", "bn_weight", "adv_weight", "hardness", "weight_lr",
                         "weight_lr_decay", "perturb_eps", "kd_weight_decay"))
        check_input_norm(self.input_norm, "CoBoostingConfig.input_norm")
        if self.pool_rounding not in ("round", "floor"):
            raise ValueError("CoBoostingConfig.pool_rounding must be 'round' or 'floor' "
                             f"(got {self.pool_rounding!r})")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> CoBoostingConfig:
        """The paper's Co-Boosting, or ⚑ what its official code does."""
        check_preset(preset)
        base = cls(preset=preset)
        if preset == "authors_code":
            base = replace(base, perturb_eps=4 / 255, weights_include_new=False,
                           reinit_generator=True, optimize_z=True, grad_clip=10.0,
                           kd_weight_decay=1e-4, kd_lr_schedule="cosine", pool_augment="auto",
                           input_norm="half", pool_rounding="floor")
        return replace(base, **overrides) if overrides else base


@dataclass(eq=False)
class CoBoost:
    """One Co-Boosting run: the shared scaffold, G, the ensemble weights, the pool, the logs,
    the last synthetic batch."""

    run: DistillRun
    cfg: CoBoostingConfig
    gen: torch.nn.Module
    w: torch.Tensor
    pool: ImagePool
    opt_s: torch.optim.Optimizer
    augment: str
    zero: torch.Tensor
    log: dict[str, list] = field(default_factory=lambda: {
        "epoch": [], "step": [], "hard": [], "adv": [], "bn": [], "total": []})
    weights: list[list[float]] = field(default_factory=list)
    weight_losses: list[torch.Tensor] = field(default_factory=list)
    kd_losses: list[torch.Tensor] = field(default_factory=list)
    kd_steps: int = 0
    times: dict[str, float] = field(default_factory=lambda: {"gen": 0.0, "w": 0.0, "kd": 0.0})
    last_x: torch.Tensor | None = None
    last_y: torch.Tensor | None = None
    targets: PoolTargets | None = None

    def checkpoint_state(self, g_opt: GeneratorOptimizer, sched: LRScheduler | None
                         ) -> dict[str, Stateful]:
        """What a checkpoint keeps (beside the scaffold's student, RNGs and curve): G, its and
        the student's optimisers (and LR schedule), the pool, w and the logs."""
        logs = Attrs(self, ("w", "log", "weights", "weight_losses", "kd_losses", "kd_steps",
                            "times", "last_x", "last_y"), self.run.device)
        return {"generator": self.gen, "opt_g": g_opt, "opt_s": self.opt_s, "pool": self.pool,
                "log": logs, **({"sched": sched} if sched is not None else {})}

    def teacher(self, x: torch.Tensor) -> torch.Tensor:
        """A_w(x) with gradients to x (never to the teachers or w)."""
        with self.run.amp:
            return weighted_logits(self.run.bank.logits(self.run.to_input(x)).float(), self.w)

    def pool_batches(self, labels: bool):
        """One shuffled pass over the pool, each batch augmented as ``pool_augment``."""
        for xb, yb in self.pool.labelled_batches(self.cfg.kd_batch_size, self.run.rng,
                                                 labels=labels):
            yield augment_batch(xb, self.augment, self.run.rng), yb

    def clients_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The teachers' logits (m, B, C) of [0, 1] images ``x``, without gradients."""
        with torch.no_grad(), self.run.amp:
            return self.run.bank.logits(self.run.to_input(x)).float()

    def weight_batches(self):
        """One pass of :meth:`pool_batches` for the weight step: each batch's teachers' logits
        (m, B, C) and labels; the logits of each pool image kept from the first pass where the
        augmentation allows (:mod:`~ofl_core.distill.targets`: the same draws and values)."""
        if not cacheable(self.augment):
            for xb, yb in self.pool_batches(labels=True):
                yield self.clients_logits(xb), yb
            return
        if self.targets is None:  # kept image-first, (N, m, C), so that a pool index picks
            self.targets = PoolTargets(lambda x: self.clients_logits(x).transpose(0, 1),
                                       self.augment, self.cfg.kd_batch_size)
        labels = self.pool.labels()
        for _, t, idx in self.targets.batches(self.pool, self.cfg.kd_batch_size, self.run.rng):
            yield t.transpose(0, 1).contiguous(), labels[idx]


def generator_step(c: CoBoost, z: torch.Tensor, y: torch.Tensor,
                   opts: list[torch.optim.Optimizer], step: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """One Adam step of G (⚑ and z) on L_G = λ_H·L_H + λ_A·L_A + λ_BN·L_BN at the current w;
    returns the pre-step loss and x̂ = G(z). The student and the teachers stay frozen."""
    cfg, run_ = c.cfg, c.run
    with run_.amp:
        x = generator_forward(c.gen, z, cfg.fast_generator)
        xa = run_.to_input(x)
        out = run_.bank.forward(xa, bn=cfg.bn_weight > 0)
        t = weighted_logits(out.logits.float(), c.w)
        l_h = hard_sample_loss(t, y, cfg.hardness)
        l_a = (adversarial_loss(t, run_.student(xa), cfg.adv_temperature)
               if cfg.adv_weight > 0 else c.zero)
        l_bn = out.bn_loss if out.bn_loss is not None else c.zero
    loss = cfg.ce_weight * l_h + cfg.adv_weight * l_a + cfg.bn_weight * l_bn
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(c.gen.parameters(), cfg.grad_clip)
    for opt in opts:
        opt.step()
    if step % cfg.log_every == 0:
        c.log["epoch"].append(step // cfg.steps_per_epoch)
        c.log["step"].append(step)
        for k, v in (("hard", l_h), ("adv", l_a), ("bn", l_bn), ("total", loss)):
            c.log[k].append(v.detach().float())
    return loss.detach(), x.detach()


def synthesis_stage(c: CoBoost, z: torch.Tensor, y: torch.Tensor,
                    opt_g: torch.optim.Optimizer, epoch: int) -> torch.Tensor:
    """Step 1: T_G generator steps; returns the epoch's lowest-loss batch (no host sync)."""
    cfg = c.cfg
    opts = [opt_g]
    if cfg.optimize_z:
        z.requires_grad_(True)
        opts.append(torch.optim.Adam([z], lr=cfg.g_lr, betas=cfg.g_betas))
    c.run.student.eval().requires_grad_(False)
    best_loss = torch.full((), float("inf"), device=z.device)
    best_x = None
    for j in range(cfg.steps_per_epoch):
        loss, x = generator_step(c, z, y, opts, epoch * cfg.steps_per_epoch + j)
        best_x = x if best_x is None else torch.where(loss < best_loss, x, best_x)
        best_loss = torch.minimum(best_loss, loss)
    assert best_x is not None
    return best_x


def weight_stage(c: CoBoost, epoch: int) -> None:
    """Step 2: ``weight_passes`` passes over the pool, one gradient-sign step of w per batch
    with step μ·γ^e; the teachers' logits without gradients."""
    lr = c.cfg.weight_lr * c.cfg.weight_lr_decay ** epoch
    if lr == 0 or len(c.pool) == 0:
        return
    losses = []
    for _ in range(c.cfg.weight_passes):
        for logits, yb in c.weight_batches():
            c.w, loss = ensemble_weight_step(c.w, logits, yb, lr)
            losses.append(loss)
    c.weight_losses.append(torch.stack(losses).mean())


def distillation_stage(c: CoBoost) -> None:
    """Step 3: one pass over the pool; each batch ODS-perturbed, then one SGD step of the
    student on KL(σ(A_w/T) ‖ σ(S/T))·T² (⚑ gradient max-norm ``grad_clip``)."""
    cfg, run_, student = c.cfg, c.run, c.run.student
    student.train().requires_grad_(True)
    losses = []
    for xb, _ in c.pool_batches(labels=False):
        xb = diversify(xb, c.teacher, cfg.perturb_eps, cfg.perturb_temperature, run_.rng)
        with torch.no_grad():
            t_out = c.teacher(xb)
        with run_.amp:
            s_out = student(run_.to_input(xb))
        loss = kd_loss(s_out, t_out, cfg.kd_temperature)
        c.opt_s.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.grad_clip)
        c.opt_s.step()
        losses.append(loss.detach())
    c.kd_steps += len(losses)
    c.kd_losses.append(torch.stack(losses).mean())


def run(uploads: list[ClientUpload], cfg: CoBoostingConfig, ctx: ServerContext) -> ServerResult:
    """Co-Boosting on the uploaded client models; returns the distilled server model."""
    return run_coboosting(uploads, cfg, ctx)


def pool_augmentation(value: str, in_channels: int) -> str:
    """``pool_augment`` resolved: ``"auto"`` is the code's data transform, crop+flip for RGB
    (CIFAR) and none for grayscale (MNIST/FMNIST; its SVHN transform has none either)."""
    if value == "auto":
        return "crop_flip" if in_channels == 3 else "none"
    return value


def start(uploads: list[ClientUpload], cfg: CoBoostingConfig, ctx: ServerContext,
          student_state: dict[str, torch.Tensor] | None = None) -> CoBoost:
    """The run's state: teachers, student, generator, w = 1/m, an empty labelled pool."""
    run_ = open_run(uploads, cfg, ctx, "Co-Boosting", "coboosting", student_state=student_state,
                    input_norm=cfg.input_norm)
    dev = run_.device
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, run_.rng,
                          dev).train()
    opt_s = torch.optim.SGD(run_.student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum,
                            weight_decay=cfg.kd_weight_decay)
    return CoBoost(run=run_, cfg=cfg, gen=gen,
                   w=torch.full((len(uploads),), 1.0 / len(uploads), device=dev),
                   pool=ImagePool(uint8=cfg.pool_uint8, device=dev,
                                  rounding=cfg.pool_rounding), opt_s=opt_s,
                   augment=pool_augmentation(cfg.pool_augment, ctx.in_channels),
                   zero=torch.zeros((), device=dev))


def run_coboosting(uploads: list[ClientUpload], cfg: CoBoostingConfig, ctx: ServerContext,
                   student_state: dict[str, torch.Tensor] | None = None) -> ServerResult:
    """:func:`run` with an optional initial student state."""
    c = start(uploads, cfg, ctx, student_state)
    rng, dev = c.run.rng, c.run.device
    sched = (torch.optim.lr_scheduler.CosineAnnealingLR(c.opt_s, T_max=max(cfg.epochs, 1))
             if cfg.kd_lr_schedule == "cosine" else None)
    g_opt = GeneratorOptimizer(c.gen, cfg)
    for epoch in c.run.epochs(c.checkpoint_state(g_opt, sched)):
        t0 = time.perf_counter()
        opt_g = g_opt.for_epoch(rng, epoch)
        z, y = sample_latents(cfg, ctx.num_classes, rng, dev)
        best_x = synthesis_stage(c, z, y, opt_g, epoch)
        c.last_x, c.last_y = best_x, y
        t1 = time.perf_counter()
        if not cfg.weights_include_new:  # ⚑ the code: w from the earlier epochs' samples
            weight_stage(c, epoch)
        c.pool.add(best_x, y)
        if cfg.weights_include_new:
            weight_stage(c, epoch)
        c.weights.append(c.w.tolist())
        t2 = time.perf_counter()
        distillation_stage(c)
        if sched is not None:
            sched.step()
        c.times["gen"] += t1 - t0
        c.times["w"] += t2 - t1
        c.times["kd"] += time.perf_counter() - t2
    c.run.finish()
    extras = coboosting_extras(c)
    if ctx.evaluate is not None:  # the boosted ensemble A_w beside the plain mean D
        models = c.run.bank.models
        extras["weighted_ensemble_acc"] = float(ctx.evaluate(WeightedEnsemble(models, c.w)))
        extras["mean_ensemble_acc"] = float(ctx.evaluate(Ensemble(models)))
    return c.run.result("coboosting", cfg.preset, extras, samples=(c.last_x, c.last_y),
                        num_images=cfg.num_images)


def coboosting_extras(c: CoBoost) -> dict:
    """Co-Boosting's own result extras (beside :meth:`DistillRun.result`'s common ones)."""
    cfg = c.cfg
    return {
        "loss_weights": {"hard": cfg.ce_weight, "adv": cfg.adv_weight, "bn": cfg.bn_weight},
        "ensemble_weights": c.w.tolist(),
        "ensemble_weights_per_epoch": c.weights,
        "pool_size": len(c.pool),
        "kd_steps": c.kd_steps,
        "generator_steps": cfg.epochs * cfg.steps_per_epoch,
        "pool_augment": c.augment,
        "input_norm": {"student": cfg.input_norm,
                       "teachers": [getattr(m, "input_norm", "none") for m in c.run.bank.models]},
        "losses": {k: (torch.stack(v).tolist() if v and isinstance(v[0], torch.Tensor) else v)
                   for k, v in c.log.items()},
        "weight_loss": as_floats(c.weight_losses),
        "kd_loss": as_floats(c.kd_losses),
        "time_generator_s": round(c.times["gen"], 3),
        "time_weights_s": round(c.times["w"], 3),
        "time_kd_s": round(c.times["kd"], 3),
    }


SPEC = MethodSpec(
    "coboosting", CoBoostingConfig, run,
    MethodKind(
        "Dai et al. ICLR 2024", True, 1,
        "per epoch: hard-sample generator → ensemble-weight boosting → distillation "
        "on perturbed samples",
        MODEL, "a generator", "one model"
    ),
)


__all__ = ["SPEC", "CoBoost", "CoBoostingConfig", "run", "run_coboosting"]
