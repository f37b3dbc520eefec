"""All clients at once (ofl_core.grouped_training): each client's result equals one-at-a-time
training up to float rounding — its own data order, momentum, step count, BN mode — and the
grouped path caches its clients under their own keys."""

from __future__ import annotations

import pytest
import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, train_local
from ofl_core.data.datasets import load_dataset
from ofl_core.data.partition import make_partition
from ofl_core.grouped_training import groupable, train_grouped
from ofl_core.upload_cache import UploadCache


def _data(sizes, channels=1, size=28):
    g = torch.Generator().manual_seed(0)
    return [((torch.rand(n, channels, size, size, generator=g) * 255).to(torch.uint8),
             torch.randint(0, 10, (n,), generator=g), 100 + k) for k, n in enumerate(sizes)]


@pytest.mark.parametrize("cfg", [
    LocalTrainConfig(epochs=2, batch_size=32, amp=False),
    LocalTrainConfig(epochs=2, batch_size=32, bn_eval_after_first_epoch=True, weight_decay=1e-3,
                     amp=False),
    LocalTrainConfig(epochs=1, batch_size=32, loss="ldam", augment="flip", amp=False),
    LocalTrainConfig(arch="cnn_cifar", epochs=1, batch_size=16, amp=False),
], ids=["ce", "bn-eval+wd", "ldam+flip", "cnn_cifar"])
def test_grouped_equals_one_at_a_time_up_to_rounding(cfg):
    torch.set_num_threads(1)
    shape = (3, 32) if cfg.arch == "cnn_cifar" else (1, 28)
    data = _data([70, 40, 64] if cfg.arch != "cnn_cifar" else [20, 40], *shape)
    assert groupable(cfg, len(data))
    grouped = train_grouped(data, cfg, 10, init_from=7)
    for (x, y, seed), g in zip(data, grouped, strict=True):
        alone = train_local(x, y, cfg, 10, seed, init_from=7, progress=False)
        assert g.keys() == alone.keys()
        for name, v in alone.items():
            if name.endswith("num_batches_tracked"):
                assert int(g[name]) == int(v), name  # its own step count (BN mode included)
            else:
                assert g[name].shape == v.shape
                torch.testing.assert_close(g[name], v, atol=2e-3, rtol=1e-3, msg=name)


def test_grouped_is_deterministic_and_reports_each_client_as_it_finishes():
    cfg = LocalTrainConfig(epochs=1, batch_size=32)
    data = _data([90, 30, 50])
    finished = []
    a = train_grouped(data, cfg, 10, init_from=1, on_done=lambda k, s: finished.append(k))
    b = train_grouped(data, cfg, 10, init_from=1)
    assert finished == [1, 2, 0]  # the smallest client leaves first
    for x, y in zip(a, b, strict=True):
        assert all(torch.equal(x[n], y[n]) for n in x)


def test_not_groupable_falls_back():
    assert not groupable(LocalTrainConfig(arch="resnet18"), 5)
    assert not groupable(LocalTrainConfig(optimizer="adam"), 5)
    assert not groupable(LocalTrainConfig(), 1)


def test_train_clients_grouped_caches_under_its_own_keys(tmp_path):
    ds = load_dataset("fmnist_embedded")
    part = make_partition(ds.y_train.numpy()[:600], 3, "dirichlet", alpha=0.5, seed=1)
    cfg = LocalTrainConfig(epochs=1, batch_size=64, amp=False)
    cache = UploadCache(tmp_path)
    grouped = train_clients(ds, part, cfg, seed=1, cache=cache, workers=1, progress=False,
                            trainer="grouped")
    assert len(list(tmp_path.rglob("*.pt"))) == 3
    again = train_clients(ds, part, cfg, seed=1, cache=cache, workers=1, progress=False,
                          trainer="grouped")
    for u, v in zip(grouped, again, strict=True):
        assert all(torch.equal(u.state_dict[n], v.state_dict[n]) for n in u.state_dict)
    seq = train_clients(ds, part, cfg, seed=1, cache=cache, workers=1, progress=False,
                        trainer="sequential")
    assert len(list(tmp_path.rglob("*.pt"))) == 6  # one-at-a-time entries are separate
    for u, v in zip(grouped, seq, strict=True):
        torch.testing.assert_close(u.state_dict["fc.weight"], v.state_dict["fc.weight"],
                                   atol=2e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="trainer must be"):
        train_clients(ds, part, cfg, seed=1, trainer="fast")
