"""Batched evaluation on uint8 test tensors: logits, accuracy, per-class accuracy."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def predict_logits(
    model: nn.Module, x: torch.Tensor, batch_size: int = 1000,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Model outputs for uint8 images ``x`` (N, C, H, W), in eval mode, as one CPU tensor."""
    was_training = model.training
    model.eval()
    outs = []
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(device).float().div_(255.0)
        outs.append(model(xb).float().cpu())
    model.train(was_training)
    return torch.cat(outs)


def accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000,
    device: str | torch.device = "cpu",
) -> float:
    """Top-1 accuracy in percent."""
    pred = predict_logits(model, x, batch_size, device).argmax(1)
    return float((pred == y.cpu()).float().mean() * 100.0)


def per_class_accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int,
    batch_size: int = 1000, device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Accuracy (percent) of each class; NaN for classes absent from ``y``."""
    pred = predict_logits(model, x, batch_size, device).argmax(1)
    y = y.cpu()
    correct = torch.bincount(y[pred == y], minlength=num_classes).float()
    total = torch.bincount(y, minlength=num_classes).float()
    return torch.where(total > 0, correct / total.clamp(min=1) * 100.0, float("nan"))
