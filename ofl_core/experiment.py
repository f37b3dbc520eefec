"""One experiment: data → partition → clients (cached) → server methods → records.

Every method of an experiment sees the same partition and the same trained client uploads
(cached by a hash of everything that determines them), so a table's columns are comparable.
:func:`setup_experiment` is the one set-up for every client kind (classifiers, FedCVAE
decoders); :meth:`Setup.record` the one place a result becomes a
:class:`~ofl_core.results.ResultRecord`. Paper tables are declared on top of this in
:mod:`ofl_core.tables`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from . import __version__
from .checkpoint import digest
from .client_training import client_code_version, client_kind, train_clients
from .clients import LocalTrainConfig
from .data.datasets import ImageDataset, load_dataset
from .data.partition import SCHEMES, Partition, make_partition
from .evaluate import accuracy, client_accuracies
from .models import MODEL_NAMES
from .precision import precision_label, resolve_amp
from .presets import split_reading
from .registry import METHODS, method_config, method_spec, run_method
from .results import ResultRecord
from .server import ServerContext, ServerResult
from .upload_cache import UploadCache
from .uploads import ClientUpload
from .validation import COUNT, NONNEG, SEED, check_config, check_device, within


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    check_device(device)
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
    FedCVAE's decoder clients are set up by passing their ``CVAETrainConfig`` to
    :func:`setup_experiment` (``clients=``). ``checkpoint_every``: the servers write a
    checkpoint to the client cache's folder (``<cache>/servers``) after every so many epochs
    and resume from it when run again (0 = off; :mod:`ofl_core.checkpoint`); like the cache
    folder, it never changes a result.
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
    data_root: str | os.PathLike | None = None
    cache_dir: str | os.PathLike | None = None
    device: str = "cpu"
    workers: int | Literal["auto"] = "auto"
    experiment: str = ""
    paper: str = ""
    table: str = ""
    setting: str = ""
    progress: bool = True
    checkpoint_every: int = 5

    def __post_init__(self) -> None:
        if self.archs is not None and not isinstance(self.archs, str):
            object.__setattr__(self, "archs", tuple(self.archs))
        check_config(self, {"num_clients": COUNT, "seed": SEED, "workers": COUNT,
                            "subset": within(0, 1, low_open=True), "classes_per_client": COUNT,
                            "resize": COUNT, "checkpoint_every": NONNEG})
        check_device(self.device, "ExperimentConfig.device")
        if self.partition not in SCHEMES:
            raise ValueError(
                f"partition: unknown scheme {self.partition!r}; choose one of: {', '.join(SCHEMES)}"
            )
        if self.partition.startswith("dirichlet") and (self.alpha is None or not self.alpha > 0):
            raise ValueError(
                f"alpha must be > 0 for the {self.partition!r} partition (got {self.alpha})"
            )
        if self.archs is not None:
            if len(self.archs) != self.num_clients:
                raise ValueError(f"archs gives {len(self.archs)} architectures for "
                                 f"{self.num_clients} clients; give one per client")
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
        # what the experiment computes, not where or how it runs nor how its records are labelled
        for k in ("device", "workers", "progress", "cache_dir", "data_root", "experiment",
                  "paper", "table", "setting", "checkpoint_every"):
            d.pop(k)
        if d["archs"] is None:  # homogeneous: the same hash as before ``archs`` existed
            d.pop("archs")
        d["local"] = self.local.key_fields()  # likewise for shared-init clients
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass(eq=False)
class Setup:
    """What every method of an experiment shares: data, partition, uploads, client accuracies.

    ``client_accs`` / ``ensemble_acc``: each client's test accuracy and the mean-logit
    ensemble's (DENSE Eq. 1); empty / None for decoder clients (FedCVAE), which have none.
    """

    cfg: ExperimentConfig
    dataset: ImageDataset
    partition: Partition
    uploads: list[ClientUpload]
    client_accs: list[float]
    ensemble_acc: float | None
    device: str
    local_amp: bool = False  # the clients trained under bfloat16 autocast
    client_code: str = ""  # the clients' training code version (client_code_version)

    def uploads_for(self, name: str, config: Any) -> list[ClientUpload]:
        """The uploads method ``name`` receives: the shared clients' uploads, after the
        method's own client step where it declares one (:class:`~ofl_core.server.MethodSpec`
        ``client_step``; computed on the clients' local data, on this setup's device)."""
        step = method_spec(name).client_step
        if step is None:
            return self.uploads
        return step(self.uploads, self.dataset, self.partition, config, self.device)

    def context(self, seed: int | None = None) -> ServerContext:
        ds = self.dataset

        def evaluate(model: torch.nn.Module) -> float:
            return accuracy(model, ds.x_test, ds.y_test, device=self.device)

        return ServerContext(
            num_classes=ds.num_classes, in_channels=ds.channels, image_size=ds.image_size,
            seed=self.cfg.seed if seed is None else seed, device=self.device,
            evaluate=evaluate, progress=self.cfg.progress, cache_dir=self.cache_root,
            checkpoint_every=self.cfg.checkpoint_every, eval_key=self.eval_key,
            dataset=ds.name,
        )

    @functools.cached_property
    def cache_root(self) -> Path:
        """The client cache's folder (server checkpoints go to its ``servers`` folder)."""
        return UploadCache(self.cfg.cache_dir).root

    @functools.cached_property
    def eval_key(self) -> str:
        """What the contexts' ``evaluate`` measures: the test set's name and content hash."""
        ds = self.dataset
        return f"{ds.name}:{digest((ds.x_test, ds.y_test))}"

    def record(
        self, method: str, config: Any, last_acc: float, best_acc: float, *,
        wall_time_s: float = 0.0, setting: str | None = None, preset: str | None = None,
        client_accs: Sequence[float] | None = None, ensemble_acc: float | None | str = "setup",
        hash_extra: Mapping[str, Any] | None = None, notes: Mapping[str, Any] | None = None,
    ) -> ResultRecord:
        """The one place a result becomes a :class:`ResultRecord` of this experiment.

        ``config`` is the method's (or client's) config, hashed with the experiment's into
        ``config_hash`` (with ``hash_extra`` when one config gives several records). Client and
        ensemble accuracies are the setup's unless given (multi-round: each round's own).
        ``notes``: the method's further measurements (:attr:`ResultRecord.notes`).
        """
        cfg = self.cfg
        accs = list(self.client_accs if client_accs is None else client_accs)
        ens = self.ensemble_acc if ensemble_acc == "setup" else ensemble_acc
        chash = config_hash(cfg, config)
        if hash_extra is not None:
            blob = json.dumps({"exp": chash, **hash_extra}, sort_keys=True)
            chash = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return ResultRecord(
            experiment=cfg.experiment, paper=cfg.paper, table=cfg.table,
            dataset=self.dataset.paper_dataset, partition=paper_partition(cfg),
            alpha=cfg.alpha if cfg.partition.startswith("dirichlet") else None,
            num_clients=cfg.num_clients, seed=cfg.seed, method=method,
            preset=getattr(config, "preset", "paper") if preset is None else preset,
            last_acc=round(float(last_acc), 4), best_acc=round(float(best_acc), 4),
            ensemble_acc=None if ens is None else round(float(ens), 4),  # type: ignore[arg-type]
            wall_time_s=round(wall_time_s, 3), config_hash=chash, version=__version__,
            setting=cfg.setting if setting is None else setting,
            data_source=self.dataset.name,
            best_client_acc=round(max(accs), 4) if accs else None,
            mean_client_acc=round(sum(accs) / len(accs), 4) if accs else None,
            precision=precision_label(self.local_amp,
                                      resolve_amp(getattr(config, "amp", False), self.device)),
            client_code=self.client_code,
            aggregation=robust_label(config),
            notes=dict(notes or {}),
        )


