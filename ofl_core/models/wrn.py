"""Pre-activation Wide ResNets (Zagoruyko & Komodakis, 2016), as in DENSE's authors' code
(``models/wrn.py``, itself from ZeroShotKnowledgeTransfer) — SPEC §2 ``wrn16_1``/``wrn40_1``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import Classifier, check_input_spec


class WideBasicBlock(nn.Module):
    """Pre-activation block: BN-ReLU-conv3×3-BN-ReLU-(dropout)-conv3×3 plus shortcut.

    When the width changes, the shortcut is a 1×1 conv applied to the pre-activated input
    (the standard Zagoruyko implementation).
    """

    def __init__(
        self, in_planes: int, out_planes: int, stride: int, dropout_rate: float = 0.0
    ) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU()
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout_rate)
        self.equal_in_out = in_planes == out_planes and stride == 1
        self.conv_shortcut: nn.Module | None = None
        if not self.equal_in_out:
            self.conv_shortcut = nn.Conv2d(
                in_planes, out_planes, 1, stride=stride, padding=0, bias=False
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(pre)))
        out = self.conv2(self.dropout(out))
        if self.conv_shortcut is None:
            return x + out
        return self.conv_shortcut(pre) + out


class WideResNet(Classifier):
    """Wide ResNet WRN-depth-k (Zagoruyko & Komodakis, 2016; DENSE's authors' code).

    3×3 conv in→16; three groups of n = (depth−4)/6 :class:`WideBasicBlock` with widths
    16k/32k/64k (strides 1/2/2); BN, ReLU, global average pool; FC. Features: the pooled
    64k-d vector. Init as in the authors' code: conv N(0, √(2/(k·k·out))), BN (1, 0),
    linear bias 0.
    """

    def __init__(
        self,
        depth: int,
        num_classes: int,
        widen_factor: int = 1,
        dropout_rate: float = 0.0,
        in_channels: int = 3,
        image_size: int = 32,
    ) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        if (depth - 4) % 6 != 0:
            raise ValueError(f"WideResNet depth must be 6n+4, got {depth}")
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.block1 = self._group(n, widths[0], widths[1], 1, dropout_rate)
        self.block2 = self._group(n, widths[1], widths[2], 2, dropout_rate)
        self.block3 = self._group(n, widths[2], widths[3], 2, dropout_rate)
        self.bn1 = nn.BatchNorm2d(widths[3])
        self.relu = nn.ReLU()
        self.feature_dim = widths[3]
        self.fc = nn.Linear(widths[3], num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / fan_out))
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    @staticmethod
    def _group(
        n: int, in_planes: int, out_planes: int, stride: int, dropout_rate: float
    ) -> nn.Sequential:
        return nn.Sequential(
            *[
                WideBasicBlock(
                    in_planes if i == 0 else out_planes,
                    out_planes,
                    stride if i == 0 else 1,
                    dropout_rate,
                )
                for i in range(n)
            ]
        )

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block3(self.block2(self.block1(self.conv1(x))))
        out = self.relu(self.bn1(out))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)


def wrn16_1(num_classes: int, in_channels: int = 3, image_size: int = 32) -> WideResNet:
    """WRN-16-1 (dropout 0)."""
    return WideResNet(16, num_classes, 1, 0.0, in_channels=in_channels, image_size=image_size)


def wrn40_1(num_classes: int, in_channels: int = 3, image_size: int = 32) -> WideResNet:
    """WRN-40-1 (dropout 0)."""
    return WideResNet(40, num_classes, 1, 0.0, in_channels=in_channels, image_size=image_size)
