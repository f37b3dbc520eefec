"""Name → constructor registry of the classifier zoo (SPEC §2)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from torch import nn

from .base import VALID_IMAGE_SIZES, VALID_IN_CHANNELS, check_input_norm
from .cnn import CNN1, CNNCifar, CNNMnist, LeNet5, McMahanCNN, simple_cnn_mnist
from .googlenet import GoogLeNet
from .resnet import resnet18
from .wrn import wrn16_1, wrn40_1

_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "cnn_mnist": CNNMnist,
    "cnn_cifar": CNNCifar,
    "cnn_cifar100": partial(CNNCifar, widths=(256, 256, 128)),
    "cnn1": CNN1,
    "mcmahan_cnn": McMahanCNN,
    "lenet": LeNet5,
    "simplecnn_mnist": simple_cnn_mnist,
    "resnet18": resnet18,
    "wrn16_1": wrn16_1,
    "wrn40_1": wrn40_1,
    "googlenet": GoogLeNet,
}

# Extra constructor options accepted through ``build_model(**kwargs)``, per model.
_OPTIONS: dict[str, frozenset[str]] = {"mcmahan_cnn": frozenset({"conv_relu"})}

MODEL_NAMES: tuple[str, ...] = tuple(_BUILDERS)
"""Names accepted by :func:`build_model`."""


def build_model(
    name: str,
    num_classes: int,
    in_channels: int = 1,
    image_size: int = 28,
    **kwargs: Any,
) -> nn.Module:
    """Build a freshly initialised classifier of the zoo.

    Args:
        name: one of :data:`MODEL_NAMES`.
        num_classes: number of output logits (≥ 1).
        in_channels: 1 (grayscale) or 3 (RGB).
        image_size: input side length, 28, 32 or 64.
        **kwargs: ``input_norm`` (every architecture; a name of
            :data:`~ofl_core.models.base.INPUT_NORMS`, default ``"none"``): the normalisation
            the model applies to its [0, 1] input first. Beside it, extra constructor options
            of the chosen architecture. The only one so far is ``conv_relu: bool = True`` for
            ``"mcmahan_cnn"``: ``conv_relu=False`` is the ⚑ FedCVAE authors'-code variant
            without ReLU after the two convolutions.

    Returns:
        A :class:`~ofl_core.models.base.Classifier`: ``model(x)`` gives logits,
        ``model(x, return_features=True)`` gives ``(logits, features)`` with features of
        shape ``(batch, model.feature_dim)``.

    Raises:
        ValueError: unknown ``name`` (the message lists the known names), unsupported
            ``in_channels``/``image_size``, ``num_classes < 1``, an unknown ``input_norm``
            or an option the architecture does not take.
    """
    if name not in _BUILDERS:
        raise ValueError(f"unknown model name {name!r}; known models: {', '.join(MODEL_NAMES)}")
    if in_channels not in VALID_IN_CHANNELS:
        raise ValueError(f"in_channels must be one of {VALID_IN_CHANNELS}, got {in_channels!r}")
    if image_size not in VALID_IMAGE_SIZES:
        raise ValueError(f"image_size must be one of {VALID_IMAGE_SIZES}, got {image_size!r}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    input_norm = check_input_norm(kwargs.pop("input_norm", "none"))
    allowed = _OPTIONS.get(name, frozenset())
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for model {name!r}; it accepts {sorted(allowed)}"
        )
    model = _BUILDERS[name](
        num_classes=num_classes, in_channels=in_channels, image_size=image_size, **kwargs
    )
    if input_norm != "none":
        model.input_norm = input_norm
    return model
