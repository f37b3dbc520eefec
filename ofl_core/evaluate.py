"""Batched evaluation on uint8 test tensors: logits, accuracy, per-class accuracy, and the
clients' and their ensemble's accuracies."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .data.datasets import ImageDataset
from .uploads import ClientUpload, build_from_upload

#: evaluation batch per device type: on the CPU, batches of 128 keep a CNN's activations in
#: cache and ran 1.3–2.7× faster than 1000 at one thread (bit-identical outputs)
EVAL_BATCH = {"cpu": 128, "cuda": 1000}


def channels_last_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """Channels-last copies of the model's 4-D (convolution) weights not stored so already,
    for :func:`torch.func.functional_call` (the model itself is left as it is)."""
    # clone, not .contiguous(): a 1-input-channel weight passes as contiguous in both formats,
    # and only explicitly channels-last strides make the convolution pick that layout
    return {k: v.clone(memory_format=torch.channels_last) for k, v in model.named_parameters()
            if v.dim() == 4 and v.stride(1) != 1}


@torch.no_grad()
def predict_logits(
    model: nn.Module, x: torch.Tensor, batch_size: int | None = None,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Model outputs for uint8 images ``x`` (N, C, H, W), in eval mode, as one CPU tensor.

    ``batch_size`` None = :data:`EVAL_BATCH` of the device. On the CPU, convolutions run on
    channels-last images and weights (float32 as before, in another memory order; the outputs
    equal the contiguous ones up to rounding; docs/decisions/speed.md#speed-evaluation)."""
    dev = torch.device(device)
    batch_size = batch_size or EVAL_BATCH.get(dev.type, 1000)
    was_training = model.training
    model.eval()
    cl = dev.type == "cpu" and x.dim() == 4
    weights = channels_last_weights(model) if cl else {}
    outs = []
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(device).float().div_(255.0)
        if cl:
            xb = xb.contiguous(memory_format=torch.channels_last)
        out = (torch.func.functional_call(model, weights, (xb,), strict=False) if weights
               else model(xb))
        outs.append(out.float())  # on the device: one copy back at the end, not one per batch
    model.train(was_training)
    return torch.cat(outs).cpu()


def accuracy(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int | None = None,
    device: str | torch.device = "cpu",
) -> float:
    """Top-1 accuracy in percent."""
    pred = predict_logits(model, x, batch_size, device).argmax(1)
    return float((pred == y.cpu()).float().mean() * 100.0)


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
