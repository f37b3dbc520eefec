"""The growing pool of synthetic images (:class:`ImagePool`) and batch augmentations
(:func:`augment_batch`: DENSE's crop/flip; :func:`jitter_flip`: DeepInversion's)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Literal

import torch

from ..augment import random_crop_flip


class ImagePool:
    """Growing in-memory pool of synthetic images in [0, 1] (DENSE's code keeps the best batch of
    every epoch; it writes them as 8-bit PNGs).

    ``uint8=True`` stores round(255·x) (exact to within 0.5/255), 4× less memory than float;
    ``rounding="floor"`` stores floor(255·x) instead, as DENSE's code (``(x·255).astype(uint8)``
    before writing the PNG), which darkens every pixel by 0.5/255 on average.
    Storage is one buffer that doubles when full, so :meth:`all` is a view, not a copy.
    """

    def __init__(self, uint8: bool = True, device: str | torch.device | None = None,
                 rounding: Literal["round", "floor"] = "round") -> None:
        if rounding not in ("round", "floor"):
            raise ValueError(f"ImagePool rounding must be 'round' or 'floor' (got {rounding!r})")
        self.uint8 = uint8
        self.rounding = rounding
        self.device = torch.device(device) if device is not None else None
        self._buf: torch.Tensor | None = None
        self._labels: list[torch.Tensor] = []
        self._n = 0
        self.num_batches = 0

    def __len__(self) -> int:
        return self._n

    def add(self, batch: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        """Append a batch (B, C, H, W) of images in [0, 1] (detached, copied), with the labels
        the generator was asked for when given (then every batch needs them)."""
        if (labels is None) != (not self._labels) and self.num_batches:
            raise ValueError("ImagePool: give labels with every batch or with none")
        if labels is not None and len(labels) != len(batch):
            raise ValueError(f"ImagePool: {len(labels)} labels for {len(batch)} images")
        b = batch.detach()
        if self.device is not None:
            b = b.to(self.device)
        if self.uint8:
            scaled = b.float().clamp(0, 1).mul(255)
            b = (scaled.floor() if self.rounding == "floor" else scaled.round()).to(torch.uint8)
        else:
            b = b.float().clone()
        if self._buf is None:
            self._buf = torch.empty((max(len(b), 1) * 4, *b.shape[1:]), dtype=b.dtype,
                                    device=b.device)
        elif tuple(b.shape[1:]) != tuple(self._buf.shape[1:]):
            raise ValueError(f"ImagePool: batch of shape {tuple(b.shape[1:])} does not match the "
                             f"pool's {tuple(self._buf.shape[1:])}")
        need = self._n + len(b)
        if need > len(self._buf):
            cap = max(need, 2 * len(self._buf))
            new = torch.empty((cap, *self._buf.shape[1:]), dtype=self._buf.dtype,
                              device=self._buf.device)
            new[: self._n] = self._buf[: self._n]
            self._buf = new
        self._buf[self._n : need] = b
        self._n = need
        self.num_batches += 1
        if labels is not None:
            self._labels.append(labels.detach().to(b.device, torch.int64).clone())

    def labels(self) -> torch.Tensor:
        """The stored labels (N,), in pool order; an error for an unlabelled pool."""
        if not self._labels:
            raise ValueError("ImagePool has no labels (add batches with labels=...)")
        if len(self._labels) > 1:
            self._labels = [torch.cat(self._labels)]
        return self._labels[0]

    def stored(self) -> torch.Tensor:
        """The stored tensor (uint8 or float), a view of the first ``len(self)`` images."""
        if self._buf is None:
            raise ValueError("ImagePool is empty")
        return self._buf[: self._n]

    def _to_float(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div_(255.0) if self.uint8 else x.float()

    def all(self) -> torch.Tensor:
        """Every image as a float tensor in [0, 1] (N, C, H, W)."""
        return self._to_float(self.stored())

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shuffle: bool = True) -> Iterator[torch.Tensor]:
        """One pass over the pool in (shuffled) float batches of ``batch_size``."""
        for xb, _ in self.labelled_batches(batch_size, generator, shuffle, labels=False):
            yield xb

    def labelled_batches(self, batch_size: int, generator: torch.Generator | None = None,
                         shuffle: bool = True, labels: bool = True
                         ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        """One pass as :meth:`batches` (the same order for the same generator state), each
        batch with its labels (None when ``labels=False``)."""
        y = self.labels() if labels else None
        for idx in self.index_batches(batch_size, generator, shuffle):
            yield self.images(idx), (y[idx] if y is not None else None)

    def index_batches(self, batch_size: int, generator: torch.Generator | None = None,
                      shuffle: bool = True) -> Iterator[torch.Tensor]:
        """The pool indices of one pass's batches, in :meth:`batches`' order (one permutation
        drawn from ``generator`` when the pass starts)."""
        data = self.stored()
        n = len(data)
        order = (torch.randperm(n, generator=generator) if shuffle else torch.arange(n))
        order = order.to(data.device)
        for i in range(0, n, batch_size):
            yield order[i : i + batch_size]

    def images(self, idx: torch.Tensor) -> torch.Tensor:
        """The images at pool indices ``idx`` as a float tensor in [0, 1]."""
        return self._to_float(self.stored()[idx])

    def num_steps(self, batch_size: int) -> int:
        return math.ceil(self._n / batch_size)

    def state_dict(self) -> dict[str, Any]:
        """The pool for a checkpoint: its images (a copy without the spare capacity), labels
        and batch count."""
        return {"images": self.stored().clone() if self._buf is not None else None,
                "labels": torch.cat(self._labels) if self._labels else None,
                "num_batches": self.num_batches, "uint8": self.uint8}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the pool's content by a :meth:`state_dict` (on this pool's device)."""
        images, labels = state["images"], state["labels"]
        dtype = torch.uint8 if self.uint8 else torch.float32
        if state["uint8"] != self.uint8 or (images is not None and images.dtype != dtype):
            raise ValueError(f"ImagePool: a {'uint8' if state['uint8'] else 'float'} pool's "
                             f"state for a {'uint8' if self.uint8 else 'float'} pool")
        n = 0 if images is None else len(images)
        if labels is not None and len(labels) != n:
            raise ValueError(f"ImagePool: {len(labels)} labels for {n} images")
        dev = self.device if self.device is not None else "cpu"
        self._buf = images.to(dev) if images is not None else None
        self._labels = [labels.to(dev)] if labels is not None else []
        self._n, self.num_batches = n, int(state["num_batches"])


