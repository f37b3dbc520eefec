"""DENSE: data-free one-shot FL by generator training + ensemble distillation
(Zhang et al., NeurIPS 2022, Algorithm 1, Eqs. 1–6; SPEC §4).

Per epoch: sample z ~ N(0, I) and labels y; T_G Adam steps of the generator G on
L_gen = CE(D(x̂), y) + λ1·L_BN + λ2·L_div (Eq. 5); then distil the ensemble D into the student S
with L_dis = KL(σ(D/T) ‖ σ(S/T))·T² (Eq. 6), SGD with momentum. Also here:
:func:`run_multi_round` (DENSE Table 5: T_c rounds, the global model sent back as every
client's initialisation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..client_training import train_clients
from ..clients import ClientUpload, LocalTrainConfig, build_from_upload
from ..data.datasets import ImageDataset
from ..data.partition import Partition
from ..models import MODEL_NAMES
from ..presets import check_preset
from ..seeds import derive_seed
from ..synthesis import (
    EvalCurve,
    ImagePool,
    TeacherBank,
    augment_batch,
    autocast_context,
    boundary_support_loss,
    build_generator,
    fuse_relu_maxpool,
    generator_forward,
    image_grid,
    kd_loss,
    reinit_generator,
    server_student,
)
from ..upload_cache import UploadCache
from .base import ServerContext, ServerResult

ABLATIONS = (None, "ce_only", "no_bn", "no_div")


@dataclass(frozen=True)
class DenseConfig:
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
    ``batch_size``/``kd_batch_size`` 128 → 256; ``synthesis_student_mode`` "eval" → "train" (their
    student stays in train mode while the generator trains, so its BN uses batch statistics).

    ``kd_data``: ``"fresh"`` is Algorithm 1 read literally (after the T_G steps, one student step
    on G(z): 200 student steps in all). ``"pool"`` is the code: the lowest-loss batch of each
    epoch joins a growing pool (8-bit when ``pool_uint8``) and each epoch's distillation is one
    shuffled pass over the pool in batches of ``kd_batch_size`` (epoch e = ⌈e·b/kd_batch⌉
    steps). SPEC §4 recommends ``"pool"`` for the paper preset too (the paper's numbers came
    from code that does it), keeping the paper's losses, weights and hyperparameters — so both
    presets default to ``"pool"``; see docs/decisions.md.

    ``ablation`` (DENSE Table 6): ``"ce_only"`` (λ1 = λ2 = 0), ``"no_bn"`` (λ1 = 0),
    ``"no_div"`` (λ2 = 0). ``student_arch``: None = the clients' architecture (homogeneous
    clients); required for heterogeneous clients (the paper uses ``"resnet18"``).
    ``label`` overrides the reported method name (e.g. ``"dense+ldam"`` for LDAM clients).

    Speed options (same results up to float rounding, except ``amp``): ``fast_generator``
    (exact upsample-conv as one stride-2 transposed conv), ``batched_teachers`` (vmap;
    "auto" = on CUDA), ``channels_last`` ("auto" = on CPU), ``amp`` (bfloat16 autocast; off
    by default).
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
    kd_temperature: float = 1.0
    ce_weight: float = 1.0
    bn_weight: float = 1.0
    adv_weight: float = 0.5
    reinit_generator: bool = False
    optimize_z: bool = False
    sorted_labels: bool = False
    augment: bool = False
    pool_augment: Literal["auto", "none", "flip", "crop_flip"] = "auto"
    kd_data: Literal["fresh", "pool"] = "pool"
    pool_uint8: bool = True
    synthesis_student_mode: Literal["eval", "train"] = "eval"
    ablation: Literal["ce_only", "no_bn", "no_div"] | None = None
    student_arch: str | None = None
    label: str | None = None
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
                     "eval_every", "log_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < (0 if name == "epochs" else 1):
                raise ValueError(f"DenseConfig.{name} must be an integer ≥ "
                                 f"{0 if name == 'epochs' else 1} (got {v!r})")
        if self.num_images < 0:
            raise ValueError(f"DenseConfig.num_images must be ≥ 0 (got {self.num_images})")
        for name in ("g_lr", "kd_lr", "kd_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DenseConfig.{name} must be > 0 (got {getattr(self, name)})")
        for name in ("ce_weight", "bn_weight", "adv_weight", "kd_momentum"):
            if getattr(self, name) < 0:
                raise ValueError(f"DenseConfig.{name} must be ≥ 0 (got {getattr(self, name)})")
        if len(self.g_betas) != 2 or not all(0 <= b < 1 for b in self.g_betas):
            raise ValueError(f"DenseConfig.g_betas must be two numbers in [0, 1) "
                             f"(got {self.g_betas})")
        if self.kd_data not in ("fresh", "pool"):
            raise ValueError(
                f"DenseConfig.kd_data must be 'fresh' or 'pool' (got {self.kd_data!r})")
        if self.pool_augment not in ("auto", "none", "flip", "crop_flip"):
            raise ValueError("DenseConfig.pool_augment must be 'auto', 'none', 'flip' or "
                             f"'crop_flip' (got {self.pool_augment!r})")
        if self.synthesis_student_mode not in ("eval", "train"):
            raise ValueError("DenseConfig.synthesis_student_mode must be 'eval' or 'train' "
                             f"(got {self.synthesis_student_mode!r})")
        if self.ablation not in ABLATIONS:
            raise ValueError(f"DenseConfig.ablation must be one of {ABLATIONS} "
                             f"(got {self.ablation!r})")
        if self.student_arch is not None and self.student_arch not in MODEL_NAMES:
            raise ValueError(f"DenseConfig.student_arch: unknown model {self.student_arch!r}; "
                             f"known: {', '.join(MODEL_NAMES)}")
        for name in ("batched_teachers", "channels_last"):
            if getattr(self, name) not in (True, False, "auto"):
                raise ValueError(f"DenseConfig.{name} must be True, False or 'auto'")

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> DenseConfig:
        """The paper's DENSE, or ⚑ what DENSE's official code does (README command:
        ``--epochs 200 --lr 0.005 --batch_size 256 --synthesis_batch_size 256 --g_steps 30
        --lr_g 1e-3 --bn 1.0 --oh 1.0 --T 20 --adv 1``, with L_BN silently zero)."""
        check_preset(preset)
        base = cls(preset=preset)
        if preset == "authors_code":
            base = replace(
                base, bn_weight=0.0, adv_weight=1.0, kd_temperature=20.0, kd_lr=0.005,
                reinit_generator=True, optimize_z=True, sorted_labels=True, augment=True,
                kd_data="pool", batch_size=256, kd_batch_size=256,
                synthesis_student_mode="train",
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


def resolve_pool_augment(cfg_value: str, augment: bool, in_channels: int) -> str:
    """KD-time augmentation of pool images. DENSE's code: flip for MNIST/FMNIST/SVHN, crop+flip
    for CIFAR; ``"auto"`` approximates it by channels (RGB → crop+flip, grayscale → flip)."""
    if not augment:
        return "none"
    if cfg_value == "auto":
        return "crop_flip" if in_channels == 3 else "flip"
    return cfg_value


class DenseSynthesizer:
    """DENSE's data-generation stage (Alg. 1 lines 7–11): one generator step on
    L_gen = CE(D(x̂), y) + λ1·L_BN + λ2·L_div (Eq. 5), x̂ = G(z) (optionally augmented).

    The student is frozen for these steps (no weight gradients; eval mode unless
    ``synthesis_student_mode="train"``); teachers never get weight gradients.
    """

    def __init__(self, gen: nn.Module, bank: TeacherBank, student: nn.Module, cfg: DenseConfig,
                 rng: torch.Generator, device: torch.device) -> None:
        self.gen, self.bank, self.student, self.cfg, self.rng = gen, bank, student, cfg, rng
        self.weights = cfg.loss_weights
        self.augment = "crop_flip" if cfg.augment else "none"
        self.amp = autocast_context(device, cfg.amp)
        self.zero = torch.zeros((), device=device)

    def to_input(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.bank.channels_last else x

    def freeze_student(self) -> None:
        self.student.train(self.cfg.synthesis_student_mode == "train")
        self.student.requires_grad_(False)

    def losses(self, z: torch.Tensor, y: torch.Tensor
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """(L_gen, its parts, x̂ = G(z)) with the autograd graph to G (and z)."""
        w_ce, w_bn, w_adv = self.weights
        with self.amp:
            x = generator_forward(self.gen, z, self.cfg.fast_generator)
            xa = self.to_input(augment_batch(x, self.augment, self.rng))
            out = self.bank.forward(xa, bn=w_bn > 0)
            d = out.mean_logits
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
                 device: torch.device, amp: bool = False) -> None:
        self.bank, self.student, self.opt, self.t = bank, student, opt, temperature
        self.augment, self.rng = augment, rng
        self.amp = autocast_context(device, amp)

    def step(self, xb: torch.Tensor) -> torch.Tensor:
        xb = augment_batch(xb, self.augment, self.rng)
        if self.bank.channels_last:
            xb = xb.contiguous(memory_format=torch.channels_last)
        with torch.no_grad(), self.amp:
            t_out = self.bank(xb)
        with self.amp:
            s_out = self.student(xb)
        loss = kd_loss(s_out, t_out, self.t)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()


def run(uploads: list[ClientUpload], cfg: DenseConfig, ctx: ServerContext) -> ServerResult:
    """DENSE Algorithm 1 on the uploaded client models; returns the distilled student."""
    return run_dense(uploads, cfg, ctx)


def run_dense(uploads: list[ClientUpload], cfg: DenseConfig, ctx: ServerContext,
              student_state: dict[str, torch.Tensor] | None = None) -> ServerResult:
    """:func:`run` with an optional initial student state (multi-round DENSE)."""
    if not uploads:
        raise ValueError("DENSE: no client uploads")
    dev = torch.device(ctx.device)
    bank = TeacherBank([build_from_upload(u, dev) for u in uploads],
                       batched=cfg.batched_teachers, channels_last=cfg.channels_last)
    student, s_arch = server_student(uploads, cfg.student_arch, ctx.num_classes,
                                     ctx.in_channels, ctx.image_size,
                                     derive_seed(ctx.seed, "dense-student"), dev, "DENSE")
    if student_state is not None:
        student.load_state_dict(student_state)
    if bank.channels_last:
        student.to(memory_format=torch.channels_last)
    unfuse = fuse_relu_maxpool(student)  # exact; undone before returning
    rng = torch.Generator().manual_seed(derive_seed(ctx.seed, "dense"))
    gen = build_generator(cfg.nz, cfg.ngf, ctx.image_size, ctx.in_channels, rng, dev).train()
    synth = DenseSynthesizer(gen, bank, student, cfg, rng, dev)
    pool = ImagePool(uint8=cfg.pool_uint8, device=dev) if cfg.kd_data == "pool" else None
    kd_aug = (resolve_pool_augment(cfg.pool_augment, cfg.augment, ctx.in_channels)
              if pool is not None else synth.augment)
    distiller = Distiller(bank, student, torch.optim.SGD(student.parameters(), lr=cfg.kd_lr,
                                                         momentum=cfg.kd_momentum),
                          cfg.kd_temperature, kd_aug, rng, dev, cfg.amp)
    opt_g: torch.optim.Optimizer | None = None
    tracker = EvalCurve(ctx.evaluate, cfg.epochs, cfg.eval_every)
    log: dict[str, list] = {"epoch": [], "step": [], "ce": [], "bn": [], "div": [], "total": []}
    kd_losses: list[torch.Tensor] = []
    kd_steps = 0
    t_gen = t_kd = 0.0
    last_x = last_y = None

    bar = tqdm(range(cfg.epochs), desc="DENSE", disable=not ctx.progress)
    for epoch in bar:
        t0 = time.perf_counter()
        # ---- data generation stage (Alg. 1 lines 7-11) ----
        if cfg.reinit_generator and epoch > 0:
            reinit_generator(gen, rng)
        if opt_g is None or cfg.reinit_generator:
            opt_g = torch.optim.Adam(gen.parameters(), lr=cfg.g_lr, betas=cfg.g_betas)
        z = torch.randn(cfg.batch_size, cfg.nz, generator=rng).to(dev)
        y = torch.randint(0, ctx.num_classes, (cfg.batch_size,), generator=rng)
        if cfg.sorted_labels:
            y = y.sort().values
        y = y.to(dev)
        opts = [opt_g]
        if cfg.optimize_z:
            z.requires_grad_(True)
            opts.append(torch.optim.Adam([z], lr=cfg.g_lr, betas=cfg.g_betas))
        synth.freeze_student()
        best_loss = torch.full((), float("inf"), device=dev)
        best_x = None
        for j in range(cfg.steps_per_epoch):
            loss, parts, x = synth.step(z, y, opts)
            if pool is not None:
                # the lowest-loss batch of the epoch (DENSE's code), kept without a host sync
                best_x = x if best_x is None else torch.where(loss < best_loss, x, best_x)
                best_loss = torch.minimum(best_loss, loss)
            step = epoch * cfg.steps_per_epoch + j
            if step % cfg.log_every == 0:
                log["epoch"].append(epoch)
                log["step"].append(step)
                for k, v in parts.items():
                    log[k].append(v)
        t1 = time.perf_counter()
        # ---- model distillation stage (Alg. 1 lines 12-14) ----
        student.requires_grad_(True)
        student.train()
        if pool is not None:
            pool.add(best_x)
            last_x, last_y = best_x, y
            ep_losses = [distiller.step(xb) for xb in pool.batches(cfg.kd_batch_size, rng)]
        else:
            with torch.no_grad(), synth.amp:
                x_kd = generator_forward(gen, z.detach(), cfg.fast_generator).float()
            last_x, last_y = x_kd, y
            ep_losses = [distiller.step(x_kd)]
        kd_steps += len(ep_losses)
        kd_losses.append(torch.stack(ep_losses).mean())
        t_gen += t1 - t0
        t_kd += time.perf_counter() - t1
        acc = tracker(epoch, student)
        if acc is not None:
            bar.set_postfix(acc=f"{acc:.2f}")
    bar.close()
    bank.close()
    unfuse()
    student.eval().to(memory_format=torch.contiguous_format)
    images, labels = (image_grid(last_x, last_y, cfg.num_images) if last_x is not None
                      else (None, None))
    extras = {
        "student_arch": s_arch,
        "loss_weights": dict(zip(("ce", "bn", "div"), cfg.loss_weights, strict=True)),
        "kd_data": cfg.kd_data,
        "pool_size": len(pool) if pool is not None else 0,
        "pool_batches": pool.num_batches if pool is not None else 0,
        "kd_steps": kd_steps,
        "generator_steps": cfg.epochs * cfg.steps_per_epoch,
        "teachers_batched": bank.batched,
        "channels_last": bank.channels_last,
        "amp": cfg.amp,
        "curve_epochs": tracker.epochs_done,
        "losses": {k: (torch.stack(v).tolist() if v and isinstance(v[0], torch.Tensor) else v)
                   for k, v in log.items()},
        "kd_loss": torch.stack(kd_losses).tolist() if kd_losses else [],
        "image_labels": labels,
        "time_generator_s": round(t_gen, 3),
        "time_kd_s": round(t_kd, 3),
    }
    return ServerResult(method=cfg.method_name, preset=cfg.preset, model=student,
                        curve=tracker.curve, last_acc=tracker.last, best_acc=tracker.best,
                        images=images, extras=extras)


# --------------------------------------------------------------------------------------------
# Multi-round DENSE (Table 5)
# --------------------------------------------------------------------------------------------


@dataclass
class RoundRecord:
    """One communication round of multi-round DENSE."""

    round: int
    last_acc: float | None
    best_acc: float | None
    ensemble_acc: float
    client_accs: list[float]
    curve: list[float] = field(default_factory=list)
    wall_time_s: float = 0.0


@dataclass(eq=False)
class MultiRoundResult:
    rounds: list[RoundRecord]
    model: nn.Module
    results: list[ServerResult]

    @property
    def accuracies(self) -> list[float | None]:
        """Last-epoch test accuracy of the global model after each round."""
        return [r.last_acc for r in self.rounds]


def run_multi_round(
    dataset: ImageDataset,
    partition: Partition,
    local_cfg: LocalTrainConfig | Sequence[LocalTrainConfig],
    dense_cfg: DenseConfig,
    rounds: int,
    seed: int,
    cache: UploadCache | None = None,
    device: str = "cpu",
    workers: int | str = "auto",
    progress: bool = True,
    warm_start_student: bool = True,
) -> MultiRoundResult:
    """Multi-round DENSE (Table 5): for each of ``rounds`` rounds, clients train from the
    current global model (``train_clients(..., init_state=global_state)``; round 1 from the
    shared initialisation), then DENSE distils them into the new global model.

    Homogeneous only: the global model is every client's initialisation, so every client must
    have the global model's architecture (a clear ``ValueError`` otherwise, before any
    training). ``warm_start_student``: round r's student starts from round r−1's global model
    (the paper does not say; see docs/decisions.md); round 1's from a fresh initialisation.
    ``local_cfg`` should have ``epochs=10`` to match the paper (E = 10 in Table 5).
    """
    from ..ensemble import Ensemble
    from ..evaluate import accuracy

    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1 (got {rounds})")
    cfgs = list(local_cfg) if isinstance(local_cfg, Sequence) else [local_cfg]
    kinds = sorted({(c.arch, tuple(c.model_kwargs)) for c in cfgs})
    if len(kinds) > 1:
        raise ValueError(
            "multi-round DENSE sends the global model back as every client's initialisation, "
            "so all clients must share one architecture; got "
            f"{sorted({c.arch for c in cfgs})} (heterogeneous clients: use one-shot DENSE)")
    arch = cfgs[0].arch
    if dense_cfg.student_arch is not None and dense_cfg.student_arch != arch:
        raise ValueError(
            f"multi-round DENSE: student_arch={dense_cfg.student_arch!r} differs from the "
            f"clients' architecture {arch!r}; the global model must be the clients' model")
    records: list[RoundRecord] = []
    results: list[ServerResult] = []
    global_state = None
    model = None
    for r in range(1, rounds + 1):
        t0 = time.perf_counter()
        uploads = train_clients(dataset, partition, local_cfg, seed, cache=cache, device=device,
                                workers=workers, progress=progress, init_state=global_state)
        models = [build_from_upload(u, device) for u in uploads]
        client_accs = [accuracy(mdl, dataset.x_test, dataset.y_test, device=device)
                       for mdl in models]
        ens_acc = accuracy(Ensemble(models), dataset.x_test, dataset.y_test, device=device)

        def evaluate(mdl: nn.Module) -> float:
            return accuracy(mdl, dataset.x_test, dataset.y_test, device=device)

        ctx = ServerContext(num_classes=dataset.num_classes, in_channels=dataset.channels,
                            image_size=dataset.image_size, seed=derive_seed(seed, "round", r),
                            device=device, evaluate=evaluate, progress=progress)
        warm = global_state if (warm_start_student and global_state is not None) else None
        res = run_dense(uploads, dense_cfg, ctx, student_state=warm)
        model = res.model
        global_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        results.append(res)
        records.append(RoundRecord(round=r, last_acc=res.last_acc, best_acc=res.best_acc,
                                   ensemble_acc=ens_acc, client_accs=client_accs,
                                   curve=list(res.curve),
                                   wall_time_s=round(time.perf_counter() - t0, 3)))
    assert model is not None
    return MultiRoundResult(rounds=records, model=model, results=results)


__all__ = ["DenseConfig", "DenseSynthesizer", "Distiller", "MultiRoundResult", "RoundRecord",
           "run", "run_dense", "run_multi_round"]
