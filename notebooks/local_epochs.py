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
# # Local epochs: DENSE Fig. 3 and FedHydra Fig. 9
#
# How the number of local training epochs E changes the one-shot result:
# - **DENSE Fig. 3**: test accuracy of every client's local model and of FedAvg as E varies
#   (E = 20, 40, …, 400 on CIFAR10), and DENSE beside them. The paper: FedAvg peaks at a small E
#   and degrades (weight divergence under non-IID data) while DENSE beats every client.
# - **FedHydra Fig. 9** (CIFAR10, α = 0.1): the same for FedAvg, FedDF, DENSE and FedHydra.
#
# For each E the clients are trained once (cached) and every method runs on those same clients.
# These figures have no table cells: the records are labelled `table="Fig3"` (paper `dense`) and
# `"Fig9"` (paper `fedhydra`) with setting `local_epochs=<E>`, so comparisons with the paper are
# n/a; compare the shapes of the curves. The right panel of DENSE Fig. 3 (the clients' accuracy
# during local training) is not drawn: local training keeps no per-epoch curve.
#
# Defaults: a quick CPU setting on the embedded FashionMNIST subset (10k training images),
# E ∈ {1, 5}, a few server epochs of a few generator steps (`server`'s `epochs`,
# `steps_per_epoch`) — compare orderings and trends, not exact numbers. `run_all.py --full`
# injects the papers' settings.

# %% tags=["parameters"]
from typing import Optional

dataset: str = "fmnist_embedded"
alphas: list[float] = [0.1]
num_clients: int = 5
seeds: list[int] = [1]
arch: str = "cnn_mnist"
local_epochs: list[int] = [1, 5]
fig3_methods: list[str] = ["fedavg", "dense"]
fig9_methods: list[str] = ["fedavg", "dense", "fedhydra"]
# server sizes as method-config fields (a key left out, or None: each method's paper
# default); ngf 32 is a quick CPU generator width, the paper's 64 is in the full grids
server: dict = {"epochs": 4, "steps_per_epoch": 3, "batch_size": 64, "ngf": 32, "strat_steps": 3,
                "strat_batch_size": 8}
device: str = "cpu"
data_root: Optional[str] = None
cache_dir: Optional[str] = None
figures_dir: str = "../figures_interactive/local_epochs"

# %% [markdown]
# ## The runs, and the figures each one serves
# One experiment per (α, seed, E): the clients are trained once (cached, setting
# `local_epochs=<E>`) and every method of either figure runs on them once; its records are
# labelled for DENSE Fig. 3 (`fig3_methods`) and FedHydra Fig. 9 (`fig9_methods`). The server
# sizes (`server`: `epochs`, `steps_per_epoch`, `batch_size`, `ngf`, FedHydra's stratification
# steps) apply to every data-free method; a size left out keeps each method's paper default.

# %%
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.results import record
from ofl_core.sections import local_epochs as section
from ofl_core.tables import Run, Serves, run_tables, server_settings

figures = {("dense", "Fig3"): fig3_methods, ("fedhydra", "Fig9"): fig9_methods}
methods = configure_methods(list(dict.fromkeys(fig3_methods + fig9_methods)),
                            common=server_settings(server))
runs = [Run(ExperimentConfig(dataset=dataset, partition="dirichlet", alpha=a,
                             num_clients=num_clients, seed=s, device=device, data_root=data_root,
                             cache_dir=cache_dir, experiment="local_epochs",
                             local=LocalTrainConfig(arch=arch, epochs=E),
                             setting=f"local_epochs={E}"),
            tuple(methods), tuple(Serves(p, t, tuple(ms)) for (p, t), ms in figures.items()))
        for a in alphas for s in seeds for E in local_epochs]

# %%
tables = run_tables(runs)
record(tables.records)

# %% [markdown]
# ## Our numbers per E (the paper has no table cells for these figures: `paper` is n/a)

# %%
print(section.figure_numbers(tables, figures))

# %% [markdown]
# ## Accuracy vs local epochs E: each client (thin grey), FedAvg and the distillation methods
# One figure per paper figure (`dense_fig3_…`, `fedhydra_fig9_…`), one panel per α; the
# dotted black line is the teacher ensemble the distillation methods learn from. Neither paper
# prints the numbers behind these figures, so no paper points are drawn.

# %%
paths = section.save_accuracy_vs_local_epochs(tables, figures, alphas, dataset, figures_dir)

# %% [markdown]
# ## Summary (printed plainly)
# Our mean per (figure, α, method, E); then the papers' claims: each distillation method beats
# every client (DENSE Fig. 3, FedHydra Fig. 9), and FedAvg peaks at a small E.

# %%
print(section.local_epochs_summary(tables, figures))
