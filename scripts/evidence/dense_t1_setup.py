"""The clients of DENSE Table 1's setting for the measurement scripts: m = 5 ``cnn_mnist``
clients on a Dirichlet(α) partition of ``dataset`` with ``seed``, from the client cache when a
run trained them before (e.g. the shipped grid ``results/grids/dense_table1_fmnist.yaml`` for
``fmnist`` and 200 local epochs)."""

from __future__ import annotations

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
