"""The clients of DENSE Table 1's setting for the measurement scripts: m = 5 ``cnn_mnist``
clients on a Dirichlet(α) partition of ``dataset`` with ``seed``, from the client cache when a
run trained them before (e.g. the shipped grid ``results/grids/dense_table1_fmnist.yaml`` for
``fmnist`` and 200 local epochs)."""

from __future__ import annotations

import argparse

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, Setup, setup_experiment


def dense_t1_setup(dataset: str, alpha: float, seed: int, local_epochs: int,
                   **local: object) -> Setup:
    """The trained clients (and data) of DENSE Table 1's cell; ``local``: more
    :class:`~ofl_core.clients.LocalTrainConfig` fields (e.g. ``bn_eval_after_first_epoch``)."""
    cfg = ExperimentConfig(dataset=dataset, partition="dirichlet", alpha=alpha, num_clients=5,
                           seed=seed, experiment="main_tables", progress=False,
                           local=LocalTrainConfig(arch="cnn_mnist", epochs=local_epochs,
                                                  **local))
    return setup_experiment(cfg)


def add_cell_args(p: argparse.ArgumentParser, dataset: str, local_epochs: int) -> None:
    """The cells a measurement covers: ``--dataset --alphas --seeds --local-epochs``."""
    p.add_argument("--dataset", default=dataset)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.5])
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--local-epochs", type=int, default=local_epochs)


def add_server_args(p: argparse.ArgumentParser) -> None:
    """The server sizes (``--server-epochs --steps-per-epoch --batch-size``); None = the
    paper's; :func:`server_sizes` turns them into config fields."""
    p.add_argument("--server-epochs", type=int, default=None, help="default: the paper's 200")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="default: the paper's 30")
    p.add_argument("--batch-size", type=int, default=None,
                   help="default: the paper's 128 (also a pool's KD batch)")


def server_sizes(args: argparse.Namespace, kd_batch: bool = False) -> dict[str, int]:
    """The server sizes given on the command line, as config fields (``kd_batch``: the batch
    size is also the pool's KD batch, ``kd_batch_size``)."""
    sizes = (("epochs", args.server_epochs), ("steps_per_epoch", args.steps_per_epoch),
             ("batch_size", args.batch_size),
             *((("kd_batch_size", args.batch_size),) if kd_batch else ()))
    return {k: v for k, v in sizes if v is not None}
