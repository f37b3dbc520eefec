"""The teacher ensemble D(x) as a "method": its accuracy is the reference that distillation
methods try to reach (SPEC §4, "Ensemble (teacher) accuracy is always reported too")."""

from __future__ import annotations

from dataclasses import dataclass

from ..clients import ClientUpload, build_from_upload
from ..combine import Ensemble
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..validation import check_config


@dataclass(frozen=True)
class EnsembleConfig:
    """Mean of logits, D(x) = (1/m) Σ_k f_k(x) (DENSE Eq. 1), in both presets."""

    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def for_preset(cls, preset: str = "paper") -> EnsembleConfig:
        return cls(preset=preset)


def run(uploads: list[ClientUpload], cfg: EnsembleConfig, ctx: ServerContext) -> ServerResult:
    models = [build_from_upload(u, ctx.device) for u in uploads]
    return ServerResult(method="ensemble", preset=cfg.preset,
                        model=Ensemble(models, combine="mean_logits"))


SPEC = MethodSpec(
    "ensemble", EnsembleConfig, run,
    MethodKind(
        "DENSE Eq. 1 (reference)", True, 1, "none: mean of the clients' logits", MODEL, "nothing",
        "m client models (ensemble)"
    ),
)
