"""FedCVAE-Ens and FedCVAE-KD servers (Heinbaugh et al., ICLR 2023; SPEC §4).

Both receive only decoder uploads (:class:`~ofl_core.uploads.ClientUpload` with
``kind="decoder"``: the decoder state_dict, its variant and latent dimension, and the client's
label counts) and a :class:`~ofl_core.server.ServerContext`. No encoder, no data.

- **FedCVAE-Ens** (App. A, Alg. 2): from each client k draw y ~ p̂^k(y) (its label counts
  normalised) and z from a truncated N(0, I) (±3 std, Table 4), decode x̂ = σ(D_θk(z, y)); n_C =
  5000 samples in total — ⌊n_C/m⌋ per client (Alg. 2 line 4) or ⚑ proportional to the client's
  size (authors' code); train the server classifier (McMahan CNN, Adam η_C = 1e-3, batch 32,
  T_C epochs, cross-entropy) on them.
- **FedCVAE-KD** (§3.2, Alg. 1): n_D = 5000 triples (x̂, y, z) from the client decoders as
  above (truncation width of Table 4's KD row); train a fresh server decoder D_θS to map (z, y)
  to x̂ with the reconstruction loss of Eq. 2 (BCE-with-logits for grayscale, MSE for RGB;
  Adam η_D = 0.01, T_D epochs, batch 32); then sample an IID labelled set of n_C = 5000 from
  the server decoder (y uniform, z truncated normal ±1/±2/±3 for MNIST/FMNIST/SVHN) and train the
  classifier.
- **Decoder parameter averaging** (App. C Table 6, "param-avg"): the server decoder is the
  (n_k-weighted) parameter average of the client decoders instead of KD.

Sampling lives in :mod:`ofl_core.fedcvae.sampling`, the two trainings in
:mod:`ofl_core.fedcvae.classifier`, the security shift (§3.3) in
:mod:`ofl_core.fedcvae.security`. Per-dataset settings (Tables 3/4) live in
:data:`ofl_core.fedcvae.hparams.FEDCVAE_HPARAMS`; a config's ``None`` fields take the value of
its ``dataset`` (see ``resolved()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import torch
from torch import nn

from ..checkpoint import EpochClock, server_checkpoint
from ..models import MODEL_NAMES
from ..models.cvae import CVAE_VARIANTS, build_decoder, truncated_normal
from ..presets import check_preset
from ..seeds import fedcvae_server_seed
from ..server import MethodKind, MethodSpec, ServerContext, ServerResult, average_states
from ..uploads import ClientUpload
from ..validation import COUNT, NONNEG, POSITIVE, check_config
from .classifier import distill_decoder, train_classifier
from .hparams import fedcvae_hparams
from .sampling import (
    Allocation,
    LatentSampler,
    allocate_samples,
    decode,
    sample_client_decoders,
    truncated_sampler,
)
from .uploads import load_decoders

__all__ = [
    "SPECS",
    "ClassifierServerConfig",
    "FedCVAEEnsConfig",
    "FedCVAEKDConfig",
    "FedCVAEParamAvgConfig",
    "ens_server",
    "run_ens",
    "run_kd",
    "run_kd_t6",
    "run_param_avg",
]

_Config = TypeVar("_Config", bound="ClassifierServerConfig")


@dataclass(frozen=True)
class ClassifierServerConfig:
    """The fields FedCVAE-Ens and -KD share: the server classifier trained on decoded samples
    (Alg. 1 lines 9–12, Alg. 2; Tables 3/4). ``None`` = the value for ``dataset``.

    - ``num_samples`` n_C = 5000; ``classifier_epochs`` T_C (10/5/5 for MNIST/FMNIST/SVHN);
      ``trunc_width``: the z width of the classifier's samples.
    - ⚑ ``allocation``: "equal" = ⌊n/m⌋ samples per client (Alg. 1 line 3, Alg. 2 line 4,
      paper); "proportional" = n·n_k/n per client, the remainder to the last client (authors'
      code).
    - ⚑ ``conv_relu``: McMahan CNN with ReLU after its convolutions (paper) or without (code).
    - ``prior_mean``: the secret prior centre μ the server samples around (security shift).
    - ``eval_every``: evaluate the classifier after every k-th epoch and after the last one
      (the test-accuracy curve; 0 = after the last epoch only).
    """

    dataset: str = "fmnist"
    num_samples: int = 5000
    classifier_epochs: int | None = None
    trunc_width: float | None = None
    classifier_lr: float = 1e-3
    batch_size: int = 32
    classifier_arch: str = "mcmahan_cnn"
    conv_relu: bool = True
    allocation: Allocation = "equal"
    prior_mean: tuple[float, ...] | None = None
    eval_every: int = 1
    preset: str = "paper"

    def __post_init__(self) -> None:  # the ranges of FedCVAEKDConfig's kd_* fields too
        check_config(self, {"num_samples": COUNT, "classifier_epochs": NONNEG,
                            "trunc_width": POSITIVE, "classifier_lr": POSITIVE,
                            "batch_size": COUNT, "eval_every": NONNEG, "kd_samples": COUNT,
                            "kd_epochs": NONNEG, "kd_lr": POSITIVE, "kd_trunc_width": POSITIVE})
        fedcvae_hparams(self.dataset)  # raises for a dataset without a Table 4 column
        if self.classifier_arch not in MODEL_NAMES:
            raise ValueError(f"classifier_arch: unknown model {self.classifier_arch!r}; known: "
                             f"{', '.join(MODEL_NAMES)}")

    @classmethod
    def for_preset(cls: type[_Config], preset: str = "paper", **overrides: object) -> _Config:
        """Paper defaults, or ⚑ the authors' code (proportional allocation, no conv ReLU)."""
        check_preset(preset)
        code = preset == "authors_code"
        base = cls(allocation="proportional" if code else "equal", conv_relu=not code,
                   preset=preset)
        return replace(base, **overrides)


