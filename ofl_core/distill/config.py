"""What every distillation server's config has (:class:`DistillConfig`) and the validation
they share (:func:`check_distill_config`): one name per concept across DENSE, Fed-DAFL,
Fed-ADI, FedDF and FedHydra."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from ..models import MODEL_NAMES
from ..presets import check_preset
from ..validation import COUNT, NONNEG, POSITIVE, Bound, check_config, within
from .combiners import Teacher
from .stratification import MIN_LOSS_FLOOR

C = TypeVar("C", bound="DistillConfig")


@dataclass(frozen=True)
class DistillConfig:
    """The fields every distillation method shares, with DENSE §3.1.4's values ("all baseline
    methods use the same setting as ours"): T = ``epochs`` = 200 server epochs of
    ``steps_per_epoch`` = T_G = 30 generator (or KD) steps, batch b = ``batch_size`` = 128,
    student SGD ``kd_lr`` 0.01 momentum ``kd_momentum`` 0.9. ``student_arch``: None = the
    clients' architecture (homogeneous clients; required for heterogeneous ones);
    ``eval_every``: test-curve cadence in epochs. Speed options (same results up to float
    rounding, except ``amp``): ``batched_teachers`` (vmap; "auto" = on CUDA),
    ``channels_last`` ("auto" = on the CPU), ``amp`` (bfloat16 autocast; off by default here,
    "auto" = where native for DENSE).

    A subclass adds its own fields and calls :func:`check_distill_config` with them from its
    ``__post_init__``."""

    epochs: int = 200
    steps_per_epoch: int = 30
    batch_size: int = 128
    kd_lr: float = 0.01
    kd_momentum: float = 0.9
    student_arch: str | None = None
    eval_every: int = 1
    batched_teachers: bool | Literal["auto"] = "auto"
    channels_last: bool | Literal["auto"] = "auto"
    amp: bool = False
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_distill_config(self)

    @classmethod
    def for_preset(cls: type[C], preset: str = "paper", **overrides: Any) -> C:
        """The paper's configuration; the methods without authors' code have the same values
        for ``"authors_code"`` (only the ``preset`` label differs)."""
        check_preset(preset)
        base = cls(preset=preset)
        return replace(base, **overrides) if overrides else base


@dataclass(frozen=True)
class GeneratorConfig(DistillConfig):
    """:class:`DistillConfig` + the image generator G of the generator-based methods (DENSE,
    Fed-DAFL, FedHydra; SPEC §2 ``generator``): latent size ``nz`` = 256, width ``ngf`` = 64,
    Adam ``g_lr`` 1e-3 with ``g_betas`` (0.5, 0.999) (DENSE's code), and ``fast_generator``
    (the exact upsample+conv as one stride-2 transposed convolution)."""

    nz: int = 256
    ngf: int = 64
    g_lr: float = 1e-3
    g_betas: tuple[float, float] = (0.5, 0.999)
    fast_generator: bool = True

    def __post_init__(self) -> None:
        check_distill_config(self, counts=("nz", "ngf"), positive=("g_lr",))

@dataclass(frozen=True)
class SynthesisConfig(GeneratorConfig):
    """:class:`GeneratorConfig` + what DENSE and FedHydra share: the generator loss's weights
    (DENSE Eq. 5, FedHydra Eq. 16: L_gen = ``ce_weight``·CE + λ1·L_BN + λ2·L_adv with λ1 =
    ``bn_weight`` = 1, λ2 = ``adv_weight`` = 0.5) and the student's KD batch
    ``kd_batch_size`` = 128 (distillation from the synthetic pool)."""

    kd_batch_size: int = 128
    ce_weight: float = 1.0
    bn_weight: float = 1.0
    adv_weight: float = 0.5

    def __post_init__(self) -> None:
        check_distill_config(self, counts=("kd_batch_size", "nz", "ngf"), positive=("g_lr",),
                             nonnegative=("ce_weight", "bn_weight", "adv_weight"))


@dataclass(frozen=True)
class TeacherConfig(SynthesisConfig):
    """:class:`SynthesisConfig` + the pluggable teacher that DENSE and FedHydra share.

    ``teacher``: how the clients' outputs are combined (:mod:`ofl_core.distill.combiners`):
    DENSE's default ``"mean_logits"`` (DENSE Eq. 1), FedHydra's ``"sa"`` (Eqs. 8–11 as
    written); the others are readings measured in docs/decisions/fedhydra.md;
    ``"oracle"`` is a diagnostic (true label counts), never a method, and the servers refuse it
    unless its weights are passed explicitly. The weighted teachers need FedHydra's model
    stratification (Alg. 2), set by ``strat_steps`` = T_G = 30, ``strat_batch_size`` = b = 128,
    Adam ``strat_lr`` 1e-3 (FedHydra §4.1.4), ``strat_group`` (generators trained together;
    "auto": C on the CPU), ``min_loss_floor`` (the guard of Eq. 2) and ``strat_u``: ``"eq2"``
    (the paper) or the opt-in ``"log_ratio"`` u = log(max L / min L) (a deviation;
    :func:`ofl_core.distill.stratification.guidance_capability`)."""

    teacher: Teacher = "mean_logits"
    strat_steps: int = 30
    strat_batch_size: int = 128
    strat_lr: float = 1e-3
    strat_group: int | Literal["auto"] = "auto"
    min_loss_floor: float = MIN_LOSS_FLOOR
    strat_u: Literal["eq2", "log_ratio"] = "eq2"

    def __post_init__(self) -> None:
        check_teacher_config(self)


def check_teacher_config(cfg: Any, counts: Sequence[str] = (), positive: Sequence[str] = (),
                           nonnegative: Sequence[str] = ()) -> None:
    """:func:`check_distill_config` with the ranges of :class:`TeacherConfig`'s fields (the
    KD batch, the loss weights and the stratification settings; ``teacher`` and ``strat_u``
    are checked by their ``Literal`` annotations) added to the given ones."""
    check_distill_config(
        cfg, counts=("kd_batch_size", "nz", "ngf", "strat_steps", "strat_batch_size",
                     "strat_group", *counts),
        positive=("g_lr", "strat_lr", "min_loss_floor", *positive),
        nonnegative=("ce_weight", "bn_weight", "adv_weight", *nonnegative))


#: ranges of the fields every distillation config (and its generator) has
RANGES: dict[str, Bound] = {
    "epochs": NONNEG, "steps_per_epoch": COUNT, "batch_size": COUNT, "eval_every": COUNT,
    "kd_lr": POSITIVE, "kd_momentum": within(0, 1, high_open=True), "num_images": NONNEG,
    "g_betas": within(0, 1, high_open=True),
}


def check_distill_config(cfg: Any, counts: Sequence[str] = (), positive: Sequence[str] = (),
                         nonnegative: Sequence[str] = ()) -> None:
    """The validation every distillation config shares; raises ``ValueError`` naming the
    field, its value and what it must be.

    Every field has its annotated type (:func:`ofl_core.validation.check_config`: ``Literal``
    fields one of their values, floats finite) and: ``preset`` known; ``epochs`` an integer
    ≥ 0; ``steps_per_epoch``, ``batch_size``, ``eval_every`` (and ``counts``) integers ≥ 1;
    ``kd_lr`` (and ``positive``) > 0; ``kd_momentum``, ``num_images`` (and ``nonnegative``)
    ≥ 0; ``g_betas`` two numbers in [0, 1); ``student_arch`` None or a known model."""
    cls = type(cfg).__name__
    check_config(cfg, {**RANGES, **dict.fromkeys(counts, COUNT),
                       **dict.fromkeys(positive, POSITIVE),
                       **dict.fromkeys(nonnegative, NONNEG)})
    if cfg.student_arch is not None and cfg.student_arch not in MODEL_NAMES:
        raise ValueError(f"{cls}.student_arch: unknown model {cfg.student_arch!r}; "
                         f"known: {', '.join(MODEL_NAMES)}")


__all__ = ["RANGES", "DistillConfig", "GeneratorConfig", "SynthesisConfig", "TeacherConfig",
           "check_distill_config", "check_teacher_config"]
