"""FedCVAE client side (SPEC §3; FedCVAE Alg. 3, §3.2, §3.3, App. C Tables 3/4/8).

A FedCVAE client trains a CVAE on its data (Adam lr 1e-3, batch 32, T_L epochs, loss = negated
Eq. 1, :func:`cvae_loss`) and uploads **its decoder only** plus its label counts: a
:class:`~ofl_core.uploads.ClientUpload` with ``kind="decoder"``, ``arch`` = the CVAE variant,
``model_kwargs={"latent_dim": d}``. The encoder never leaves the client. Optional extensions:
label-count noise before upload (Table 8) and a secret prior mean μ (security shift, §3.3).

This module also holds the local-training configs of FedCVAE's own FedAvg/FedOneShot baselines
(:func:`baseline_local_config`); Table 4's per-dataset values live in
:mod:`ofl_core.fedcvae.hparams`. The server checks uploads with
:mod:`ofl_core.fedcvae.uploads`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

import numpy as np
import torch

from ..client_training import ClientJob, ClientKind, State
from ..clients import LocalTrainConfig
from ..data.datasets import ImageDataset
from ..data.partition import Partition
from ..models.cvae import CVAE, CVAE_VARIANTS, build_cvae
from ..precision import resolve_amp
from ..presets import check_preset
from ..progress import progress_bar
from ..seeds import client_seed, cvae_init_seed
from ..uploads import ClientUpload
from ..validation import COUNT, NONNEG, POSITIVE, check_config
from .hparams import fedcvae_hparams


def baseline_local_config(dataset: str, method: Literal["fedavg", "fedoneshot"],
                          preset: str = "paper") -> LocalTrainConfig:
    """Local training of FedCVAE's FedAvg / FedOneShot clients (SPEC §3, Tables 3/4).

    McMahan CNN, Adam lr 1e-3, batch 32, T_L = 10/10/5 (FedAvg) or 15/15/10 (FedOneShot)
    epochs for MNIST/FMNIST/SVHN; one shared initialisation (the paper gives none for its
    baselines; FL's server sends its model to the clients). ⚑ ``preset="authors_code"``, as in
    the authors' code (ceh-2000/fed_cvae):

    - the CNN without ReLU after its convolutions (``conv_relu=False``;
      ``models/classifier.py`` l. 9–22: Conv2d → MaxPool2d → Conv2d → MaxPool2d → Linear → ReLU
      → Linear);
    - FedOneShot's clients each start from their own weights (``shared_init=False``): every
      ``User`` builds its own ``Classifier`` (``users/user.py`` l. 17) and
      ``ServerOneShot.train`` copies user 0's weights to all only with
      ``should_initialize_same`` (``servers/server_one_shot.py`` l. 110–114), which
      ``main.py`` defaults to 0 (l. 320–325) and the Table 1 script (``experiments/alpha.py``)
      does not set. FedAvg's clients share one init there too: ``ServerFedAvg.train`` loads
      the server model into every client before training (``servers/server_fed_avg.py``
      l. 25–28).
    """
    check_preset(preset)
    hp = fedcvae_hparams(dataset)
    if method not in ("fedavg", "fedoneshot"):
        raise ValueError(f"method must be 'fedavg' or 'fedoneshot' (got {method!r})")
    epochs = hp.fedavg_local_epochs if method == "fedavg" else hp.fedoneshot_local_epochs
    return LocalTrainConfig(
        arch="mcmahan_cnn", optimizer="adam", lr=1e-3, momentum=0.0, batch_size=32,
        epochs=epochs, model_kwargs=(("conv_relu", preset == "paper"),),
        shared_init=preset == "paper" or method == "fedavg", preset=preset,
    )


@dataclass(frozen=True)
class CVAETrainConfig:
    """Local CVAE training and upload of one FedCVAE client (SPEC §3; Tables 3/4, Alg. 3).

    Adam lr 1e-3, batch 32, ``epochs`` = T_L (15/25/50 for MNIST/FMNIST/SVHN), β = 1, latent
    dimension d (10; FedCVAE-KD on FMNIST uses 100). Flagged differences:

    - ⚑ ``condition_encoder``: True = q(z|x,y) as in Eq. 1 (paper); the authors' code's
      encoder does not see y (False).
    - ⚑ ``label_noise``: Table 8 noise ε_c ~ N(0, γ·n_k) on each class count before upload;
      "variance" (paper: γ·n_k is the variance) or "std" (authors' code: γ·n_k is the standard
      deviation). ``label_noise_gamma`` = γ (0 = exact counts). Noised counts are clipped at 0
      and rounded to integers. Noise does not change training (not part of the cache key).
    - ``prior_mean``: secret prior centre μ (security shift, §3.3); None = N(0, I).
    - ``shared_init``: all clients of a variant start from the same weights (off: Alg. 3 line 2
      initialises each client's CVAE itself, and so does the authors' code by default).

    Speed options (same arithmetic up to float rounding): ``channels_last`` (convolutions on
    NHWC activations; "auto" = on the CPU) and ``fused_adam`` (one fused kernel per Adam step
    instead of per-tensor foreach ops; "auto" = always). ``amp``: bfloat16 autocast of the
    client's forward pass ("auto" = where bfloat16 is native, as local training's; off by
    default until shown accuracy-neutral for FedCVAE, docs/decisions/speed.md). A decoder trained
    with any of them gets its own cache entry (:meth:`speed_key`), so a cached result never
    depends on which code filled the cache; with all off the keys are those from before the
    options existed. Measured in docs/decisions/speed.md#speed-fedcvae.
    """

    variant: str = "cvae"
    latent_dim: int = 10
    epochs: int = 25
    lr: float = 1e-3
    batch_size: int = 32
    beta: float = 1.0
    condition_encoder: bool = True
    prior_mean: tuple[float, ...] | None = None
    shared_init: bool = False
    label_noise_gamma: float = 0.0
    label_noise: Literal["variance", "std"] = "variance"
    label_noise_seed: int | None = None
    channels_last: bool | Literal["auto"] = "auto"
    fused_adam: bool | Literal["auto"] = "auto"
    amp: bool | Literal["auto"] = False
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self, {"latent_dim": COUNT, "epochs": NONNEG, "lr": POSITIVE,
                            "batch_size": COUNT, "beta": NONNEG, "label_noise_gamma": NONNEG})
        if self.variant not in CVAE_VARIANTS:
            raise ValueError(
                f"variant: unknown CVAE variant {self.variant!r}; known: {', '.join(CVAE_VARIANTS)}"
            )
        if self.prior_mean is not None and len(self.prior_mean) != self.latent_dim:
            raise ValueError(f"prior_mean has {len(self.prior_mean)} entries but latent_dim "
                             f"is {self.latent_dim}")

    @classmethod
    def for_dataset(cls, dataset: str = "fmnist", method: Literal["ens", "kd"] = "ens",
                    preset: str = "paper", **overrides: object) -> CVAETrainConfig:
        """Table 4 settings of ``dataset`` for FedCVAE-Ens or -KD (their d differs on FMNIST)."""
        check_preset(preset)
        if method not in ("ens", "kd"):
            raise ValueError(f"method must be 'ens' or 'kd' (got {method!r})")
        hp = fedcvae_hparams(dataset)
        base = cls(
            latent_dim=hp.ens_latent_dim if method == "ens" else hp.kd_latent_dim,
            epochs=hp.cvae_local_epochs,
            condition_encoder=preset == "paper",
            label_noise="variance" if preset == "paper" else "std",
            preset=preset,
        )
        return replace(base, **overrides)

    @classmethod
    def for_preset(cls, preset: str = "paper", **overrides: object) -> CVAETrainConfig:
        """FMNIST FedCVAE-Ens settings for ``preset`` (see :meth:`for_dataset`)."""
        return cls.for_dataset("fmnist", "ens", preset, **overrides)

    def resolved_speed(self, device: str | torch.device) -> dict[str, bool]:
        """``channels_last``, ``fused_adam`` and ``amp`` as they apply on ``device``."""
        cl = (torch.device(device).type == "cpu" if self.channels_last == "auto"
              else bool(self.channels_last))
        return {"channels_last": cl,
                "fused_adam": True if self.fused_adam == "auto" else bool(self.fused_adam),
                "amp": resolve_amp(self.amp, device)}

    def client_kind(self) -> ClientKind:
        """These clients are CVAE decoders (:data:`DECODER`)."""
        return DECODER

    def speed_key(self, device: str | torch.device) -> dict[str, bool]:
        """The cache-key entries of the speed options in effect on ``device`` (none when all
        are off: the arithmetic of decoders cached before these options existed)."""
        return {k: True for k, on in self.resolved_speed(device).items() if on}

    def training_fields(self) -> dict:
        """The fields that determine the trained decoder (the cache key's part)."""
        d = asdict(self)
        for k in ("label_noise_gamma", "label_noise", "label_noise_seed", "preset",
                  "channels_last", "fused_adam", "amp"):
            d.pop(k)
        return d


def secret_prior_mean(latent_dim: int, scale: float, seed: int) -> tuple[float, ...]:
    """A secret prior centre μ ~ U(−scale, scale)^d (security shift, §3.3), from ``seed``.

    The paper only says "a random position in real space"; the uniform box is our choice
    (docs/decisions/fedcvae.md). ``scale=0`` gives μ = 0 (⚑ the authors' code never shifts the
    prior).
    """
    if scale < 0:
        raise ValueError(f"scale must be ≥ 0 (got {scale})")
    g = torch.Generator().manual_seed(int(seed))
    mu = (2.0 * torch.rand(latent_dim, generator=g, dtype=torch.float64) - 1.0) * scale
    return tuple(float(v) for v in mu)


def heterogeneous_variants(num_clients: int, seed: int,
                           variants: Sequence[str] = CVAE_VARIANTS) -> list[str]:
    """One CVAE variant per client, drawn uniformly (as the authors' code does with
    ``random.choice``) from a seeded generator — FedCVAE Fig. 4's heterogeneous setting."""
    for v in variants:
        if v not in CVAE_VARIANTS:
            raise ValueError(f"unknown CVAE variant {v!r}; known: {', '.join(CVAE_VARIANTS)}")
    rng = np.random.default_rng([int(seed), 4])
    return [str(variants[int(i)]) for i in rng.integers(0, len(variants), size=num_clients)]


def noisy_label_counts(counts: Sequence[int] | np.ndarray, gamma: float,
                       mode: Literal["variance", "std"], generator: torch.Generator
                       ) -> tuple[int, ...]:
    """FedCVAE Table 8: counts + ε, ε_c ~ N(0, γ·n_k) (``mode="variance"``, paper) or
    N(0, (γ·n_k)²) (``mode="std"``, ⚑ authors' code), clipped at 0, rounded to integers."""
    c = torch.as_tensor(np.asarray(counts, dtype=np.float64))
    if gamma == 0:
        return tuple(int(v) for v in c.round().long())
    n_k = float(c.sum())
    std = math.sqrt(gamma * n_k) if mode == "variance" else gamma * n_k
    noise = torch.randn(c.shape, generator=generator, dtype=torch.float64) * std
    return tuple(int(v) for v in (c + noise).clamp_(min=0.0).round().long())


def cvae_loss(model: CVAE, x: torch.Tensor, y: torch.Tensor, beta: float,
              generator: torch.Generator | None) -> torch.Tensor:
    """The client's training loss, the negated ELBO of FedCVAE Eq. 1:
    ℓ(w^k; x, y) = g(D_θ(z, y), x) + β·KL(q_φ(z | x, y) ‖ N(μ, I)), z = μ_φ + σ_φ·ε, where g is
    the reconstruction loss (BCE for grayscale, MSE for RGB, §4.1), μ the prior centre (0, or the
    secret μ of §3.3) and ε drawn from ``generator``; averaged over the batch."""
    loss, _, _ = model.loss(x, y, beta, generator)
    return loss


def train_cvae(
    x: torch.Tensor, y: torch.Tensor, cfg: CVAETrainConfig, num_classes: int, seed: int,
    init_seed: int, device: str | torch.device = "cpu", progress: bool = True,
    desc: str = "cvae",
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Train one client's CVAE (Alg. 3: Adam on :func:`cvae_loss`, Eq. 1) on uint8 images ``x``
    and labels ``y``.

    Returns (decoder state_dict on the CPU, mean training loss per epoch). Data stays a device
    tensor; batch order and reparameterisation noise come from a generator seeded ``seed``.
    """
    dev = torch.device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = build_cvae(cfg.variant, num_classes, int(x.shape[1]), int(x.shape[-1]),
                           cfg.latent_dim, cfg.condition_encoder, cfg.prior_mean)
    model.to(dev).train()
    speed = cfg.resolved_speed(dev)
    channels_last, fused, amp = speed["channels_last"], speed["fused_adam"], speed["amp"]
    if channels_last:
        model.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=fused or None)
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    xd, yd = x.to(dev), y.to(dev)
    n = len(yd)
    steps = math.ceil(n / cfg.batch_size)
    history: list[float] = []
    for _ in progress_bar(range(cfg.epochs), desc=desc, leave=False, show=progress):
        perm = torch.randperm(n, generator=gen, device=dev)
        total = torch.zeros((), device=dev)
        for s in range(steps):
            idx = perm[s * cfg.batch_size : (s + 1) * cfg.batch_size]
            xb = xd[idx].float().div_(255.0)
            if channels_last:
                xb = xb.contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = cvae_loss(model, xb, yd[idx], cfg.beta, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        history.append(float(total) / max(n, 1))  # one host sync per epoch
    state = {k: v.detach().cpu().clone(memory_format=torch.contiguous_format)
             for k, v in model.decoder.state_dict().items()}
    return state, history


def cvae_key_payload(dataset: ImageDataset, partition: Partition, client_id: int,
                     cfg: CVAETrainConfig, seed: int) -> dict:
    """Everything that determines a trained client decoder (hashed into its cache key)."""
    return {
        "kind": "cvae_decoder",
        "dataset": dataset.name,
        "data": dataset.fingerprint(),
        "partition": partition.fingerprint(),
        "client_id": int(client_id),
        "train": cfg.training_fields(),
        "seed": int(seed),
        "init_scheme": "shared-per-variant" if cfg.shared_init else "per-client",
    }


def make_decoder_upload(
    client_id: int, decoder_state: dict[str, torch.Tensor], counts: Sequence[int] | np.ndarray,
    cfg: CVAETrainConfig, num_classes: int, in_channels: int, image_size: int, seed: int,
) -> ClientUpload:
    """The upload of a FedCVAE client: decoder state_dict + (optionally noised) label counts.

    ``num_samples`` is the sum of the uploaded counts, so a noised upload reveals no exact n_k.
    """
    if cfg.label_noise_gamma > 0:
        nseed = seed if cfg.label_noise_seed is None else cfg.label_noise_seed
        g = torch.Generator().manual_seed(client_seed(nseed, 10_000 + int(client_id)))
        up_counts = noisy_label_counts(counts, cfg.label_noise_gamma, cfg.label_noise, g)
    else:
        up_counts = tuple(int(v) for v in counts)
    return ClientUpload(
        client_id=int(client_id), arch=cfg.variant, state_dict=decoder_state,
        num_classes=num_classes, in_channels=in_channels, image_size=image_size,
        num_samples=int(sum(up_counts)), model_kwargs={"latent_dim": cfg.latent_dim},
        label_counts=up_counts, kind="decoder",
    )

def _train_decoder(job: ClientJob) -> State:
    state, _ = train_cvae(job.x, job.y, job.cfg, job.num_classes,
                          client_seed(job.seed, job.client_id),
                          cvae_init_seed(job.seed, job.client_id, job.cfg), job.device,
                          progress=job.progress, desc=f"CVAE client {job.client_id}")
    return state


def _decoder_key(dataset: ImageDataset, partition: Partition, k: int, cfg: CVAETrainConfig,
                 seed: int, init_hash: str | None) -> dict:
    if init_hash is not None:
        raise ValueError("FedCVAE clients train once from their own initialisation; "
                         "init_state is for classifier clients (multi-round FL)")
    return cvae_key_payload(dataset, partition, k, cfg, seed)


def _decoder_upload(k: int, state: State, dataset: ImageDataset, partition: Partition,
                    cfg: CVAETrainConfig, seed: int) -> ClientUpload:
    return make_decoder_upload(k, state, partition.counts[k], cfg, dataset.num_classes,
                               dataset.channels, dataset.image_size, seed)


def _check_decoder_data(dataset: ImageDataset) -> None:
    if dataset.image_size % 16:
        raise ValueError(
            f"FedCVAE's CVAE needs 32-px images but {dataset.name!r} is {dataset.image_size} px; "
            "use dataset.resized(32) (FedCVAE resizes MNIST/FMNIST to 32×32)"
        )


def _decoder_device_key(cfg: CVAETrainConfig, device: str | torch.device) -> dict:
    return cfg.speed_key(device)  # channels-last / fused Adam round differently


#: FedCVAE's client kind for :func:`ofl_core.client_training.train_clients`
DECODER = ClientKind("CVAE clients", _train_decoder, _decoder_key, _decoder_upload,
                     _check_decoder_data, upload_kind="decoder", device_key=_decoder_device_key,
                     code=("fedcvae/clients.py", "models/cvae.py"))
