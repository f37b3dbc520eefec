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
# # Two classes per client ("2c/c"): FedHydra Table 2, Figs. 6b, 7 and 8
#
# FedHydra's extreme partition: each of the m = 5 clients holds k = 2 disjoint classes.
# - **Table 2**: FedAvg, FedDF, DENSE and FedHydra on the same 2c/c clients.
# - **Fig. 6b**: the stratified weights Ū_r (classes × clients) found by model stratification;
#   the paper shows one block per client — its two classes carry its largest weights.
# - **Fig. 7**: test accuracy over the server's distillation epochs, FedHydra vs DENSE (and FedDF).
# - **Fig. 8**: the averaging ensemble (AE, DENSE's teacher: mean of logits) vs the stratified
#   aggregation ensemble (SA, label-free form P_ij = Σ_k Ū_r(j,k)·Ū_c(j,k)·P_k[i,j]) on real test
#   data, over Dirichlet α and 2c/c.
#
# FedHydra is run twice: `sa_rescale=False` (Eqs. 8–11 literally; the SA logits are ≈ 1/C of the
# mean logits, a softmax temperature of C) and `sa_rescale=True` (SA logits × C), as the
# specification asks (docs/spec.md §4); its records carry preset `paper` and `paper+sa_rescale`.
# The SA *ensemble accuracy* is the same for both (rescaling keeps the argmax).
#
# Defaults: a quick CPU setting on the embedded FashionMNIST subset (10k training images), few
# local epochs, a few server epochs of a few generator steps and a short stratification —
# compare orderings, not exact numbers. `run_all.py --full` injects the paper's settings.
#
# Later sections ask *which reading of FedHydra reproduces its claims, and why the literal one
# collapses*: what model stratification measured on these clients, and (the last section) a
# teacher × distillation-regime table on the same clients as DENSE, at the quick scale and at
# the paper's data (read from the committed results of
# `scripts/evidence/fedhydra_teacher_regime.py`). The full 200-epoch paper-scale run of Table 2
# is a shipped record (`results/two_classes_per_client/a717a34fab6b.json`: FedAvg and FedDF
# reproduce, DENSE is 13.5 above the paper, FedHydra's paper preset 28.4 below;
# docs/decisions/paper-gaps.md). FedHydra in the runs above is always the paper preset.

# %% tags=["parameters"]
from typing import Optional

dataset: str = "fmnist_embedded"
num_clients: int = 5
classes_per_client: int = 2
seeds: list[int] = [1]
arch: str = "cnn_mnist"
local_epochs: int = 10
methods: list[str] = ["fedavg", "feddf", "dense", "fedhydra"]
sa_rescale: list[bool] = [False, True]
# server sizes as method-config fields (a key left out, or None: each method's paper
# default); ngf 32 is a quick CPU generator width, the paper's 64 is in the full grids
server: dict = {"epochs": 5, "steps_per_epoch": 5, "batch_size": 32, "ngf": 32, "strat_steps": 3,
                "strat_batch_size": 8}
fig8_alphas: list[float] = [0.1]
device: str = "cpu"
data_root: Optional[str] = None
cache_dir: Optional[str] = None
figures_dir: str = "../figures_interactive/two_classes_per_client"
# None = results/fedhydra_teacher_regime.json (the quick-scale teacher × regime table)
teacher_regime_results: Optional[str] = None
# None = results/fedhydra_teacher_regime_fmnist_full.json (the paper-data teacher × regime run)
teacher_regime_full_results: Optional[str] = None

# %% [markdown]
# ## The runs
# One 2c/c partition and one set of clients per seed; every method runs on them and its records
# fill FedHydra Table 2. The server sizes (`server`: `epochs`, `steps_per_epoch`, `batch_size`,
# `ngf`; FedHydra's stratification steps) apply to every method that has them. Fig. 8 also needs
# clients on each Dirichlet α of `fig8_alphas`: those runs train (or load) the clients only — no
# server method, no record.

# %%
from ofl_core.clients import LocalTrainConfig
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.plots import save_paper_vs_ours
from ofl_core.results import record
from ofl_core.sections import two_classes_per_client as section
from ofl_core.sections.teacher_regime import RESULTS_FULL
from ofl_core.tables import Run, Serves, run_tables, server_settings