@dataclass(frozen=True)
class FedCVAEEnsConfig(ClassifierServerConfig):
    """FedCVAE-Ens server (Alg. 2; Tables 3/4): the fields of :class:`ClassifierServerConfig`;
    ``trunc_width`` ±3 std (Table 4's Ens row)."""

    def resolved(self) -> FedCVAEEnsConfig:
        """A copy with every ``None`` replaced by Table 4's value for ``dataset``."""
        hp = fedcvae_hparams(self.dataset)
        return replace(
            self,
            classifier_epochs=(hp.ens_classifier_epochs if self.classifier_epochs is None
                               else self.classifier_epochs),
            trunc_width=hp.ens_trunc_width if self.trunc_width is None else self.trunc_width,
        )


@dataclass(frozen=True)
class FedCVAEKDConfig(ClassifierServerConfig):
    """FedCVAE-KD server (§3.2 Alg. 1; Tables 3/4). ``None`` = the value for ``dataset``.

    - ``kd_samples`` n_D = 5000 (z, y, x̂) triples; ``kd_epochs`` T_D (7/10/80); ``kd_lr``
      η_D = 0.01 (Adam); ``kd_trunc_width``: z width for the triples (Table 4's KD row,
      ±1/±2/±3 — the width "used for sampling from client decoders").
    - the classifier fields of :class:`ClassifierServerConfig`; ``trunc_width``: z width when
      sampling the server decoder (Table 4's KD row; the authors' code uses one width for both
      samplings).
    - ``server_variant``: the server decoder's architecture (the standard CVAE decoder).
    - ``aggregation``: "kd" (Alg. 1) or "param_avg" (Table 6 ablation: average the client
      decoders' parameters; homogeneous clients only), weighted by n_k if ``avg_weighted``.
    """

    kd_samples: int = 5000
    kd_epochs: int | None = None
    kd_lr: float = 0.01
    kd_trunc_width: float | None = None
    server_variant: str = "cvae"
    aggregation: Literal["kd", "param_avg"] = "kd"
    avg_weighted: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()  # every field's type and range (the KD fields' too)
        if self.server_variant not in CVAE_VARIANTS:
            raise ValueError(f"server_variant: unknown CVAE variant {self.server_variant!r}; "
                             f"known: {', '.join(CVAE_VARIANTS)}")

    def resolved(self) -> FedCVAEKDConfig:
        """A copy with every ``None`` replaced by Table 4's value for ``dataset``."""
        hp = fedcvae_hparams(self.dataset)

        def pick(v: object, default: object) -> object:
            return default if v is None else v

        return replace(
            self,
            kd_epochs=pick(self.kd_epochs, hp.kd_decoder_epochs),
            kd_trunc_width=pick(self.kd_trunc_width, hp.kd_trunc_width),
            classifier_epochs=pick(self.classifier_epochs, hp.kd_classifier_epochs),
            trunc_width=pick(self.trunc_width, hp.kd_trunc_width),
        )


@dataclass(frozen=True)
class FedCVAEParamAvgConfig(FedCVAEKDConfig):
    """Table 6's "parameter averaging" column: FedCVAE-KD with ``aggregation="param_avg"``."""

    aggregation: Literal["kd", "param_avg"] = "param_avg"


# --------------------------------------------------------------------------------------------
# results


def _image_grid(x: torch.Tensor, y: torch.Tensor, num_classes: int, per_class: int = 8
                ) -> torch.Tensor:
    """Up to ``per_class`` images of each class, class-major (for figures)."""
    rows = [x[y == c][:per_class].cpu() for c in range(num_classes)]
    return torch.cat(rows) if rows else x[:0].cpu()


