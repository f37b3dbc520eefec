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
dataset = "fmnist_embedded"
alpha = 0.1
num_clients = 5
seeds = [1]
arch = "cnn_mnist"
local_epochs = 10
server_epochs = 5
g_steps = 5
batch_size = 64
strat_steps = 3
strat_batch_size = 8
num_images = 64
baseline_test_images = 1000
device = "cpu"
data_root = None
cache_dir = None
figures_dir = "../figures/synthetic_data"

# %%
import dataclasses

import numpy as np
import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods, run_methods, setup_experiment
from ofl_core.plots import plot_histograms, plot_image_grid, save_figure
from ofl_core.privacy import distance_summary, nearest_neighbour_distances
from ofl_core.results import compare_with_paper, record

server = {"epochs": server_epochs, "g_steps": g_steps, "batch_size": batch_size,
          "kd_batch_size": batch_size, "strat_steps": strat_steps,
          "strat_batch_size": strat_batch_size, "num_images": num_images}
methods = configure_methods(["dense", "fedhydra"], common=server)
records, runs = [], []
for seed in seeds:
    cfg = ExperimentConfig(
        dataset=dataset, partition="dirichlet", alpha=alpha, num_clients=num_clients, seed=seed,
        local=LocalTrainConfig(arch=arch, epochs=local_epochs), device=device,
        data_root=data_root, cache_dir=cache_dir, experiment="synthetic_data",
        paper="dense", table="T1",
    )
    setup = setup_experiment(cfg)
    recs, results = run_methods(setup, methods)
    # the FedHydra row belongs to FedHydra's Table 1 (same dataset, α and m)
    records += [dataclasses.replace(r, paper="fedhydra") if r.method == "fedhydra" else r
                for r in recs]
    runs.append((setup, results))
    print(f"seed {seed}: clients {[round(a, 1) for a in setup.client_accs]}, "
          f"ensemble {setup.ensemble_acc:.2f}; "
          + ", ".join(f"{k} last {v.last_acc:.2f} / best {v.best_acc:.2f}"
                      for k, v in results.items()))
record(records)

# %% [markdown]
# ## Accuracy of the runs that made the images, beside the papers' Table 1 cells

# %%
compare_with_paper([r for r in records if r.paper == "dense"], "dense", "T1")

# %%
compare_with_paper([r for r in records if r.paper == "fedhydra"], "fedhydra", "T1")

# %% [markdown]
# ## DENSE Fig. 6 / FedHydra Fig. 12: real training images and synthetic images
# Top: one real training image per class (from the clients' data). Below: the last synthetic
# batch of each method (DENSE: the epoch's lowest-loss batch that joined its pool; FedHydra: the
# last generator step's batch), sorted by the label the generator was asked for.

# %%
setup, results = runs[0]
ds = setup.dataset
client_idx = torch.as_tensor(np.concatenate(setup.partition.client_indices))
x_clients, y_clients = ds.x_train[client_idx], ds.y_train[client_idx]
real = torch.stack([x_clients[y_clients == c][0] for c in range(ds.num_classes)
                    if bool((y_clients == c).any())]).float() / 255
fig = plot_image_grid(real.numpy(), nrow=len(real), title=f"real {ds.name} training images")
save_figure(fig, figures_dir, "real_images")
for name, res in results.items():
    labels = res.extras.get("image_labels")
    print(f"{name}: {len(res.images)} images, labels {labels}")
    fig = plot_image_grid(res.images.numpy(), nrow=16,
                          title=f"{name} synthetic images ({ds.name}, α={alpha})")
    save_figure(fig, figures_dir, f"{name}_synthetic")

# %% [markdown]
# ## Privacy check: distance of each synthetic image to its nearest real training image
# Baseline: the same nearest-training-image distance for real test images (a random subset of
# `baseline_test_images`). `frac_below_baseline_p5` = the share of images closer to a training
# image than 95% of real test images are (≈ 0.05 for the baseline itself; ≫ 0.05 would mean
# near-copies of client data).

# %%
dists: dict[str, list[torch.Tensor]] = {}
nearest: dict[str, torch.Tensor] = {}
for setup_s, results_s in runs:
    ds_s = setup_s.dataset
    train = ds_s.x_train[torch.as_tensor(np.concatenate(setup_s.partition.client_indices))]
    for name, res in results_s.items():
        d, idx = nearest_neighbour_distances(res.images, train, device=setup_s.device)
        dists.setdefault(f"{name} synthetic", []).append(d)
        nearest.setdefault(name, train[idx].float() / 255)
    g = torch.Generator().manual_seed(setup_s.cfg.seed)
    test = ds_s.x_test[torch.randperm(len(ds_s.x_test), generator=g)[:baseline_test_images]]
    d, _ = nearest_neighbour_distances(test, train, device=setup_s.device)
    dists.setdefault("real test (baseline)", []).append(d)
dists_all = {k: torch.cat(v) for k, v in dists.items()}
stats = distance_summary(dists_all, baseline="real test (baseline)")
print(f"L2 distance to the nearest real training image (pixels in [0, 1], "
      f"{ds.channels}×{ds.image_size}×{ds.image_size}):")
print(stats.round(3).to_string())
base_med = stats.loc["real test (baseline)", "median"]
for name in results:
    s = stats.loc[f"{name} synthetic"]
    near = s["frac_below_baseline_p5"]
    verdict = "possible near-copies" if near > 0.05 else "no sign of copied training images"
    print(f"{name}: closest synthetic image at {s['min']:.2f} (baseline median {base_med:.2f}); "
          f"{100 * near:.1f}% of its images are closer than 95% of real test images "
          f"-> {verdict}")

# %%
fig = plot_histograms({k: v.numpy() for k, v in dists_all.items()},
                      "nearest-real-training-image distance", "L2 distance (pixels in [0, 1])")
save_figure(fig, figures_dir, "nn_distance_histogram")

# %% [markdown]
# Each synthetic image (upper row of a pair) above its nearest real training image (lower row).

# %%
for name, res in results.items():
    n = min(16, len(res.images))
    pairs = torch.cat([res.images[:n], nearest[name][:n]])
    fig = plot_image_grid(pairs.numpy(), nrow=n,
                          title=f"{name}: synthetic (top) and nearest real training image (bottom)")
    save_figure(fig, figures_dir, f"{name}_nearest_real")
