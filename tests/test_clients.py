"""Local training, uploads, validation and the upload cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, ldam_loss, train_local
from ofl_core.data.partition import make_partition
from ofl_core.evaluate import accuracy
from ofl_core.models import build_model
from ofl_core.upload_cache import UploadCache
from ofl_core.uploads import ClientUpload, UploadError, build_from_upload, validate_upload


def _upload(state=None, arch="cnn_mnist", **kw):
    state = state if state is not None else build_model(arch, 4, 1, 28).state_dict()
    return ClientUpload(client_id=3, arch=arch, state_dict=state, num_classes=4, in_channels=1,
                        image_size=28, num_samples=10, **kw)


def test_local_training_learns_and_is_deterministic(tiny_dataset):
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32)
    ds = tiny_dataset
    sd1 = train_local(ds.x_train, ds.y_train, cfg, 4, seed=5, progress=False)
    sd2 = train_local(ds.x_train, ds.y_train, cfg, 4, seed=5, progress=False)
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), k
    model = build_from_upload(_upload(sd1))
    assert accuracy(model, ds.x_test, ds.y_test) > 90.0


def test_ldam_training_runs_and_learns(tiny_dataset):
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32, loss="ldam")
    sd = train_local(tiny_dataset.x_train, tiny_dataset.y_train, cfg, 4, seed=0, progress=False)
    assert accuracy(build_from_upload(_upload(sd)), tiny_dataset.x_test, tiny_dataset.y_test) > 60


def test_ldam_margin_is_largest_for_the_rarest_class():
    logits = torch.zeros(2, 3)
    counts = torch.tensor([10000, 16, 1])
    y = torch.tensor([0, 2])
    # With zero logits, the loss of a sample grows with its class margin.
    l_common = ldam_loss(logits[:1], y[:1], counts)
    l_rare = ldam_loss(logits[1:], y[1:], counts)
    assert l_rare > l_common
    # rarest class gets exactly the max margin 0.5: its target logit is shifted by 0.5·30
    expected = torch.nn.functional.cross_entropy(torch.tensor([[0.0, 0.0, -15.0]]),
                                                 torch.tensor([2]))
    assert torch.isclose(l_rare, expected)


def test_ldam_does_not_scale_raw_logits():
    # Raw logits are taken as they are (they play the role of s·cos θ); only the margin is
    # scaled by s. Multiplying the logits by s = 30 made clients collapse to chance.
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    counts = torch.tensor([1, 1, 1])  # equal counts: every margin is the max 0.5
    y = torch.tensor([0])
    got = ldam_loss(logits, y, counts, max_margin=0.5, scale=30.0)
    want = torch.nn.functional.cross_entropy(logits - torch.tensor([[15.0, 0.0, 0.0]]), y)
    assert torch.isclose(got, want)
    assert not torch.isclose(got, torch.nn.functional.cross_entropy(30 * logits - 15, y))


def test_clients_share_one_initialisation(tiny_dataset):
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=0)
    a = train_local(tiny_dataset.x_train[:10], tiny_dataset.y_train[:10], cfg, 4, seed=1,
                    progress=False, init_from=7)
    b = train_local(tiny_dataset.x_train[10:20], tiny_dataset.y_train[10:20], cfg, 4, seed=2,
                    progress=False, init_from=7)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_train_clients_uses_the_cache(tiny_dataset, tmp_path):
    ds = tiny_dataset
    part = make_partition(ds.y_train.numpy(), 3, "dirichlet", alpha=0.5, seed=0)
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=64)
    cache = UploadCache(tmp_path)
    ups = train_clients(ds, part, cfg, seed=0, cache=cache, workers=1, progress=False)
    assert len(cache) == 3 and cache.misses == 3 and cache.hits == 0
    again = train_clients(ds, part, cfg, seed=0, cache=cache, workers=1, progress=False)
    assert cache.hits == 3
    for u, v in zip(ups, again, strict=False):
        assert u.num_samples == int(part.sizes[u.client_id]) and u.label_counts is None
        assert all(torch.equal(u.state_dict[k], v.state_dict[k]) for k in u.state_dict)
    other = train_clients(ds, part, LocalTrainConfig(arch="cnn_mnist", epochs=2, batch_size=64),
                          seed=0, cache=cache, workers=1, progress=False)
    assert len(cache) == 6 and other[0].state_dict is not ups[0].state_dict
    assert not list(tmp_path.glob("*.tmp"))


def _half_written(victim):
    victim.write_bytes(victim.read_bytes()[:100])


def _python_object(victim):
    torch.save({"state": np.random.default_rng(0)}, victim)  # a Python object, not tensors


@pytest.mark.parametrize("tamper, warned", [
    (_half_written, "is unreadable"),
    # refused by weights_only loading, said without torch's advice to load it with
    # weights_only=False
    (_python_object, "is refused \\(it holds Python objects other than tensors"),
])
def test_a_corrupt_cache_entry_is_retrained_not_trusted(tiny_dataset, tmp_path, tamper, warned):
    ds = tiny_dataset
    part = make_partition(ds.y_train.numpy(), 2, "iid", seed=0)
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=64)
    cache = UploadCache(tmp_path)
    train_clients(ds, part, cfg, seed=0, cache=cache, workers=1, progress=False)
    victim = sorted(tmp_path.glob("*.pt"))[0]
    tamper(victim)
    with pytest.warns(UserWarning, match=f"cache entry .* {warned}") as got:
        ups = train_clients(ds, part, cfg, seed=0, cache=cache, workers=1, progress=False)
    assert len(ups) == 2 and not any("weights_only=False" in str(w.message) for w in got)
    torch.load(victim, weights_only=True)  # rewritten whole


def test_a_diverged_client_is_named_as_such_and_never_cached(tiny_dataset, tmp_path):
    """A learning rate far too large gives weights no trained model has: the error says the
    local training diverged and names the learning rate, and nothing is cached (a re-run used
    to load, refuse and retrain the same bad client every time)."""
    ds = tiny_dataset
    part = make_partition(ds.y_train.numpy(), 2, "iid", seed=0)
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=64, lr=1000.0)
    with pytest.raises(UploadError, match="client 0: its local training diverged .* under "
                                          "LocalTrainConfig\\(lr=1000.0.*lower the learning"):
        train_clients(ds, part, cfg, seed=0, cache=UploadCache(tmp_path), workers=1,
                      progress=False)
    assert not list(tmp_path.glob("*.pt"))


def test_parallel_workers_give_the_same_clients(tiny_dataset, tmp_path):
    ds = tiny_dataset
    part = make_partition(ds.y_train.numpy(), 2, "iid", seed=0)
    # float32: bfloat16 kernels round differently at another thread count
    cfg = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=64, amp=False)
    serial = train_clients(ds, part, cfg, seed=0, workers=1, progress=False)
    par = train_clients(ds, part, cfg, seed=0, workers=2, progress=False)
    for u, v in zip(serial, par, strict=False):
        for k in u.state_dict:
            torch.testing.assert_close(u.state_dict[k], v.state_dict[k], rtol=1e-4, atol=1e-5)


def test_upload_validation_errors_name_the_problem():
    good = _upload()
    validate_upload(good)
    with pytest.raises(UploadError, match="client 3: unknown architecture 'vgg'"):
        validate_upload(_upload(arch="vgg", state={}))
    sd = dict(good.state_dict)
    sd["fc.weight"] = torch.zeros(5, 5)
    with pytest.raises(UploadError, match=r"'fc.weight' has shape \(5, 5\), expected"):
        validate_upload(_upload(sd))
    sd = dict(good.state_dict)
    sd.pop("fc.bias")
    with pytest.raises(UploadError, match="missing \\['fc.bias'\\]"):
        validate_upload(_upload(sd))
    sd = dict(good.state_dict)
    sd["fc.bias"] = torch.full_like(sd["fc.bias"], float("nan"))
    with pytest.raises(UploadError, match="NaN or inf"):
        validate_upload(_upload(sd))


def test_built_upload_is_frozen():
    model = build_from_upload(_upload())
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("kw,msg", [
    ({"arch": "vgg"}, "arch: unknown model"),
    ({"epochs": -1}, "epochs must be"),
    ({"lr": 0.0}, "lr must be a finite float > 0"),
    ({"preset": "mine"}, "preset must be one of"),
])
def test_local_config_rejects_bad_values(kw, msg):
    with pytest.raises(ValueError, match=msg):
        LocalTrainConfig(**kw)


def test_authors_code_preset_flips_the_documented_fields():
    p, c = LocalTrainConfig.for_preset("paper"), LocalTrainConfig.for_preset("authors_code")
    assert (p.epochs, p.bn_eval_after_first_epoch) == (200, False)
    assert (c.epochs, c.bn_eval_after_first_epoch) == (400, True)


def test_random_crop_flip_keeps_shape_and_content_statistics():
    from ofl_core.augment import random_crop_flip

    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    g = torch.Generator().manual_seed(0)
    y = random_crop_flip(x, pad=2, generator=g)
    assert y.shape == x.shape
    # each output row is a contiguous (possibly flipped, possibly zero-padded) slice of input
    z = random_crop_flip(x, pad=0, flip=True, generator=g)
    for b in range(2):
        assert torch.equal(z[b], x[b]) or torch.equal(z[b], x[b].flip(-1))
    assert np.isfinite(y.numpy()).all()


def test_config_checks_name_the_field_and_what_to_change():
    with pytest.raises(ValueError, match="LocalTrainConfig.epochs must be an int ≥ 0, got -1"):
        LocalTrainConfig(epochs=-1)
    with pytest.raises(ValueError, match="LocalTrainConfig.lr must be a finite float > 0, got nan"):
        LocalTrainConfig(lr=float("nan"))
    with pytest.raises(ValueError, match="optimizer must be one of \\('sgd', 'adam'\\)"):
        LocalTrainConfig(optimizer="rmsprop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="preset must be one of"):
        LocalTrainConfig(preset="code")


def test_one_driver_refuses_mixed_or_unknown_client_kinds(tiny_dataset):
    from ofl_core.client_training import CLASSIFIER, client_kind
    from ofl_core.fedcvae.clients import DECODER, CVAETrainConfig

    part = make_partition(tiny_dataset.y_train.numpy(), 2, "iid", seed=0)
    assert client_kind(LocalTrainConfig()) is CLASSIFIER
    assert client_kind(CVAETrainConfig()) is DECODER
    with pytest.raises(ValueError, match="must all be classifiers or all CVAEs"):
        train_clients(tiny_dataset, part, [LocalTrainConfig(), CVAETrainConfig()], seed=0,
                      workers=1, progress=False)
    with pytest.raises(TypeError, match="LocalTrainConfig or a CVAETrainConfig"):
        train_clients(tiny_dataset, part, {"epochs": 1}, seed=0, workers=1, progress=False)
    with pytest.raises(ValueError, match="needs 32-px images"):  # decoders: 28-px data refused
        train_clients(tiny_dataset, part, CVAETrainConfig(), seed=0, workers=1, progress=False)
