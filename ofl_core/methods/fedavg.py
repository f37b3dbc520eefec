"""FedAvg in one shot: the n_k/n-weighted parameter average (FedSyn Eq. 2; SPEC §4)."""

from __future__ import annotations

from dataclasses import dataclass

from ..clients import ClientUpload, build_from_upload, validate_upload
from ..presets import check_preset
from ..server import (
    MODEL,
    MethodKind,
    MethodSpec,
    ServerContext,
    ServerResult,
    average_states,
    check_homogeneous,
)
from ..validation import check_config


@dataclass(frozen=True)
class FedAvgConfig:
    """``weighted=True``: weights n_k/n (paper). ⚑ ``preset="authors_code"``: unweighted mean,
    as DENSE's (and Co-Boosting's) code does. BN running statistics are averaged like weights;
    integer buffers (``num_batches_tracked``) take the first client's value."""

    weighted: bool = True
    preset: str = "paper"

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def for_preset(cls, preset: str = "paper") -> FedAvgConfig:
        check_preset(preset)
        return cls(weighted=preset == "paper", preset=preset)


def run(uploads: list[ClientUpload], cfg: FedAvgConfig, ctx: ServerContext) -> ServerResult:
    """Average the uploaded models into one global model (homogeneous clients only)."""
    check_homogeneous(uploads, "FedAvg")
    for u in uploads:
        validate_upload(u)
    weights = [u.num_samples if cfg.weighted else 1.0 for u in uploads]
    state = average_states([u.state_dict for u in uploads], weights)
    model = build_from_upload(
        ClientUpload(**{**uploads[0].__dict__, "state_dict": state, "client_id": -1}), ctx.device
    )
    return ServerResult(method="fedavg", preset=cfg.preset, model=model)


SPEC = MethodSpec(
    "fedavg", FedAvgConfig, run,
    MethodKind(
        "McMahan et al. 2017", True, 1, "1: weighted parameter average", MODEL + ' + sample count',
        "one shared initialisation", "one model"
    ),
    homogeneous=True,
)
