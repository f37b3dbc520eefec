"""FedOneShot (Guha et al. 2019, FedCVAE's baseline): the ensemble of all client classifiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..clients import ClientUpload, build_from_upload
from ..combine import Ensemble
from ..presets import check_preset
from ..validation import check_config
from .base import ServerContext, ServerResult


@dataclass(frozen=True)
class FedOneShotConfig:
    """``combine="mean_softmax"``: the paper "ensembles the predictions" (mean of softmax).
    ⚑ ``preset="authors_code"``: FedCVAE's code takes a hard majority vote (ties → lowest
    class)."""

    combine: Literal["mean_softmax", "vote", "mean_logits"] = "mean_softmax"
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def for_preset(cls, preset: str = "paper") -> FedOneShotConfig:
        check_preset(preset)
        return cls(combine="mean_softmax" if preset == "paper" else "vote", preset=preset)


def run(uploads: list[ClientUpload], cfg: FedOneShotConfig, ctx: ServerContext) -> ServerResult:
    """Combine the (validated, frozen) client models; works for heterogeneous clients too."""
    models = [build_from_upload(u, ctx.device) for u in uploads]
    return ServerResult(method="fedoneshot", preset=cfg.preset,
                        model=Ensemble(models, combine=cfg.combine))
