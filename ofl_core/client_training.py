"""The one cached client-training driver, for every kind of client.

A client kind (:class:`ClientKind`) says what a client of that kind trains and uploads: a
classifier (:class:`~ofl_core.clients.LocalTrainConfig`, SPEC §3) or a FedCVAE decoder
(``CVAETrainConfig``, FedCVAE Alg. 3). :func:`train_clients` does the rest once for all kinds:
hold the clients' cache locks (concurrent tasks train shared clients once), read what the
content-addressed cache (:mod:`ofl_core.upload_cache`) has, train the missing clients — in
worker processes when the work repays their start-up — write each finished client to the cache
at once (an interrupted run loses at most the clients in progress), and return the uploads.
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .clients import LocalTrainConfig, train_key_payload, train_local
from .data.datasets import ImageDataset
from .data.partition import Partition, check_no_empty_client
from .grouped_training import groupable, train_grouped
from .precision import resolve_amp
from .progress import progress_bar
from .seeds import client_seed
from .upload_cache import UploadCache, cache_lock, state_hash
from .uploads import ClientUpload, UploadError, validate_upload

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ClientJob:
    """One client's training: its data, config and seeds (``seed`` is the experiment's)."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    cfg: Any
    num_classes: int
    seed: int
    device: str | torch.device = "cpu"
    progress: bool = False
    init_state: State | None = None


@dataclass(frozen=True)
class ClientKind:
    """What one kind of client trains, how it is keyed in the cache, and what it uploads.

    ``train`` must be a module-level function (worker processes receive it by name);
    ``upload_kind`` is the :attr:`ClientUpload.kind` its uploads have.
    """

    name: str
    train: Callable[[ClientJob], State]
    key: Callable[[ImageDataset, Partition, int, Any, int, str | None], dict]
    upload: Callable[[int, State, ImageDataset, Partition, Any, int], ClientUpload]
    check: Callable[[ImageDataset], None] = lambda dataset: None
    upload_kind: str = "classifier"
    #: what else keys a client's cache entry on this device (precision, kernels that round
    #: differently)
    device_key: Callable[[Any, str | torch.device], dict] = lambda cfg, device: {}
    #: the source files (globs under ``ofl_core/``) that define how this kind trains: their
    #: hash keys every cache entry (:func:`client_code_version`), so an edit of them trains
    #: the clients again while an edit elsewhere in the library keeps the cache
    code: tuple[str, ...] = ()


#: pins the client-training code version of the cache keys (keep an expensive cache across
#: edits on purpose): its value replaces the source hash in every key; ``none`` keys as before
#: the code version was part of the key. Records name the pin and the code's real hash.
CLIENT_CODE_ENV = "OFL_CLIENT_CODE"

#: what every client kind's training runs through (the driver, seeds, precision)
_SHARED_CODE = ("client_training.py", "clients.py", "seeds.py", "precision.py")


@functools.cache
def source_digest(files: tuple[str, ...], root: Path | None = None) -> str:
    """A hash of the source files matching ``files`` (globs) under ``root`` (default: the
    installed ``ofl_core``), read once per process."""
    root = Path(__file__).resolve().parent if root is None else root
    paths = sorted({p for pattern in files for p in root.glob(pattern) if p.is_file()})
    h = hashlib.sha256()
    for p in paths:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def client_code_version(kind: ClientKind) -> tuple[str | None, str]:
    """The code version that keys ``kind``'s cache entries (None: none, as pinned) and how a
    record names it: the source hash of the kind's training code, or the pin of
    ``$OFL_CLIENT_CODE`` with the real hash beside it (``"<pin> (pinned; code <hash>)"``)."""
    real = source_digest(tuple(sorted({*_SHARED_CODE, *kind.code})))
    pin = os.environ.get(CLIENT_CODE_ENV, "").strip()
    if not pin:
        return real, real
    label = f"{pin} (pinned; code {real})"
    return (None if pin.lower() == "none" else pin), label


def _train_classifier(job: ClientJob) -> State:
    return train_local(job.x, job.y, job.cfg, job.num_classes,
                       client_seed(job.seed, job.client_id), job.device,
                       init_state=job.init_state, progress=job.progress,
                       desc=f"client {job.client_id}", init_from=job.seed,
                       client_id=job.client_id)


def _classifier_upload(k: int, state: State, dataset: ImageDataset, partition: Partition,
                       cfg: LocalTrainConfig, seed: int) -> ClientUpload:
    return ClientUpload(client_id=k, arch=cfg.arch, state_dict=state,
                        num_classes=dataset.num_classes, in_channels=dataset.channels,
                        image_size=dataset.image_size, num_samples=int(partition.sizes[k]),
                        model_kwargs=cfg.model_options)


def _classifier_device_key(cfg: LocalTrainConfig, device: str | torch.device) -> dict:
    return {"amp": resolve_amp(cfg.amp, device)}


CLASSIFIER = ClientKind("clients", _train_classifier, train_key_payload, _classifier_upload,
                        device_key=_classifier_device_key,
                        code=("grouped_training.py", "augment.py", "models/*.py"))


