"""Tests of FedCVAE's server side, :mod:`ofl_core.fedcvae.sampling`, ``.classifier``,
``.server`` and ``.security`` (SPEC §4 FedCVAE-Ens/-KD and extensions).

Unit tests of the samplers, configs and allocation, and tiny end-to-end runs on a synthetic
4-class 32×32 dataset where every client holds a single class (extreme label skew,
``fedcvae_tiny`` in tests/conftest.py): a server that combines the clients' decoders correctly
beats chance (25 %) by far; one that mixes up the clients' label distributions cannot.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ofl_core.client_training import train_clients
from ofl_core.fedcvae.classifier import eval_due
from ofl_core.fedcvae.clients import (
    CVAETrainConfig,
    baseline_local_config,
    secret_prior_mean,
)
from ofl_core.fedcvae.hparams import FEDCVAE_HPARAMS
from ofl_core.fedcvae.sampling import allocate_samples, uniform_sampler
from ofl_core.fedcvae.security import security_experiment
from ofl_core.fedcvae.server import (
    FedCVAEEnsConfig,
    FedCVAEKDConfig,
    FedCVAEParamAvgConfig,
    run_ens,
    run_kd,
    run_param_avg,
)
from ofl_core.models.cvae import truncated_normal
from ofl_core.registry import METHODS, method_config, run_method

C = 4  # classes of the synthetic dataset (tests/conftest.py: fedcvae_synthetic)
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("width", [1.0, 2.0, 3.0])
def test_truncated_normal_bounds_and_moments(width: float) -> None:
    g = torch.Generator().manual_seed(0)
    z = truncated_normal((40_000, 5), width, g)
    assert z.shape == (40_000, 5) and z.dtype == torch.float32
    assert z.abs().max().item() <= width
    # variance of N(0,1) truncated to [−w, w]: 1 − 2wφ(w)/(2Φ(w) − 1)
    phi = math.exp(-width**2 / 2) / math.sqrt(2 * math.pi)
    var = 1 - 2 * width * phi / math.erf(width / math.sqrt(2))
    assert z.var().item() == pytest.approx(var, rel=0.03)
    assert abs(z.mean().item()) < 0.02
    shifted = truncated_normal((1000, 2), width, g, mean=[10.0, -10.0])
    assert (shifted[:, 0] - 10).abs().max() <= width and (shifted[:, 1] + 10).abs().max() <= width
    # the same generator state gives the same draws
    a = truncated_normal((5, 2), width, torch.Generator().manual_seed(3))
    b = truncated_normal((5, 2), width, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_uniform_attacker_sampler() -> None:
    z = uniform_sampler(100.0, "cpu")(20_000, 3, torch.Generator().manual_seed(0))
    assert z.abs().max() <= 100.0 and z.abs().max() > 99.0
    assert z.std().item() == pytest.approx(200 / math.sqrt(12), rel=0.03)


def test_configs_presets_and_table4() -> None:
    paper = CVAETrainConfig.for_dataset("fmnist", "kd")
    code = CVAETrainConfig.for_dataset("fmnist", "kd", "authors_code")
    assert (paper.latent_dim, paper.epochs, paper.lr, paper.batch_size) == (100, 25, 1e-3, 32)
    assert paper.condition_encoder and not code.condition_encoder
    assert (paper.label_noise, code.label_noise) == ("variance", "std")
    assert CVAETrainConfig.for_dataset("svhn", "ens").epochs == 50
    assert FEDCVAE_HPARAMS["mnist"].kd_trunc_width == 1.0
    ens = FedCVAEEnsConfig.for_preset("paper").resolved()
    assert (ens.classifier_epochs, ens.trunc_width, ens.allocation, ens.conv_relu) == (
        5, 3.0, "equal", True)
    ens_code = FedCVAEEnsConfig.for_preset("authors_code")
    assert (ens_code.allocation, ens_code.conv_relu) == ("proportional", False)
    kd = FedCVAEKDConfig(dataset="svhn").resolved()
    assert (kd.kd_epochs, kd.kd_trunc_width, kd.trunc_width, kd.kd_lr) == (80, 3.0, 3.0, 0.01)
    assert FedCVAEKDConfig(dataset="mnist").resolved().trunc_width == 1.0
    for name in ("fedcvae-ens", "fedcvae-kd", "param-avg", "kd"):
        assert name in METHODS
        assert method_config(name, "authors_code").allocation == "proportional"
    assert method_config("param-avg").aggregation == "param_avg"
    with pytest.raises(ValueError, match="Table 4"):
        FedCVAEEnsConfig(dataset="cifar10")
    with pytest.raises(ValueError, match="allocation"):
        FedCVAEEnsConfig(allocation="random")  # type: ignore[arg-type]
    fa, fo = baseline_local_config("fmnist", "fedavg"), baseline_local_config("svhn", "fedoneshot")
    assert (fa.arch, fa.optimizer, fa.lr, fa.batch_size, fa.epochs) == (
        "mcmahan_cnn", "adam", 1e-3, 32, 10)
    assert fo.epochs == 10 and dict(fo.model_kwargs) == {"conv_relu": True}
    assert dict(baseline_local_config("mnist", "fedavg", "authors_code").model_kwargs) == {
        "conv_relu": False}


def test_allocation() -> None:
    assert allocate_samples([611, 3031, 5247], 5000, "equal") == [1666] * 3
    prop = allocate_samples([100, 300, 600], 5000, "proportional")
    assert prop == [500, 1500, 3000]
    assert allocate_samples([1, 1, 1], 100, "proportional") == [33, 33, 34]


def test_ens_and_kd_beat_chance_from_decoders_only(fedcvae_tiny: dict) -> None:
    """Trained clients, then the training data is out of reach: the server sees only the
    uploads and a context whose single test-set access is ``evaluate``."""
    uploads, ctx = fedcvae_tiny["uploads"], fedcvae_tiny["context"]()
    ens = run_ens(uploads, FedCVAEEnsConfig(num_samples=400, classifier_epochs=2), ctx)
    assert ens.method == "fedcvae-ens" and len(ens.curve) == 2
    assert ens.last_acc is not None and ens.last_acc > 80.0  # chance is 25 %
    assert ens.extras["samples_per_client"] == [100] * 4
    assert ens.extras["synthetic_class_counts"] == [100] * 4  # y ~ each client's p̂(y)
    kd_cfg = FedCVAEKDConfig(kd_samples=400, kd_epochs=5, num_samples=400, classifier_epochs=2)
    kd = run_method("fedcvae-kd", uploads, kd_cfg, ctx)
    assert kd.method == "fedcvae-kd" and kd.last_acc is not None and kd.last_acc > 80.0
    assert kd.extras["kd_loss"][-1] < kd.extras["kd_loss"][0]
    assert kd.images is not None and kd.images.shape[1:] == (1, 32, 32)
    # swapping the label counts between clients (a server that mismatches decoders and label
    # distributions) asks each decoder for classes it never saw: accuracy collapses
    swapped = [dataclasses.replace(u, label_counts=uploads[(i + 1) % 4].label_counts)
               for i, u in enumerate(uploads)]
    bad = run_ens(swapped, FedCVAEEnsConfig(num_samples=400, classifier_epochs=2), ctx)
    assert bad.last_acc is not None and bad.last_acc < ens.last_acc - 30


def test_param_avg_and_t6_names(fedcvae_tiny: dict) -> None:
    ctx = fedcvae_tiny["context"]()
    cfg = FedCVAEKDConfig(num_samples=200, classifier_epochs=1, kd_samples=200, kd_epochs=1)
    res = run_param_avg(fedcvae_tiny["uploads"], cfg, ctx)
    assert res.method == "param-avg" and "kd_loss" not in res.extras
    avg = res.extras["server_decoder"]["fc.weight"]
    manual = torch.stack([u.state_dict["fc.weight"] for u in fedcvae_tiny["uploads"]]).mean(0)
    assert torch.allclose(avg, manual, atol=1e-6)  # equal n_k: weighted = plain mean
    assert run_method("kd", fedcvae_tiny["uploads"], cfg, ctx).method == "kd"
    assert run_kd(fedcvae_tiny["uploads"], dataclasses.replace(cfg, aggregation="param_avg"),
                  ctx).method == "param-avg"


def test_eval_every_matches_the_distillation_methods(fedcvae_tiny: dict) -> None:
    """``eval_every`` = k: a curve point after every k-th epoch and after the last one; 0: the
    last epoch only (the former ``eval_each_epoch=False``)."""
    ctx = fedcvae_tiny["context"]()
    base = FedCVAEEnsConfig(num_samples=100, classifier_epochs=3)
    uploads = fedcvae_tiny["uploads"]
    curves = {k: run_ens(uploads, dataclasses.replace(base, eval_every=k), ctx).curve
              for k in (0, 1, 2)}
    assert [len(curves[k]) for k in (0, 1, 2)] == [1, 3, 2]
    assert curves[0] == curves[1][-1:] and curves[2] == [curves[1][1], curves[1][2]]
    assert [k for k in range(6) if eval_due(k, 2)] == [1, 3, 5] and not eval_due(0, 0)
    with pytest.raises(ValueError, match="eval_every"):
        FedCVAEKDConfig(eval_every=-1)
    assert method_config("fedcvae-kd").eval_every == 1
    code = FedCVAEParamAvgConfig.for_preset("authors_code", eval_every=0)
    assert type(code) is FedCVAEParamAvgConfig and code.aggregation == "param_avg"
    assert (code.allocation, code.eval_every) == ("proportional", 0)


def test_heterogeneous_cvaes(fedcvae_tiny: dict) -> None:
    ds, part = fedcvae_tiny["ds"], fedcvae_tiny["part"]
    variants = ["cvae", "cvae_small", "cvae", "cvae_small"]
    cfgs = [dataclasses.replace(fedcvae_tiny["cfg"], variant=v, epochs=1) for v in variants]
    uploads = train_clients(ds, part, cfgs, seed=0, workers=1, progress=False)
    assert [u.arch for u in uploads] == variants
    ctx = fedcvae_tiny["context"]()
    cfg = FedCVAEKDConfig(num_samples=64, classifier_epochs=1, kd_samples=64, kd_epochs=1)
    assert run_kd(uploads, cfg, ctx).last_acc is not None
    with pytest.raises(ValueError, match="mix"):
        run_param_avg(uploads, cfg, ctx)
    mixed_d = [uploads[0], *train_clients(
        ds, part, dataclasses.replace(cfgs[0], latent_dim=3), seed=0, workers=1,
        progress=False)[1:]]
    with pytest.raises(ValueError, match="same latent dimension"):
        run_kd(mixed_d, cfg, ctx)
    run_ens(mixed_d, FedCVAEEnsConfig(num_samples=64, classifier_epochs=1), ctx)  # Ens: fine


def test_security_shift_attacker_without_mu(fedcvae_tiny: dict) -> None:
    ds, part = fedcvae_tiny["ds"], fedcvae_tiny["part"]
    mu = secret_prior_mean(4, scale=20.0, seed=3)
    assert secret_prior_mean(4, 0.0, seed=3) == (0.0,) * 4  # ⚑ authors' code: μ = 0
    cfg = dataclasses.replace(fedcvae_tiny["cfg"], prior_mean=mu)
    uploads = train_clients(ds, part, cfg, seed=0, workers=1, progress=False)
    for up in uploads:  # μ is not in the upload
        assert "prior_mean" not in up.state_dict and "prior_mean" not in up.model_kwargs
    res = security_experiment(uploads, mu, bounds=(1.0,), ctx=fedcvae_tiny["context"](),
                              cfg=FedCVAEEnsConfig(num_samples=400, classifier_epochs=2))
    assert res.server_acc > 80.0
    assert res.attacker_acc[1.0] < res.server_acc - 30  # U(−1, 1) misses N(μ, I)
    assert [r["who"] for r in res.rows()] == ["server", "attacker"]
