"""Shared base class and shape helpers for the classifier zoo (SPEC §2)."""

from __future__ import annotations

import torch
from torch import nn

VALID_IN_CHANNELS: tuple[int, ...] = (1, 3)
VALID_IMAGE_SIZES: tuple[int, ...] = (28, 32, 64)

#: The named input normalisations a classifier may apply to its [0, 1] input before its first
#: layer, name -> (mean, std) of ``(x − mean) / std`` (the same for every channel), None = the
#: raw [0, 1] pixels. ``"half"``: mean 0.5, std 0.5 (inputs in [−1, 1]), Co-Boosting's code for
#: every dataset (``registry.NORMALIZE_DICT``); ``"mnist"`` and ``"fmnist"``: the datasets' usual
#: mean and std, IntactOFL's code (``dataset_helper.NORMALIZE_DICT``). One name for the concept
#: in every config: ``input_norm`` (:class:`~ofl_core.clients.LocalTrainConfig`, the server
#: configs that set it).
INPUT_NORMS: dict[str, tuple[float, float] | None] = {
    "none": None, "half": (0.5, 0.5), "mnist": (0.1307, 0.3081), "fmnist": (0.2860, 0.3530)}


def check_input_norm(name: object, what: str = "input_norm") -> str:
    """``name`` if it is one of :data:`INPUT_NORMS`, else a ``ValueError`` listing them."""
    if not isinstance(name, str) or name not in INPUT_NORMS:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, INPUT_NORMS))} "
                         f"(got {name!r})")
    return name


def normalize_input(x: torch.Tensor, name: str) -> torch.Tensor:
    """``(x − mean) / std`` for the named normalisation (``x`` unchanged for ``"none"``)."""
    ms = INPUT_NORMS[check_input_norm(name)]
    if ms is None:
        return x
    mean, std = ms
    return (x - mean) / std


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

    ``input_norm`` (:data:`INPUT_NORMS`; set by ``build_model(..., input_norm=...)``): the
    normalisation the model applies to its input first, so that every caller — local training,
    a server's synthetic images, the test set — hands it [0, 1] images. It holds no parameter
    or buffer (the state dict is the same either way); an upload names it in its
    ``model_kwargs``, so the server rebuilds the same function.
    """

    input_norm: str = "none"

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
        if self.input_norm != "none":
            x = normalize_input(x, self.input_norm)
        features = self.extract_features(x)
        logits = self.fc(features)
        if return_features:
            return logits, features
        return logits

    def extra_repr(self) -> str:
        # in the repr, so that models that differ only here never share a batched teacher group
        return f"input_norm={self.input_norm!r}" if self.input_norm != "none" else ""