def client_kind(cfg: Any) -> ClientKind:
    """The kind of client a training config makes: a classifier for a
    :class:`LocalTrainConfig`, else the kind the config's own ``client_kind()`` names (FedCVAE's
    :class:`~ofl_core.fedcvae.clients.CVAETrainConfig` makes decoders)."""
    if isinstance(cfg, LocalTrainConfig):
        return CLASSIFIER
    kind = getattr(cfg, "client_kind", None)
    if callable(kind) and isinstance(kind(), ClientKind):
        return kind()
    raise TypeError(f"a client config must be a LocalTrainConfig or a CVAETrainConfig "
                    f"(got {type(cfg).__name__})")


def resolve_workers(workers: int | str, device: str | torch.device, jobs: int,
                    work: int) -> int:
    """How many worker processes to train clients in.

    ``"auto"``: on a multi-core CPU, one process per core when the total work (samples ×
    epochs) is large enough to repay process start-up (about 3 s each); else 1. "Core" means
    the threads torch was given (``OMP_NUM_THREADS``, ``torch.set_num_threads``), so a task
    that a batch runner gave one thread trains in one process.
    """
    if workers == "auto":
        cpus = min(os.cpu_count() or 1, torch.get_num_threads())
        if torch.device(device).type != "cpu" or cpus < 2 or jobs < 2 or work < 300_000:
            return 1
        return min(cpus, jobs)
    w = int(workers)
    if w < 1:
        raise ValueError(f"workers must be ≥ 1 or 'auto' (got {workers!r})")
    return min(w, max(jobs, 1))


UNGUARDED_SCRIPT = (
    "clients train in worker processes that re-import your script: put the script's code "
    "under `if __name__ == \"__main__\":`, or pass workers=1")


def refuse_in_starting_worker() -> None:
    """Fail at once, with the fix, when a worker process that is still starting up re-runs an
    unguarded script's call: it would otherwise wait forever on the cache lock its parent holds
    (the parent then reports the broken pool)."""
    if getattr(mp.current_process(), "_inheriting", False):  # set while a child bootstraps
        raise RuntimeError(UNGUARDED_SCRIPT)


def cached_states(cache: UploadCache | None, kind: ClientKind, keys: list[dict],
                  dataset: ImageDataset, partition: Partition, cfgs: list[Any], seed: int
                  ) -> dict[int, State]:
    """The clients the cache holds, each checked as the upload it becomes
    (:func:`~ofl_core.uploads.validate_upload`): an entry with missing or unexpected
    parameters, wrong shapes or dtypes, or non-finite values is corrupt — removed with a
    warning naming the file, and its client trained again."""
    states: dict[int, State] = {}
    for k, key in enumerate(keys):
        if cache is None or (state := cache.get(key)) is None:
            continue
        try:
            validate_upload(kind.upload(k, state, dataset, partition, cfgs[k], seed),
                            kind.upload_kind)
        except UploadError as e:
            cache.hits, cache.misses = cache.hits - 1, cache.misses + 1
            cache.discard(key, f"not a valid client ({e})")
            continue
        states[k] = state
    return states


def check_trained(k: int, state: State, kind: ClientKind, dataset: ImageDataset,
                  partition: Partition, cfg: Any, seed: int) -> State:
    """``state``, a freshly trained client, once it is a valid upload (before it is cached or
    used): weights
    that are NaN, inf or beyond any trained model's size mean the local training diverged
    (a learning rate or momentum too large), said as such — never cached, so a re-run with
    the same settings does not load, refuse and retrain it each time."""
    try:
        validate_upload(kind.upload(k, state, dataset, partition, cfg, seed), kind.upload_kind)
    except UploadError as e:
        if "NaN or inf" not in str(e) and "beyond any trained model's" not in str(e):
            raise
        knobs = ", ".join(f"{f}={getattr(cfg, f)}" for f in ("lr", "momentum", "optimizer")
                          if hasattr(cfg, f))
        raise UploadError(f"client {k}: its local training diverged ({e}) under "
                          f"{type(cfg).__name__}({knobs}); lower the learning rate") from None
    return state


