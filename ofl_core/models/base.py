"""Shared base class and shape helpers for the classifier zoo (SPEC §2)."""

from __future__ import annotations

import torch
from torch import nn

VALID_IN_CHANNELS: tuple[int, ...] = (1, 3)
VALID_IMAGE_SIZES: tuple[int, ...] = (28, 32, 64)


def conv_out(size: int, kernel: int, padding: int = 0, stride: int = 1) -> int:
    """Spatial output size of a convolution (or pooling) layer."""
    return (size + 2 * padding - kernel) // stride + 1


def check_input_spec(in_channels: int, image_size: int) -> None:
    """Raise a clear ``ValueError`` when the input spec is not one the zoo supports."""
    if in_channels not in VALID_IN_CHANNELS:
        raise ValueError(f"in_channels must be one of {VALID_IN_CHANNELS}, got {in_channels!r}")
    if image_size not in VALID_IMAGE_SIZES:
        raise ValueError(f"image_size must be one of {VALID_IMAGE_SIZES}, got {image_size!r}")


class Classifier(nn.Module):
    """Base class of every classifier in the zoo.

    Subclasses implement :meth:`extract_features`, which returns the penultimate activation
    vector ``(batch, feature_dim)``, and define ``self.fc``, the final ``nn.Linear`` that maps
    those features to logits. ``forward(x)`` returns logits; ``forward(x, return_features=True)``
    returns ``(logits, features)`` (the features feed e.g. the DAFL activation loss).
    """

    feature_dim: int
    num_classes: int
    in_channels: int
    image_size: int
    fc: nn.Linear

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        """Return the penultimate activations ``(batch, feature_dim)``."""
        raise NotImplementedError

    def forward(
        self, x: torch.Tensor, return_features: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        features = self.extract_features(x)
        logits = self.fc(features)
        if return_features:
            return logits, features
        return logits
