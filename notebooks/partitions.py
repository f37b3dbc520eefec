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
# # Partitions: how non-IID the clients are
#
# Reproduces the data-distribution figures: DENSE Figs. 4–5 (right; Dirichlet α over clients),
# FedHydra Figs. 3 and 6a (Dirichlet and "2c/c"; Fig. 3's α = 0.01 panel is drawn by the full
# grid, `notebooks/grids/full/partitions.yaml`), FedCVAE Fig. 3 (its own Dirichlet scheme; its
# Fig. 9 draws such partitions beside their label-noise counts, which this notebook does not),
# and shows Co-Boosting's Dirichlet beside DENSE's. Each bubble is the number of
# samples of one class held by one client.
#
# The defaults run on the embedded FashionMNIST subset in seconds; papermill injects the
# paper's settings (e.g. `dataset="fmnist"`).

# %% tags=["parameters"]
from typing import Optional

dataset: str = "fmnist_embedded"
alphas: list[float] = [0.1, 0.3, 0.5]
num_clients: int = 5
seed: int = 1
fedcvae_alphas: list[float] = [0.001, 0.01, 0.05]
fedcvae_num_clients: int = 10
fedcvae_seed: int = 1693
fedcvae_subset: float = 0.5
classes_per_client: int = 2
data_root: Optional[str] = None
figures_dir: str = "../figures_interactive/partitions"

# %%
from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.plots import plot_partitions, save_figure
from ofl_core.sections.partitions import counts_text, dirichlet_schemes, side_by_side_counts

ds = load_dataset(dataset, data_root)
labels = ds.y_train.numpy()
print(f"{ds.name}: {len(labels)} training images, {ds.num_classes} classes")

# %% [markdown]
# ## DENSE / FedHydra Dirichlet scheme (α over clients, every client ≥ 10 samples)
# One panel per α (DENSE Figs. 4–5, right; FedHydra Fig. 3): the smaller α, the fewer classes
# each client holds. Below the figure: each client's size and its class counts.

# %%
dense_parts = {
    f"α={a}": make_partition(labels, num_clients, "dirichlet", alpha=a, seed=seed)
    for a in alphas
}
fig = plot_partitions({k: p.counts for k, p in dense_parts.items()}, ds.classes)
path = save_figure(fig, figures_dir, "dirichlet_dense")

# %%
# NBVAL_CHECK_OUTPUT
print(counts_text(dense_parts))

# %% [markdown]
# ## Two "Dirichlet" schemes: DENSE's per-class split and Co-Boosting's per-client prior
# DENSE (and FedHydra, which follows DENSE's set-up) splits **each class** over the clients by
# Dir(α·1_m), so client sizes differ. Co-Boosting's code (`dirichlet_client`) draws **each
# client's** class prior from Dir(α·1_C) and gives every client the same number of samples;
# when the classes a client wants run out, its remaining samples come from the classes left.
# Same α and seed, left DENSE, right Co-Boosting; the tables add each client's total (and each
# class's). In `main_tables` Co-Boosting runs on DENSE's partition (the same clients).

# %%
schemes = dirichlet_schemes(labels, num_clients, alphas, seed)
fig = plot_partitions({k: p.counts for k, p in schemes.items()}, ds.classes)
save_figure(fig, figures_dir, "dirichlet_dense_vs_coboosting")

# %%
# NBVAL_CHECK_OUTPUT
print(side_by_side_counts(schemes))

# %% [markdown]
# ## FedHydra "2c/c": each client holds two disjoint classes
# FedHydra Fig. 6a: every client holds its own two classes (equal shares) and nothing else.

# %%
twocc = make_partition(labels, min(num_clients, ds.num_classes // classes_per_client),
                       "classes_per_client", classes_per_client=classes_per_client, seed=seed)
fig = plot_partitions({f"{classes_per_client}c/c": twocc.counts}, ds.classes)
path = save_figure(fig, figures_dir, "classes_per_client")

# %% [markdown]
# ## FedCVAE scheme (per-client proportions over classes; 50% subset for MNIST/FMNIST)
# FedCVAE Fig. 3: a Dirichlet draw per client over the classes (not per class over the
# clients), on half the training set; at α = 0.001 most clients hold one class.

# %%
cvae_parts = {
    f"α={a}": make_partition(labels, fedcvae_num_clients, "dirichlet_fedcvae", alpha=a,
                             seed=fedcvae_seed, subset=fedcvae_subset)
    for a in fedcvae_alphas
}
fig = plot_partitions({k: p.counts for k, p in cvae_parts.items()}, ds.classes)
path = save_figure(fig, figures_dir, "dirichlet_fedcvae")

# %%
# NBVAL_CHECK_OUTPUT
print(counts_text(cvae_parts, counts=False))