def _result(method: str, preset: str, model: nn.Module, curve: list[float],
            images: torch.Tensor, extras: dict) -> ServerResult:
    """A :class:`ServerResult` whose last/best accuracy come from ``curve``."""
    res = ServerResult(method=method, preset=preset, model=model, curve=curve, images=images,
                       extras=extras)
    if curve:
        res.last_acc, res.best_acc = curve[-1], max(curve)
    return res


# --------------------------------------------------------------------------------------------
# FedCVAE-Ens


def ens_server(uploads: Sequence[ClientUpload], cfg: FedCVAEEnsConfig, ctx: ServerContext,
               z_sampler: LatentSampler | None, method: str, seed_offset: int = 0
               ) -> ServerResult:
    """FedCVAE-Ens (Alg. 2) with a choice of latent sampler: ``z_sampler=None`` samples z from
    the config's truncated N(μ, I); the security experiment passes the eavesdropper's
    U(−b, b) (Fig. 5). ``seed_offset`` shifts the server seed (one per attacker); ``method``
    names the result."""
    cfg = cfg.resolved()
    assert cfg.classifier_epochs is not None and cfg.trunc_width is not None
    decoders = load_decoders(uploads, ctx, "FedCVAE-Ens")
    seed = ctx.seed + seed_offset
    per_client = allocate_samples([sum(u.label_counts or ()) for u in uploads],
                                  cfg.num_samples, cfg.allocation)
    if z_sampler is None:
        z_sampler = truncated_sampler(cfg.trunc_width, cfg.prior_mean, ctx.device)
    gen = torch.Generator().manual_seed(fedcvae_server_seed(seed, 0))
    x, y, _ = sample_client_decoders(decoders, uploads, per_client, z_sampler, gen, ctx.device)
    clock = EpochClock()
    clf, curve = train_classifier(
        x, y, arch=cfg.classifier_arch, conv_relu=cfg.conv_relu, epochs=cfg.classifier_epochs,
        lr=cfg.classifier_lr, batch_size=cfg.batch_size, ctx=ctx, seed=seed,
        eval_every=cfg.eval_every,
        checkpoint=server_checkpoint(ctx, f"{method}/classifier", uploads, cfg,
                                     cfg.classifier_epochs, seed=seed, data=(x, y)),
        clock=clock,
    )
    extras = {"time_resumed_s": round(clock.resumed, 3), "samples_per_client": per_client,
              "synthetic_class_counts": torch.bincount(y.cpu(), minlength=ctx.num_classes)
              .tolist()}
    return _result(method, cfg.preset, clf, curve, _image_grid(x, y, ctx.num_classes), extras)


def run_ens(uploads: list[ClientUpload], cfg: FedCVAEEnsConfig, ctx: ServerContext
            ) -> ServerResult:
    """FedCVAE-Ens (Alg. 2): decoders + label distributions → synthetic set → classifier."""
    return ens_server(uploads, cfg, ctx, None, "fedcvae-ens")


# --------------------------------------------------------------------------------------------
# FedCVAE-KD and the parameter-averaging ablation


def _common_latent_dim(uploads: Sequence[ClientUpload], who: str) -> int:
    dims = sorted({int(u.model_kwargs["latent_dim"]) for u in uploads})
    if len(dims) != 1:
        raise ValueError(f"{who}: the server decoder maps (z, y) → x̂ for every client, so all "
                         f"clients need the same latent dimension; uploads have {dims}")
    return dims[0]


