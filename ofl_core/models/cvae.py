"""FedCVAE's conditional VAE (SPEC §2 ``cvae``; FedCVAE §2 Eq. 1, §4.1, §4.3).

Architecture (after the β-VAE of Higgins et al. 2017, as in the authors' code):

- **Encoder** q(z | x[, y]): 4 × [conv 4×4 stride 2 pad 1, BN, ReLU] with 32, 32, 64, 64 channels
  → flatten (64·(s/16)² = 256 at s = 32) → Linear 500 → Linear 2d giving (μ, log σ²).
  ``condition_encoder=True`` (paper, q(z|x,y) in Eq. 1) concatenates onehot(y) to the flattened
  features before the first Linear; ⚑ ``False`` is the authors' code, whose encoder never sees y.
- **Decoder** p(x | z, y): [z, onehot(y)] → Linear 64·(s/16)² → view 64×2×2 → ReLU →
  3 × [convT 4×4 s2 p1, BN(eps 1e-3), ReLU] with 64, 32, 32 channels → convT → C×s×s **logits**
  (the sigmoid is applied outside, as in the authors' code).
- **Small variant** ``"cvae_small"`` (FedCVAE §4.3 "heterogeneous local models": one
  convolutional/deconvolutional block fewer in the encoder/decoder; layer sizes from the authors'
  ``ConditionalEncoderAlt``/``ConditionalDecoderAlt``): encoder conv(32, k4 s2 p1), conv(64, k8 s2
  p1), conv(64, k4 s3 p1), each + BN + ReLU → 256 → Linear 300 → Linear 2d; decoder Linear 256 →
  64×2×2 → ReLU → convT(64, k6 s2 p1) BN ReLU → convT(32, k8 s2 p1) BN ReLU → convT(C, k4 s2 p1).
  Defined for 32×32 images only (FedCVAE resizes every dataset to 32).

Loss (Eq. 1 negated, per batch): reconstruction + β·KL, β = 1. Reconstruction is
BCE-with-logits summed over pixels for grayscale, MSE of sigmoid(logits) summed over pixels for
RGB (§4.1 "binary cross entropy and mean squared error ... for grayscale and RGB images"), both
divided by the batch size. KL is KL(N(μ, σ²) ‖ N(μ₀, I)) summed over latent dimensions and
averaged over the batch; μ₀ = 0 except for the security shift (§3.3), where the prior is N(μ₀, I).

The upload of a FedCVAE client is ``cvae.decoder.state_dict()`` only (see
:mod:`ofl_core.fedcvae.clients`); :func:`build_decoder` rebuilds a decoder on the server side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..devices import to_device

CVAE_VARIANTS: tuple[str, ...] = ("cvae", "cvae_small")
"""Names of the CVAE architectures (the ``arch`` of a decoder upload)."""


#: the largest latent size, image side and class count a CVAE is built for (FedCVAE uses latent
#: sizes of 5 to 100 on 32-pixel images of 10 classes): a size field beyond them is refused
#: before any layer is allocated (a decoder of latent_dim 10⁶ took 870 MiB)
MAX_LATENT_DIM = 1024
MAX_IMAGE_SIZE = 256
MAX_CLASSES = 1000


def _check(variant: str, num_classes: int, in_channels: int, image_size: int,
           latent_dim: int) -> None:
    for name, v, hi in (("num_classes", num_classes, MAX_CLASSES),
                        ("image_size", image_size, MAX_IMAGE_SIZE),
                        ("latent_dim", latent_dim, MAX_LATENT_DIM)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= hi:
            raise ValueError(f"{name} must be an integer in 1 … {hi} (got {v!r})")
    if variant not in CVAE_VARIANTS:
        raise ValueError(f"unknown CVAE variant {variant!r}; known: {', '.join(CVAE_VARIANTS)}")
    if in_channels not in (1, 3):
        raise ValueError(f"in_channels must be 1 or 3 (got {in_channels!r})")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer (got {num_classes!r})")
    if not isinstance(latent_dim, int) or latent_dim < 1:
        raise ValueError(f"latent_dim must be a positive integer (got {latent_dim!r})")
    if variant == "cvae" and (image_size < 16 or image_size % 16):
        raise ValueError(
            f"the 'cvae' variant needs an image size divisible by 16 (got {image_size}); "
            "FedCVAE resizes MNIST/FMNIST to 32 px: use ImageDataset.resized(32)"
        )
    if variant == "cvae_small" and image_size != 32:
        raise ValueError(
            f"the 'cvae_small' variant is defined for 32×32 images only (got {image_size}); "
            "use ImageDataset.resized(32)"
        )


def one_hot(y: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Labels (N,) → one-hot (N, C); an (N, C) float tensor is returned as is (cast)."""
    if y.dim() == 2:
        return y.to(dtype)
    return F.one_hot(y.long(), num_classes).to(dtype)


