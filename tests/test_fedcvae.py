"""Tests of FedCVAE (SPEC §2 cvae, §3 FedCVAE clients, §4 FedCVAE-Ens/-KD and extensions).

Unit tests on hand-made tensors (CVAE loss terms, truncated sampler, label noise, upload
validation) and tiny end-to-end runs on a synthetic 4-class 32×32 dataset where every client
holds a single class (extreme label skew): a server that combines the clients' decoders correctly
beats chance (25 %) by far; one that mixes up the clients' label distributions cannot.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ofl_core.client_training import train_clients
from ofl_core.clients import ClientUpload, UploadError, validate_upload
from ofl_core.data.datasets import ImageDataset
from ofl_core.data.partition import make_partition
from ofl_core.evaluate import accuracy
from ofl_core.fedcvae_clients import (
    FEDCVAE_HPARAMS,
    CVAETrainConfig,
    baseline_local_config,
    decoder_from_upload,
    heterogeneous_variants,
    noisy_label_counts,
    secret_prior_mean,
    validate_decoder_upload,
)
from ofl_core.methods import METHODS, ServerContext, method_config, run_method
from ofl_core.methods.fedcvae import (
    FedCVAEEnsConfig,
    FedCVAEKDConfig,
    allocate_samples,
    run_ens,
    run_kd,
    run_param_avg,
    security_experiment,
    uniform_sampler,
)
from ofl_core.models import build_model
from ofl_core.models.cvae import (
    CVAE,
    build_cvae,
    build_decoder,
    kl_divergence,
    reconstruction_loss,
    truncated_normal,
)
from ofl_core.upload_cache import UploadCache

C = 4  # classes of the synthetic dataset


def synthetic(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class c = a bright 10×10 square in quadrant c (±2 px jitter) on a dark noisy image."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % C
    x = torch.rand(n, 1, 32, 32, generator=g) * 40
    corner = torch.tensor([(3, 3), (3, 19), (19, 3), (19, 19)])[y]
    corner = corner + torch.randint(-2, 3, (n, 2), generator=g)
    rows, cols = torch.arange(32).view(1, 32, 1), torch.arange(32).view(1, 1, 32)
    r0, c0 = corner[:, 0].view(n, 1, 1), corner[:, 1].view(n, 1, 1)
    mask = (rows >= r0) & (rows < r0 + 10) & (cols >= c0) & (cols < c0 + 10)
    bright = 200 + 55 * torch.rand(n, 1, 1, generator=g)
    x[:, 0] = torch.where(mask, bright, x[:, 0])
    return x.round().clamp(0, 255).to(torch.uint8), y


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run fastest (and reproducibly) on one thread; restored afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny() -> dict:
    xtr, ytr = synthetic(240, 0)
    xte, yte = synthetic(200, 1)
    ds = ImageDataset("synthetic", xtr, ytr, xte, yte, C)
    part = make_partition(ytr.numpy(), 4, "classes_per_client", classes_per_client=1, seed=0)
    cfg = CVAETrainConfig(latent_dim=4, epochs=8, batch_size=16, lr=3e-3)
    uploads = train_clients(ds, part, cfg, seed=0, workers=1, progress=False)
    return {"ds": ds, "part": part, "cfg": cfg, "uploads": uploads, "x_test": xte, "y_test": yte}


def context(tiny: dict, seed: int = 0) -> ServerContext:
    """A server context whose only access to the test set is the evaluate callback."""
    xte, yte = tiny["x_test"], tiny["y_test"]
    return ServerContext(num_classes=C, in_channels=1, image_size=32, seed=seed,
                         evaluate=lambda model: accuracy(model, xte, yte), progress=False)


# ------------------------------------------------------------------ model, losses, samplers


@pytest.mark.parametrize("variant", ["cvae", "cvae_small"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("condition", [True, False])
def test_cvae_shapes(variant: str, channels: int, condition: bool) -> None:
    torch.manual_seed(0)
    m = build_cvae(variant, 10, channels, 32, latent_dim=7, condition_encoder=condition)
    x, y = torch.rand(3, channels, 32, 32), torch.tensor([0, 4, 9])
    logits, mu, logvar = m(x, y)
    assert logits.shape == (3, channels, 32, 32)
    assert mu.shape == logvar.shape == (3, 7)
    first = m.encoder.fc[0].in_features
    assert first == 256 + (10 if condition else 0)  # q(z|x,y) sees onehot(y) only if asked
    assert m.decoder.fc.in_features == 7 + 10
    assert m.decoder(torch.zeros(5, 7), torch.arange(5)).shape == (5, channels, 32, 32)


def test_small_variant_has_one_block_fewer() -> None:
    def count(mod: torch.nn.Module, kind: type) -> int:
        return sum(isinstance(x, kind) for x in mod.modules())

    big, small = build_cvae("cvae", 10, 1, 32, 10), build_cvae("cvae_small", 10, 1, 32, 10)
    assert count(big.encoder, torch.nn.Conv2d) - count(small.encoder, torch.nn.Conv2d) == 1
    assert (count(big.decoder, torch.nn.ConvTranspose2d)
            - count(small.decoder, torch.nn.ConvTranspose2d)) == 1
    with pytest.raises(ValueError, match="32×32"):
        build_cvae("cvae_small", 10, 1, 64, 10)
    with pytest.raises(ValueError, match="divisible by 16"):
        build_cvae("cvae", 10, 1, 28, 10)
    with pytest.raises(ValueError, match="unknown CVAE variant"):
        build_decoder("vae9000", 10)


def test_kl_values() -> None:
    mu, logvar = torch.zeros(4, 3), torch.zeros(4, 3)
    assert kl_divergence(mu, logvar).item() == 0.0
    # one sample, d=2: KL(N((1,0), diag(e, 1)) || N(0, I)) = ½[(e + 1 − 1 − 1) + (1 + 0 − 1 − 0)]
    mu, logvar = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0]])
    assert kl_divergence(mu, logvar).item() == pytest.approx(0.5 * (math.e - 1.0))
    # a shifted prior: the KL of N(μ₀, I) to N(μ₀, I) is 0, and N(0, I) to N(μ₀, I) is ½‖μ₀‖²
    mu0 = torch.tensor([3.0, -4.0])
    assert kl_divergence(mu0.expand(2, 2), torch.zeros(2, 2), mu0).item() == 0.0
    assert kl_divergence(torch.zeros(1, 2), torch.zeros(1, 2), mu0).item() == pytest.approx(12.5)


def test_reconstruction_loss_matches_manual() -> None:
    logits = torch.tensor([[[[0.0, 2.0], [-1.0, 3.0]]], [[[1.0, -2.0], [0.5, 0.0]]]])
    x = torch.tensor([[[[0.0, 1.0], [0.5, 1.0]]], [[[1.0, 0.0], [0.25, 0.5]]]])
    p = torch.sigmoid(logits)
    manual = -(x * p.log() + (1 - x) * (1 - p).log()).sum() / 2  # summed over pixels, / batch
    assert reconstruction_loss(logits, x).item() == pytest.approx(manual.item(), rel=1e-6)
    rgb_logits, rgb = logits.repeat(1, 3, 1, 1), x.repeat(1, 3, 1, 1)
    manual_mse = ((torch.sigmoid(rgb_logits) - rgb) ** 2).sum() / 2
    assert reconstruction_loss(rgb_logits, rgb).item() == pytest.approx(manual_mse.item())


def test_cvae_loss_is_recon_plus_beta_kl() -> None:
    torch.manual_seed(0)
    m = CVAE(10, 1, 32, latent_dim=5)
    x, y = torch.rand(6, 1, 32, 32), torch.randint(0, 10, (6,))
    total, rec, kl = m.loss(x, y, beta=2.0, generator=torch.Generator().manual_seed(1))
    logits, mu, logvar = m(x, y, torch.Generator().manual_seed(1))
    assert rec.item() == pytest.approx(reconstruction_loss(logits, x).item())
    assert kl.item() == pytest.approx(kl_divergence(mu, logvar).item())
    assert total.item() == pytest.approx(rec.item() + 2.0 * kl.item())


def test_prior_mean_starts_encoder_at_prior() -> None:
    torch.manual_seed(0)
    mu0 = (50.0, -20.0, 5.0)
    m = CVAE(10, 1, 32, latent_dim=3, prior_mean=mu0).eval()
    _, mu, _ = m(torch.rand(8, 1, 32, 32), torch.randint(0, 10, (8,)))
    assert torch.allclose(mu.mean(0), torch.tensor(mu0), atol=3.0)
    assert "prior_mean" not in m.decoder.state_dict()  # μ never travels with the upload


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


# ------------------------------------------------------------------ label noise, configs


@pytest.mark.parametrize(("mode", "expected_std"), [("variance", math.sqrt(0.01 * 50_000)),
                                                      ("std", 0.01 * 50_000)])
def test_label_noise_variance_vs_std(mode: str, expected_std: float) -> None:
    counts = [5000] * 10  # n_k = 50,000, γ = 0.01: std √500 ≈ 22.4 (paper) vs 500 (code)
    g = torch.Generator().manual_seed(0)
    draws = np.array([noisy_label_counts(counts, 0.01, mode, g) for _ in range(400)])
    assert draws.min() >= 0 and draws.dtype.kind == "i"
    assert draws.std() == pytest.approx(expected_std, rel=0.08)
    assert noisy_label_counts(counts, 0.0, mode, g) == tuple(counts)


def test_label_noise_clipped_at_zero() -> None:
    g = torch.Generator().manual_seed(0)
    noised = noisy_label_counts([1000, 0, 0, 0], 1.0, "std", g)  # std 1000
    assert min(noised) >= 0 and noised != (1000, 0, 0, 0)


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


def test_heterogeneous_variants_are_seeded() -> None:
    a = heterogeneous_variants(20, seed=1)
    assert a == heterogeneous_variants(20, seed=1) and set(a) == {"cvae", "cvae_small"}


# ------------------------------------------------------------------ uploads: decoder only


def test_upload_is_decoder_only_and_counts(tiny: dict) -> None:
    for up, counts in zip(tiny["uploads"], tiny["part"].counts, strict=True):
        assert up.kind == "decoder" and up.arch == "cvae"
        assert set(up.state_dict) == set(build_decoder("cvae", C, 1, 32, 4).state_dict())
        assert not any(k.startswith("encoder") for k in up.state_dict)
        assert up.label_counts == tuple(int(c) for c in counts)
        assert up.num_samples == int(counts.sum())
        # nothing but the declared fields travels (no data, no encoder, no prior mean)
        assert {f.name for f in dataclasses.fields(ClientUpload)} == set(vars(up))
    # the encoder's Linear layers (500×260, 8×500) have no counterpart in the decoder
    encoder_shapes = {tuple(v.shape) for k, v in build_cvae("cvae", C, 1, 32, 4).state_dict()
                      .items() if k.startswith("encoder.fc") and v.dim() == 2}
    for up in tiny["uploads"]:
        assert not encoder_shapes & {tuple(v.shape) for v in up.state_dict.values()}


def test_decoder_upload_validation(tiny: dict) -> None:
    good = tiny["uploads"][0]
    validate_decoder_upload(good)
    bad_cases = {
        "unknown CVAE variant": dataclasses.replace(good, arch="vae9000"),
        "kind='decoder'": dataclasses.replace(good, kind="classifier"),
        "latent_dim": dataclasses.replace(good, model_kwargs={}),
        "has shape": dataclasses.replace(good, model_kwargs={"latent_dim": 5}),
        "one count per class": dataclasses.replace(good, label_counts=(1, 2)),
        "≥ 0": dataclasses.replace(good, label_counts=(1, -2, 3, 4)),
        "NaN or inf": dataclasses.replace(good, state_dict={
            **good.state_dict, "fc.weight": torch.full_like(good.state_dict["fc.weight"], math.nan)
        }),
        "missing": dataclasses.replace(good, state_dict={
            k: v for k, v in good.state_dict.items() if k != "fc.bias"}),
    }
    for msg, up in bad_cases.items():
        with pytest.raises(UploadError, match=msg):
            validate_decoder_upload(up)
    # classifier validation (the default kind) rejects a decoder and still accepts classifiers
    with pytest.raises(UploadError, match="needs a classifier upload"):
        validate_upload(good)
    clf = ClientUpload(0, "mcmahan_cnn", build_model("mcmahan_cnn", C, 1, 32).state_dict(),
                       C, 1, 32, 10)
    validate_upload(clf)
    with pytest.raises(UploadError, match="kind='decoder'"):
        run_ens([clf], FedCVAEEnsConfig(num_samples=8, classifier_epochs=1), context(tiny))


def test_cache_reuses_decoders_and_noise_does_not_retrain(tiny: dict, tmp_path) -> None:
    ds, part = tiny["ds"], tiny["part"]
    cfg = dataclasses.replace(tiny["cfg"], epochs=1)
    cache = UploadCache(tmp_path)
    first = train_clients(ds, part, cfg, seed=5, cache=cache, workers=1, progress=False)
    assert cache.misses == 4 and len(cache) == 4
    noisy = dataclasses.replace(cfg, label_noise_gamma=0.5, label_noise="std")
    again = train_clients(ds, part, noisy, seed=5, cache=cache, workers=1, progress=False)
    assert cache.hits == 4 and len(cache) == 4
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)
    assert any(a.label_counts != b.label_counts for a, b in zip(first, again, strict=True))
    other = dataclasses.replace(cfg, condition_encoder=False)
    train_clients(ds, part, other, seed=5, cache=cache, workers=1, progress=False)
    assert len(cache) == 8  # the encoder's conditioning changes the decoder: a new entry


# ------------------------------------------------------------------ end to end (tiny)


def test_ens_and_kd_beat_chance_from_decoders_only(tiny: dict) -> None:
    """Trained clients, then the training data is out of reach: the server sees only the
    uploads and a context whose single test-set access is ``evaluate``."""
    uploads, ctx = tiny["uploads"], context(tiny)
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


def test_param_avg_and_t6_names(tiny: dict) -> None:
    ctx = context(tiny)
    cfg = FedCVAEKDConfig(num_samples=200, classifier_epochs=1, kd_samples=200, kd_epochs=1)
    res = run_param_avg(tiny["uploads"], cfg, ctx)
    assert res.method == "param-avg" and "kd_loss" not in res.extras
    avg = res.extras["server_decoder"]["fc.weight"]
    manual = torch.stack([u.state_dict["fc.weight"] for u in tiny["uploads"]]).mean(0)
    assert torch.allclose(avg, manual, atol=1e-6)  # equal n_k: weighted = plain mean
    assert run_method("kd", tiny["uploads"], cfg, ctx).method == "kd"
    assert run_kd(tiny["uploads"], dataclasses.replace(cfg, aggregation="param_avg"),
                  ctx).method == "param-avg"


def test_heterogeneous_cvaes(tiny: dict) -> None:
    ds, part = tiny["ds"], tiny["part"]
    variants = ["cvae", "cvae_small", "cvae", "cvae_small"]
    cfgs = [dataclasses.replace(tiny["cfg"], variant=v, epochs=1) for v in variants]
    uploads = train_clients(ds, part, cfgs, seed=0, workers=1, progress=False)
    assert [u.arch for u in uploads] == variants
    ctx = context(tiny)
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


def test_security_shift_attacker_without_mu(tiny: dict) -> None:
    ds, part = tiny["ds"], tiny["part"]
    mu = secret_prior_mean(4, scale=20.0, seed=3)
    assert secret_prior_mean(4, 0.0, seed=3) == (0.0,) * 4  # ⚑ authors' code: μ = 0
    cfg = dataclasses.replace(tiny["cfg"], prior_mean=mu)
    uploads = train_clients(ds, part, cfg, seed=0, workers=1, progress=False)
    for up in uploads:  # μ is not in the upload
        assert "prior_mean" not in up.state_dict and "prior_mean" not in up.model_kwargs
    res = security_experiment(uploads, mu, bounds=(1.0,), ctx=context(tiny),
                              cfg=FedCVAEEnsConfig(num_samples=400, classifier_epochs=2))
    assert res.server_acc > 80.0
    assert res.attacker_acc[1.0] < res.server_acc - 30  # U(−1, 1) misses N(μ, I)
    assert [r["who"] for r in res.rows()] == ["server", "attacker"]


def test_uploads_carry_no_training_images(tiny: dict) -> None:
    """No uploaded tensor is (a reshaped copy of) a training image."""
    train = F.normalize(tiny["ds"].x_train.float().flatten(1), dim=1)
    for up in tiny["uploads"]:
        for v in up.state_dict.values():
            if v.numel() % 1024 == 0 and v.is_floating_point():
                rows = F.normalize(v.reshape(-1, 1024).float(), dim=1)
                assert (rows @ train.T).max() < 0.99
    decoder_from_upload(tiny["uploads"][0])  # and each loads into a plain decoder