common = dict(dataset=dataset, num_clients=num_clients, local=LocalTrainConfig(
    arch=arch, epochs=local_epochs), device=device, data_root=data_root, cache_dir=cache_dir,
    experiment="two_classes_per_client")
hydra = [("fedhydra", c, section.hydra_label(r)) for r in sa_rescale if "fedhydra" in methods
         for _, c in configure_methods(["fedhydra"], common=server_settings(server, sa_rescale=r))]
others = tuple(configure_methods([m for m in methods if m != "fedhydra"],
                                common=server_settings(server, stratification=False)))
runs = [Run(ExperimentConfig(partition="classes_per_client", alpha=None, seed=s,
                             classes_per_client=classes_per_client, **common),
            others + tuple(hydra), (Serves("fedhydra", "T2"),)) for s in seeds]
runs += [Run(ExperimentConfig(partition="dirichlet", alpha=a, seed=s, **common), (), ())
         for s in seeds for a in fig8_alphas]

# %%
tables = run_tables(runs)
record(tables.records)

# %% [markdown]
# ## FedHydra Table 2 (2c/c): ours beside the paper
# `paper` is the paper's FMNIST cell for the embedded subset (labelled FMNIST); both FedHydra
# rows (literal SA and `sa_rescale`) sit beside the same paper number. The table, then the
# paper's number beside ours per method.

# %%
t2 = tables.compare("fedhydra", "T2")
save_paper_vs_ours(t2, f"FedHydra Table 2 (2c/c), {dataset} (ours) vs paper", figures_dir,
                   "fedhydra_t2_paper_vs_ours")
t2

# %% [markdown]
# ## Fig. 6b: stratified weights Ū_r (rows: classes, columns: clients)
# Ū_r (of the first seed's FedHydra run) normalises each class row over the clients. Block
# check: for every client, are its two largest weights (in its column) exactly its own two
# classes?

# %%
check = section.fig6b_block_check(tables, tables.setups[0], figures_dir,
                                  f"FedHydra Ū_r, 2c/c, {dataset}")

# %% [markdown]
# ## What stratification measured
# Alg. 2 trains one fresh generator per (client, class) against that client alone and records
# the loss curve L_kj; Eq. 2 turns it into u = (max L − min L) / min L, which grows like
# 1/min L. Left: the curves (log scale; solid = a class the client holds). Right: Ū_c, the
# weights Eq. 8 multiplies each client's logits by. Ū_r finds each class's owner (Fig. 6b), but
# Ū_c is nearly winner-take-all between a client's two own classes: the class the fresh
# generator's grey images already fall into starts near zero loss, falls least in relative
# terms and gets a tiny weight — so Eq. 8 silences it. The printed ratios are max / min of Ū_c
# between each client's own classes (1 = equal).

# %%
strat_frame = section.stratification_diagnostics(
    tables, tables.setups[0], figures_dir, f"Alg. 2 loss curves and Ū_c, 2c/c, {dataset}")

# %% [markdown]
# ## Fig. 7: test accuracy over distillation epochs (first seed; FedAvg has no epochs)
# One curve per distillation method: the server model's test accuracy after each epoch.

# %%
curves = section.fig7_curves(tables, figures_dir,
                             f"2c/c, {dataset}: test accuracy of the server model")

# %% [markdown]
# ## Fig. 8: averaging ensemble (AE) vs stratified-aggregation ensemble (SA) on real test data
# For 2c/c the numbers come from FedHydra's own stratification (its result extras); the
# Dirichlet clients of `fig8_alphas` are stratified here with the same settings.

# %%
fig8 = section.fig8_ae_vs_sa(
    tables, server=server,
    classes_per_client=classes_per_client, figures_dir=figures_dir,
    title=f"FedHydra Fig. 8 on {dataset}: ensemble accuracy on real test data")

# %% [markdown]
# ## Verdicts (printed plainly; a negative result is a result)

# %%
summary = section.verdicts(tables, fig8, sa_rescale if "fedhydra" in methods else [])

