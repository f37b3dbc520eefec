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
# # Multi-round: DENSE Table 5, FedHydra Tables 5 and 8–11
#
# The one-shot methods extended to T rounds: in every round the clients train E local epochs
# starting from the current global model, the server method builds the new global model from
# their uploads, and that model is sent back as every client's initialisation (homogeneous
# clients only). Round 1 is the one-shot setting with E local epochs.
# - **DENSE Table 5**: DENSE over T_c = 1…5 rounds, E = 10, α ∈ {0.1, 0.3, 0.5}.
# - **FedHydra Tables 5, 8–11**: FedAvg, FedDF, DENSE and FedHydra over T = 1…5 rounds, E = 50;
#   Table 5 at α = 0.1 (the paper states E there), Tables 8/9/10 at α = 0.5/0.3/0.01 and Table 11
#   on 2c/c (E not restated: their setting strings carry only the round).
#
# Every method runs its own chain of rounds on the same partition; round 1's clients are shared,
# and a chain asked for by two tables with the same config runs once. DENSE beside FedHydra
# carries FedHydra's stratification sizes (unused by DENSE's own teacher, but part of its
# config), so DENSE's Table 5 chain and FedHydra's DENSE chain are two runs.
# DENSE and FedHydra start each round's student from the previous global model (the papers do
# not say; docs/decisions/notebooks.md#nb-multi-round); FedAvg averages clients that started
# from it; FedDF starts from that average. Driver: `ofl_core.multi_round` (one driver for
# every server method), declared as runs with `rounds` (`ofl_core.tables.Run`).
#
# Defaults: a quick CPU setting on the embedded FashionMNIST subset (10k training images), 2
# rounds of 2 local epochs, a few server epochs of a few generator steps — compare orderings
# and trends, not exact numbers. Neither paper prints FMNIST cells for these tables (CIFAR10,
# SVHN only), so the figure also draws the paper's curves for those datasets.
# `run_all.py --full` injects the papers' settings.

# %% tags=["parameters"]
from typing import Optional, Union

dataset: str = "fmnist_embedded"
num_clients: int = 5
seeds: list[int] = [1]
arch: str = "cnn_mnist"
rounds: int = 2
dense_alphas: list[float] = [0.1]
dense_local_epochs: int = 2
fedhydra_partitions: list[Union[float, str]] = [0.1]
fedhydra_local_epochs: int = 2
fedhydra_methods: list[str] = ["fedavg", "dense", "fedhydra"]
# server sizes as method-config fields (a key left out, or None: each method's paper
# default); ngf 32 is a quick CPU generator width, the paper's 64 is in the full grids
server: dict = {"epochs": 4, "steps_per_epoch": 3, "batch_size": 64, "ngf": 32, "strat_steps": 3,
                "strat_batch_size": 8}
device: str = "cpu"
data_root: Optional[str] = None
cache_dir: Optional[str] = None
figures_dir: str = "../figures_interactive/multi_round"

# %% [markdown]
# ## The runs, and the table each one serves
# One run per (seed, partition): DENSE alone for DENSE Table 5 (E = `dense_local_epochs`), and
# `fedhydra_methods` for FedHydra's table of that partition (E = `fedhydra_local_epochs`), each
# over `rounds` rounds (`Run(rounds=...)`: one record per round, setting
# `rounds=T;local_epochs=E`; FedHydra Tables 8–11 keep `rounds=T`). The server sizes apply to
# every method that has them (FedHydra's stratification steps to FedHydra only).

# %%
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.results import record
from ofl_core.sections import multi_round as section
from ofl_core.tables import Run, Serves, run_tables, server_settings

common = dict(dataset=dataset, num_clients=num_clients, device=device, data_root=data_root,
              cache_dir=cache_dir, experiment="multi_round")
no_strat = server_settings(server, stratification=False)  # DENSE's own table: no strat sizes
runs = [Run(ExperimentConfig(**section.partition_fields(a), seed=s, **common,
                             local=LocalTrainConfig(arch=arch, epochs=dense_local_epochs)),
            tuple(configure_methods(["dense"], common=no_strat)), (Serves("dense", "T5"),),
            rounds=rounds)
        for s in seeds for a in dense_alphas]
runs += [Run(ExperimentConfig(**section.partition_fields(p), seed=s, **common,
                              local=LocalTrainConfig(arch=arch, epochs=fedhydra_local_epochs)),
             tuple(configure_methods(fedhydra_methods, common=server_settings(server))),
             (section.fedhydra_serves(p),), rounds=rounds)
         for s in seeds for p in fedhydra_partitions]

# %%
tables = run_tables(runs)
record(tables.records)

# %% [markdown]
# ## Ours beside the papers, per table
# `paper` is the cell for our dataset and setting (n/a for FMNIST: these tables print CIFAR10
# and SVHN only); `ours_last`/`ours_best` the global model's last-/best-epoch accuracy
# after that round.

# %%
compared = section.comparisons(tables)

# %% [markdown]
# ## Accuracy vs round: ours (solid) and the paper (dashed; its datasets when ours has no cell)
# One panel per table, one colour per method in every panel; where the paper has no cell for
# our dataset, one line style per dataset it did run.

# %%
fig = section.plot_accuracy_vs_round(compared, dataset, figures_dir)

# %% [markdown]
# ## Summary (printed plainly): does accuracy grow with rounds?
# Mean over seeds per round: the global model's last/best accuracy, the round's teacher
# ensemble and its mean client accuracy; then round 1 → T per method.

# %%
summary = section.round_trends(tables)
