"""Tests of ofl_core.sections.fedcvae_runs (FedCVAE experiments on the shared orchestration) and
ofl_core.plots.plot_accuracy_vs, on a tiny synthetic 4-class 32×32 dataset where each client
holds one class (a bright square in quadrant c)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from ofl_core.clients import LocalTrainConfig
from ofl_core.data.datasets import ImageDataset
from ofl_core.data.partition import make_partition
from ofl_core.experiment import ExperimentConfig, setup_experiment
from ofl_core.fedcvae.clients import CVAETrainConfig, secret_prior_mean
from ofl_core.fedcvae.samples import client_decoder_samples, decode_classes, server_decoder
from ofl_core.fedcvae.sampling import truncated_sampler, uniform_sampler
from ofl_core.fedcvae.server import FedCVAEEnsConfig
from ofl_core.plots import plot_accuracy_vs
from ofl_core.registry import method_config
from ofl_core.sections.fedcvae_runs import (
    client_config,
    fedcvae_data_settings,
    run_fedcvae_experiment,
    run_security,
)

C = 4
pytestmark = pytest.mark.usefixtures("one_thread")


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % C
    x = torch.rand(n, 1, 32, 32, generator=g) * 40
    corner = torch.tensor([(3, 3), (3, 19), (19, 3), (19, 19)])[y]
    rows, cols = torch.arange(32).view(1, 32, 1), torch.arange(32).view(1, 1, 32)
    r0, c0 = corner[:, 0].view(n, 1, 1), corner[:, 1].view(n, 1, 1)
    mask = (rows >= r0) & (rows < r0 + 10) & (cols >= c0) & (cols < c0 + 10)
    x[:, 0] = torch.where(mask, torch.full_like(x[:, 0], 230.0), x[:, 0])
    return x.round().clamp(0, 255).to(torch.uint8), y


@pytest.fixture(scope="module")
def ds() -> ImageDataset:
    xtr, ytr = synthetic(240, 0)
    xte, yte = synthetic(120, 1)
    return ImageDataset("synthetic", xtr, ytr, xte, yte, C)


def config(**kw: object) -> ExperimentConfig:
    base = {"dataset": "fmnist", "partition": "classes_per_client", "classes_per_client": 1,
            "alpha": None, "num_clients": 4, "seed": 0, "workers": 1, "progress": False,
            "paper": "fedcvae", "table": "T2", "experiment": "test"}
    return ExperimentConfig(**{**base, **kw})  # type: ignore[arg-type]


CVAE = {"epochs": 4, "latent_dim": 4, "batch_size": 16, "lr": 3e-3}


def test_data_settings_and_client_configs() -> None:
    assert fedcvae_data_settings("fmnist_embedded") == {"resize": 32, "subset": 0.5}
    assert fedcvae_data_settings("mnist") == {"resize": 32, "subset": 0.5}
    assert fedcvae_data_settings("svhn") == {"resize": None, "subset": 1.0}
    with pytest.raises(ValueError, match="mnist, fmnist or svhn"):
        fedcvae_data_settings("cifar10")
    ens = client_config("fedcvae-ens", "fmnist")
    kd = client_config("fedcvae-kd", "fmnist_embedded", cvae={"epochs": 3, "lr": None})
    assert isinstance(ens, CVAETrainConfig) and (ens.latent_dim, ens.epochs) == (10, 25)
    assert (kd.latent_dim, kd.epochs, kd.lr) == (100, 3, 1e-3)  # None = the paper's value
    code = client_config("param-avg", "mnist", "authors_code")
    assert not code.condition_encoder and code.label_noise == "std"
    avg = client_config("fedavg", "svhn", local={"epochs": 2})
    assert isinstance(avg, LocalTrainConfig) and avg.arch == "mcmahan_cnn" and avg.epochs == 2
    assert client_config("fedoneshot", "mnist").epochs == 15
    with pytest.raises(ValueError, match="not a method of FedCVAE"):
        client_config("dense", "fmnist")


def test_setup_uses_its_partition_seed(ds: ImageDataset) -> None:
    cfg = config(partition="dirichlet_fedcvae", alpha=0.5, num_clients=3, seed=5)
    cvae = CVAETrainConfig(**{**CVAE, "epochs": 0})
    a = setup_experiment(cfg, cvae, dataset=ds)
    b = setup_experiment(cfg, cvae, partition_seed=9, dataset=ds)
    ref = make_partition(ds.y_train.numpy(), 3, "dirichlet_fedcvae", alpha=0.5, seed=9,
                         num_classes=C)
    assert np.array_equal(b.partition.counts, ref.counts)
    assert not np.array_equal(a.partition.counts, b.partition.counts)
    assert all(u.kind == "decoder" for u in b.uploads)
    assert b.ensemble_acc is None and b.client_accs == []  # decoders: no classifier


def test_run_groups_methods_by_client_training(ds: ImageDataset) -> None:
    methods = [("fedcvae-ens", method_config("fedcvae-ens", num_samples=200,
                                             classifier_epochs=2)),
               ("fedavg", method_config("fedavg")), ("fedoneshot", method_config("fedoneshot"))]
    recs, results, setups = run_fedcvae_experiment(
        config(), methods, cvae=CVAE, local={"epochs": 1}, dataset=ds)
    assert [r.method for r in recs] == ["fedcvae-ens", "fedavg", "fedoneshot"]
    assert set(results) == {"fedcvae-ens", "fedavg", "fedoneshot"}
    assert setups["fedavg"] is setups["fedoneshot"]  # equal local training: shared clients
    assert setups["fedcvae-ens"] is not setups["fedavg"]
    assert np.array_equal(setups["fedcvae-ens"].partition.counts,
                          setups["fedavg"].partition.counts)
    ens, avg = recs[0], recs[1]
    assert ens.ensemble_acc is None and ens.best_client_acc is None
    assert isinstance(avg.ensemble_acc, float) and avg.best_client_acc is not None
    assert ens.last_acc > 60.0  # decoders of one class each, combined: far above chance (25)
    assert (ens.paper, ens.table, ens.num_clients) == ("fedcvae", "T2", 4)
    json.dumps([r.to_dict() for r in recs], allow_nan=False)  # records are plain JSON


def test_security_records_and_sample_grids(ds: ImageDataset) -> None:
    mu = secret_prior_mean(4, 20.0, seed=3)
    cfg = config(table="Fig5")
    setup = setup_experiment(cfg, CVAETrainConfig(**CVAE, prior_mean=mu), dataset=ds)
    recs, res = run_security(setup, mu, (1.0, 1000.0),
                             FedCVAEEnsConfig(num_samples=200, classifier_epochs=2))
    assert [(r.method, r.setting) for r in recs] == [
        ("fedcvae-ens-server", ""), ("fedcvae-ens-attacker", "b=1"),
        ("fedcvae-ens-attacker", "b=1000")]
    assert {(r.paper, r.table, r.preset) for r in recs} == {("fedcvae", "Fig5", "paper")}
    assert recs[0].last_acc == round(res.server_acc, 4) and recs[0].best_acc >= recs[0].last_acc
    assert recs[0].last_acc > recs[1].last_acc  # U(−1, 1) misses N(μ, I)
    json.dumps([r.to_dict() for r in recs], allow_nan=False)

    near = client_decoder_samples(setup.uploads, 2, truncated_sampler(3.0, mu, "cpu"), seed=0)
    far = client_decoder_samples(setup.uploads, 2, uniform_sampler(1.0, "cpu"), seed=0)
    assert near.shape == far.shape == (2 * C, 1, 32, 32)
    assert 0.0 <= float(near.min()) and float(near.max()) <= 1.0
    # sample-major: image c of each row is class c, drawn by the client that holds class c
    # (client c here), so its square sits in quadrant c
    quad = [near[i, 0, r:r + 16, c:c + 16].mean() for i, (r, c) in
            enumerate([(0, 0), (0, 16), (16, 0), (16, 16)])]
    other = [near[i, 0, 16 - r:32 - r, 16 - c:32 - c].mean() for i, (r, c) in
             enumerate([(0, 0), (0, 16), (16, 0), (16, 16)])]
    assert all(q > o for q, o in zip(quad, other, strict=True))


def test_server_decoder_of_kd_and_param_avg(ds: ImageDataset) -> None:
    cfgs = [(m, method_config(m, num_samples=64, classifier_epochs=1, kd_samples=64,
                              kd_epochs=1)) for m in ("kd", "param-avg")]
    _, results, setups = run_fedcvae_experiment(config(table="T6"), cfgs, cvae=CVAE, dataset=ds)
    uploads = setups["kd"].uploads
    for res in results.values():
        dec = server_decoder(res, uploads)
        x = decode_classes(dec, 3, truncated_sampler(2.0, None, "cpu"), seed=1)
        assert x.shape == (3 * C, 1, 32, 32) and not dec.training
    bad = dataclasses.replace(results["kd"], extras={})
    with pytest.raises(ValueError, match="no server decoder"):
        server_decoder(bad, uploads)


def test_plot_accuracy_vs() -> None:
    frame = pd.DataFrame({"num_clients": [5, 10, 5, 10], "method": ["a", "a", "b", "b"],
                          "ours_last": [50.0, 40.0, 30.0, 35.0],
                          "paper": [60.0, float("nan"), float("nan"), float("nan")]})
    fig = plot_accuracy_vs(frame, "num_clients", order=["b", "a"])
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert labels == ["a (ours)", "a (paper)", "b (ours)"]  # b has no paper value: no line
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert colours["a (ours)"] == colours["a (paper)"] != colours["b (ours)"]


def test_fedcvae_fedavg_is_weighted_by_client_sizes_under_both_presets() -> None:
    """FedCVAE's code weights its FedAvg by n_k; FedAvg's own ``authors_code`` preset (DENSE's
    code) does not, so FedCVAE's runs switch it on and leave every other config untouched."""
    from ofl_core.experiment import configure_methods
    from ofl_core.sections.fedcvae_runs import fedcvae_runs, fedcvae_weighting

    methods = configure_methods(["fedavg", "fedoneshot"], ["paper", "authors_code"])
    assert [getattr(c, "weighted", None) for n, c in methods if n == "fedavg"] == [True, False]
    runs = fedcvae_runs(config(), methods, [])
    ran = [m for r in runs for m in r.methods]
    assert sorted((n, c.preset, c.weighted) for n, c, *_ in ran if n == "fedavg") == [
        ("fedavg", "authors_code", True), ("fedavg", "paper", True)]
    kept = [m for m in methods if not (m[0] == "fedavg" and m[1].preset == "authors_code")]
    assert all(fedcvae_weighting(m)[1] is m[1] for m in kept)
    assert {c for n, c, *_ in ran if n == "fedoneshot"} == {c for n, c in methods
                                                            if n == "fedoneshot"}


