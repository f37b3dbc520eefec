"""FedCVAE experiments on the shared orchestration (:mod:`ofl_core.experiment`,
:mod:`ofl_core.tables`).

FedCVAE's clients train CVAEs and upload decoders plus label counts
(:mod:`ofl_core.fedcvae.clients`); its baselines train McMahan CNNs. Both are set up by
:func:`~ofl_core.experiment.setup_experiment` with the client training as ``clients=``:

- :func:`fedcvae_data_settings`: the image size and training subset FedCVAE uses per dataset
  (MNIST/FMNIST resized to 32 px and a seeded 50 % subset; SVHN at 100 %).
- :func:`client_config`: the client training each FedCVAE-table method needs (decoders for
  FedCVAE-Ens/-KD, McMahan CNNs for its FedAvg/FedOneShot).
- :func:`fedcvae_runs`: FedCVAE-table methods as table runs, grouped by the client training
  they need, all on one partition (``partition_seed``: FedCVAE Tables 1/2 vary the
  initialisation seed on one partition, Table 5 the partition); FedAvg weighted by n_k under
  both presets, as FedCVAE's code averages (:func:`fedcvae_weighting`).
- :func:`run_fedcvae_experiment`: the same, run at once (records, results, setups).
- :func:`run_security`: the security-shift experiment (Fig. 5) as result records.

Decoder clients have no classifier, so the records of decoder-based methods carry no ensemble or
client accuracy (``None``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..clients import LocalTrainConfig
from ..data.datasets import ImageDataset
from ..experiment import (
    ExperimentConfig,
    Setup,
    load_experiment_data,
    method_key,
    run_methods,
    setup_experiment,
)
from ..fedcvae.clients import CVAETrainConfig, baseline_local_config
from ..fedcvae.security import SecurityResult, security_experiment
from ..fedcvae.server import FedCVAEEnsConfig
from ..results import ResultRecord
from ..server import ServerResult
from ..tables import Run, Serves

__all__ = [
    "BASELINE_METHODS",
    "DECODER_METHODS",
    "client_config",
    "fedcvae_data_settings",
    "fedcvae_runs",
    "fedcvae_weighting",
    "run_fedcvae_experiment",
    "run_security",
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


def fedcvae_weighting(method: Sequence[Any]) -> tuple[Any, ...]:
    """A FedCVAE-table method as it runs: FedAvg averages weighted by n_k under every preset.

    FedCVAE's code weights its FedAvg by the users' data amounts (``servers/server_fed_avg.py``
    calls ``average_weights(models, data_amts=...)``), as the paper's FedAvg does; FedAvg's
    ``authors_code`` preset elsewhere is DENSE's code's unweighted mean, which is not FedCVAE's.
    ``method``: a (name, config) pair or (name, config, preset label) triple, returned as is
    (the same config object) unless it is an unweighted FedAvg.
    """
    if method[0] == "fedavg" and getattr(method[1], "weighted", True) is False:
        return (method[0], dataclasses.replace(method[1], weighted=True), *method[2:])
    return tuple(method)


def fedcvae_runs(
    experiment: ExperimentConfig, methods: Sequence[Sequence[Any]], serves: Sequence[Serves], *,
    cvae: Mapping[str, Any] | None = None, local: Mapping[str, Any] | None = None,
    partition_seed: int | None = None,
) -> list[Run]:
    """FedCVAE-table methods as :class:`~ofl_core.tables.Run` s: one run per client training
    they need (:func:`client_config`: decoders with Table 4's d for FedCVAE-Ens/-KD, McMahan
    CNNs for FedAvg/FedOneShot; ``cvae``/``local`` field overrides), all on one partition
    (``partition_seed``, else the experiment's seed). ``methods``: (name, config) pairs, or
    (name, config, preset label) triples; FedAvg runs weighted by n_k under every preset
    (:func:`fedcvae_weighting`)."""
    groups: dict[Any, list[Any]] = {}
    for m in map(fedcvae_weighting, methods):
        ccfg = client_config(m[0], experiment.dataset, getattr(m[1], "preset", "paper"), cvae,
                             local)
        groups.setdefault(ccfg, []).append(m)
    return [Run(experiment, tuple(ms), tuple(serves), clients=c, partition_seed=partition_seed)
            for c, ms in groups.items()]


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
    pairs = [fedcvae_weighting(p) for p in (methods.items() if isinstance(methods, Mapping)
                                            else methods)]
    keys = [method_key(n, c, [m for m, _ in pairs]) for n, c in pairs]
    ds = dataset if dataset is not None else load_experiment_data(cfg)
    out: dict[int, tuple[ResultRecord, ServerResult, Setup]] = {}
    for run in fedcvae_runs(cfg, pairs, [], cvae=cvae, local=local,
                            partition_seed=partition_seed):
        setup = setup_experiment(cfg, run.clients, partition_seed=partition_seed, dataset=ds)
        recs, res = run_methods(setup, run.methods)  # type: ignore[arg-type]
        idx = [i for i, p in enumerate(pairs) if any(p[0] == m[0] and p[1] is m[1]
                                                    for m in run.methods)]
        for i, rec, r in zip(idx, recs, res.values(), strict=True):
            out[i] = (rec, r, setup)
    return ([out[i][0] for i in range(len(pairs))], {k: out[i][1] for i, k in enumerate(keys)},
            {k: out[i][2] for i, k in enumerate(keys)})


def run_security(
    setup: Setup, mu: Sequence[float] | None, bounds: Sequence[float] = (1.0, 10.0, 100.0, 1000.0),
    cfg: FedCVAEEnsConfig | None = None, *, preset: str = "paper", table: str = "Fig5",
) -> tuple[list[ResultRecord], SecurityResult]:
    """FedCVAE Fig. 5 on a decoder setup (clients trained with prior N(μ, I)) as records.

    Calls :func:`ofl_core.fedcvae.security.security_experiment`; one record for the legitimate
    server (method ``"fedcvae-ens-server"``, empty setting: it samples around μ whatever b) and
    one per bound (``"fedcvae-ens-attacker"``, setting ``"b=<b>"``). ``preset`` labels the
    variant ("paper": secret shifted μ; "authors_code": μ = 0). The call's wall time is split
    evenly over the records. Records carry ``paper="fedcvae"`` and ``table`` (default "Fig5").
    """
    ens = cfg if cfg is not None else FedCVAEEnsConfig()
    t0 = time.perf_counter()
    res = security_experiment(setup.uploads, mu, bounds, ctx=setup.context(), cfg=ens)
    wall = (time.perf_counter() - t0) / (1 + len(bounds))
    mu_key = None if mu is None else [round(float(v), 6) for v in mu]

    def rec(method: str, acc: float, best: float, setting: str) -> ResultRecord:
        return dataclasses.replace(setup.record(
            method, ens, acc, best, wall_time_s=wall, setting=setting, preset=preset,
            hash_extra={"mu": mu_key, "setting": setting, "method": method}),
            paper="fedcvae", table=table)

    server = res.server
    best = server.best_acc if server is not None and server.best_acc is not None else None
    records = [rec("fedcvae-ens-server", res.server_acc,
                   max(res.server_acc, best) if best is not None else res.server_acc, "")]
    records += [rec("fedcvae-ens-attacker", a, a, f"b={b:g}") for b, a in res.attacker_acc.items()]
    return records, res