def _kd(uploads: list[ClientUpload], cfg: FedCVAEKDConfig, ctx: ServerContext,
        method: str) -> ServerResult:
    """FedCVAE-KD (Alg. 1) or decoder averaging (Table 6): a server decoder, then n_C samples
    from it (Alg. 1 line 9) train the classifier."""
    cfg = cfg.resolved()
    assert cfg.kd_epochs is not None and cfg.kd_trunc_width is not None
    assert cfg.classifier_epochs is not None and cfg.trunc_width is not None
    who = "FedCVAE-KD" if cfg.aggregation == "kd" else "FedCVAE decoder averaging"
    decoders = load_decoders(uploads, ctx, who)
    d = _common_latent_dim(uploads, who)
    extras: dict = {"aggregation": cfg.aggregation}
    decoder_clock, classifier_clock = EpochClock(), EpochClock()
    if cfg.aggregation == "param_avg":
        variants = sorted({u.arch for u in uploads})
        if len(variants) > 1:
            raise ValueError(f"{who}: parameter averaging needs one decoder architecture, but "
                             f"the uploads mix {variants}; use aggregation='kd'")
        weights = [float(sum(u.label_counts or ())) if cfg.avg_weighted else 1.0
                   for u in uploads]
        server = build_decoder(variants[0], ctx.num_classes, ctx.in_channels, ctx.image_size, d)
        server.load_state_dict(average_states([u.state_dict for u in uploads], weights))
        server.to(ctx.device).eval()
    else:
        per_client = allocate_samples([sum(u.label_counts or ()) for u in uploads],
                                      cfg.kd_samples, cfg.allocation)
        gen = torch.Generator().manual_seed(fedcvae_server_seed(ctx.seed, 10))
        sampler = truncated_sampler(cfg.kd_trunc_width, cfg.prior_mean, ctx.device)
        x_kd, y_kd, z_kd = sample_client_decoders(decoders, uploads, per_client, sampler, gen,
                                                  ctx.device)
        assert z_kd is not None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(fedcvae_server_seed(ctx.seed, 11))
            server = build_decoder(cfg.server_variant, ctx.num_classes, ctx.in_channels,
                                   ctx.image_size, d)
        server.to(ctx.device)
        extras["kd_loss"] = distill_decoder(
            server, x_kd, y_kd, z_kd, epochs=cfg.kd_epochs, lr=cfg.kd_lr,
            batch_size=cfg.batch_size, seed=fedcvae_server_seed(ctx.seed, 12),
            progress=ctx.progress,
            checkpoint=server_checkpoint(ctx, f"{method}/decoder", uploads, cfg, cfg.kd_epochs,
                                         data=(x_kd, y_kd, z_kd)),
            clock=decoder_clock,
        )
        extras["samples_per_client"] = per_client
    # Alg. 1 line 9: an IID labelled set from the server decoder, y uniform
    gen = torch.Generator().manual_seed(fedcvae_server_seed(ctx.seed, 13))
    y = torch.randint(0, ctx.num_classes, (cfg.num_samples,), generator=gen).to(ctx.device)
    z = truncated_normal((cfg.num_samples, d), cfg.trunc_width, gen, mean=cfg.prior_mean,
                         device=ctx.device)
    x = decode(server, z, y)
    clf, curve = train_classifier(
        x, y, arch=cfg.classifier_arch, conv_relu=cfg.conv_relu, epochs=cfg.classifier_epochs,
        lr=cfg.classifier_lr, batch_size=cfg.batch_size, ctx=ctx, seed=ctx.seed,
        eval_every=cfg.eval_every,
        checkpoint=server_checkpoint(ctx, f"{method}/classifier", uploads, cfg,
                                     cfg.classifier_epochs, data=(x, y)),
        clock=classifier_clock,
    )
    extras["time_resumed_s"] = round(decoder_clock.resumed + classifier_clock.resumed, 3)
    extras["server_decoder"] = {k: v.detach().cpu() for k, v in server.state_dict().items()}
    return _result(method, cfg.preset, clf, curve, _image_grid(x, y, ctx.num_classes), extras)


def run_kd(uploads: list[ClientUpload], cfg: FedCVAEKDConfig, ctx: ServerContext
           ) -> ServerResult:
    """FedCVAE-KD (Alg. 1), or decoder averaging when ``cfg.aggregation == "param_avg"``."""
    name = "fedcvae-kd" if cfg.aggregation == "kd" else "param-avg"
    return _kd(uploads, cfg, ctx, name)


def run_kd_t6(uploads: list[ClientUpload], cfg: FedCVAEKDConfig, ctx: ServerContext
              ) -> ServerResult:
    """Table 6's "knowledge distillation" column (method name ``"kd"``)."""
    return _kd(uploads, replace(cfg, aggregation="kd"), ctx, "kd")


def run_param_avg(uploads: list[ClientUpload], cfg: FedCVAEKDConfig, ctx: ServerContext
                  ) -> ServerResult:
    """Table 6's "parameter averaging" column (method name ``"param-avg"``)."""
    return _kd(uploads, replace(cfg, aggregation="param_avg"), ctx, "param-avg")


SPECS = (
    MethodSpec(
        "fedcvae-ens", FedCVAEEnsConfig, run_ens,
        MethodKind(
            "Heinbaugh et al. ICLR 2023", True, 1,
            "1: decode samples from every client decoder → train a classifier",
            "CVAE decoder + label counts", "nothing", "one model"
        ),
        client="decoder",
    ),
    MethodSpec(
        "fedcvae-kd", FedCVAEKDConfig, run_kd,
        MethodKind(
            "Heinbaugh et al. ICLR 2023", True, 1,
            "2: distil the decoders into a server decoder → decode → train a classifier",
            "CVAE decoder + label counts", "nothing", "one model"
        ),
        client="decoder",
    ),
    MethodSpec(
        "param-avg", FedCVAEParamAvgConfig, run_param_avg,
        None,
        client="decoder",
    ),
    MethodSpec(
        "kd", FedCVAEKDConfig, run_kd_t6,
        None,
        client="decoder",
    ),
)
