"""FedCVAE experiments on the shared orchestration (:mod:`ofl_core.experiment`).

:func:`~ofl_core.experiment.setup_experiment` trains classifier clients; FedCVAE's clients
train CVAEs and upload decoders plus label counts (:mod:`ofl_core.fedcvae_clients`). This module
gives the notebooks one call per FedCVAE experiment, still through
:func:`~ofl_core.experiment.run_methods` (same partition, same cached clients for every method):

- :func:`fedcvae_data_settings`: the image size and training subset FedCVAE uses per dataset
  (MNIST/FMNIST resized to 32 px and a seeded 50 % subset; SVHN at 100 %).
- :func:`setup_fedcvae_experiment`: a :class:`~ofl_core.experiment.Setup` whose uploads are
  decoders (``CVAETrainConfig``) or FedCVAE's McMahan-CNN baseline classifiers
  (``LocalTrainConfig``), optionally with the partition drawn from its own seed
  (``partition_seed``: FedCVAE Tables 1/2 vary the initialisation seed on one partition, Table 5
  varies the partition).
- :func:`run_fedcvae_experiment`: FedCVAE-Ens/-KD (decoder clients) and FedCVAE's FedAvg /
  FedOneShot baselines (classifier clients) on one partition; methods that need the same
  client training share one set of clients.
- :func:`run_security`: the security-shift experiment (Fig. 5) as result records.
- :func:`decode_classes`, :func:`client_decoder_samples`, :func:`server_decoder`: decoded
  sample grids (Figs. 7–8).

Decoder clients have no classifier, so the records of decoder-based methods carry no ensemble or
client accuracy (``None``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from . import __version__
from .clients import ClientUpload, LocalTrainConfig, build_from_upload, train_clients
from .combine import Ensemble
from .data.datasets import ImageDataset
from .data.partition import Partition, make_partition
from .evaluate import accuracy
from .experiment import (
    ExperimentConfig,
    Setup,
    _config_hash,
    _paper_partition,
    load_experiment_data,
    resolve_device,
    run_methods,
)
from .fedcvae_clients import (
    CVAETrainConfig,
    baseline_local_config,
    decoder_from_upload,
    train_cvae_clients,
)
from .methods.base import ServerResult
from .methods.fedcvae import (
    FedCVAEEnsConfig,
    LatentSampler,
    SecurityResult,
    security_experiment,
)
from .models.cvae import CVAE_VARIANTS, CVAEDecoder, build_decoder
from .results import ResultRecord
from .upload_cache import UploadCache

__all__ = [
    "DECODER_METHODS",
    "BASELINE_METHODS",
    "client_config",
    "client_decoder_samples",
    "decode_classes",
    "fedcvae_data_settings",
    "run_fedcvae_experiment",
    "run_security",
    "server_decoder",
    "setup_fedcvae_experiment",
]

#: FedCVAE methods whose clients upload decoders, with the CVAE they train (Table 4's d differs
#: between Ens and KD on FMNIST).
DECODER_METHODS: dict[str, str] = {
    "fedcvae-ens": "ens", "fedcvae-kd": "kd", "kd": "kd", "param-avg": "kd",
}
#: FedCVAE's classifier baselines (McMahan CNN clients, Adam, Tables 3/4).
BASELINE_METHODS: tuple[str, ...] = ("fedavg", "fedoneshot")

ClientConfig = CVAETrainConfig | LocalTrainConfig


def fedcvae_data_settings(dataset: str) -> dict[str, Any]:
    """``resize`` and ``subset`` for an :class:`ExperimentConfig` of a FedCVAE experiment:
    MNIST/FMNIST (and the embedded FMNIST subset) are resized to 32 px and use a seeded 50 %
    subset of the training set (FedCVAE §4.1); SVHN is 32 px already and uses all of it."""
    key = dataset.lower().replace("-", "").replace("_", "")
    if key.startswith(("mnist", "fmnist", "fashion")):
        return {"resize": 32, "subset": 0.5}
    if key.startswith("svhn"):
        return {"resize": None, "subset": 1.0}
    raise ValueError(f"FedCVAE's experiments use mnist, fmnist or svhn (got {dataset!r})")


def _drop_none(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (overrides or {}).items() if v is not None}


def client_config(method: str, dataset: str, preset: str = "paper",
                  cvae: Mapping[str, Any] | None = None,
                  local: Mapping[str, Any] | None = None) -> ClientConfig:
    """The client training a FedCVAE-table method needs, for ``dataset`` and ``preset``.

    FedCVAE-Ens/-KD (and Table 6's "kd"/"param-avg"): a :class:`CVAETrainConfig` (Table 4's d
    and T_L), updated with the ``cvae`` fields; FedAvg/FedOneShot: FedCVAE's McMahan-CNN local
    training (:func:`baseline_local_config`), updated with the ``local`` fields. ``None`` values
    in the overrides mean "the paper's value".
    """
    if method in DECODER_METHODS:
        return CVAETrainConfig.for_dataset(dataset, DECODER_METHODS[method], preset,  # type: ignore[arg-type]
                                           **_drop_none(cvae))
    if method in BASELINE_METHODS:
        base = baseline_local_config(dataset, method, preset)  # type: ignore[arg-type]
        upd = _drop_none(local)
        return dataclasses.replace(base, **upd) if upd else base
    raise ValueError(f"{method!r} is not a method of FedCVAE's tables; choose one of: "
                     f"{', '.join([*DECODER_METHODS, *BASELINE_METHODS])}")


def _partition(cfg: ExperimentConfig, ds: ImageDataset, partition_seed: int | None) -> Partition:
    return make_partition(
        ds.y_train.numpy(), cfg.num_clients, cfg.partition, alpha=cfg.alpha,
        seed=cfg.seed if partition_seed is None else partition_seed,
        classes_per_client=cfg.classes_per_client, subset=cfg.subset, num_classes=ds.num_classes,
    )


def setup_fedcvae_experiment(
    cfg: ExperimentConfig, clients: ClientConfig | Sequence[CVAETrainConfig], *,
    partition_seed: int | None = None, dataset: ImageDataset | None = None,
) -> Setup:
    """Load data, partition it and train (or load from cache) every client of a FedCVAE table.

    ``clients``: a :class:`CVAETrainConfig` (or one per client: heterogeneous CVAEs) gives
    decoder uploads; the setup's client and ensemble accuracies are NaN (no classifiers). A
    :class:`LocalTrainConfig` gives classifier uploads exactly as
    :func:`~ofl_core.experiment.setup_experiment` does. ``cfg.seed`` seeds client training and
    the server; the partition uses ``partition_seed`` when given, else ``cfg.seed``.
    """
    device = resolve_device(cfg.device)
    ds = dataset if dataset is not None else load_experiment_data(cfg)
    part = _partition(cfg, ds, partition_seed)
    cache = UploadCache(cfg.cache_dir)
    if isinstance(clients, LocalTrainConfig):
        uploads = train_clients(ds, part, clients, cfg.seed, cache=cache, device=device,
                                workers=cfg.workers, progress=cfg.progress)
        models = [build_from_upload(u, device) for u in uploads]
        client_accs = [accuracy(mdl, ds.x_test, ds.y_test, device=device) for mdl in models]
        ens_acc = accuracy(Ensemble(models), ds.x_test, ds.y_test, device=device)
    else:
        uploads = train_cvae_clients(ds, part, clients, cfg.seed, cache=cache, device=device,
                                     workers=cfg.workers, progress=cfg.progress)
        client_accs, ens_acc = [math.nan], math.nan
    return Setup(cfg=cfg, dataset=ds, partition=part, uploads=uploads, client_accs=client_accs,
                 ensemble_acc=ens_acc, device=device)


def _nan_to_none(rec: ResultRecord) -> ResultRecord:
    def fix(v: float | None) -> float | None:
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    return dataclasses.replace(rec, ensemble_acc=fix(rec.ensemble_acc),  # type: ignore[arg-type]
                               best_client_acc=fix(rec.best_client_acc),
                               mean_client_acc=fix(rec.mean_client_acc))


def run_fedcvae_experiment(
    cfg: ExperimentConfig, methods: Mapping[str, Any] | Sequence[tuple[str, Any]], *,
    cvae: Mapping[str, Any] | None = None, local: Mapping[str, Any] | None = None,
    partition_seed: int | None = None, dataset: ImageDataset | None = None,
) -> tuple[list[ResultRecord], dict[str, ServerResult], dict[str, Setup]]:
    """Run FedCVAE-table methods on one partition; return records, results and setups.

    Each method's clients come from :func:`client_config` (``cvae``/``local`` field overrides,
    e.g. ``{"epochs": 3}`` for a quick run; the method config's ``preset`` picks the clients'
    preset). Methods whose client configs are equal share one :class:`Setup` (and so the same
    clients); all setups share the partition. Results and setups are keyed by method name (or
    ``"<name>/<preset>"`` when a name repeats). Records of decoder-based methods carry
    ``ensemble_acc = None`` (no client classifiers to ensemble).
    """
    pairs = list(methods.items()) if isinstance(methods, Mapping) else list(methods)
    names = [n for n, _ in pairs]
    keys = [n if names.count(n) == 1 else f"{n}/{getattr(c, 'preset', '')}" for n, c in pairs]
    ds = dataset if dataset is not None else load_experiment_data(cfg)
    groups: dict[ClientConfig, list[int]] = {}
    for i, (name, mcfg) in enumerate(pairs):
        ccfg = client_config(name, cfg.dataset, getattr(mcfg, "preset", "paper"), cvae, local)
        groups.setdefault(ccfg, []).append(i)
    by_index: dict[int, tuple[ResultRecord, ServerResult, Setup]] = {}
    for ccfg, idx in groups.items():
        setup = setup_fedcvae_experiment(cfg, ccfg, partition_seed=partition_seed, dataset=ds)
        recs, res = run_methods(setup, [pairs[i] for i in idx])
        for i, rec, r in zip(idx, recs, res.values(), strict=True):
            by_index[i] = (_nan_to_none(rec), r, setup)
    order = range(len(pairs))
    return ([by_index[i][0] for i in order], {keys[i]: by_index[i][1] for i in order},
            {keys[i]: by_index[i][2] for i in order})


def run_security(
    setup: Setup, mu: Sequence[float] | None, bounds: Sequence[float] = (1.0, 10.0, 100.0, 1000.0),
    cfg: FedCVAEEnsConfig | None = None, *, preset: str = "paper", table: str = "Fig5",
) -> tuple[list[ResultRecord], SecurityResult]:
    """FedCVAE Fig. 5 on a decoder setup (clients trained with prior N(μ, I)) as records.

    Calls :func:`ofl_core.methods.fedcvae.security_experiment`; one record for the legitimate
    server (method ``"fedcvae-ens-server"``, empty setting: it samples around μ whatever b) and
    one per bound (``"fedcvae-ens-attacker"``, setting ``"b=<b>"``). ``preset`` labels the
    variant ("paper": secret shifted μ; "authors_code": μ = 0). The call's wall time is split
    evenly over the records. Records carry ``paper="fedcvae"`` and ``table`` (default "Fig5").
    """
    ens = cfg if cfg is not None else FedCVAEEnsConfig()
    t0 = time.perf_counter()
    res = security_experiment(setup.uploads, mu, bounds, ctx=setup.context(), cfg=ens)
    wall = (time.perf_counter() - t0) / (1 + len(bounds))
    c = setup.cfg
    mu_key = None if mu is None else [round(float(v), 6) for v in mu]

    def rec(method: str, acc: float, best: float, setting: str) -> ResultRecord:
        blob = json.dumps({"exp": _config_hash(c, ens), "mu": mu_key, "setting": setting,
                           "method": method}, sort_keys=True)
        return ResultRecord(
            experiment=c.experiment, paper="fedcvae", table=table,
            dataset=setup.dataset.paper_dataset, partition=_paper_partition(c),
            alpha=c.alpha if c.partition.startswith("dirichlet") else None,
            num_clients=c.num_clients, seed=c.seed, method=method, preset=preset,
            last_acc=round(float(acc), 4), best_acc=round(float(best), 4),
            ensemble_acc=None, wall_time_s=round(wall, 3),  # type: ignore[arg-type]
            config_hash=hashlib.sha256(blob.encode()).hexdigest()[:12], version=__version__,
            setting=setting, data_source=setup.dataset.name,
        )

    server = res.server
    best = server.best_acc if server is not None and server.best_acc is not None else None
    records = [rec("fedcvae-ens-server", res.server_acc,
                   max(res.server_acc, best) if best is not None else res.server_acc, "")]
    records += [rec("fedcvae-ens-attacker", a, a, f"b={b:g}") for b, a in res.attacker_acc.items()]
    return records, res


# --------------------------------------------------------------------------------------------
# decoded samples (Figs. 7–8)


@torch.no_grad()
def decode_classes(decoder: CVAEDecoder, per_class: int, sampler: LatentSampler, seed: int,
                   classes: Sequence[int] | None = None, device: str = "cpu") -> torch.Tensor:
    """``per_class`` images of each class from one decoder, z from ``sampler`` (e.g.
    :func:`~ofl_core.methods.fedcvae.truncated_sampler` or
    :func:`~ofl_core.methods.fedcvae.uniform_sampler`); float (n, C, H, W) in [0, 1] on the CPU,
    sample-major (row i of a grid with one column per class holds sample i of every class)."""
    cls = list(range(decoder.num_classes)) if classes is None else list(classes)
    gen = torch.Generator().manual_seed(int(seed))
    y = torch.as_tensor(cls, device=device).repeat(per_class)
    z = sampler(len(y), decoder.latent_dim, gen).to(device)
    decoder.eval()
    return torch.sigmoid(decoder.to(device)(z, y)).cpu()


def client_decoder_samples(uploads: Sequence[ClientUpload], per_class: int,
                           sampler: LatentSampler, seed: int, device: str = "cpu"
                           ) -> torch.Tensor:
    """``per_class`` images of each class, each class decoded by the client decoder that holds
    the most samples of it (the uploaded label counts); sample-major like
    :func:`decode_classes`."""
    if not uploads:
        raise ValueError("no client uploads")
    C = uploads[0].num_classes
    decoders = [decoder_from_upload(u, device) for u in uploads]
    owner = [max(range(len(uploads)), key=lambda k, c=c: (uploads[k].label_counts or (0,) * C)[c])
             for c in range(C)]
    cols = [decode_classes(decoders[owner[c]], per_class, sampler, seed + c, [c], device)
            for c in range(C)]
    # cols[c] holds per_class samples of class c; interleave to sample-major order
    return torch.stack(cols, dim=1).flatten(0, 1)


def server_decoder(result: ServerResult, uploads: Sequence[ClientUpload],
                   device: str = "cpu") -> CVAEDecoder:
    """The aggregated server decoder of a FedCVAE-KD (or decoder-averaging) result."""
    state = result.extras.get("server_decoder")
    if state is None:
        raise ValueError(f"{result.method}: the result holds no server decoder (only FedCVAE-KD "
                         "and decoder averaging build one)")
    u = uploads[0]
    d = int(u.model_kwargs["latent_dim"])
    for variant in (u.arch, *CVAE_VARIANTS):  # KD: the config's server_variant; avg: clients'
        dec = build_decoder(variant, u.num_classes, u.in_channels, u.image_size, d)
        if dec.state_dict().keys() == state.keys() and all(
                dec.state_dict()[k].shape == v.shape for k, v in state.items()):
            dec.load_state_dict(state)
            return dec.to(device).eval().requires_grad_(False)
    raise ValueError(f"{result.method}: the server decoder matches no CVAE variant")
