"""Batched image augmentation on the device (no PIL, no per-sample Python loop)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(
    x: torch.Tensor,
    pad: int = 4,
    flip: bool = True,
    crop: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Random crop (zero padding ``pad``) and horizontal flip of a float batch (B, C, H, W).

    Same distribution as torchvision's ``RandomCrop(H, padding=pad)`` + ``RandomHorizontalFlip``
    applied per image (DENSE's CIFAR transform), done for the whole batch with one gather.
    """
    b, _, h, w = x.shape
    dev = x.device
    if crop and pad > 0:
        xp = F.pad(x, (pad, pad, pad, pad))
        ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator, device="cpu").to(dev)
        oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator, device="cpu").to(dev)
        rows = (oy[:, None] + torch.arange(h, device=dev)[None, :])  # (B, H)
        cols = (ox[:, None] + torch.arange(w, device=dev)[None, :])  # (B, W)
        idx_r = rows[:, None, :, None].expand(b, x.shape[1], h, xp.shape[-1])
        xr = torch.gather(xp, 2, idx_r)
        idx_c = cols[:, None, None, :].expand(b, x.shape[1], h, w)
        x = torch.gather(xr, 3, idx_c)
    if flip:
        mask = torch.rand(b, generator=generator, device="cpu").to(dev) < 0.5
        x = torch.where(mask[:, None, None, None], x.flip(-1), x)
    return x
