"""Multi-round FL with any server method (DENSE Table 5; FedHydra Tables 5 and 8–11).

Round r: every client trains E local epochs starting from round r−1's global model (round 1
from the shared initialisation, i.e. the one-shot clients), uploads it, and the server method
turns the uploads into the new global model, which is sent back as every client's
initialisation. This is method-agnostic: the server step is a callable
``server(uploads, ctx, previous_global_state) -> ServerResult``; :func:`server_for` makes one
from a registry method. The global model must be a model of the clients' architecture, so
clients must be homogeneous (a clear ``ValueError`` otherwise, before any training).

:func:`run_rounds` is the driver; :func:`run_multi_round_methods` runs it for several methods
on one experiment's partition and returns one :class:`~ofl_core.results.ResultRecord` per
method and round (``setting`` e.g. ``"rounds=2;local_epochs=10"``, as in paper_results.csv).
With DENSE it is what the former ``dense.run_multi_round`` computed (bit-identical).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .checkpoint import digest
from .client_training import train_clients
from .clients import LocalTrainConfig, init_model
from .data.datasets import ImageDataset
from .data.partition import Partition
from .dense.server import run_dense
from .evaluate import accuracy, client_accuracies
from .fedhydra.server import run_fedhydra
from .registry import run_method
from .results import ResultRecord
from .seeds import derive_seed
from .server import ServerContext, ServerResult
from .upload_cache import UploadCache
from .uploads import ClientUpload

#: server(uploads, ctx, previous global state or None) -> the round's ServerResult
ServerFn = Callable[[list[ClientUpload], ServerContext, "dict[str, torch.Tensor] | None"],
                    ServerResult]


def server_for(name: str, cfg: Any, warm_start: bool = True) -> ServerFn:
    """A registry method as a multi-round server step.

    DENSE and FedHydra distil into a student; with ``warm_start`` it starts from the previous
    round's global model (round 1: a fresh student). Other
    methods ignore the previous global model: FedAvg averages clients that started from it,
    FedDF starts from that average. Methods whose output is not a single model of the clients'
    architecture (ensemble, FedOneShot, FedCVAE) are rejected by :func:`run_rounds`.
    """
    if name == "dense":
        def dense(ups: list[ClientUpload], ctx: ServerContext,
                  state: dict[str, torch.Tensor] | None) -> ServerResult:
            return run_dense(ups, cfg, ctx, student_state=state if warm_start else None)

        return dense
    if name == "fedhydra":
        def fedhydra(ups: list[ClientUpload], ctx: ServerContext,
                     state: dict[str, torch.Tensor] | None) -> ServerResult:
            return run_fedhydra(ups, cfg, ctx, student_state=state if warm_start else None)

        return fedhydra

    def other(ups: list[ClientUpload], ctx: ServerContext,
              state: dict[str, torch.Tensor] | None) -> ServerResult:
        return run_method(name, ups, cfg, ctx)

    return other


@dataclass
class RoundResult:
    """One communication round: the global model's accuracy and the round's clients."""

    round: int
    last_acc: float
    best_acc: float
    ensemble_acc: float
    client_accs: list[float]
    curve: list[float] = field(default_factory=list)
    wall_time_s: float = 0.0


@dataclass(eq=False)
class MultiRoundResult:
    rounds: list[RoundResult]
    model: nn.Module
    results: list[ServerResult]

    @property
    def accuracies(self) -> list[float]:
        """Last-epoch test accuracy of the global model after each round."""
        return [r.last_acc for r in self.rounds]


def _common_arch(local_cfg: LocalTrainConfig | Sequence[LocalTrainConfig]) -> LocalTrainConfig:
    cfgs = list(local_cfg) if isinstance(local_cfg, Sequence) else [local_cfg]
    kinds = sorted({(c.arch, tuple(c.model_kwargs), c.input_norm) for c in cfgs}, key=str)
    if len(kinds) > 1:
        raise ValueError(
            "multi-round FL sends the global model back as every client's initialisation, so "
            f"all clients must share one architecture; got {sorted({c.arch for c in cfgs})} "
            "(heterogeneous clients: use the one-shot methods)")
    return cfgs[0]


def _check_global_model(state: Mapping[str, torch.Tensor], ref: nn.Module, method: str) -> None:
    expected = ref.state_dict()
    if set(state) != set(expected) or any(
            tuple(state[k].shape) != tuple(v.shape) for k, v in expected.items()):
        raise ValueError(
            f"multi-round FL: {method}'s global model is not a model of the clients' "
            "architecture, so it cannot be sent back as their initialisation (use a method "
            "that returns one global model, e.g. fedavg, feddf, dense, fedhydra, with "
            "student_arch=None)")


def run_rounds(
    dataset: ImageDataset,
    partition: Partition,
    local_cfg: LocalTrainConfig | Sequence[LocalTrainConfig],
    server: ServerFn,
    rounds: int,
    seed: int,
    cache: UploadCache | None = None,
    device: str = "cpu",
    workers: int | str = "auto",
    progress: bool = True,
    first_uploads: list[ClientUpload] | None = None,
    first_accuracies: tuple[Sequence[float], float] | None = None,
    method: str = "server",
    checkpoint_every: int = 5,
) -> MultiRoundResult:
    """Run ``rounds`` rounds: clients train from the current global model
    (``train_clients(..., init_state=global_state)``), then ``server`` builds the next one.

    ``first_uploads``: round 1's uploads when already trained (e.g. ``Setup.uploads`` of the
    same partition and ``local_cfg``), else they are trained (or read from ``cache``);
    ``first_accuracies`` = (their test accuracies, their mean-logit ensemble's) when known
    (``Setup.client_accs``, ``Setup.ensemble_acc``), else they are measured. Round r's
    server gets seed ``derive_seed(seed, "round", r)`` and the previous global state (None in
    round 1). Homogeneous clients only (``ValueError`` otherwise). With a ``cache``, each
    round's server checkpoints to it every ``checkpoint_every`` epochs (0 = off).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be ≥ 1 (got {rounds})")
    base = _common_arch(local_cfg)
    ref = init_model(base.arch, dataset.num_classes, dataset.channels, dataset.image_size, 0,
                     **base.model_options)

    def evaluate(mdl: nn.Module) -> float:
        return accuracy(mdl, dataset.x_test, dataset.y_test, device=device)

    eval_key = f"{dataset.name}:{digest((dataset.x_test, dataset.y_test))}"

    out: list[RoundResult] = []
    results: list[ServerResult] = []
    global_state: dict[str, torch.Tensor] | None = None
    model: nn.Module | None = None
    for r in range(1, rounds + 1):
        t0 = time.perf_counter()
        if r == 1 and first_uploads is not None:
            uploads = first_uploads
        else:
            uploads = train_clients(dataset, partition, local_cfg, seed, cache=cache,
                                    device=device, workers=workers, progress=progress,
                                    init_state=global_state)
        if r == 1 and first_uploads is not None and first_accuracies is not None:
            client_accs, ens_acc = list(first_accuracies[0]), float(first_accuracies[1])
        else:
            client_accs, ens_acc = client_accuracies(uploads, dataset, device)
        ctx = ServerContext(num_classes=dataset.num_classes, in_channels=dataset.channels,
                            image_size=dataset.image_size, seed=derive_seed(seed, "round", r),
                            device=device, evaluate=evaluate, progress=progress,
                            cache_dir=cache.root if cache is not None else None,
                            checkpoint_every=checkpoint_every, eval_key=eval_key,
                            dataset=dataset.name)
        res = server(uploads, ctx, global_state)
        model = res.model
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        _check_global_model(state, ref, method)
        global_state = state
        last = res.last_acc if res.last_acc is not None else evaluate(model)
        best = res.best_acc if res.best_acc is not None else max([last, *res.curve])
        results.append(res)
        out.append(RoundResult(round=r, last_acc=float(last), best_acc=float(best),
                               ensemble_acc=ens_acc, client_accs=client_accs,
                               curve=list(res.curve),
                               wall_time_s=round(time.perf_counter() - t0, 3)))
    assert model is not None
    return MultiRoundResult(rounds=out, model=model, results=results)


def run_multi_round_methods(
    setup: Any,
    methods: Mapping[str, Any] | Sequence[tuple[str, Any]],
    rounds: int,
    setting: str = "rounds={round};local_epochs={local_epochs}",
    warm_start: bool = True,
) -> tuple[list[ResultRecord], dict[str, MultiRoundResult]]:
    """Multi-round FL for each (name, config) on one experiment (an
    :class:`ofl_core.experiment.Setup`): the same partition, and round 1 = the setup's clients.

    Returns one record per method and round, labelled like ``run_methods``'s records with
    ``setting`` formatted from ``round`` and ``local_epochs`` (FedHydra Tables 8–11 print only
    ``"rounds={round}"``), and the :class:`MultiRoundResult` per method name (``name/preset``
    when a name repeats).
    """
    cfg = setup.cfg
    pairs = list(methods.items()) if isinstance(methods, Mapping) else list(methods)
    names = [n for n, _ in pairs]
    local = cfg.client_configs() if hasattr(cfg, "client_configs") else cfg.local
    epochs = _common_arch(local).epochs
    records: list[ResultRecord] = []
    results: dict[str, MultiRoundResult] = {}
    for name, mcfg in pairs:
        res = run_rounds(setup.dataset, setup.partition, local,
                         server_for(name, mcfg, warm_start), rounds, cfg.seed,
                         cache=UploadCache(cfg.cache_dir), device=setup.device,
                         checkpoint_every=getattr(cfg, "checkpoint_every", 5),
                         workers=cfg.workers, progress=cfg.progress,
                         first_uploads=setup.uploads,
                         first_accuracies=(setup.client_accs, setup.ensemble_acc), method=name)
        key = name if names.count(name) == 1 else f"{name}/{getattr(mcfg, 'preset', '')}"
        results[key] = res
        for rr, sres in zip(res.rounds, res.results, strict=True):
            records.append(setup.record(
                sres.method, mcfg, rr.last_acc, rr.best_acc, wall_time_s=rr.wall_time_s,
                setting=setting.format(round=rr.round, local_epochs=epochs),
                client_accs=rr.client_accs, ensemble_acc=rr.ensemble_acc))
    return records, results


__all__ = ["MultiRoundResult", "RoundResult", "ServerFn", "run_multi_round_methods",
           "run_rounds", "server_for"]
