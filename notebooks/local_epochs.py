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
# E ∈ {1, 5}, a few server epochs of a few generator steps — compare orderings and trends,
# not exact numbers. `run_all.py --full` injects the papers' settings.

# %% tags=["parameters"]
dataset = "fmnist_embedded"
alphas = [0.1]
num_clients = 5
seeds = [1]
arch = "cnn_mnist"
local_epochs = [1, 5]
fig3_methods = ["fedavg", "dense"]
fig9_methods = ["fedavg", "dense", "fedhydra"]
server_epochs = 4
g_steps = 3
batch_size = 64
ngf = 32  # generator width (quick CPU default); the paper's 64 is in the full grids
strat_steps = 3
strat_batch_size = 8
device = "cpu"
data_root = None
cache_dir = None
figures_dir = "../figures/local_epochs"

# %%
import dataclasses

import matplotlib.pyplot as plt
import pandas as pd

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods, run_methods, setup_experiment
from ofl_core.plots import save_figure
from ofl_core.results import compare_with_paper, record, records_frame

server = {"epochs": server_epochs, "g_steps": g_steps, "steps_per_epoch": g_steps,
          "batch_size": batch_size, "kd_batch_size": batch_size, "ngf": ngf,
          "strat_steps": strat_steps, "strat_batch_size": strat_batch_size}
figures = {("dense", "Fig3"): fig3_methods, ("fedhydra", "Fig9"): fig9_methods}
methods = list(dict.fromkeys(fig3_methods + fig9_methods))
records, clients = [], []
for alpha in alphas:
    for seed in seeds:
        for E in local_epochs:
            cfg = ExperimentConfig(
                dataset=dataset, partition="dirichlet", alpha=alpha, num_clients=num_clients,
                seed=seed, local=LocalTrainConfig(arch=arch, epochs=E), device=device,
                data_root=data_root, cache_dir=cache_dir, experiment="local_epochs",
                setting=f"local_epochs={E}")
            setup = setup_experiment(cfg)
            recs, _ = run_methods(setup, configure_methods(methods, common=server))
            for (paper, table), names in figures.items():
                records += [dataclasses.replace(r, paper=paper, table=table)
                            for r in recs if r.method in names]
            clients += [{"alpha": alpha, "seed": seed, "E": E, "client": k, "acc": a}
                        for k, a in enumerate(setup.client_accs)]
            print(f"α={alpha} seed={seed} E={E}: clients "
                  f"{[round(a, 1) for a in setup.client_accs]}, "
                  f"ensemble {setup.ensemble_acc:.2f}; "
                  + ", ".join(f"{r.method} {r.last_acc:.2f} (best {r.best_acc:.2f})"
                              for r in recs))
record(records)

# %% [markdown]
# ## Our numbers per E (the paper has no table cells for these figures: `paper` is n/a)

# %%
for (paper, table) in figures:
    recs = [r for r in records if r.paper == paper and r.table == table]
    print(f"\n{paper} {table}")
    print(compare_with_paper(recs, paper, table)[
        ["alpha", "setting", "method", "ours_last", "ours_best", "ensemble", "paper"]
    ].to_string(index=False))

# %% [markdown]
# ## Accuracy vs local epochs E: each client (thin grey), FedAvg and the distillation methods

# %%
df = records_frame(records)
df["E"] = df["setting"].str.extract(r"local_epochs=(\d+)")[0].astype(int)
cl = pd.DataFrame(clients).groupby(["alpha", "E", "client"])["acc"].mean().reset_index()
for (paper, table), names in figures.items():
    fig, axes = plt.subplots(1, len(alphas), figsize=(5.2 * len(alphas), 3.6), squeeze=False)
    for ax, alpha in zip(axes[0], alphas, strict=True):
        for k, g in cl[cl.alpha == alpha].groupby("client"):
            ax.plot(g["E"], g["acc"], "-", color="0.65", lw=1,
                    label="clients" if k == 0 else None)
        d = df[(df.paper == paper) & (df.table == table) & (df.alpha == alpha)]
        for m in names:
            g = d[d.method == m].groupby("E")[["last_acc", "best_acc"]].mean()
            ax.plot(g.index, g["last_acc"], "-o", ms=4, label=f"{m} (last)")
        ens = d.groupby("E")["ensemble_acc"].mean()
        ax.plot(ens.index, ens.values, ":", color="k", label="ensemble (teacher)")
        ax.set_xlabel("local epochs E")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_xticks(sorted(df["E"].unique()))
        ax.set_title(f"{paper} {table}, {dataset}, α={alpha}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, figures_dir, f"{paper}_{table.lower()}_accuracy_vs_local_epochs")

# %% [markdown]
# ## Summary (printed plainly)

# %%
summary = df.groupby(["paper", "table", "alpha", "method", "E"])[["last_acc", "best_acc"]].mean()
print(summary.round(2).to_string())
best_client = cl.groupby(["alpha", "E"])["acc"].max()
for (paper, table), names in figures.items():
    for m in names:
        if m == "fedavg":
            continue
        s = df[(df.paper == paper) & (df.table == table) & (df.method == m)]
        s = s.groupby(["alpha", "E"])["last_acc"].mean()
        beats = int((s > best_client.loc[s.index]).sum())
        print(f"{paper} {table}: {m} beats the best client at {beats}/{len(s)} (α, E) settings")
    fa = df[(df.paper == paper) & (df.table == table) & (df.method == "fedavg")]
    if len(fa):
        peak = fa.groupby("E")["last_acc"].mean()
        print(f"{paper} {table}: FedAvg peaks at E = {peak.idxmax()} ({peak.max():.2f})")
