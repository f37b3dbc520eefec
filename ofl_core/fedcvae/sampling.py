"""Synthetic samples from FedCVAE decoders (SPEC §4).

The server draws labelled samples from the uploaded client decoders: from client k,
y ~ p̂^k(y) (its label counts normalised) and z from a latent sampler, x̂ = σ(D_θk(z, y))
(Alg. 1 lines 3–4 build D_Ens for KD; Alg. 2 line 4 builds the classifier's training set). The
number of samples per client is ⌊n/m⌋ (paper) or ⚑ proportional to the client's size (authors'
code), :func:`allocate_samples`. Latent samplers: a truncated N(μ, I) (Table 4's widths; μ the
secret prior centre of §3.3) or the eavesdropper's U(−b, b) (Fig. 5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from ..models.cvae import CVAEDecoder, truncated_normal, uniform_latent
from ..uploads import ClientUpload

__all__ = [
    "Allocation",
    "LatentSampler",
    "allocate_samples",
    "decode",
    "label_distribution",
    "sample_client_decoders",
    "truncated_sampler",
    "uniform_sampler",
]

Allocation = Literal["equal", "proportional"]
LatentSampler = Callable[[int, int, torch.Generator], torch.Tensor]



# --------------------------------------------------------------------------------------------
# shared machinery


def allocate_samples(sizes: Sequence[float], total: int, mode: Allocation) -> list[int]:
    """How many samples each client's decoder contributes.

    "equal": ⌊total/m⌋ each (Alg. 1 line 3, Alg. 2 line 4). "proportional": ⌊total·n_k/n⌋ for
    all but the last client, which gets the remainder (⚑ authors' code, ``should_weight``).
    """
    m = len(sizes)
    if m == 0:
        raise ValueError("no clients to sample from")
    if mode == "equal":
        return [total // m] * m
    s = np.asarray(sizes, dtype=np.float64)
    if s.sum() <= 0:
        return allocate_samples(sizes, total, "equal")
    out = [int(w * total) for w in (s / s.sum())[:-1]]
    return [*out, total - sum(out)]


def label_distribution(counts: Sequence[float]) -> torch.Tensor:
    """p̂^k(y): the uploaded counts normalised; uniform when they sum to 0 (all noised away)."""
    c = torch.as_tensor(np.asarray(counts, dtype=np.float64), dtype=torch.float64)
    if float(c.sum()) <= 0:
        return torch.full_like(c, 1.0 / len(c))
    return c / c.sum()


@torch.no_grad()
def decode(dec: nn.Module, z: torch.Tensor, y: torch.Tensor, chunk: int = 1000) -> torch.Tensor:
    """σ(D(z, y)) in eval mode, in chunks: images in [0, 1]."""
    dec.eval()
    out = [torch.sigmoid(dec(z[i : i + chunk], y[i : i + chunk])) for i in range(0, len(z), chunk)]
    return torch.cat(out) if out else z.new_zeros((0,))


def truncated_sampler(width: float, mean: Sequence[float] | None, device: str
                      ) -> LatentSampler:
    """z ~ N(μ, I) truncated at ±``width`` std (μ = 0 when ``mean`` is None)."""
    def sample(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
        if mean is not None and len(mean) != d:
            raise ValueError(f"prior_mean has {len(mean)} entries but the decoder's latent "
                             f"dimension is {d}")
        return truncated_normal((n, d), width, gen, mean=mean, device=device)
    return sample


def uniform_sampler(bound: float, device: str) -> LatentSampler:
    """The eavesdropper's z ~ U(−b, b) (Fig. 5)."""
    def sample(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
        return uniform_latent((n, d), bound, gen, device=device)
    return sample


def sample_client_decoders(
    decoders: Sequence[CVAEDecoder], uploads: Sequence[ClientUpload], per_client: Sequence[int],
    z_sampler: LatentSampler, gen: torch.Generator, device: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """D_Ens (Alg. 1 lines 3–4, Alg. 2 line 4): from client k, ``per_client[k]`` samples with
    y ~ p̂^k(y) and z from ``z_sampler``. Returns (x̂ in [0, 1], y, z); z is None when the
    clients' latent dimensions differ."""
    xs, ys, zs = [], [], []
    for dec, up, n in zip(decoders, uploads, per_client, strict=True):
        if n <= 0:
            continue
        p = label_distribution(up.label_counts or ())
        y = torch.multinomial(p, n, replacement=True, generator=gen).to(device)
        z = z_sampler(n, dec.latent_dim, gen).to(device)
        xs.append(decode(dec, z, y))
        ys.append(y)
        zs.append(z)
    if not xs:
        raise ValueError("no samples requested from any client (num_samples too small?)")
    same_d = len({z.shape[1] for z in zs}) == 1
    return torch.cat(xs), torch.cat(ys), torch.cat(zs) if same_d else None