def augment_batch(x: torch.Tensor, mode: str, generator: torch.Generator | None = None,
                  pad: int = 4) -> torch.Tensor:
    """Batched augmentation: ``"none"``, ``"flip"`` (horizontal flip, p=1/2 per image) or
    ``"crop_flip"`` (random crop with zero padding ``pad`` + flip; DENSE's code)."""
    if mode == "none":
        return x
    if mode not in ("flip", "crop_flip"):
        raise ValueError(f"augmentation must be 'none', 'flip' or 'crop_flip' (got {mode!r})")
    return random_crop_flip(x, pad=pad, crop=mode == "crop_flip", generator=generator)


def jitter_flip(x: torch.Tensor, lim: int = 2, flip: bool = True,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """DeepInversion's augmentation: roll the whole batch by a random offset in [−lim, lim]
    along H and W, then flip it horizontally with probability 1/2 (one draw per batch)."""
    if lim > 0:
        dx, dy = torch.randint(-lim, lim + 1, (2,), generator=generator).tolist()
        x = torch.roll(x, shifts=(dx, dy), dims=(2, 3))
    if flip and bool(torch.rand((), generator=generator) < 0.5):
        x = x.flip(3)
    return x


def resolve_pool_augment(cfg_value: str, augment: bool, in_channels: int) -> str:
    """KD-time augmentation of pool images. DENSE's code: flip for MNIST/FMNIST/SVHN, crop+flip
    for CIFAR; ``"auto"`` approximates it by channels (RGB → crop+flip, grayscale → flip)."""
    if not augment:
        return "none"
    if cfg_value == "auto":
        return "crop_flip" if in_channels == 3 else "flip"
    return cfg_value


def keep_lowest(best_x: torch.Tensor | None, best_loss: torch.Tensor, x: torch.Tensor,
                loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The lower-loss of (``best_x``, ``best_loss``) and (``x``, ``loss``), without a host
    sync: the batch an epoch adds to the pool (Fed-ADI, Fed-DAFL's ``"pool"``)."""
    x, loss = x.detach(), loss.detach()
    best_x = x.clone() if best_x is None else torch.where(loss < best_loss, x, best_x)
    return best_x, torch.minimum(best_loss, loss)


__all__ = ["ImagePool", "augment_batch", "jitter_flip", "keep_lowest",
           "resolve_pool_augment"]