class CVAEEncoder(nn.Module):
    """q(z | x[, y]) → (μ, log σ²), each (N, latent_dim)."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, latent_dim: int,
                 variant: str = "cvae", condition_on_label: bool = True) -> None:
        super().__init__()
        _check(variant, num_classes, in_channels, image_size, latent_dim)
        self.num_classes, self.latent_dim = num_classes, latent_dim
        self.condition_on_label = condition_on_label
        if variant == "cvae":
            chans, layers, c_in = (32, 32, 64, 64), [], in_channels
            for c in chans:
                layers += [nn.Conv2d(c_in, c, 4, 2, 1), nn.BatchNorm2d(c), nn.ReLU()]
                c_in = c
            feat, hidden = 64 * (image_size // 16) ** 2, 500
        else:  # cvae_small: one block fewer (authors' "Alt" layer sizes)
            layers = [
                nn.Conv2d(in_channels, 32, 4, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.Conv2d(32, 64, 8, 2, 1), nn.BatchNorm2d(64), nn.ReLU(),
                nn.Conv2d(64, 64, 4, 3, 1), nn.BatchNorm2d(64), nn.ReLU(),
            ]
            feat, hidden = 64 * 2 * 2, 300
        self.features = nn.Sequential(*layers, nn.Flatten())
        label_dim = num_classes if condition_on_label else 0
        # Linear → Linear with no non-linearity in between, as in the β-VAE/authors' encoder
        self.fc = nn.Sequential(nn.Linear(feat + label_dim, hidden),
                                nn.Linear(hidden, 2 * latent_dim))

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(x)
        if self.condition_on_label:
            if y is None:
                raise ValueError("this encoder is conditioned on y (q(z|x,y)); pass the labels")
            h = torch.cat([h, one_hot(y, self.num_classes, h.dtype)], dim=1)
        out = self.fc(h)
        return out[:, : self.latent_dim], out[:, self.latent_dim :]


class CVAEDecoder(nn.Module):
    """p(x | z, y): ``decoder(z, y)`` → image logits (N, C, s, s); y as labels or one-hot."""

    def __init__(self, num_classes: int, in_channels: int, image_size: int, latent_dim: int,
                 variant: str = "cvae") -> None:
        super().__init__()
        _check(variant, num_classes, in_channels, image_size, latent_dim)
        self.num_classes, self.in_channels = num_classes, in_channels
        self.image_size, self.latent_dim, self.variant = image_size, latent_dim, variant
        if variant == "cvae":
            s = image_size // 16
            self.fc = nn.Linear(latent_dim + num_classes, 64 * s * s)
            self.net = nn.Sequential(
                nn.Unflatten(1, (64, s, s)), nn.ReLU(),
                nn.ConvTranspose2d(64, 64, 4, 2, 1), nn.BatchNorm2d(64, eps=1e-3), nn.ReLU(),
                nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.BatchNorm2d(32, eps=1e-3), nn.ReLU(),
                nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.BatchNorm2d(32, eps=1e-3), nn.ReLU(),
                nn.ConvTranspose2d(32, in_channels, 4, 2, 1),
            )
        else:  # cvae_small: 2×2 → 6 → 16 → 32
            self.fc = nn.Linear(latent_dim + num_classes, 64 * 2 * 2)
            self.net = nn.Sequential(
                nn.Unflatten(1, (64, 2, 2)), nn.ReLU(),
                nn.ConvTranspose2d(64, 64, 6, 2, 1), nn.BatchNorm2d(64, eps=1e-3), nn.ReLU(),
                nn.ConvTranspose2d(64, 32, 8, 2, 1), nn.BatchNorm2d(32, eps=1e-3), nn.ReLU(),
                nn.ConvTranspose2d(32, in_channels, 4, 2, 1),
            )

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.cat([z, one_hot(y, self.num_classes, z.dtype)], dim=1)
        return self.net(self.fc(h))


def reparameterize(mu: torch.Tensor, logvar: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """z = μ + σ·ε, ε ~ N(0, I) (Kingma & Welling 2014), drawn from ``generator``."""
    eps = torch.randn(mu.shape, generator=generator,
                      device=generator.device if generator is not None else mu.device)
    return mu + torch.exp(0.5 * logvar) * to_device(eps, mu.device).to(mu.dtype)


def kl_divergence(mu: torch.Tensor, logvar: torch.Tensor,
                  prior_mean: torch.Tensor | None = None) -> torch.Tensor:
    """KL(N(μ, diag σ²) ‖ N(μ₀, I)), summed over latent dims and averaged over the batch.

    = ½ Σ_j (σ_j² + (μ_j − μ₀_j)² − 1 − log σ_j²); μ₀ = 0 unless the prior is shifted (§3.3).
    """
    diff = mu if prior_mean is None else mu - prior_mean.to(mu)
    return 0.5 * (logvar.exp() + diff.pow(2) - 1.0 - logvar).sum(1).mean()


def reconstruction_loss(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The reconstruction term g(·) of Eqs. 1–2 (§4.1), summed over pixels, / batch size.

    Grayscale (1 channel): BCE-with-logits against targets in [0, 1] (soft targets allowed,
    as in KD where the targets are the teachers' sigmoid outputs). RGB: MSE(sigmoid(logits), x).
    """
    n = x.shape[0]
    if x.shape[1] == 1:
        return F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / n
    return F.mse_loss(torch.sigmoid(logits), x, reduction="sum") / n


