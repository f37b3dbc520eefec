"""Tests of FedCVAE's client side, :mod:`ofl_core.fedcvae.clients` and
:mod:`ofl_core.fedcvae.uploads` (SPEC §2 cvae, §3 FedCVAE clients).

Unit tests on hand-made tensors (CVAE loss terms, label noise, upload validation) and decoder
uploads of tiny clients on a synthetic 4-class 32×32 dataset where every client holds a single
class (``fedcvae_tiny`` in tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ofl_core.client_training import train_clients
from ofl_core.fedcvae.clients import heterogeneous_variants, noisy_label_counts
from ofl_core.fedcvae.server import FedCVAEEnsConfig, run_ens
from ofl_core.fedcvae.uploads import decoder_from_upload
from ofl_core.models import build_model
from ofl_core.models.cvae import CVAE, build_cvae, build_decoder, kl_divergence, reconstruction_loss
from ofl_core.precision import native_bf16
from ofl_core.upload_cache import UploadCache
from ofl_core.uploads import ClientUpload, UploadError, validate_upload

C = 4  # classes of the synthetic dataset (tests/conftest.py: fedcvae_synthetic)
pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_heterogeneous_variants_are_seeded() -> None:
    a = heterogeneous_variants(20, seed=1)
    assert a == heterogeneous_variants(20, seed=1) and set(a) == {"cvae", "cvae_small"}


def test_upload_is_decoder_only_and_counts(fedcvae_tiny: dict) -> None:
    for up, counts in zip(fedcvae_tiny["uploads"], fedcvae_tiny["part"].counts, strict=True):
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
    for up in fedcvae_tiny["uploads"]:
        assert not encoder_shapes & {tuple(v.shape) for v in up.state_dict.values()}


def test_decoder_upload_validation(fedcvae_tiny: dict) -> None:
    good = fedcvae_tiny["uploads"][0]
    validate_upload(good, "decoder")
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
            validate_upload(up, "decoder")
    # classifier validation (the default kind) rejects a decoder and still accepts classifiers
    with pytest.raises(UploadError, match="needs a classifier upload"):
        validate_upload(good)
    clf = ClientUpload(0, "mcmahan_cnn", build_model("mcmahan_cnn", C, 1, 32).state_dict(),
                       C, 1, 32, 10)
    validate_upload(clf)
    with pytest.raises(UploadError, match="kind='decoder'"):
        run_ens([clf], FedCVAEEnsConfig(num_samples=8, classifier_epochs=1),
                fedcvae_tiny["context"]())


def test_cache_reuses_decoders_and_noise_does_not_retrain(fedcvae_tiny: dict, tmp_path) -> None:
    ds, part = fedcvae_tiny["ds"], fedcvae_tiny["part"]
    cfg = dataclasses.replace(fedcvae_tiny["cfg"], epochs=1)
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


def test_speed_options_get_their_own_cache_entries_and_plain_uploads(fedcvae_tiny: dict,
                                                                      tmp_path) -> None:
    """Channels-last / fused Adam round differently: a decoder trained with them is never
    served for one trained without (nor the reverse); with both off the key is the one from
    before the options existed; uploads are plain contiguous tensors either way."""
    ds, part = fedcvae_tiny["ds"], fedcvae_tiny["part"]
    fast = dataclasses.replace(fedcvae_tiny["cfg"], epochs=1)
    plain = dataclasses.replace(fast, channels_last=False, fused_adam=False)
    assert fast.speed_key("cpu") == {"channels_last": True, "fused_adam": True}
    assert fast.speed_key("cuda") == {"fused_adam": True} and plain.speed_key("cpu") == {}
    assert fast.training_fields() == plain.training_fields()  # the pre-option key payload
    cache = UploadCache(tmp_path)
    ups_fast = train_clients(ds, part, fast, seed=5, cache=cache, workers=1, progress=False)
    ups_plain = train_clients(ds, part, plain, seed=5, cache=cache, workers=1, progress=False)
    assert cache.misses == 8 and len(cache) == 8
    for a, b in zip(ups_fast, ups_plain, strict=True):
        assert a.state_dict.keys() == b.state_dict.keys()
        assert all(v.is_contiguous() for u in (a, b) for v in u.state_dict.values())
    # rounding differs (Adam turns the rounding noise of near-zero gradients, e.g. a bias
    # before BN, into full-size steps), hence the separate entries
    assert any(not torch.equal(a.state_dict[k], b.state_dict[k])
               for a, b in zip(ups_fast, ups_plain, strict=True) for k in a.state_dict)


def test_bfloat16_clients_train_under_autocast_with_their_own_cache_entries(
        fedcvae_tiny: dict, tmp_path) -> None:
    """``amp=True``: the CVAE's forward pass under bfloat16 autocast; the decoders differ from
    float32 ones and get their own cache entries; "auto" keys what it resolves to."""
    ds, part = fedcvae_tiny["ds"], fedcvae_tiny["part"]
    fp32 = dataclasses.replace(fedcvae_tiny["cfg"], epochs=1)
    bf16 = dataclasses.replace(fp32, amp=True)
    assert bf16.speed_key("cpu") == {**fp32.speed_key("cpu"), "amp": True}
    assert bf16.training_fields() == fp32.training_fields()
    auto = dataclasses.replace(fp32, amp="auto").speed_key("cpu")
    assert auto.get("amp", False) == native_bf16("cpu")
    cache = UploadCache(tmp_path)
    a = train_clients(ds, part, fp32, seed=5, cache=cache, workers=1, progress=False)
    b = train_clients(ds, part, bf16, seed=5, cache=cache, workers=1, progress=False)
    assert cache.misses == 8 and len(cache) == 8
    assert any(not torch.equal(x.state_dict[k], y.state_dict[k])
               for x, y in zip(a, b, strict=True) for k in x.state_dict)
    assert all(v.dtype == torch.float32 for u in b for v in u.state_dict.values()
               if v.is_floating_point())


def test_uploads_carry_no_training_images(fedcvae_tiny: dict) -> None:
    """No uploaded tensor is (a reshaped copy of) a training image."""
    train = F.normalize(fedcvae_tiny["ds"].x_train.float().flatten(1), dim=1)
    for up in fedcvae_tiny["uploads"]:
        for v in up.state_dict.values():
            if v.numel() % 1024 == 0 and v.is_floating_point():
                rows = F.normalize(v.reshape(-1, 1024).float(), dim=1)
                assert (rows @ train.T).max() < 0.99
    decoder_from_upload(fedcvae_tiny["uploads"][0])  # and each loads into a plain decoder