def test_table8_noise_runs_per_preset_and_mode() -> None:
    """Table 8's runs: the text's decoders under each noise mode (variance = ``paper``, std =
    ``label_noise=std``), the code's decoders and server with std noise (``authors_code``);
    γ = 0 is one exact-count run per preset, filed as Table 1."""
    from ofl_core.sections.cvae_security_shift import noise_runs

    base = config(partition="dirichlet_fedcvae", alpha=0.01, num_clients=10)
    runs = noise_runs(base, [1], [0.0, 0.1], ["variance", "std"], ["fedcvae-ens"], alpha=0.01,
                      partition_seed=1693, cvae_epochs=None, sizes={},
                      presets=["paper", "authors_code"])
    got = [(r.serves[0].table, r.methods[0][2], r.methods[0][1].preset, r.clients.preset,
            r.clients.label_noise_gamma, r.clients.label_noise) for r in runs]
    assert got == [
        ("T1", "paper", "paper", "paper", 0.0, "variance"),
        ("T1", "authors_code", "authors_code", "authors_code", 0.0, "std"),
        ("T8", "paper", "paper", "paper", 0.1, "variance"),
        ("T8", "label_noise=std", "paper", "paper", 0.1, "std"),
        ("T8", "authors_code", "authors_code", "authors_code", 0.1, "std"),
    ]
    assert {r.experiment.seed for r in runs} == {1} and {r.partition_seed for r in runs} == {1693}
    # the code's decoders are the code's client CVAE (its encoder does not see the label)
    assert [r.clients.condition_encoder for r in runs[:2]] == [True, False]
    only_paper = noise_runs(base, [1], [0.1], ["variance"], ["fedcvae-ens"], alpha=0.01,
                            partition_seed=1693, cvae_epochs=None, sizes={})
    assert [r.methods[0][2] for r in only_paper] == ["paper"]
    with pytest.raises(ValueError, match="'paper' and 'authors_code'"):
        noise_runs(base, [1], [0.1], ["std"], ["fedcvae-ens"], alpha=0.01, partition_seed=1693,
                   cvae_epochs=None, sizes={}, presets=["label_noise=std"])
