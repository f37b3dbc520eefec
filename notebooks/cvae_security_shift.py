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
# # FedCVAE: security shift (Fig. 5), label-count noise (Table 8), decoded samples (Figs. 7–8)
#
# - **Fig. 5** (FedCVAE §3.3, §4.3; α = 0.05, m = 10): clients train their CVAEs with the prior
#   N(μ, I), μ a secret shared offline with the server. (⚑ marks a documented difference
#   between the paper's text and its authors' code; each becomes a preset.) The legitimate
#   server samples z around μ; an eavesdropper who intercepted every decoder and label count
#   but not μ samples z ~ U(−b, b) for b ∈ {1, 10, 100, 1000}. Both train the FedCVAE-Ens
#   classifier.
#   ⚑ `paper`: μ is a random point (μ ~ U(−s, s)^d, s = `mean_scale`; the paper only says "a
#   random position in real space"). ⚑ `authors_code`: the authors' code never shifts the prior
#   (μ = 0), so its figure — whose caption says "the prior is N(0, I)" — attacks standard-normal
#   decoders with boxes centred on the true μ. Fig. 5 has no table cells: its records use
#   table "Fig5", methods `fedcvae-ens-server` / `fedcvae-ens-attacker`, setting `b=<b>`.
# - **Table 8** (α = 0.01, m = 10): Gaussian noise on each uploaded class count, ε_c ~ N(0,
#   γ·n_k), γ ∈ {0.01, 0.05, 0.1}. ⚑ The paper calls γ·n_k the *variance*; read as the *standard
#   deviation* (much stronger noise) it is the specification's reading of the authors' code
#   (docs/spec.md §4), whose public release has no label-noise path. `noise_presets`: `paper` runs
#   the text's clients and server under each of `noise_modes`; `authors_code` runs FedCVAE's
#   code's client CVAE and server with the standard-deviation noise. γ = 0 is Table 1.
# - **Figs. 7–8**: decoded samples — client decoders near and far from the prior's centre
#   (what the server and the eavesdropper get), and the aggregated server decoder of FedCVAE-KD
#   beside decoder parameter averaging (Table 6's two columns, shown here, recorded by the
#   ablations notebook).
#
# Defaults: a quick CPU setting on the embedded FashionMNIST subset (resized to 32 px, 50 %
# subset as in FedCVAE) with few CVAE epochs, n_C = 1000 samples and 2 classifier epochs;
# compare orderings and trends, not exact numbers. `run_all.py --full` injects the papers'
# settings (`notebooks/grids/full/cvae_security_shift.yaml`).

# %% tags=["parameters"]
from typing import Optional

dataset: str = "fmnist_embedded"
seeds: list[int] = [1]
num_clients: int = 10
partition_seed: int = 1693
security_alpha: float = 0.05
bounds: list[int] = [1, 10, 100, 1000]
presets: list[str] = ["paper", "authors_code"]
mean_scale: float = 10.0
alpha: float = 0.01
gammas: list[float] = [0.0, 0.01, 0.05, 0.1]
noise_modes: list[str] = ["variance", "std"]
noise_methods: list[str] = ["fedcvae-ens"]
noise_presets: list[str] = ["paper", "authors_code"]
grid_methods: list[str] = ["kd", "param-avg"]
grid_per_class: int = 2
cvae_epochs: Optional[int] = 2
num_samples: int = 1000
kd_samples: int = 1000
kd_epochs: Optional[int] = 2
classifier_epochs: Optional[int] = 2
device: str = "cpu"
data_root: Optional[str] = None
cache_dir: Optional[str] = None
figures_dir: str = "../figures_interactive/cvae_security_shift"

# %%
from ofl_core.experiment import ExperimentConfig
from ofl_core.plots import save_figure
from ofl_core.results import record
from ofl_core.sections import cvae_security_shift as sec
from ofl_core.sections.fedcvae_runs import fedcvae_data_settings
from ofl_core.tables import run_tables

base = ExperimentConfig(dataset=dataset, partition="dirichlet_fedcvae", num_clients=num_clients,
                        device=device, data_root=data_root, cache_dir=cache_dir,
                        experiment="cvae_security_shift", **fedcvae_data_settings(dataset))
