"""Host-to-device copies that do not wait for the device.

A plain ``t.to("cuda")`` of a tensor in ordinary (pageable) host memory synchronises the
stream: the host waits until every kernel queued before it has run, so a training loop that
draws its noise or batch indices on the CPU (the library's random streams are CPU generators,
so that CPU and CUDA runs draw the same numbers) stalls once per step. :func:`to_device` copies
through page-locked memory with ``non_blocking=True`` instead (PyTorch's pinned-memory cache
keeps the page-locked block alive until the copy has run); on the CPU it is ``t.to(device)``.
"""

from __future__ import annotations

import torch


def to_device(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """``t`` on ``device``; a host tensor goes to a CUDA device without a stream sync."""
    dev = torch.device(device)
    if dev.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(dev, non_blocking=True)
    return t.to(dev, non_blocking=True)


__all__ = ["to_device"]