# %% [markdown]
# ## Which reading of FedHydra reproduces? Teacher × distillation regime
# Each row is a server on the same clients and the same stratification: a teacher (how the
# clients' outputs are combined: DENSE's mean of logits, FedHydra's SA as written, SA on
# probabilities, SA without Ū_c — label-free or with Eq. 10's label row —, the mean of
# softmax, and the *oracle*, which uses the true class owners and is a diagnostic, never a
# method) and a distillation regime (the paper's intermediate batches, a replay pool of them,
# Alg. 1 read literally with one step per epoch, DENSE's best-batch pool). The teacher panel
# measures each teacher alone on the test set: label-free accuracy, accuracy when fed the true
# test labels (*leaky*: a server never has them) and the random-label echo rate (how often the
# prediction is just the label it was given; 10 % for a label-free teacher).
#
# **Verdict on the committed results** (quick scale: embedded FMNIST, 10 local epochs, clients
# trained with bf16 autocast — the file's `clients.precision`; the last accuracy, mean ± std over
# seeds 1–3; the 20-epoch column and the details are in
# docs/decisions/fedhydra.md#fedhydra-readings). FedHydra
# as written (the paper preset, `sa / intermediate`) reaches 11.1 ± 0.2 % on 2c/c against
# DENSE's 20.7 ± 1.8 % (below DENSE in 3 of 3 seeds; 3.3 vs 29.7 with 20 server epochs), and
# 7.8 ± 5.7 vs 26.0 ± 13.5 at α = 0.1. SA as written (on logits, with Ū_c) beats DENSE in no
# regime: 9.2–12.0 on 2c/c in all four. Other readings of SA pass DENSE's mean within the seeds'
# spread (SA on probabilities from DENSE's pool 24.1 ± 6.2; Eq. 2's u as its logarithm on fresh
# batches 24.2 ± 5.0). The best FedHydra variant at
# 20 epochs, above DENSE on 2c/c at both server budgets, is SA without Ū_c distilled from
# DENSE's pool (`sa_no_uc / pool`: 26.4 ± 12.6, only seed 1 above DENSE; 42.6 ± 6.2 at 20
# epochs, 2 of 3 seeds), but not at α = 0.1 (21.2 ± 8.4); the same teacher in DENSE's own loop
# does at least as well (27.3 ± 6.6; 46.0 ± 6.7), so at this scale the gain is the teacher's, not
# FedHydra's loop (at the paper's data, one seed, FedHydra's loop is ahead: see below). The
# teacher panel shows why: label-free, SA as written (23.8 %) is below DENSE's mean of logits
# (32.7 %); without Ū_c it reaches 49.0 %. With `teacher_regime_results` pointing at
# another file, the printed tables below are that file's, not these numbers.
#
# **The same check at the paper's scale: full FashionMNIST 2c/c** (the second table below). Before
# concluding on Table 2, the best combination and the paper preset must be checked at the paper's
# sizes: `scripts/evidence/fedhydra_teacher_regime.py --scale paper` runs DENSE, the paper preset
# and `sa_no_uc / pool` (in FedHydra's loop and in DENSE's) on full FashionMNIST 2c/c (60k training
# images) with the paper's 200 local epochs, T_G = 30 generator steps of 128 images, the 30 × 128
# stratification probe and ngf 64 — but fewer server epochs than the paper's T_g = 200 (the file's
# `scale` entry says what was reduced), one seed, so no std. The committed run (seed 1, 10 server
# epochs) agrees with the quick tables on the teacher: SA as written is below the mean of logits
# and equals the oracle × Ū_c, the paper preset ends far below DENSE, and `sa_no_uc / pool` beats
# DENSE; unlike them, that teacher does better in FedHydra's loop than in DENSE's (46.44 against
# 42.99)
# (docs/decisions/fedhydra.md#fedhydra-t2-paper-scale). Without the results file the cell says that
# it is missing.

# %%
teacher_regime = section.teacher_regime_report(
    teacher_regime_results, figures_dir, f"2c/c, {dataset}: teacher / regime (mean of seeds)")
teacher_regime_full = section.teacher_regime_report(
    teacher_regime_full_results, figures_dir,
    "2c/c, full FashionMNIST, paper sizes: teacher / regime", name="teacher_regime_2cc_full",
    default=RESULTS_FULL, command="scripts/evidence/fedhydra_teacher_regime.py --scale paper")
