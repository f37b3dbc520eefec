"""CIFAR-style ResNet-18 (He et al., 2016), as in DENSE's authors' code (SPEC §2 ``resnet18``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import Classifier, check_input_spec


class BasicBlock(nn.Module):
    """ResNet basic block: two 3×3 conv-BN layers with an identity / 1×1-conv-BN shortcut."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(Classifier):
    """CIFAR-style ResNet (DENSE's authors' code ``models/resnet.py``; He et al., 2016).

    3×3 stem conv (stride 1, no max-pool), BN, ReLU; four stages of :class:`BasicBlock` with
    widths 64/128/256/512 (strides 1/2/2/2); global average pool; FC. Works at any input size
    thanks to the adaptive pooling. Features: the 512-d pooled vector.
    """

    def __init__(
        self,
        num_blocks: tuple[int, int, int, int],
        num_classes: int,
        in_channels: int = 3,
        image_size: int = 32,
    ) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self._in_planes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(64, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(128, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(256, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(512, num_blocks[3], stride=2)
        self.feature_dim = 512 * BasicBlock.expansion
        self.fc = nn.Linear(self.feature_dim, num_classes)

    def _make_layer(self, planes: int, n: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (n - 1):
            layers.append(BasicBlock(self._in_planes, planes, s))
            self._in_planes = planes * BasicBlock.expansion
        return nn.Sequential(*layers)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)


def resnet18(num_classes: int, in_channels: int = 3, image_size: int = 32) -> ResNet:
    """ResNet-18: :class:`ResNet` with [2, 2, 2, 2] basic blocks."""
    return ResNet((2, 2, 2, 2), num_classes, in_channels=in_channels, image_size=image_size)
