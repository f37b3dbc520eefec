"""FedLPA's own FashionMNIST setting for the evidence probes: the clients of one (β, seed)."""

from __future__ import annotations

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig


def setting_config(beta: float, seed: int, local_epochs: int = 10,
                   **overrides: object) -> ExperimentConfig:
    """The task settings of ``results/grids/fedlpa_setting_fmnist.yaml`` for one (β, seed): 10 ×
    ``simplecnn_mnist``, label-Dirichlet β, batch 64, weight decay 1e-5 — the same client cache
    keys as the grid's runs, so the probes find its clients (trained when absent)."""
    return ExperimentConfig(dataset="fmnist", partition="dirichlet", alpha=beta, num_clients=10,
                            seed=seed, progress=False, **overrides,
                            local=LocalTrainConfig(arch="simplecnn_mnist", epochs=local_epochs,
                                                   batch_size=64, weight_decay=1e-5))
