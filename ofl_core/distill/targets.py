"""The teachers' distillation targets of a pool's images, computed once per image.

A distillation pass over the pool (DENSE Eq. 6 in DENSE's code, Fed-ADI, Fed-DAFL's ``"pool"``,
Co-Boosting's ensemble-weight step) asks the frozen teachers about the same images every epoch:
the pool grows by one batch an epoch and every pass visits all of it, so over T epochs the
teachers see about T²/2 batches where T would do, and at the papers' 200 epochs their forwards
are a large part of the distillation stage. A teacher's output is a fixed function of each image
(frozen weights, eval mode, no randomness), and on the CPU an image's output does not depend on
the other images of its batch: :class:`PoolTargets` computes each image's target once, when it
joins the pool, and once more for its mirror image when the pass flips images at random (DENSE's
code on grayscale data), and the pass reads them instead of running the teachers. The pass draws
the same random numbers in the same order (the shuffle, then each batch's flips), so the student
sees the same batches and the same targets: bit for bit on the CPU
(``tests/test_pool_targets.py``: the zoo's classifiers under bfloat16 autocast at any batch
size, in float32 for batches of 64 images or more; float32 batches of a few images choose other
matrix kernels and round differently, by about 1e-8). On a GPU the kernels may depend on the
batch size, so the targets are equal to the teachers' to float rounding. A crop augmentation
(DENSE's code on RGB data) has too many variants of an image to keep: such a pass runs the
teachers as before (:func:`cacheable`). The kept targets take pool size × classes floats (twice
under flips; Co-Boosting keeps each client's logits: × clients), e.g. 2 MB for DENSE's 51,200
images of 10 classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from .pool import ImagePool

#: KD-time augmentations whose variants of an image can be kept (see :func:`cacheable`)
CACHEABLE = ("none", "flip")


def cacheable(augment: str) -> bool:
    """Whether a pass with KD-time augmentation ``augment`` can read kept targets: none, or a
    random horizontal flip (two variants an image)."""
    return augment in CACHEABLE


def random_flip(x: torch.Tensor, generator: torch.Generator | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` with each image flipped horizontally with probability 1/2, and the mask: the
    draws and the arithmetic of ``augment_batch(x, "flip", generator)``."""
    mask = torch.rand(len(x), generator=generator, device="cpu").to(x.device) < 0.5
    return torch.where(mask[:, None, None, None], x.flip(-1), x), mask


class PoolTargets:
    """The targets ``target(x)`` of every image of a pool (and of its mirror image when
    ``augment="flip"``), computed ``chunk`` images at a time as they join; :meth:`batches`
    is one shuffled pass over the pool as ``pool.batches`` + ``augment_batch`` draw it, each
    batch with its targets. A pool that shrinks (a checkpoint loaded into it) is computed
    again from the start."""

    def __init__(self, target: Callable[[torch.Tensor], torch.Tensor], augment: str,
                 chunk: int) -> None:
        if not cacheable(augment):
            raise ValueError(f"PoolTargets: the augmentation {augment!r} has too many variants "
                             f"of an image to keep (only {', '.join(CACHEABLE)})")
        if chunk < 1:
            raise ValueError(f"PoolTargets: chunk must be at least 1 (got {chunk})")
        self.target, self.flip, self.chunk = target, augment == "flip", chunk
        self._plain: list[torch.Tensor] = []
        self._mirror: list[torch.Tensor] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def update(self, pool: ImagePool) -> None:
        """Compute the targets of the images that joined ``pool`` since the last update."""
        n = len(pool)
        if n < self._n:
            self._plain, self._mirror, self._n = [], [], 0
        for start in range(self._n, n, self.chunk):
            x = pool.images(torch.arange(start, min(start + self.chunk, n)))
            self._plain.append(self.target(x))
            if self.flip:
                self._mirror.append(self.target(x.flip(-1)))
        self._n = n
        self._plain = [torch.cat(self._plain)] if len(self._plain) > 1 else self._plain
        self._mirror = [torch.cat(self._mirror)] if len(self._mirror) > 1 else self._mirror

    def batches(self, pool: ImagePool, batch_size: int, generator: torch.Generator | None
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """One shuffled pass: (images, after the flips when ``augment="flip"``; their targets;
        their pool indices, e.g. for the pool's labels)."""
        self.update(pool)
        for idx in pool.index_batches(batch_size, generator):
            x, t = pool.images(idx), self._plain[0][idx]
            if self.flip:
                x, mask = random_flip(x, generator)
                t = torch.where(mask.view(-1, *([1] * (t.dim() - 1))), self._mirror[0][idx], t)
            yield x, t, idx


__all__ = ["CACHEABLE", "PoolTargets", "cacheable", "random_flip"]
