"""Decoded samples of FedCVAE's decoders (FedCVAE Figs. 7–8): per-class grids from a client
decoder, from the client decoders that hold each class, and from a server decoder."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..models.cvae import CVAE_VARIANTS, CVAEDecoder, build_decoder
from ..server import ServerResult
from ..uploads import ClientUpload
from .sampling import LatentSampler
from .uploads import decoder_from_upload


@torch.no_grad()
def decode_classes(decoder: CVAEDecoder, per_class: int, sampler: LatentSampler, seed: int,
                   classes: Sequence[int] | None = None, device: str = "cpu") -> torch.Tensor:
    """``per_class`` images of each class from one decoder, z from ``sampler`` (e.g.
    :func:`~ofl_core.fedcvae.sampling.truncated_sampler` or
    :func:`~ofl_core.fedcvae.sampling.uniform_sampler`); float (n, C, H, W) in [0, 1] on the CPU,
    sample-major (row i of a grid with one column per class holds sample i of every class)."""
    cls = list(range(decoder.num_classes)) if classes is None else list(classes)
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.as_tensor(cls, device=device).repeat(per_class)
    z = sampler(len(y), decoder.latent_dim, gen).to(device)
    decoder.eval()
    return torch.sigmoid(decoder.to(device)(z, y)).cpu()


def client_decoder_samples(uploads: Sequence[ClientUpload], per_class: int,
                           sampler: LatentSampler, seed: int, device: str = "cpu"
                           ) -> torch.Tensor:
    """``per_class`` images of each class, each class decoded by the client decoder that holds
    the most samples of it (the uploaded label counts); sample-major like
    :func:`decode_classes`."""
    if not uploads:
        raise ValueError("no client uploads")
    C = uploads[0].num_classes
    decoders = [decoder_from_upload(u, device) for u in uploads]
    owner = [max(range(len(uploads)), key=lambda k, c=c: (uploads[k].label_counts or (0,) * C)[c])
             for c in range(C)]
    cols = [decode_classes(decoders[owner[c]], per_class, sampler, seed + c, [c], device)
            for c in range(C)]
    # cols[c] holds per_class samples of class c; interleave to sample-major order
    return torch.stack(cols, dim=1).flatten(0, 1)


def server_decoder(result: ServerResult, uploads: Sequence[ClientUpload],
                   device: str = "cpu") -> CVAEDecoder:
    """The aggregated server decoder of a FedCVAE-KD (or decoder-averaging) result."""
    state = result.extras.get("server_decoder")
    if state is None:
        raise ValueError(f"{result.method}: the result holds no server decoder (only FedCVAE-KD "
                         "and decoder averaging build one)")
    u = uploads[0]
    d = int(u.model_kwargs["latent_dim"])
    for variant in (u.arch, *CVAE_VARIANTS):  # KD: the config's server_variant; avg: clients'
        dec = build_decoder(variant, u.num_classes, u.in_channels, u.image_size, d)
        if dec.state_dict().keys() == state.keys() and all(
                dec.state_dict()[k].shape == v.shape for k, v in state.items()):
            dec.load_state_dict(state)
            return dec.to(device).eval().requires_grad_(False)
    raise ValueError(f"{result.method}: the server decoder matches no CVAE variant")
