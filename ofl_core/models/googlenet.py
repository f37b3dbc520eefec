"""CIFAR-size GoogLeNet / Inception-v1 (Szegedy et al., 2015) in the widely used form of the
``kuangliu/pytorch-cifar`` repository (with BatchNorm) — SPEC §2 ``googlenet``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import Classifier, check_input_spec


def _conv_bn_relu(in_c: int, out_c: int, kernel: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_c, out_c, kernel_size=kernel, padding=kernel // 2),
        nn.BatchNorm2d(out_c),
        nn.ReLU(),
    ]


class Inception(nn.Module):
    """Inception module with four branches: 1×1; 1×1→3×3; 1×1→3×3→3×3 (the "5×5" branch);
    3×3 max-pool→1×1. Outputs are concatenated along channels."""

    def __init__(
        self,
        in_planes: int,
        n1x1: int,
        n3x3red: int,
        n3x3: int,
        n5x5red: int,
        n5x5: int,
        pool_planes: int,
    ) -> None:
        super().__init__()
        self.b1 = nn.Sequential(*_conv_bn_relu(in_planes, n1x1, 1))
        self.b2 = nn.Sequential(
            *_conv_bn_relu(in_planes, n3x3red, 1), *_conv_bn_relu(n3x3red, n3x3, 3)
        )
        self.b3 = nn.Sequential(
            *_conv_bn_relu(in_planes, n5x5red, 1),
            *_conv_bn_relu(n5x5red, n5x5, 3),
            *_conv_bn_relu(n5x5, n5x5, 3),
        )
        self.b4 = nn.Sequential(
            nn.MaxPool2d(3, stride=1, padding=1), *_conv_bn_relu(in_planes, pool_planes, 1)
        )
        self.out_planes = n1x1 + n3x3 + n5x5 + pool_planes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(Classifier):
    """CIFAR-size GoogLeNet (kuangliu/pytorch-cifar; Szegedy et al., 2015), a client model of
    FedHydra's heterogeneous-model experiment.

    3×3 conv in→192, BN, ReLU; inception 3a, 3b; max-pool /2; inception 4a–4e; max-pool /2;
    inception 5a, 5b; global average pool (adaptive, so 28/32/64 px all work; equal to the
    original 8×8 average pool at 32 px); FC 1024→C. Features: the 1024-d pooled vector.
    """

    def __init__(self, num_classes: int, in_channels: int = 3, image_size: int = 32) -> None:
        super().__init__()
        check_input_spec(in_channels, image_size)
        self.num_classes, self.in_channels, self.image_size = num_classes, in_channels, image_size
        self.pre_layers = nn.Sequential(*_conv_bn_relu(in_channels, 192, 3))
        self.a3 = Inception(192, 64, 96, 128, 16, 32, 32)
        self.b3 = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.a4 = Inception(480, 192, 96, 208, 16, 48, 64)
        self.b4 = Inception(512, 160, 112, 224, 24, 64, 64)
        self.c4 = Inception(512, 128, 128, 256, 24, 64, 64)
        self.d4 = Inception(512, 112, 144, 288, 32, 64, 64)
        self.e4 = Inception(528, 256, 160, 320, 32, 128, 128)
        self.a5 = Inception(832, 256, 160, 320, 32, 128, 128)
        self.b5 = Inception(832, 384, 192, 384, 48, 128, 128)
        self.feature_dim = self.b5.out_planes
        self.fc = nn.Linear(self.feature_dim, num_classes)

    def extract_features(self, x: torch.Tensor) -> torch.Tensor:
        out = self.b3(self.a3(self.pre_layers(x)))
        out = self.maxpool(out)
        out = self.e4(self.d4(self.c4(self.b4(self.a4(out)))))
        out = self.maxpool(out)
        out = self.b5(self.a5(out))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)