sizes = {"num_samples": num_samples, "kd_samples": kd_samples, "kd_epochs": kd_epochs,
         "classifier_epochs": classifier_epochs}

# %% [markdown]
# ## Fig. 5: legitimate server vs eavesdropper
# The clients' CVAEs are trained with the paper preset (only μ differs between the two
# variants), so the comparison isolates the prior shift.

# %%
security_records, security_setups = sec.security_experiments(
    base, seeds, presets, alpha=security_alpha, partition_seed=partition_seed, bounds=bounds,
    mean_scale=mean_scale, cvae_epochs=cvae_epochs, num_samples=num_samples,
    classifier_epochs=classifier_epochs)

# %% [markdown]
# ## Table 8: noise on the uploaded label counts
# Noise is applied at upload, so every γ reuses the same trained decoders (cached). The γ = 0
# runs are Table 1's cells (α = 0.01).

# %%
noise = run_tables(sec.noise_runs(base, seeds, gammas, noise_modes, noise_methods, alpha=alpha,
                                  partition_seed=partition_seed, cvae_epochs=cvae_epochs,
                                  sizes=sizes, presets=noise_presets))
record(security_records + noise.records)

# %% [markdown]
# ## Fig. 5 beside the paper
# The paper prints no numbers for Fig. 5; its text: "Even a good guess of U(−10, 10) for a
# normal prior of N(0, I) results in a 3–30 % point decrease in accuracy depending on the
# dataset. A more realistic guess of U(−1000, 1000) results in a 33–67 % point decrease."
# The server's reference is FedCVAE-Ens in Table 1 at α = 0.05. The figure: our server's
# accuracy (flat: it does not depend on b) and the eavesdropper's against b, per preset; below
# it, the attacker's accuracy per b and preset, and each preset's gap to the server.

# %%
save_figure(sec.plot_fig5(security_records, f"FedCVAE Fig. 5: {dataset}, α={security_alpha}, "
                          f"m={num_clients}"), figures_dir, "fig5_server_vs_attacker")
sec.fig5_summary(security_records, security_alpha, num_clients)

# %% [markdown]
# ## Table 8 beside the paper
# The paper's Table 8 prints FedCVAE-Ens only (its KD column is empty); `label_noise=std` is
# γ·n_k as the standard deviation on the text's decoders, `authors_code` the same noise on the
# code's decoders and server. The γ = 0 row
# is Table 1 (α = 0.01), below. The figure: accuracy against γ, ours solid, the paper's
# dashed.

# %%
t8 = noise.compare("fedcvae", "T8")
path = sec.save_table8(t8, f"FedCVAE Table 8: {dataset}", figures_dir)
t8

# %% [markdown]
# Without noise (γ = 0): FedCVAE-Ens beside its Table 1 cell at α = 0.01.

# %%
noise.compare("fedcvae", "T1")

# %% [markdown]
# ## Figs. 7–8: decoded samples
# Fig. 7-like (one figure per preset): a column per class, decoded by the client decoder that
# holds most of that class (named under the class); a block of `grid_per_class` rows per
# sampler: z around μ (what the legitimate server draws, ±3 std), then the eavesdropper's
# z ~ U(−b, b) for each b. The further the eavesdropper samples from μ, the less its images
# look like the classes.
#
# Fig. 8-like: the aggregated server decoder — decoder parameter averaging vs knowledge
# distillation (FedCVAE-KD) — at α = 0.01, beside the client decoders it summarises. Each
# server decoder is sampled as FedCVAE-KD samples it (y uniform, truncated normal of FedCVAE's
# App. C Table 4 KD width), a column per class, a block of rows per decoder. Below the
# figures: their classifiers' accuracies beside Table 6, shown, not recorded (Table 6 belongs to the
# ablations notebook).

# %%
sec.save_client_samples(security_setups, bounds, grid_per_class, figures_dir)
sec.server_decoder_grid(base, grid_methods, alpha=alpha, seed=seeds[0],
                        partition_seed=partition_seed, cvae_epochs=cvae_epochs, sizes=sizes,
                        per_class=grid_per_class, figures_dir=figures_dir)
