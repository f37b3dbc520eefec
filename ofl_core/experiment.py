"""The only orchestration: data → partition → clients (cached) → server methods → records.

Every method of an experiment sees the same partition and the same trained client uploads
(cached by a hash of everything that determines them), so a table's columns are comparable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from . import __version__
from .clients import ClientUpload, LocalTrainConfig, build_from_upload, train_clients
from .combine import Ensemble
from .data.datasets import ImageDataset, load_dataset
from .data.partition import SCHEMES, Partition, make_partition
from .evaluate import accuracy
from .methods import ServerContext, ServerResult, run_method
from .results import ResultRecord
from .upload_cache import UploadCache


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but no CUDA GPU is visible; use 'cpu' or 'auto'")
    return device


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: a dataset, a partition, the clients' local training, labels for tables.

    ``paper``/``table``/``setting`` only label the records so they can be matched with the
    papers' cells. ``resize`` rescales images once (FedCVAE uses 32 px for MNIST/FMNIST).
    ``archs``: one architecture per client (heterogeneous models; each client trains ``local``
    with its own ``arch``); None = every client uses ``local.arch``.
    ``cvae``: a :class:`ofl_core.fedcvae_clients.CVAETrainConfig` (or one per client) makes the
    clients FedCVAE clients that upload decoders + label counts instead of classifiers (then
    ``local`` is unused and there are no client/ensemble accuracies: NaN).
    """

    dataset: str = "fmnist_embedded"
    partition: str = "dirichlet"
    alpha: float | None = 0.1
    num_clients: int = 5
    seed: int = 1
    subset: float = 1.0
    classes_per_client: int = 2
    resize: int | None = None
    local: LocalTrainConfig = field(default_factory=LocalTrainConfig)
    archs: tuple[str, ...] | None = None
    cvae: Any = None
    data_root: str | None = None
    cache_dir: str | None = None
    device: str = "cpu"
    workers: int | str = "auto"
    experiment: str = ""
    paper: str = ""
    table: str = ""
    setting: str = ""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.partition not in SCHEMES:
            raise ValueError(
                f"partition: unknown scheme {self.partition!r}; choose one of: {', '.join(SCHEMES)}"
            )
        if self.partition.startswith("dirichlet") and (self.alpha is None or not self.alpha > 0):
            raise ValueError(
                f"alpha must be > 0 for the {self.partition!r} partition (got {self.alpha})"
            )
        if self.num_clients < 1:
            raise ValueError(f"num_clients must be ≥ 1 (got {self.num_clients})")
        if self.archs is not None:
            object.__setattr__(self, "archs", tuple(self.archs))
            if len(self.archs) != self.num_clients:
                raise ValueError(f"archs gives {len(self.archs)} architectures for "
                                 f"{self.num_clients} clients; give one per client")
            from .models import MODEL_NAMES

            bad = [a for a in self.archs if a not in MODEL_NAMES]
            if bad:
                raise ValueError(f"archs: unknown model(s) {bad}; known: {', '.join(MODEL_NAMES)}")

    def client_configs(self) -> LocalTrainConfig | list[LocalTrainConfig]:
        """``local``, or one copy of it per client with that client's ``archs`` entry
        (heterogeneous clients: DENSE Table 2, FedHydra Tables 3, 6, 7)."""
        if self.archs is None:
            return self.local
        return [dataclasses.replace(self.local, arch=a) for a in self.archs]

    def hash(self) -> str:
        d = dataclasses.asdict(self)
        for k in ("device", "workers", "progress", "cache_dir", "data_root"):
            d.pop(k)
        if d["archs"] is None:  # homogeneous: the same hash as before ``archs`` existed
            d.pop("archs")
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass(eq=False)
class Setup:
    """What every method of an experiment shares: data, partition, uploads, client accuracies."""

    cfg: ExperimentConfig
    dataset: ImageDataset
    partition: Partition
    uploads: list[ClientUpload]
    client_accs: list[float]
    ensemble_acc: float
    device: str

    def context(self, seed: int | None = None) -> ServerContext:
        ds = self.dataset

        def evaluate(model: torch.nn.Module) -> float:
            return accuracy(model, ds.x_test, ds.y_test, device=self.device)

        return ServerContext(
            num_classes=ds.num_classes, in_channels=ds.channels, image_size=ds.image_size,
            seed=self.cfg.seed if seed is None else seed, device=self.device,
            evaluate=evaluate, progress=self.cfg.progress,
        )


def load_experiment_data(cfg: ExperimentConfig) -> ImageDataset:
    return load_dataset(cfg.dataset, cfg.data_root, resize=cfg.resize)