def load_experiment_data(cfg: ExperimentConfig) -> ImageDataset:
    return load_dataset(cfg.dataset, cfg.data_root, resize=cfg.resize)


def setup_experiment(
    cfg: ExperimentConfig, clients: Any = None, *, partition_seed: int | None = None,
    dataset: ImageDataset | None = None,
) -> Setup:
    """Load data, partition it and train (or load from cache) every client.

    ``clients``: the client training — a :class:`~ofl_core.clients.LocalTrainConfig` or a
    FedCVAE ``CVAETrainConfig``, or one per client; None = ``cfg.client_configs()``.
    ``cfg.seed`` seeds client training and the server; the partition uses ``partition_seed``
    when given (FedCVAE Tables 1/2 vary the initialisation seed on one partition), else
    ``cfg.seed``. Decoder clients have no test accuracy (``client_accs=[]``,
    ``ensemble_acc=None``).
    """
    device = resolve_device(cfg.device)
    ds = dataset if dataset is not None else load_experiment_data(cfg)
    part = make_partition(
        ds.y_train.numpy(), cfg.num_clients, cfg.partition, alpha=cfg.alpha,
        seed=cfg.seed if partition_seed is None else partition_seed,
        classes_per_client=cfg.classes_per_client, subset=cfg.subset,
        num_classes=ds.num_classes,
    )
    clients = cfg.client_configs() if clients is None else clients
    uploads = train_clients(ds, part, clients, cfg.seed, cache=UploadCache(cfg.cache_dir),
                            device=device, workers=cfg.workers, progress=cfg.progress)
    accs: list[float] = []
    ens: float | None = None
    if uploads[0].kind == "classifier":
        accs, ens = client_accuracies(uploads, ds, device)
    first = clients[0] if isinstance(clients, Sequence) else clients
    return Setup(cfg=cfg, dataset=ds, partition=part, uploads=uploads, client_accs=accs,
                 ensemble_acc=ens, device=device,
                 local_amp=resolve_amp(getattr(first, "amp", False), device),
                 client_code=client_code_version(client_kind(first))[1])


