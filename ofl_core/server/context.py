"""What every server method receives and returns (DESIGN "Interfaces").

A server method is ``run(uploads, cfg, ctx) -> ServerResult``. :class:`ServerContext` carries
what a server legitimately has: device, seed, the data's shape and class count, an evaluation
callback on the test set (for accuracy curves), whether to show progress and where to keep its
checkpoints. It never carries client data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..validation import (
    COUNT,
    NONNEG,
    check_config,
    check_device,
    describe,
    matches,
    shown,
    within,
)

#: a server's seed: a derived 63-bit seed (:func:`~ofl_core.seeds.derive_seed`) or an
#: experiment's own
SERVER_SEED = within(0, 2**63 - 1)


@dataclass(frozen=True)
class ServerContext:
    """The task's shape, the seed and the device, and how the run is observed and kept.

    Checkpoints (:mod:`ofl_core.checkpoint`; never part of a result or its config hash): a
    server with epochs writes its whole state to ``<cache_dir>/servers`` after every
    ``checkpoint_every``-th epoch and after the last one, and resumes from it when run again;
    off without a ``cache_dir`` or with ``checkpoint_every=0``. ``eval_key`` names what
    ``evaluate`` measures (e.g. the test set's name and content hash): it is part of the
    checkpoint's key, since the stored test curve depends on it. ``dataset``: the task's
    dataset name (``ImageDataset.name``, e.g. ``"fmnist"`` or ``"fmnist@32"``; ``""`` when not
    known), for a method whose authors' code picks a convention per dataset.
    """

    num_classes: int
    in_channels: int
    image_size: int
    seed: int = 0
    device: str = "cpu"
    evaluate: Callable[[nn.Module], float] | None = None
    progress: bool = True
    cache_dir: str | os.PathLike | None = None
    checkpoint_every: int = 5
    eval_key: str = ""
    dataset: str = ""

    def __post_init__(self) -> None:
        v = self.checkpoint_every
        if not matches(int, v, NONNEG):
            raise ValueError(f"ServerContext.checkpoint_every must be {describe(int, NONNEG)} "
                             f"(epochs; 0 = off), got {shown(v)} ({type(v).__name__})")
        check_config(self, {"num_classes": COUNT, "in_channels": COUNT, "image_size": COUNT,
                            "seed": SERVER_SEED})
        check_device(self.device, "ServerContext.device")
        if self.device == "auto":
            raise ValueError("ServerContext.device must be the device to run on (cpu, cuda, "
                             "cuda:N or mps), not 'auto': resolve it first "
                             "(ofl_core.experiment.resolve_device)")


@dataclass(eq=False)
class ServerResult:
    """A server method's output: the global model (or combined scorer) and its test curve.

    ``curve`` holds the test accuracy after each server epoch where the method has epochs
    (empty otherwise); ``last_acc``/``best_acc`` are filled by the method when it evaluates,
    else by the experiment. ``images`` is a grid of synthetic samples for generator methods.
    """

    method: str
    preset: str
    model: nn.Module
    curve: list[float] = field(default_factory=list)
    last_acc: float | None = None
    best_acc: float | None = None
    images: torch.Tensor | None = None
    extras: dict = field(default_factory=dict)


def check_homogeneous(uploads: list, method: str) -> str:
    """Return the common architecture or raise a clear error for mixed architectures."""
    if not uploads:
        raise ValueError(f"{method}: no client uploads")
    archs = sorted({u.arch for u in uploads})
    if len(archs) > 1:
        raise ValueError(
            f"{method} averages parameters and needs every client to use the same architecture, "
            f"but the uploads mix {archs}; use a distillation method (e.g. DENSE, FedDF) for "
            "heterogeneous clients"
        )
    norms = sorted({u.model_kwargs.get("input_norm", "none") for u in uploads})
    if len(norms) > 1:
        raise ValueError(f"{method} averages parameters, but the uploads' models normalise their "
                         f"inputs differently (input_norm {norms}): an average of them computes "
                         "no client's function")
    return archs[0]
