"""Batched evaluation on uint8 test tensors: logits, accuracy, per-class accuracy, and the
clients' and their ensemble's accuracies."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .clients import ClientUpload, build_from_upload
from .data.datasets import ImageDataset


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


def client_accuracies(uploads: Sequence[ClientUpload], dataset: ImageDataset,
                      device: str | torch.device = "cpu") -> tuple[list[float], float]:
    """Each classifier client's test accuracy and the mean-logit ensemble's (DENSE Eq. 1),
    from one pass of every client over the test set."""
    y = dataset.y_test.cpu()
    logits = [predict_logits(build_from_upload(u, device), dataset.x_test, device=device)
              for u in uploads]
    accs = [float((lg.argmax(1) == y).float().mean() * 100.0) for lg in logits]
    ens = torch.stack(logits).mean(0).argmax(1)
    return accs, float((ens == y).float().mean() * 100.0)