def method_key(name: str, config: Any, names: Sequence[str]) -> str:
    """``name``, or ``"<name>/<preset>"`` when the name repeats in ``names``."""
    return name if list(names).count(name) == 1 else f"{name}/{getattr(config, 'preset', '')}"


def run_one(setup: Setup, name: str, config: Any) -> tuple[ResultRecord, ServerResult]:
    """Run one server method on the setup's uploads; its record and result (the last/best
    accuracy filled from the test set when the method did not evaluate)."""
    ctx = setup.context()
    t0 = time.perf_counter()
    res = run_method(name, setup.uploads_for(name, config), config, ctx)
    wall = time.perf_counter() - t0 + float(res.extras.get("time_resumed_s", 0.0))
    if res.last_acc is None:
        res.last_acc = ctx.evaluate(res.model)
    if res.best_acc is None:
        res.best_acc = max([res.last_acc, *res.curve])
    notes = {k: res.extras[k] for k in method_spec(name).recorded if k in res.extras}
    return setup.record(res.method, config, res.last_acc, res.best_acc, wall_time_s=wall,
                        notes=notes), res


def run_methods(
    setup: Setup, methods: Mapping[str, Any] | Sequence[tuple[str, Any]]
) -> tuple[list[ResultRecord], dict[str, ServerResult]]:
    """Run each server method (name → config, or (name, config) pairs to run one method under
    several configs) on the shared uploads; return the records and the results keyed by
    :func:`method_key` (a key that repeats — one method and preset under two configs — gets
    ``#2``, ``#3``, … in the order of ``methods``)."""
    records, results = [], {}
    pairs = list(methods.items()) if isinstance(methods, Mapping) else list(methods)
    names = [n for n, _ in pairs]
    for name, mcfg in pairs:
        rec, res = run_one(setup, name, mcfg)
        key = base = method_key(name, mcfg, names)
        n = 1
        while key in results:
            n += 1
            key = f"{base}#{n}"
        results[key] = res
        records.append(rec)
    return records, results


