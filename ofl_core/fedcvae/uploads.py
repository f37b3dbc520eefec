"""The server's view of FedCVAE uploads (SPEC §3/§4): validate a decoder upload and rebuild
the frozen client decoder D_θk from it (Alg. 1 line 2 / Alg. 2 line 2: the server receives θ^k
and p̂^k(y), nothing else)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..clients import ClientUpload, UploadError
from ..models.cvae import CVAE_VARIANTS, CVAEDecoder, build_decoder

if TYPE_CHECKING:
    from ..methods.base import ServerContext


def validate_decoder_upload(upload: ClientUpload) -> CVAEDecoder:
    """Check a FedCVAE decoder upload; return an (unloaded) decoder of its declared variant.

    Raises :class:`~ofl_core.clients.UploadError` naming the client and the problem: not a
    decoder upload, unknown variant, missing/invalid ``latent_dim``, missing or invalid label
    counts, state_dict keys/shapes that do not match the variant, NaN/inf values.
    """
    who = f"client {upload.client_id}"
    if upload.kind != "decoder":
        raise UploadError(f"{who}: FedCVAE needs a decoder upload (kind='decoder'), got "
                          f"kind={upload.kind!r}")
    if upload.arch not in CVAE_VARIANTS:
        raise UploadError(f"{who}: unknown CVAE variant {upload.arch!r}; known: "
                          f"{', '.join(CVAE_VARIANTS)}")
    d = upload.model_kwargs.get("latent_dim")
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise UploadError(f"{who}: model_kwargs['latent_dim'] must be a positive integer "
                          f"(got {d!r})")
    extra_kw = sorted(set(upload.model_kwargs) - {"latent_dim"})
    if extra_kw:
        raise UploadError(f"{who}: unexpected model_kwargs {extra_kw} for a decoder upload")
    counts = upload.label_counts
    if counts is None or len(counts) != upload.num_classes:
        raise UploadError(f"{who}: label_counts must give one count per class "
                          f"({upload.num_classes}), got {counts!r}")
    c = np.asarray(counts, dtype=np.float64)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise UploadError(f"{who}: label_counts must be finite and ≥ 0 (got {tuple(counts)})")
    try:
        dec = build_decoder(upload.arch, upload.num_classes, upload.in_channels,
                            upload.image_size, d)
    except ValueError as e:
        raise UploadError(f"{who}: {e}") from None
    expected, got = dec.state_dict(), upload.state_dict
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    if missing or extra:
        raise UploadError(
            f"{who}: state_dict does not match decoder variant {upload.arch!r}: "
            f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}, "
            f"unexpected {extra[:5]}{'…' if len(extra) > 5 else ''}"
        )
    for k, v in expected.items():
        t = got[k]
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(v.shape):
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise UploadError(f"{who}: parameter {k!r} has shape {shape}, expected "
                              f"{tuple(v.shape)} for {upload.arch!r} with latent_dim={d}")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise UploadError(f"{who}: parameter {k!r} contains NaN or inf values")
    return dec


def decoder_from_upload(upload: ClientUpload, device: str | torch.device = "cpu"
                        ) -> CVAEDecoder:
    """Validate a decoder upload and return the decoder, frozen (eval mode, no gradients)."""
    dec = validate_decoder_upload(upload)
    dec.load_state_dict(upload.state_dict)
    dec.eval().requires_grad_(False)
    return dec.to(device)


def load_decoders(uploads: Sequence[ClientUpload], ctx: ServerContext, who: str
                  ) -> list[CVAEDecoder]:
    """Every client's frozen decoder D_θk on ``ctx.device``; raises if there are no uploads or
    one was made for other classes or image shapes than the server's (``who`` names the
    method in the message)."""
    if not uploads:
        raise ValueError(f"{who}: no client uploads")
    decs = [decoder_from_upload(u, ctx.device) for u in uploads]
    for u in uploads:
        if (u.num_classes, u.in_channels, u.image_size) != (
                ctx.num_classes, ctx.in_channels, ctx.image_size):
            raise UploadError(
                f"client {u.client_id}: upload is for {u.num_classes} classes, "
                f"{u.in_channels}×{u.image_size}² images but the server expects "
                f"{ctx.num_classes} classes, {ctx.in_channels}×{ctx.image_size}²"
            )
    return decs