class CVAE(nn.Module):
    """Encoder + decoder with the reparameterisation trick (FedCVAE Eq. 1).

    ``prior_mean`` (length ``latent_dim``) shifts the prior to N(μ₀, I) (security extension,
    §3.3); it is a buffer of the CVAE (never uploaded) and the encoder's μ-bias starts at μ₀ so
    that q starts at the prior (docs/decisions/fedcvae.md).
    """

    def __init__(self, num_classes: int, in_channels: int = 1, image_size: int = 32,
                 latent_dim: int = 10, condition_encoder: bool = True, variant: str = "cvae",
                 prior_mean: Sequence[float] | torch.Tensor | None = None) -> None:
        super().__init__()
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self.latent_dim, self.variant = latent_dim, variant
        self.encoder = CVAEEncoder(num_classes, in_channels, image_size, latent_dim, variant,
                                   condition_on_label=condition_encoder)
        self.decoder = CVAEDecoder(num_classes, in_channels, image_size, latent_dim, variant)
        pm = torch.zeros(latent_dim) if prior_mean is None else torch.as_tensor(
            prior_mean, dtype=torch.float32).flatten()
        if pm.numel() != latent_dim:
            raise ValueError(f"prior_mean has {pm.numel()} entries, latent_dim is {latent_dim}")
        self.register_buffer("prior_mean", pm.clone())
        if prior_mean is not None:
            with torch.no_grad():
                self.encoder.fc[-1].bias[:latent_dim].add_(pm)

    def forward(self, x: torch.Tensor, y: torch.Tensor,
                generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(reconstruction logits, μ, log σ²) for images ``x`` in [0, 1] and labels ``y``."""
        mu, logvar = self.encoder(x, y)
        z = reparameterize(mu, logvar, generator)
        return self.decoder(z, y), mu, logvar

    def loss(self, x: torch.Tensor, y: torch.Tensor, beta: float = 1.0,
             generator: torch.Generator | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(total, reconstruction, KL) with total = recon + β·KL (negated Eq. 1)."""
        logits, mu, logvar = self(x, y, generator)
        rec = reconstruction_loss(logits, x)
        kl = kl_divergence(mu, logvar, self.prior_mean)
        return rec + beta * kl, rec, kl


def build_cvae(variant: str, num_classes: int, in_channels: int = 1, image_size: int = 32,
               latent_dim: int = 10, condition_encoder: bool = True,
               prior_mean: Sequence[float] | None = None) -> CVAE:
    """A freshly initialised CVAE of the named variant (``"cvae"`` or ``"cvae_small"``)."""
    return CVAE(num_classes, in_channels, image_size, latent_dim, condition_encoder, variant,
                prior_mean)


def build_decoder(variant: str, num_classes: int, in_channels: int = 1, image_size: int = 32,
                  latent_dim: int = 10) -> CVAEDecoder:
    """A freshly initialised decoder of the named variant (what a server rebuilds from an
    upload, and FedCVAE-KD's server decoder)."""
    return CVAEDecoder(num_classes, in_channels, image_size, latent_dim, variant)


def truncated_normal(
    shape: Sequence[int], width_std: float | None, generator: torch.Generator | None = None,
    mean: torch.Tensor | Sequence[float] | float | None = None,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """z ~ N(mean, I) truncated to mean ± ``width_std`` standard deviations per coordinate.

    FedCVAE samples latents "from a truncated standard normal distribution with tight
    symmetric bounds" (§3.2 footnote 1; widths in Table 4). Inverse-CDF sampling in float64:
    u ~ U(Φ(−w), Φ(w)), z = Φ⁻¹(u), clamped to [−w, w] (exact up to rounding). ``width_std``
    None or inf gives the untruncated normal. Drawn from ``generator`` (on its device), returned
    as float32 on ``device`` (default: the generator's device).
    """
    gdev = generator.device if generator is not None else torch.device("cpu")
    out_dev = torch.device(device) if device is not None else gdev
    if width_std is None or math.isinf(width_std):
        z = torch.randn(tuple(shape), generator=generator, device=gdev, dtype=torch.float64)
    else:
        if not width_std > 0:
            raise ValueError(f"width_std must be > 0 (got {width_std})")
        w = float(width_std)
        lo = 0.5 * math.erfc(w / math.sqrt(2.0))  # Φ(−w)
        u = torch.rand(tuple(shape), generator=generator, device=gdev, dtype=torch.float64)
        u = lo + (1.0 - 2.0 * lo) * u
        z = (math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0)).clamp_(-w, w)
    z = z.to(out_dev, torch.float32)
    if mean is not None:
        z = z + torch.as_tensor(mean, dtype=torch.float32, device=out_dev)
    return z


def uniform_latent(
    shape: Sequence[int], bound: float, generator: torch.Generator | None = None,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """z ~ U(−b, b) per coordinate: the eavesdropper's sampler of FedCVAE Fig. 5 (§4.3)."""
    if not bound > 0:
        raise ValueError(f"bound must be > 0 (got {bound})")
    gdev = generator.device if generator is not None else torch.device("cpu")
    u = torch.rand(tuple(shape), generator=generator, device=gdev)
    out_dev = torch.device(device) if device is not None else gdev
    return ((2.0 * u - 1.0) * float(bound)).to(out_dev)
