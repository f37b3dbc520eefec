"""FedAvg in one shot: the n_k/n-weighted parameter average (FedSyn Eq. 2; SPEC §4)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from ..presets import check_preset
from ..server import (
    MODEL,
    SHARED_INIT,
    MethodKind,
    MethodSpec,
    ServerContext,
    ServerResult,
    average_states,
    check_homogeneous,
)
from ..uploads import ClientUpload, build_from_upload, validate_upload
from ..validation import check_config


@dataclass(frozen=True)
class FedAvgConfig:
    """``weighted=True``: weights n_k/n (paper). ⚑ ``preset="authors_code"``: unweighted mean,
    as DENSE's (and Co-Boosting's) code does. BN running statistics are averaged like weights;
    integer buffers (``num_batches_tracked``) take the first client's value.

    ``aggregation`` (off by default: ``"mean"``, the papers' FedAvg): ``"median"`` takes the
    coordinate-wise median of the clients' floating-point tensors (Yin et al. 2018),
    ``"trimmed_mean"`` the coordinate-wise mean after dropping the ``trim_fraction`` largest
    and smallest values of each coordinate; both are unweighted, so that one client scaling
    its weights (or claiming many samples) cannot move the average far. Records say when it
    is on (``ResultRecord.aggregation``)."""

    weighted: bool = True
    preset: str = "paper"
    aggregation: Literal["mean", "median", "trimmed_mean"] = "mean"
    trim_fraction: float = 0.1

    #: fields left out of the record's config hash while at their defaults (so the hashes of
    #: records made before they existed stay the same)
    HASH_IF_SET: ClassVar[tuple[str, ...]] = ("aggregation", "trim_fraction")

    def __post_init__(self) -> None:
        check_config(self)
        if not 0 <= self.trim_fraction < 0.5:
            raise ValueError(f"FedAvgConfig.trim_fraction must be in [0, 0.5), got "
                             f"{self.trim_fraction}")

    @classmethod
    def for_preset(cls, preset: str = "paper") -> FedAvgConfig:
        check_preset(preset)
        return cls(weighted=preset == "paper", preset=preset)


def run(uploads: list[ClientUpload], cfg: FedAvgConfig, ctx: ServerContext) -> ServerResult:
    """Average the uploaded models into one global model (homogeneous clients only)."""
    check_homogeneous(uploads, "FedAvg")
    for u in uploads:
        validate_upload(u)
    states = [u.state_dict for u in uploads]
    if cfg.aggregation == "mean":
        weights = [u.num_samples if cfg.weighted else 1.0 for u in uploads]
        state = average_states(states, weights)
    else:
        state = robust_average(states, cfg.aggregation, cfg.trim_fraction)
    model = build_from_upload(
        ClientUpload(**{**uploads[0].__dict__, "state_dict": state, "client_id": -1}), ctx.device
    )
    return ServerResult(method="fedavg", preset=cfg.preset, model=model)


def robust_average(states: list[dict[str, torch.Tensor]], how: str,
                   trim_fraction: float = 0.1) -> dict[str, torch.Tensor]:
    """The coordinate-wise ``"median"`` or ``"trimmed_mean"`` of the states' floating-point
    tensors (unweighted); integer buffers from the first state."""
    m = len(states)
    k = math.floor(trim_fraction * m) if how == "trimmed_mean" else 0
    out = {}
    for name, v in states[0].items():
        if not v.is_floating_point():
            out[name] = v.clone()
            continue
        stacked = torch.stack([s[name].to(torch.float64) for s in states])
        if how == "median":
            agg = stacked.quantile(0.5, dim=0) if stacked.numel() else stacked.mean(0)
        else:
            agg = stacked.sort(dim=0).values[k:m - k].mean(0)
        out[name] = agg.to(v.dtype)
    return out


SPEC = MethodSpec(
    "fedavg", FedAvgConfig, run,
    MethodKind(
        "McMahan et al. 2017", True, 1, "1: weighted parameter average", MODEL + ' + sample count',
        SHARED_INIT, "one model"
    ),
    homogeneous=True,
)
