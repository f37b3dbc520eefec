"""The server's view of FedCVAE uploads (SPEC §3/§4): validate a decoder upload and rebuild
the frozen client decoder D_θk from it (Alg. 1 line 2 / Alg. 2 line 2: the server receives θ^k
and p̂^k(y), nothing else)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..models.cvae import CVAEDecoder
from ..server import ServerContext
from ..uploads import ClientUpload, build_from_upload, check_upload_header


def decoder_from_upload(upload: ClientUpload, device: str | torch.device = "cpu"
                        ) -> CVAEDecoder:
    """Validate a decoder upload and return the decoder, frozen (eval mode, no gradients)."""
    return build_from_upload(upload, device, "decoder")  # type: ignore[return-value]


def load_decoders(uploads: Sequence[ClientUpload], ctx: ServerContext, who: str
                  ) -> list[CVAEDecoder]:
    """Every client's frozen decoder D_θk on ``ctx.device``; raises if there are no uploads or
    one was made for other classes or image shapes than the server's (``who`` names the
    method in the message)."""
    if not uploads:
        raise ValueError(f"{who}: no client uploads")
    for u in uploads:  # the header against the task first (run_method does it too)
        check_upload_header(u, ctx.num_classes, ctx.in_channels, ctx.image_size)
    return [decoder_from_upload(u, ctx.device) for u in uploads]
