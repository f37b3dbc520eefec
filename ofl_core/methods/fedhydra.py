"""FedHydra: data-free one-shot FL with stratified aggregation
(Bai et al., Algs. 1–3, Eqs. 1–19; SPEC §4 "FedHydra").

1. Model stratification (Alg. 2, Eqs. 1–7, :mod:`ofl_core.stratification`): the stratified
   weights Ū_r, Ū_c (C, m) from m·C short generator trainings.
2. Every epoch (Alg. 1 lines 12–25): sample z ~ N(0, I) and uniform labels y; T_G Adam steps of
   one persistent generator G on L_Gen = CE(P, y) + λ1·L_BN + λ2·L_AD (Eq. 16), where P is the
   stratified aggregation SA(x̂, y) of the clients' logits (Eqs. 8–12, :func:`sa_logits`),
   L_BN the BN-statistics loss (Eq. 14, as in DENSE) and L_AD = −KL(σ(P) ‖ σ(S(x̂))) (Eq. 15, no
   mask); then distil into the global model S with L_Glo = KL(σ(P) ‖ σ(S)) + β·CE(S, argmax P)
   (Eqs. 17–19), SGD.

The teachers, the BN loss, the KL, the generator and the pool are DENSE's machinery
(:mod:`ofl_core.synthesis`). FedHydra has no public code, so ``preset="authors_code"`` equals
the paper preset; every choice the paper leaves open is in docs/decisions.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..clients import ClientUpload, build_from_upload
from ..ensemble import SA_SPACES, Ensemble, SAEnsemble, sa_logits
from ..models import MODEL_NAMES
from ..presets import check_preset
from ..seeds import derive_seed
from ..stratification import MIN_LOSS_FLOOR, Stratification, stratify
from ..synthesis import (
    EvalCurve,
    ImagePool,
    TeacherBank,
    autocast_context,
    build_generator,
    generator_forward,
    image_grid,
    kd_loss,
    kl_per_sample,
    server_student,
)
from .base import ServerContext, ServerResult

KD_DATA = ("intermediate", "fresh", "pool")


@dataclass(frozen=True)
class FedHydraConfig:
    """FedHydra's server side; defaults = the paper (§4.1.4, Algs. 1–3).

    Paper values: T_g = ``epochs`` = 200, T_G = ``steps_per_epoch`` = 30, b = ``batch_size`` = 128,
    generator Adam ``g_lr`` 1e-3, λ1 = ``bn_weight`` = 1, λ2 = ``adv_weight`` = 0.5, global model
    SGD ``kd_lr`` 0.01. Stratification uses the same T_G, b and Adam (``strat_steps``,
    ``strat_batch_size``, ``strat_lr``).

    Not given by the paper (docs/decisions.md): β = ``kd_ce_weight`` = 1 (Eq. 19);
    ``kd_momentum`` 0.9 and Adam ``g_betas`` (0.5, 0.999) (DENSE's values, FedHydra builds on
    DENSE); nz = 256 and the generator of SPEC §2; ``kd_data``:

    - ``"intermediate"`` (default): each epoch's T_G intermediate batches x̂_1..x̂_T_G (with the SA
      logits computed for them during the generator steps) are distilled after the generator
      stage, one SGD step each — FedHydra §2: "our strategy leverages all generated intermediate
      images" instead of selecting the best batch as DENSE does.
    - ``"fresh"``: Algorithm 1 read literally — one student step per epoch on G(z) after the
      T_G generator steps (200 student steps in all).
    - ``"pool"``: DENSE's code — the lowest-loss batch of each epoch (with its labels) joins a
      growing pool and each epoch is one pass over it in batches of ``kd_batch_size``.

    ``sa_rescale``: False = Eqs. 8–11 literally (P ≈ mean logits / C); True multiplies P by C
    (SPEC §4). ``sa_space``: ``"logits"`` = Eq. 8 as written (weights on logits);
    ``"probs"`` applies the same weights to softmax probabilities (not the paper; measured in
    docs/decisions.md, FedHydra section). ``student_arch``: None = the clients' architecture
    (homogeneous clients); the paper's server model for heterogeneous clients is ``"resnet18"``.
    ``min_loss_floor``: guard of Eq. 2 (:func:`ofl_core.stratification.guidance_capability`).
    ``strat_group``: generators trained together during stratification ("auto": C on the CPU).
    Speed options as in DENSE: ``fast_generator``, ``batched_teachers``, ``channels_last``,
    ``amp`` (bfloat16 autocast, off by default).
    """

    epochs: int = 200
    steps_per_epoch: int = 30
    batch_size: int = 128
    kd_batch_size: int = 128
    nz: int = 256
    ngf: int = 64
    g_lr: float = 1e-3
    g_betas: tuple[float, float] = (0.5, 0.999)
    kd_lr: float = 0.01
    kd_momentum: float = 0.9
    ce_weight: float = 1.0
    bn_weight: float = 1.0
    adv_weight: float = 0.5
    kd_ce_weight: float = 1.0
    sa_rescale: bool = False
    sa_space: Literal["logits", "probs"] = "logits"
    kd_data: Literal["intermediate", "fresh", "pool"] = "intermediate"
    pool_uint8: bool = True
    strat_steps: int = 30
    strat_batch_size: int = 128
    strat_lr: float = 1e-3
    strat_group: int | Literal["auto"] = "auto"
    min_loss_floor: float = MIN_LOSS_FLOOR
    student_arch: str | None = None
    eval_every: int = 1
    log_every: int = 10
    num_images: int = 64
    fast_generator: bool = True
    batched_teachers: bool | Literal["auto"] = "auto"
    channels_last: bool | Literal["auto"] = "auto"
    amp: bool = False
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_preset(self.preset)
        for name in ("epochs", "steps_per_epoch", "batch_size", "kd_batch_size", "nz", "ngf",
                     "strat_steps", "strat_batch_size", "eval_every", "log_every"):
            v = getattr(self, name)
            lo = 0 if name == "epochs" else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"FedHydraConfig.{name} must be an integer ≥ {lo} (got {v!r})")
        if self.num_images < 0:
            raise ValueError(f"FedHydraConfig.num_images must be ≥ 0 (got {self.num_images})")
        for name in ("g_lr", "kd_lr", "strat_lr", "min_loss_floor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FedHydraConfig.{name} must be > 0 (got {getattr(self, name)})")
        for name in ("ce_weight", "bn_weight", "adv_weight", "kd_ce_weight", "kd_momentum"):
            if getattr(self, name) < 0:
                raise ValueError(f"FedHydraConfig.{name} must be ≥ 0 (got {getattr(self, name)})")
        if len(self.g_betas) != 2 or not all(0 <= b < 1 for b in self.g_betas):
            raise ValueError(f"FedHydraConfig.g_betas must be two numbers in [0, 1) "
                             f"(got {self.g_betas})")
        if self.sa_space not in SA_SPACES:
            raise ValueError(f"FedHydraConfig.sa_space must be one of {SA_SPACES} "
                             f"(got {self.sa_space!r})")
        if self.kd_data not in KD_DATA:
            raise ValueError(f"FedHydraConfig.kd_data must be one of {KD_DATA} "
                             f"(got {self.kd_data!r})")
        if self.strat_group != "auto" and (not isinstance(self.strat_group, int)
                                           or self.strat_group < 1):
            raise ValueError("FedHydraConfig.strat_group must be a positive integer or 'auto' "
                             f"(got {self.strat_group!r})")
        if self.student_arch is not None and self.student_arch not in MODEL_NAMES:
            raise ValueError(f"FedHydraConfig.student_arch: unknown model "
                             f"{self.student_arch!r}; known: {', '.join(MODEL_NAMES)}")
        for name in ("batched_teachers", "channels_last"):
            if getattr(self, name) not in (True, False, "auto"):
                raise ValueError(f"FedHydraConfig.{name} must be True, False or 'auto'")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> FedHydraConfig:
        """The paper's FedHydra. FedHydra has no public code, so ``"authors_code"`` has the
        same values (only the ``preset`` label differs)."""
        check_preset(preset)
        base = cls(preset=preset)
        return replace(base, **overrides) if overrides else base


def run(uploads: list[ClientUpload], cfg: FedHydraConfig, ctx: ServerContext) -> ServerResult:
    """FedHydra Algorithm 1 on the uploaded client models; returns the distilled global model."""
    return run_fedhydra(uploads, cfg, ctx)


def run_fedhydra(
    uploads: list[ClientUpload],
    cfg: FedHydraConfig,
    ctx: ServerContext,
    student_state: dict[str, torch.Tensor] | None = None,
    stratification: Stratification | None = None,
) -> ServerResult:
    """:func:`run` with an optional initial global-model state (multi-round) and an optional
    precomputed :class:`Stratification` (e.g. to compare ``sa_rescale`` settings without
    repeating the m·C generator trainings; it must come from the same uploads)."""
    if not uploads:
        raise ValueError("FedHydra: no client uploads")
    dev = torch.device(ctx.device)
    C = ctx.num_classes
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student, s_arch = server_student(uploads, cfg.student_arch, C, ctx.in_channels,
                                     ctx.image_size, derive_seed(ctx.seed, "fedhydra-student"),
                                     dev, "FedHydra")
    if student_state is not None:
        student.load_state_dict(student_state)
    cl = bank.channels_last
    if cl:
        student.to(memory_format=torch.channels_last)

    def to_input(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if cl else x

    # ---- model stratification (Alg. 1 line 9, Alg. 2) ----
    t0 = time.perf_counter()
    if stratification is None:
        stratification = stratify(
            bank.models, C, ctx.in_channels, ctx.image_size, steps=cfg.strat_steps,
            batch_size=cfg.strat_batch_size, nz=cfg.nz, ngf=cfg.ngf, lr=cfg.strat_lr,
            betas=cfg.g_betas, seed=derive_seed(ctx.seed, "fedhydra-stratify"), device=dev,
            group=cfg.strat_group, fast_generator=cfg.fast_generator, channels_last=cl,
            min_loss_floor=cfg.min_loss_floor, progress=ctx.progress)
    elif tuple(stratification.U.shape) != (C, len(uploads)):
        raise ValueError(f"FedHydra: the given stratification is {tuple(stratification.U.shape)}"
                         f", expected (C, m) = ({C}, {len(uploads)})")
    t_strat = time.perf_counter() - t0
    U_r = stratification.U_r.to(dev, torch.float32)
    U_c = stratification.U_c.to(dev, torch.float32)

    # ---- structure-value learning (Alg. 1 lines 11-25) ----
    rng = torch.Generator().manual_seed(derive_seed(ctx.seed, "fedhydra"))
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    opt_g = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
    opt_s = torch.optim.SGD(student.parameters(), lr=cfg.kd_lr, momentum=cfg.kd_momentum)
    w_ce, w_bn, w_adv, beta = cfg.ce_weight, cfg.bn_weight, cfg.adv_weight, cfg.kd_ce_weight
    amp = autocast_context(dev, cfg.amp)
    pool = ImagePool(uint8=cfg.pool_uint8, device=dev) if cfg.kd_data == "pool" else None
    pool_labels: list[torch.Tensor] = []
    tracker = EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every)
    log: dict[str, list] = {"epoch": [], "step": [], "ce": [], "bn": [], "ad": [], "total": []}
    kd_log: dict[str, list[torch.Tensor]] = {"kl": [], "ce": []}
    kd_steps = 0
    t_gen = t_kd = 0.0
    last_x = last_y = None
    zero = torch.zeros((), device=dev)

    def sa_teacher(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            with amp:
                logits = bank.logits(to_input(xb))
            return sa_logits(logits.float(), yb, U_r, U_c, cfg.sa_rescale, cfg.sa_space)

    def kd_step(xb: torch.Tensor, pb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One SGD step on L_Glo = KL(σ(P) ‖ σ(S)) + β·CE(S, argmax P) (Eqs. 17–19)."""
        with amp:
            s_out = student(to_input(xb)).float()
        kl = kd_loss(s_out, pb)
        ce = F.cross_entropy(s_out, pb.argmax(1)) if beta > 0 else zero
        loss = kl + beta * ce
        opt_s.zero_grad(set_to_none=True)
        loss.backward()
        opt_s.step()
        return kl.detach(), ce.detach()

    bar = tqdm(range(cfg.epochs), desc="FedHydra", disable=not ctx.progress)
    for epoch in bar:
        t1 = time.perf_counter()
        # ---- data generation (Alg. 1 lines 13-21) ----
        z = torch.randn(cfg.batch_size, cfg.nz, generator=rng).to(dev)
        y = torch.randint(0, C, (cfg.batch_size,), generator=rng).to(dev)
        student.eval().requires_grad_(False)
        inter: list[tuple[torch.Tensor, torch.Tensor]] = []
        best_loss = torch.full((), float("inf"), device=dev)
        best_x = None
        for t in range(cfg.steps_per_epoch):
            with amp:
                x = generator_forward(gen, z, cfg.fast_generator)
                xa = to_input(x)
                out = bank.forward(xa, bn=w_bn > 0)
                s_out = student(xa) if w_adv > 0 else None
            P = sa_logits(out.logits.float(), y, U_r, U_c, cfg.sa_rescale,
                          cfg.sa_space)  # Eq. 12
            loss_ce = F.cross_entropy(P, y)  # Eq. 13
            loss_bn = out.bn_loss if out.bn_loss is not None else zero  # Eq. 14
            loss_ad = -kl_per_sample(P, s_out).mean() if s_out is not None else zero  # Eq. 15
            loss = w_ce * loss_ce + w_bn * loss_bn + w_adv * loss_ad  # Eq. 16
            if cfg.kd_data == "intermediate":
                inter.append((x.detach().float(), P.detach()))
            elif pool is not None:
                lower = loss.detach() < best_loss
                best_x = x.detach() if best_x is None else torch.where(lower, x.detach(), best_x)
                best_loss = torch.minimum(best_loss, loss.detach())
            step = epoch * cfg.steps_per_epoch + t
            if step % cfg.log_every == 0:
                log["epoch"].append(epoch)
                log["step"].append(step)
                for k, v in (("ce", loss_ce), ("bn", loss_bn), ("ad", loss_ad), ("total", loss)):
                    log[k].append(v.detach().float())
            opt_g.zero_grad(set_to_none=True)
            loss.backward()
            opt_g.step()
        t2 = time.perf_counter()
        # ---- model distillation (Alg. 1 lines 22-24) ----
        student.train().requires_grad_(True)
        if cfg.kd_data == "intermediate":
            parts = [kd_step(xb, pb) for xb, pb in inter]
            last_x, last_y = inter[-1][0], y
        elif cfg.kd_data == "fresh":
            with torch.no_grad(), amp:
                x_kd = generator_forward(gen, z, cfg.fast_generator).float()
            parts = [kd_step(x_kd, sa_teacher(x_kd, y))]
            last_x, last_y = x_kd, y
        else:
            assert pool is not None and best_x is not None
            pool.add(best_x)
            pool_labels.append(y)
            labels = torch.cat(pool_labels)
            stored = pool.stored()
            order = torch.randperm(len(pool), generator=rng).to(dev)
            parts = []
            for i in range(0, len(pool), cfg.kd_batch_size):
                idx = order[i : i + cfg.kd_batch_size]
                xb = stored[idx].float().div_(255.0) if pool.uint8 else stored[idx].float()
                parts.append(kd_step(xb, sa_teacher(xb, labels[idx])))
            last_x, last_y = best_x.float(), y
        kd_steps += len(parts)
        kd_log["kl"].append(torch.stack([p[0] for p in parts]).mean())
        kd_log["ce"].append(torch.stack([p[1] for p in parts]).mean())
        t_gen += t2 - t1
        t_kd += time.perf_counter() - t2
        acc = tracker(epoch, student)
        if acc is not None:
            bar.set_postfix(acc=f"{acc:.2f}")
    bar.close()
    bank.close()
    student.eval().to(memory_format=torch.contiguous_format)
    for mdl in bank.models:
        mdl.to(memory_format=torch.contiguous_format)

    extras: dict = {
        **stratification.to_lists(),
        "strat_losses": stratification.losses.tolist(),
        "sa_rescale": cfg.sa_rescale,
        "student_arch": s_arch,
        "kd_data": cfg.kd_data,
        "loss_weights": {"ce": w_ce, "bn": w_bn, "ad": w_adv, "kd_ce": beta},
        "kd_steps": kd_steps,
        "generator_steps": cfg.epochs * cfg.steps_per_epoch,
        "strat_generator_steps": len(uploads) * C * cfg.strat_steps,
        "pool_size": len(pool) if pool is not None else 0,
        "teachers_batched": bank.batched,
        "curve_epochs": tracker.epochs_done,
        "losses": {k: (torch.stack(v).tolist() if v and isinstance(v[0], torch.Tensor) else v)
                   for k, v in log.items()},
        "kd_loss": {k: torch.stack(v).tolist() if v else [] for k, v in kd_log.items()},
        "time_stratification_s": round(t_strat, 3),
        "time_generator_s": round(t_gen, 3),
        "time_kd_s": round(t_kd, 3),
    }
    if ctx.evaluate is not None:
        # Fig. 8: label-free SA ensemble vs the averaging ensemble (AE) on real test data
        extras["sa_ensemble_acc"] = float(ctx.evaluate(
            SAEnsemble(bank.models, stratification.U_r, stratification.U_c, cfg.sa_rescale,
                       cfg.sa_space)))
        extras["mean_ensemble_acc"] = float(ctx.evaluate(Ensemble(bank.models)))
    images, labels = (image_grid(last_x, last_y, cfg.num_images) if last_x is not None
                      else (None, None))
    extras["image_labels"] = labels
    return ServerResult(method="fedhydra", preset=cfg.preset, model=student,
                        curve=tracker.curve, last_acc=tracker.last, best_acc=tracker.best,
                        images=images, extras=extras)


__all__ = ["FedHydraConfig", "run", "run_fedhydra"]
