"""Server methods: each module has a ``<Name>Config`` (paper defaults + ``preset``) and
``run(uploads, cfg, ctx) -> ServerResult``. :data:`METHODS` maps a method name to both.
FedCVAE's, FedHydra's and Co-Boosting's servers live in their own packages
(:mod:`ofl_core.fedcvae.server`, :mod:`ofl_core.fedhydra.server`,
:mod:`ofl_core.coboosting.server`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..clients import check_upload_header
from ..coboosting import server as coboosting
from ..cpu_memory import large_blocks_from_heap
from ..fedcvae import server as fedcvae_server
from ..fedhydra import server as fedhydra
from . import adi, dafl, dense, ensemble, fedavg, feddf, fedoneshot, ot_fusion
from .base import ServerContext, ServerResult, check_homogeneous

#: method name -> (config class, run function)
METHODS: dict[str, tuple[type, Callable[..., ServerResult]]] = {
    "fedavg": (fedavg.FedAvgConfig, fedavg.run),
    "fedoneshot": (fedoneshot.FedOneShotConfig, fedoneshot.run),
    "ensemble": (ensemble.EnsembleConfig, ensemble.run),
    "fedcvae-ens": (fedcvae_server.FedCVAEEnsConfig, fedcvae_server.run_ens),
    "fedcvae-kd": (fedcvae_server.FedCVAEKDConfig, fedcvae_server.run_kd),
    "param-avg": (fedcvae_server.FedCVAEParamAvgConfig, fedcvae_server.run_param_avg),
    "kd": (fedcvae_server.FedCVAEKDConfig, fedcvae_server.run_kd_t6),
    "dense": (dense.DenseConfig, dense.run),
    "fed-dafl": (dafl.FedDAFLConfig, dafl.run),
    "fed-adi": (adi.FedADIConfig, adi.run),
    "feddf": (feddf.FedDFConfig, feddf.run),
    "fedhydra": (fedhydra.FedHydraConfig, fedhydra.run),
    "ot": (ot_fusion.OTFusionConfig, ot_fusion.run),
    "coboosting": (coboosting.CoBoostingConfig, coboosting.run),
}


def method_config(name: str, preset: str = "paper", **overrides: Any) -> Any:
    """The config of method ``name`` for ``preset``, with field overrides."""
    import dataclasses

    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}")
    cfg = METHODS[name][0].for_preset(preset)
    fields = {f.name for f in dataclasses.fields(cfg)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ValueError(f"{name}: unknown config field(s) {bad}; fields: {sorted(fields)}")
    return dataclasses.replace(cfg, **overrides) if overrides else cfg


def run_method(name: str, uploads: list, cfg: Any, ctx: ServerContext) -> ServerResult:
    """Run server method ``name``; on the CPU inside
    :func:`~ofl_core.cpu_memory.large_blocks_from_heap` (same values, fewer page faults)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}")
    for u in uploads:  # untrusted: the header against the task, before any model is built
        check_upload_header(u, ctx.num_classes, ctx.in_channels, ctx.image_size)
    with large_blocks_from_heap(enabled=torch.device(ctx.device).type == "cpu"):
        return METHODS[name][1](uploads, cfg, ctx)


__all__ = ["METHODS", "ServerContext", "ServerResult", "check_homogeneous", "method_config",
           "run_method"]