def setup_experiment(cfg: ExperimentConfig, dataset: ImageDataset | None = None) -> Setup:
    """Load data, partition it and train (or load from cache) every client."""
    device = resolve_device(cfg.device)
    ds = dataset if dataset is not None else load_experiment_data(cfg)
    part = make_partition(
        ds.y_train.numpy(), cfg.num_clients, cfg.partition, alpha=cfg.alpha, seed=cfg.seed,
        classes_per_client=cfg.classes_per_client, subset=cfg.subset,
        num_classes=ds.num_classes,
    )
    cache = UploadCache(cfg.cache_dir)
    if cfg.cvae is not None:
        from .fedcvae_clients import train_cvae_clients

        uploads = train_cvae_clients(ds, part, cfg.cvae, cfg.seed, cache=cache, device=device,
                                     workers=cfg.workers, progress=cfg.progress)
        return Setup(cfg=cfg, dataset=ds, partition=part, uploads=uploads, client_accs=[],
                     ensemble_acc=float("nan"), device=device)
    uploads = train_clients(ds, part, cfg.client_configs(), cfg.seed, cache=cache, device=device,
                            workers=cfg.workers, progress=cfg.progress)
    models = [build_from_upload(u, device) for u in uploads]
    client_accs = [accuracy(mdl, ds.x_test, ds.y_test, device=device) for mdl in models]
    ens_acc = accuracy(Ensemble(models), ds.x_test, ds.y_test, device=device)
    return Setup(cfg=cfg, dataset=ds, partition=part, uploads=uploads, client_accs=client_accs,
                 ensemble_acc=ens_acc, device=device)


def run_methods(
    setup: Setup, methods: Mapping[str, Any] | Sequence[tuple[str, Any]]
) -> tuple[list[ResultRecord], dict[str, ServerResult]]:
    """Run each server method (name → config, or (name, config) pairs to run one method under
    several configs) on the shared uploads; return the records and the results keyed by
    ``"<name>"`` (or ``"<name>/<preset>"`` when a name repeats)."""
    records, results = [], {}
    cfg = setup.cfg
    pairs = list(methods.items()) if isinstance(methods, Mapping) else list(methods)
    names = [n for n, _ in pairs]
    for name, mcfg in pairs:
        ctx = setup.context()
        t0 = time.perf_counter()
        res = run_method(name, setup.uploads, mcfg, ctx)
        wall = time.perf_counter() - t0
        if res.last_acc is None:
            res.last_acc = ctx.evaluate(res.model)
        if res.best_acc is None:
            res.best_acc = max([res.last_acc, *res.curve])
        key = name if names.count(name) == 1 else f"{name}/{getattr(mcfg, 'preset', '')}"
        results[key] = res
        records.append(ResultRecord(
            experiment=cfg.experiment, paper=cfg.paper, table=cfg.table,
            dataset=setup.dataset.paper_dataset, partition=_paper_partition(cfg),
            alpha=cfg.alpha if cfg.partition.startswith("dirichlet") else None,
            num_clients=cfg.num_clients, seed=cfg.seed, method=res.method,
            preset=getattr(mcfg, "preset", "paper"),
            last_acc=round(float(res.last_acc), 4), best_acc=round(float(res.best_acc), 4),
            ensemble_acc=round(setup.ensemble_acc, 4), wall_time_s=round(wall, 3),
            config_hash=_config_hash(cfg, mcfg), version=__version__, setting=cfg.setting,
            data_source=setup.dataset.name,
            best_client_acc=round(max(setup.client_accs), 4) if setup.client_accs else None,
            mean_client_acc=(round(sum(setup.client_accs) / len(setup.client_accs), 4)
                             if setup.client_accs else None),
        ))
    return records, results


def run_experiment(
    cfg: ExperimentConfig, methods: Mapping[str, Any] | Sequence[tuple[str, Any]]
) -> tuple[list[ResultRecord], dict[str, ServerResult], Setup]:
    """Set up an experiment and run the given methods on it."""
    setup = setup_experiment(cfg)
    records, results = run_methods(setup, methods)
    return records, results, setup


def _paper_partition(cfg: ExperimentConfig) -> str:
    if cfg.partition == "classes_per_client":
        return f"{cfg.classes_per_client}c/c"
    return "dirichlet" if cfg.partition.startswith("dirichlet") else cfg.partition


def _config_hash(cfg: ExperimentConfig, mcfg: Any) -> str:
    blob = json.dumps({"exp": cfg.hash(), "method": dataclasses.asdict(mcfg)}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def configure_methods(
    names: Sequence[str],
    presets: Sequence[str] = ("paper",),
    common: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[tuple[str, Any]]:
    """(name, config) pairs for every method × preset, as notebooks take them from parameters.

    ``common`` fields (e.g. ``{"epochs": 20}`` for a quick server) are applied to every config
    that has such a field; ``overrides[name]`` fields to that method only (unknown fields there
    are an error, naming the method's fields).
    """
    from .methods import method_config

    out = []
    for name in names:
        for preset in presets:
            cfg = method_config(name, preset)
            fields = {f.name for f in dataclasses.fields(cfg)}
            upd = {k: v for k, v in (common or {}).items() if k in fields}
            cfg = dataclasses.replace(cfg, **upd) if upd else cfg
            own = dict((overrides or {}).get(name, {}))
            if own:
                cfg = method_config(name, preset, **{**upd, **own})
            out.append((name, cfg))
    return out
