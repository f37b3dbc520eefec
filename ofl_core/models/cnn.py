"""Small CNNs of the reproduced papers (SPEC §2), layer by layer from the authors' code.

Fully-connected input sizes are computed from ``in_channels``/``image_size`` so that every
network accepts 1 or 3 channels and 28, 32 or 64 pixel inputs. The numbers quoted in the
docstrings (e.g. "FC 1568") are the ones of the paper's native input size.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Classifier, check_input_spec, conv_out


class CNNMnist(Classifier):
    """DENSE's CNN for MNIST/FMNIST (SPEC §2 ``cnn_mnist``, authors' code ``CNNMnist``).

    conv in→16 5×5 pad 2, BN, ReLU, maxpool 2; conv 16→32 5×5 pad 2, BN, ReLU, maxpool 2;
    FC 1568→C at 28 px. Features: the flattened conv output (1568-d at 28 px).
    """

    def __init__(self, num_classes: int, in_channels: int = 1, image_size: int = 28) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 16, kernel_size=5, padding=2),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=5, padding=2),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        s = image_size // 2 // 2
        self.feature_dim = 32 * s * s
        self.fc = nn.Linear(self.feature_dim, num_classes)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.conv(x), 1)


class CNNCifar(Classifier):
    """DENSE's CIFAR10/SVHN CNN, "CNN2" (SPEC §2 ``cnn_cifar``, authors' code ``CNNCifar``).

    conv in→w1 3×3 (no padding), ReLU, maxpool 2; conv w1→w2 3×3, ReLU, maxpool 2;
    conv w2→w3 3×3, ReLU; FC w3·4·4→C at 32 px (2048 for the default widths 128/128/128).
    No BatchNorm. ``cnn_cifar100`` is the same network with widths 256/256/128
    (authors' code ``CNNCifar100``). Features: the flattened conv output.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int = 3,
        image_size: int = 32,
        widths: tuple[int, int, int] = (128, 128, 128),
    ) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        w1, w2, w3 = widths
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, w1, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(w1, w2, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(w2, w3, kernel_size=3),
            nn.ReLU(),
        )
        s = conv_out(conv_out(conv_out(image_size, 3) // 2, 3) // 2, 3)
        self.feature_dim = w3 * s * s
        self.fc = nn.Linear(self.feature_dim, num_classes)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.conv(x), 1)


class _HiddenFC(Classifier):
    """A conv stack (``self.conv``), then FC flat→hidden, ReLU, FC hidden→C; features: the
    hidden FC activation. The layers are made in that order (the same initialisation draws as
    writing them out in each network)."""

    def _hidden_head(self, flat_dim: int, hidden: int, num_classes: int) -> None:
        self.flat_dim = flat_dim
        self.fc1 = nn.Linear(flat_dim, hidden)
        self.relu = nn.ReLU()
        self.feature_dim = hidden
        self.fc = nn.Linear(hidden, num_classes)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.fc1(torch.flatten(self.conv(x), 1)))


class CNN1(_HiddenFC):
    """DENSE's "CNN1" for the heterogeneous-model experiment (SPEC §2 ``cnn1``,
    authors' code ``CNNCifar2``).

    conv in→32 3×3, ReLU, maxpool 2; conv 32→64 3×3, ReLU, maxpool 2; conv 64→64 3×3, ReLU;
    FC 1024→64, ReLU; FC 64→C (1024 at 32 px). Features: the 64-d hidden FC activation.
    """

    def __init__(self, num_classes: int, in_channels: int = 3, image_size: int = 32) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(64, 64, kernel_size=3),
            nn.ReLU(),
        )
        s = conv_out(conv_out(conv_out(image_size, 3) // 2, 3) // 2, 3)
        self._hidden_head(64 * s * s, 64, num_classes)


class McMahanCNN(_HiddenFC):
    """The CNN of McMahan et al. (2017) as used by FedCVAE for its server classifier and its
    FedAvg/FedOneShot baselines (SPEC §2 ``mcmahan_cnn``).

    conv in→32 5×5, ReLU, maxpool 2; conv 32→64 5×5, ReLU, maxpool 2; FC 1600→512, ReLU;
    FC 512→C (1600 at 32 px, no padding). Features: the 512-d hidden FC activation.

    ``conv_relu=False`` gives the ⚑ FedCVAE authors'-code variant, which has no ReLU after the
    two convolutions (conv → maxpool directly; ``nn.Identity`` placeholders keep the state_dict
    keys identical to the paper variant's); the paper's text (``conv_relu=True``) keeps them.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: int = 1,
        image_size: int = 32,
        conv_relu: bool = True,
    ) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self.conv_relu = conv_relu

        # nn.Identity keeps the module indices (hence the state_dict keys) of both variants equal
        def act() -> nn.Module:
            return nn.ReLU() if conv_relu else nn.Identity()

        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5),
            act(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(32, 64, kernel_size=5),
            act(),
            nn.MaxPool2d(2, 2),
        )
        s = conv_out(conv_out(image_size, 5) // 2, 5) // 2
        self._hidden_head(64 * s * s, 512, num_classes)


class LeNet5(Classifier):
    """LeNet-5 (LeCun et al., 1998) in its common modern form with ReLU and max-pooling, used as
    a client model in FedHydra's heterogeneous-model experiment (SPEC §2 ``lenet``).

    conv in→6 5×5 (padding 2 at 28 px so that both 28 and 32 px reach 5×5), ReLU, maxpool 2;
    conv 6→16 5×5, ReLU, maxpool 2; FC 400→120, ReLU; FC 120→84, ReLU; FC 84→C.
    Features: the 84-d activation. ``first_padding`` overrides the first convolution's padding
    (0 at 28 px: FC 256→120, NIID-Bench's ``SimpleCNNMNIST``, FedLPA's client model, which is
    :func:`simple_cnn_mnist`).
    """

    def __init__(self, num_classes: int, in_channels: int = 1, image_size: int = 28,
                 first_padding: int | None = None) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        pad = (2 if image_size == 28 else 0) if first_padding is None else first_padding
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 6, kernel_size=5, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
        )
        s = conv_out(conv_out(image_size, 5, padding=pad) // 2, 5) // 2
        self.flat_dim = 16 * s * s
        self.hidden = nn.Sequential(
            nn.Linear(self.flat_dim, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
        )
        self.feature_dim = 84
        self.fc = nn.Linear(84, num_classes)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.hidden(torch.flatten(self.conv(x), 1))


def simple_cnn_mnist(num_classes: int, in_channels: int = 1, image_size: int = 28) -> LeNet5:
    """NIID-Bench's ``SimpleCNNMNIST``, FedLPA's client model: LeNet-5 without padding and
    without BatchNorm — conv in→6 5×5, ReLU, maxpool 2; conv 6→16 5×5, ReLU, maxpool 2;
    FC 256→120 (at 28 px), ReLU; FC 120→84, ReLU; FC 84→C."""
    return LeNet5(num_classes, in_channels, image_size, first_padding=0)