def run_experiment(
    cfg: ExperimentConfig, methods: Mapping[str, Any] | Sequence[tuple[str, Any]]
) -> tuple[list[ResultRecord], dict[str, ServerResult], Setup]:
    """Set up an experiment and run the given methods on it (at least one: clients alone are
    :func:`setup_experiment`'s)."""
    if not methods:
        raise ValueError("run_experiment got no methods: give (name, config) pairs, e.g. "
                         "configure_methods(['fedavg', 'dense']); to train the clients alone, "
                         "call setup_experiment(cfg)")
    setup = setup_experiment(cfg)
    records, results = run_methods(setup, methods)
    return records, results, setup


def paper_partition(cfg: ExperimentConfig) -> str:
    """The partition as the papers' tables name it: ``dirichlet``, ``2c/c``, ``iid``."""
    if cfg.partition == "classes_per_client":
        return f"{cfg.classes_per_client}c/c"
    return "dirichlet" if cfg.partition.startswith("dirichlet") else cfg.partition


def robust_label(config: Any) -> str:
    """How a method's config aggregates robustly ("" for the papers' plain aggregation)."""
    if getattr(config, "normalize_logits", False):
        return "normalized_logits"
    how = getattr(config, "aggregation", "mean")
    if how == "mean":
        return ""
    trim = getattr(config, "trim_fraction", None)
    return f"{how}({trim:g})" if how == "trimmed_mean" and trim is not None else str(how)


def config_hash(cfg: ExperimentConfig, mcfg: Any) -> str:
    """A short hash of an experiment and one method's (or client's) config."""
    method = dataclasses.asdict(mcfg)
    for k in getattr(mcfg, "HASH_IF_SET", ()):  # new fields at their defaults: hashes as before
        f = next(f for f in dataclasses.fields(mcfg) if f.name == k)
        if method.get(k) == f.default:
            method.pop(k)
    blob = json.dumps({"exp": cfg.hash(), "method": method}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def configure_methods(
    names: Sequence[str],
    presets: Sequence[str] = ("paper",),
    common: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    method_presets: Mapping[str, Sequence[str]] | None = None,
) -> list[tuple[str, Any] | tuple[str, Any, str]]:
    """(name, config) pairs for every method × preset, as notebooks take them from parameters.

    ``common`` fields (e.g. ``{"epochs": 20}`` for a quick server; ``None`` values mean "each
    method's own value") are applied to every selected config that has such a field. A
    ``common`` key that no method of the registry has (a typo, or a renamed field such as the
    old ``g_steps``) is an error naming the selected methods and their fields; a key that only
    unselected methods have is a setting this run does not use (grids select subsets of a
    notebook's methods). ``overrides[name]`` fields apply to that method only (unknown fields
    there are an error). ``method_presets[name]``: that method's presets instead of
    ``presets`` (repeats dropped), e.g. FedAvg under both presets beside methods run under the
    paper's only, on the same clients. A preset may be a reading (:func:`~ofl_core.presets.
    split_reading`: ``"paper+kd_data=pool"``): the preset's config with those fields changed,
    its records labelled with the whole reading (a ``(name, config, label)`` triple).
    """
    unknown = sorted((set(names) | set(method_presets or {})) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from: {', '.join(METHODS)}")
    common = {k: v for k, v in (common or {}).items() if v is not None}
    stray = sorted(set(common) - set().union(*(_fields(m) for m in METHODS)))
    if stray:
        mine = sorted(set().union(*(_fields(m) for m in names)))
        raise ValueError(f"common setting(s) {stray} are fields of no method; the selected "
                         f"methods {list(names)} have: {mine}")
    out: list = []
    for name in names:
        for label in dict.fromkeys((method_presets or {}).get(name, presets)):
            preset, reading = split_reading(label)
            upd = {k: v for k, v in common.items() if k in _fields(name)}
            try:
                cfg = method_config(name, preset,
                                    **{**upd, **(overrides or {}).get(name, {}), **reading})
            except (TypeError, ValueError) as e:
                raise ValueError(f"{name} under {label!r}: {e}") from None
            out.append((name, cfg) if label == preset else (name, cfg, label))
    return out


def _fields(method: str) -> set[str]:
    return {f.name for f in dataclasses.fields(METHODS[method].config)}