def _train_in_pool(kind: ClientKind, jobs: dict[int, ClientJob], todo: list[int],
                   n_workers: int, finish: Callable[[int, State], None]) -> None:
    """Train the ``todo`` clients in ``n_workers`` spawned processes, each finished in order;
    a diverged client cancels the clients not yet started (the running ones end first)."""
    threads = max(1, torch.get_num_threads() // n_workers)
    try:
        with ProcessPoolExecutor(n_workers, mp_context=mp.get_context("spawn")) as ex:
            futs = {k: ex.submit(_in_worker, kind.train, jobs[k], threads) for k in todo}
            try:
                for k, fut in futs.items():
                    finish(k, fut.result())
            except UploadError:
                ex.shutdown(cancel_futures=True)
                raise
    except BrokenProcessPool:
        raise RuntimeError(UNGUARDED_SCRIPT + " (a client-training worker process "
                           "died while starting)") from None


def _in_worker(train: Callable[[ClientJob], State], job: ClientJob, threads: int) -> State:
    torch.set_num_threads(threads)
    return train(job)


def _use_grouped(trainer: str, kind: ClientKind, cfgs: Sequence[Any],
                 device: str | torch.device, init_state: State | None) -> bool:
    if trainer not in ("auto", "grouped", "sequential"):
        raise ValueError(f"trainer must be 'auto', 'grouped' or 'sequential' (got {trainer!r})")
    if trainer == "sequential" or kind is not CLASSIFIER or init_state is not None:
        return False
    if any(c != cfgs[0] for c in cfgs) or not groupable(cfgs[0], len(cfgs)):
        return False
    return trainer == "grouped" or torch.device(device).type == "cuda"


def train_clients(
    dataset: ImageDataset,
    partition: Partition,
    cfg: Any,
    seed: int,
    cache: UploadCache | None = None,
    device: str | torch.device = "cpu",
    workers: int | str = "auto",
    progress: bool = True,
    init_state: State | None = None,
    trainer: str = "auto",
) -> list[ClientUpload]:
    """Train every client of ``partition`` (or load it from ``cache``); return the uploads.

    ``cfg`` is one client config for all clients or one per client (heterogeneous
    architectures or CVAEs), all of one kind. ``init_state`` (multi-round FL, classifier
    clients) starts every client from that model, in this process. ``trainer``:
    ``"grouped"`` trains same-architecture classifier clients at once as one grouped network
    (:mod:`ofl_core.grouped_training`), ``"sequential"`` one at a time, ``"auto"`` grouped on
    CUDA (on the CPU one at a time measured as fast: docs/decisions/speed.md).
    """
    refuse_in_starting_worker()
    m = partition.num_clients
    check_no_empty_client(partition.sizes, partition.scheme, partition.alpha, partition.seed,
                          partition.subset)  # a hand-made partition too
    cfgs = list(cfg) if isinstance(cfg, Sequence) else [cfg] * m
    if len(cfgs) != m:
        raise ValueError(f"got {len(cfgs)} client configs for {m} clients; give one or {m}")
    kinds = {client_kind(c) for c in cfgs}
    if len(kinds) > 1:
        raise ValueError("the clients of one experiment must all be classifiers or all CVAEs")
    kind = kinds.pop()
    kind.check(dataset)
    init_hash = state_hash(init_state) if init_state is not None else None
    keys = [kind.key(dataset, partition, k, c, seed, init_hash) for k, c in enumerate(cfgs)]
    grouped = _use_grouped(trainer, kind, cfgs, device, init_state)
    if grouped:  # the grouped kernels round differently: their own cache entries
        keys = [{**key, "trainer": "grouped"} for key in keys]
    # "auto" precision, channels-last or fused Adam depend on the machine: key what they resolve to
    keys = [{**key, **kind.device_key(c, device)} for key, c in zip(keys, cfgs, strict=True)]
    code, _ = client_code_version(kind)  # clients of other training code are trained again
    if code is not None:
        keys = [{**key, "code": code} for key in keys]
    with cache_lock(cache, keys):  # concurrent tasks train shared clients once
        states = cached_states(cache, kind, keys, dataset, partition, cfgs, seed)
        todo = [k for k in range(m) if k not in states]
        jobs = {k: ClientJob(k, dataset.x_train[torch.as_tensor(partition.client_indices[k])],
                             dataset.y_train[torch.as_tensor(partition.client_indices[k])],
                             cfgs[k], dataset.num_classes, seed) for k in todo}
        work = sum(len(jobs[k].y) * cfgs[k].epochs for k in todo)
        n_workers = resolve_workers(workers, device, len(todo), work) if init_state is None else 1
        bar = progress_bar(total=m, initial=m - len(todo), desc=kind.name, show=progress)

        def finish(k: int, state: State) -> None:
            states[k] = check_trained(k, state, kind, dataset, partition, cfgs[k], seed)
            if cache is not None:
                cache.put(keys[k], state)
            bar.update(1)

        if grouped and len(todo) > 1:
            train_grouped([(jobs[k].x, jobs[k].y, client_seed(seed, k)) for k in todo], cfgs[0],
                          dataset.num_classes, device, init_from=seed,
                          on_done=lambda j, state: finish(todo[j], state))
        elif n_workers > 1:
            _train_in_pool(kind, jobs, todo, n_workers, finish)
        else:
            for k in todo:
                job = jobs[k]
                finish(k, kind.train(ClientJob(k, job.x, job.y, job.cfg, job.num_classes, seed,
                                               device, progress, init_state)))
        bar.close()
    return [kind.upload(k, states[k], dataset, partition, cfgs[k], seed) for k in range(m)]


__all__ = ["CLASSIFIER", "CLIENT_CODE_ENV", "ClientJob", "ClientKind", "cached_states",
           "client_code_version", "client_kind", "resolve_workers", "source_digest",
           "train_clients"]
