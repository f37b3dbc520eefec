"""The teacher ensemble D(x) as a "method": its accuracy is the reference that distillation
methods try to reach (SPEC §4, "Ensemble (teacher) accuracy is always reported too")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..combine import Ensemble
from ..server import MODEL, MethodKind, MethodSpec, ServerContext, ServerResult
from ..uploads import ClientUpload, build_from_upload
from ..validation import check_config


@dataclass(frozen=True)
class EnsembleConfig:
    """Mean of logits, D(x) = (1/m) Σ_k f_k(x) (DENSE Eq. 1), in both presets.

    ``normalize_logits`` (off by default): each client's logits are standardised per sample
    before the mean (:class:`~ofl_core.combine.Ensemble`), so one client scaling its head
    cannot decide the prediction; records name it when on (``ResultRecord.aggregation``)."""

    preset: str = "paper"
    normalize_logits: bool = False

    #: left out of the record's config hash while at its default (earlier hashes stay)
    HASH_IF_SET: ClassVar[tuple[str, ...]] = ("normalize_logits",)

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def for_preset(cls, preset: str = "paper") -> EnsembleConfig:
        return cls(preset=preset)


def run(uploads: list[ClientUpload], cfg: EnsembleConfig, ctx: ServerContext) -> ServerResult:
    models = [build_from_upload(u, ctx.device) for u in uploads]
    return ServerResult(method="ensemble", preset=cfg.preset,
                        model=Ensemble(models, combine="mean_logits",
                                       normalize_logits=cfg.normalize_logits))


SPEC = MethodSpec(
    "ensemble", EnsembleConfig, run,
    MethodKind(
        "DENSE Eq. 1 (reference)", True, 1, "none: mean of the clients' logits", MODEL, "nothing",
        "m client models (ensemble)"
    ),
)
