# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Synthetic data: what DENSE's and FedHydra's generators produce, and how close it is to real data
#
# Reproduces DENSE Fig. 6 (synthetic CIFAR10/SVHN images next to real ones) and FedHydra Fig. 12
# (synthetic FashionMNIST/CIFAR10 images), and adds a **privacy check** both papers only argue
# visually: for every synthetic image, the L2 distance (pixels in [0, 1]) to its nearest
# neighbour among the clients' real training images, compared with the same distance for real
# *test* images (new samples of the same distribution: what "similar but not copied" looks like).
# A generator that memorised client data would put synthetic images at distance ≈ 0.
#
# Both methods run on the **same partition and the same trained clients**; their accuracies are
# published as DENSE / FedHydra Table 1 rows (same α), so they sit beside those cells.
#
# Defaults: a quick CPU setting on the embedded FashionMNIST subset (10k training images), few
# local epochs and a few server epochs of a few generator steps — compare orderings and the
# look of the images, not exact numbers. `run_all.py --full` injects the papers' settings.

# %% tags=["parameters"]
from typing import Optional

dataset: str = "fmnist_embedded"
alpha: float = 0.1
num_clients: int = 5
seeds: list[int] = [1]
arch: str = "cnn_mnist"
local_epochs: int = 10
# server sizes as method-config fields (a key left out, or None: each method's paper default)
server: dict = {"epochs": 5, "steps_per_epoch": 5, "batch_size": 64, "strat_steps": 3,
                "strat_batch_size": 8}
num_images: int = 64
baseline_test_images: int = 1000
device: str = "cpu"
data_root: Optional[str] = None
cache_dir: Optional[str] = None
figures_dir: str = "../figures_interactive/synthetic_data"

# %% [markdown]
# ## The runs: DENSE and FedHydra on the same clients
# The DENSE row fills DENSE Table 1's cell, the FedHydra row FedHydra Table 1's (same dataset,
# α and m).

# %%
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.results import record
from ofl_core.sections import synthetic_data as syn
from ofl_core.tables import Run, Serves, run_tables, server_settings

tables = run_tables([
    Run(ExperimentConfig(dataset=dataset, partition="dirichlet", alpha=alpha,
                         num_clients=num_clients, seed=s, device=device, data_root=data_root,
                         cache_dir=cache_dir, experiment="synthetic_data",
                         local=LocalTrainConfig(arch=arch, epochs=local_epochs)),
        tuple(configure_methods(["dense", "fedhydra"],
                                common=server_settings(server, num_images=num_images))),
        (Serves("dense", "T1", ("dense",)), Serves("fedhydra", "T1", ("fedhydra",))))
    for s in seeds])
record(tables.records)

# %% [markdown]
# ## Accuracy of the runs that made the images, beside the papers' Table 1 cells

# %%
tables.compare("dense", "T1")

# %%
tables.compare("fedhydra", "T1")

# %% [markdown]
# ## DENSE Fig. 6 / FedHydra Fig. 12: real training images and synthetic images
# Top: one real training image per class (from the clients' data). Below: the last synthetic
# batch of each method (DENSE: the epoch's lowest-loss batch that joined its pool; FedHydra: the
# last generator step's batch), one row per label the generator was asked for (the row label
# gives the class and how many images of the batch it got).

# %%
syn.save_image_grids(tables, figures_dir, f"{dataset}, α={alpha}")

# %% [markdown]
# ## Privacy check: distance of each synthetic image to its nearest real training image
# Baseline: the same nearest-training-image distance for real test images (a random subset of
# `baseline_test_images`). `frac_below_baseline_p5` = the share of images closer to a training
# image than 95% of real test images are (≈ 0.05 for the baseline itself; ≫ 0.05 would mean
# near-copies of client data).

# %%
syn.privacy_check(tables, baseline_test_images)
