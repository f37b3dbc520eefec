"""The image generator of DENSE / FedHydra / DAFL (SPEC §2 ``generator``, DENSE's authors' code
``models/generator.py``)."""

from __future__ import annotations

import torch
from torch import nn


class Generator(nn.Module):
    """DENSE's official generator (SPEC §2), producing images in [0, 1].

    z (``nz``) → Linear → reshape to (2·ngf, s/4, s/4) → BatchNorm2d(2·ngf) → ×2 nearest
    upsample → conv 3×3 2·ngf→2·ngf (no bias) → BN → LeakyReLU(0.2) → ×2 upsample →
    conv 3×3 2·ngf→ngf (no bias) → BN → LeakyReLU(0.2) → conv 3×3 ngf→channels → Sigmoid.
    With the default ``ngf=64`` the widths are 128/128/64 as in the paper's code.

    ``img_size`` must be divisible by 4 (28, 32 and 64 are). Weights are initialised by
    :meth:`init_weights` at construction (from torch's global RNG); call it again with a
    ``torch.Generator`` for a reproducible, RNG-isolated initialisation.
    """

    def __init__(self, nz: int = 256, ngf: int = 64, img_size: int = 32, channels: int = 3) -> None:
        super().__init__()
        if img_size <= 0 or img_size % 4 != 0:
            raise ValueError(f"Generator img_size must be a positive multiple of 4, got {img_size}")
        if channels not in (1, 3):
            raise ValueError(f"Generator channels must be 1 or 3, got {channels}")
        self.nz, self.ngf, self.img_size, self.channels = nz, ngf, img_size, channels
        self.init_size = img_size // 4
        self.l1 = nn.Linear(nz, ngf * 2 * self.init_size**2)
        self.conv_blocks = nn.Sequential(
            nn.BatchNorm2d(ngf * 2),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(ngf * 2, ngf * 2, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2, mode="nearest"),
            nn.Conv2d(ngf * 2, ngf, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ngf, channels, 3, stride=1, padding=1),
            nn.Sigmoid(),
        )
        self.init_weights()

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """Re-initialise the weights in place (see :func:`init_generator_weights`)."""
        init_generator_weights(self, generator)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.l1(z).view(z.shape[0], self.ngf * 2, self.init_size, self.init_size)
        return self.conv_blocks(out)


@torch.no_grad()
def init_generator_weights(module: nn.Module, generator: torch.Generator | None = None) -> None:
    """DCGAN-style init of SPEC §2: conv/linear weights ~ N(0, 0.02), BN γ ~ N(1, 0.02),
    BN β = 0; conv/linear biases are set to 0 so the result depends only on ``generator``
    (torch's global RNG when ``None``). Modules are visited in ``module.modules()`` order."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, 0.02, generator=generator)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            nn.init.normal_(m.weight, 1.0, 0.02, generator=generator)
            nn.init.zeros_(m.bias)
