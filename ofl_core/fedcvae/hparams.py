"""FedCVAE's per-dataset hyperparameters (App. C Tables 3/4).

Table 3's values shared by every dataset are config defaults; Table 4's per-dataset column is
:data:`FEDCVAE_HPARAMS`. Client configs (:mod:`ofl_core.fedcvae.clients`) and server configs
(:mod:`ofl_core.fedcvae.server`) fill their ``None`` fields from here, so every FedCVAE number
lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..validation import POSITIVE, check_config


@dataclass(frozen=True)
class FedCVAEHParams:
    """One dataset's column of FedCVAE Table 4 (Table 3's shared values are config defaults)."""

    fedavg_local_epochs: int
    fedoneshot_local_epochs: int
    cvae_local_epochs: int
    ens_latent_dim: int
    ens_classifier_epochs: int
    ens_trunc_width: float
    kd_latent_dim: int
    kd_classifier_epochs: int
    kd_decoder_epochs: int
    kd_trunc_width: float

    def __post_init__(self) -> None:
        check_config(self, dict.fromkeys((f.name for f in fields(self)), POSITIVE))


#: FedCVAE Table 4, per dataset (MNIST, FashionMNIST, SVHN).
FEDCVAE_HPARAMS: dict[str, FedCVAEHParams] = {
    "mnist": FedCVAEHParams(10, 15, 15, 10, 10, 3.0, 10, 10, 7, 1.0),
    "fmnist": FedCVAEHParams(10, 15, 25, 10, 5, 3.0, 100, 5, 10, 2.0),
    "svhn": FedCVAEHParams(5, 10, 50, 10, 5, 3.0, 10, 5, 80, 3.0),
}


def fedcvae_hparams(dataset: str) -> FedCVAEHParams:
    """Table 4 column of ``dataset`` ("mnist", "fmnist", "svhn"; "fmnist_embedded" and a
    resized name like "fmnist@32" map to their paper dataset)."""
    key = dataset.split("@")[0].lower()
    key = {"fmnist_embedded": "fmnist", "fashionmnist": "fmnist", "fashion": "fmnist"}.get(key, key)
    if key not in FEDCVAE_HPARAMS:
        raise ValueError(
            f"dataset: FedCVAE's Table 4 has no column for {dataset!r}; choose one of "
            f"{', '.join(FEDCVAE_HPARAMS)} (the settings of the closest dataset can be passed "
            "field by field)"
        )
    return FEDCVAE_HPARAMS[key]

