"""Kept distillation targets (ofl_core.distill.targets): the same random draws as the pass they
replace, the teachers' outputs of each pool image, and whole runs (DENSE under both presets,
Fed-ADI, Co-Boosting's weight step) bit for bit equal to the runs that ask the teachers again in
every pass."""

from __future__ import annotations

import pytest
import torch

import ofl_core.coboosting.server as coboosting_server
import ofl_core.dense.server as dense_server
import ofl_core.methods.adi as adi
from ofl_core.distill.pool import ImagePool, augment_batch
from ofl_core.distill.targets import PoolTargets, cacheable, random_flip
from ofl_core.distill.teachers import TeacherBank
from ofl_core.models import build_model
from ofl_core.registry import method_config, run_method

pytestmark = pytest.mark.usefixtures("one_thread")


def test_random_flip_draws_and_flips_as_augment_batch() -> None:
    x = torch.rand(33, 1, 6, 6)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    flipped, mask = random_flip(x, g1)
    assert torch.equal(flipped, augment_batch(x, "flip", g2))
    assert torch.equal(g1.get_state(), g2.get_state())
    assert 0 < int(mask.sum()) < 33
    assert cacheable("none") and cacheable("flip") and not cacheable("crop_flip")
    with pytest.raises(ValueError, match="variants"):
        PoolTargets(lambda x: x, "crop_flip", 8)


def test_targets_are_the_teachers_outputs_of_each_image_and_its_mirror() -> None:
    """Targets kept as batches join (and after the pool is reloaded smaller) are the target
    function of each image, flipped where the pass flips it; the pass shuffles as
    ``pool.batches`` does."""
    torch.manual_seed(0)
    w = torch.randn(10, 36)

    def target(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ w.T

    pool = ImagePool()
    kept = PoolTargets(target, "flip", 8)
    for _ in range(3):
        pool.add(torch.rand(8, 1, 6, 6))
        g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        got = list(kept.batches(pool, 5, g1))
        want = [augment_batch(xb, "flip", g2) for xb in pool.batches(5, g2)]
        assert len(kept) == len(pool) and len(got) == len(want)
        for (x, t, _), wx in zip(got, want, strict=True):
            assert torch.equal(x, wx)
            assert torch.allclose(t, target(x), atol=1e-5)
    smaller = ImagePool()
    smaller.add(pool.all()[:8])
    assert len(list(kept.batches(smaller, 8, None))) == 1 and len(kept) == 8


@pytest.mark.parametrize("arch,channels,size", [("cnn_mnist", 1, 28), ("lenet", 1, 32),
                                                ("simplecnn_mnist", 1, 28),
                                                ("resnet18", 3, 32)])
@pytest.mark.parametrize("amp", ["auto", False])
def test_a_teachers_output_of_an_image_does_not_depend_on_its_batch(arch, channels, size,
                                                                    amp) -> None:
    """What keeping targets rests on (CPU): each image's output of a batch of 64 or more is
    the same bit for bit whatever the other images are (bfloat16 autocast at any batch)."""
    from ofl_core.distill.kernels import autocast_context

    torch.manual_seed(0)
    bank = TeacherBank([build_model(arch, 10, channels, size).eval() for _ in range(2)],
                       batched="auto", channels_last="auto")
    ctx = autocast_context(torch.device("cpu"), amp)

    def cl(t: torch.Tensor) -> torch.Tensor:
        return t.contiguous(memory_format=torch.channels_last) if bank.channels_last else t

    x = torch.rand(192, channels, size, size)
    perm = torch.randperm(192)
    with torch.no_grad(), ctx:
        whole = bank(cl(x))
        for part in (perm[:64], perm[64:]):
            assert torch.equal(bank(cl(x[part])), whole[part])


def _same_run(a, b) -> None:
    assert a.curve == b.curve
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("preset", ["paper", "authors_code"])
def test_dense_with_kept_targets_is_the_run_without(two_per_client, preset, monkeypatch) -> None:
    """DENSE's pass with kept targets (``paper``: no augmentation; ``authors_code``: random
    flips on grayscale data, bfloat16 as the library's default) gives the very same student
    and test curve as asking the teachers in every pass."""
    uploads, ctx = two_per_client
    cfg = method_config("dense", preset=preset, epochs=4, steps_per_epoch=2, batch_size=64,
                        kd_batch_size=64, nz=16, ngf=8)
    kept = run_method("dense", uploads, cfg, ctx)
    monkeypatch.setattr(dense_server, "cacheable", lambda augment: False)
    asked = run_method("dense", uploads, cfg, ctx)
    _same_run(kept, asked)
    assert kept.extras["kd_steps"] == 1 + 2 + 3 + 4


def test_fed_adi_with_kept_targets_is_the_run_without(two_per_client, monkeypatch) -> None:
    uploads, ctx = two_per_client
    cfg = method_config("fed-adi", epochs=3, steps_per_epoch=2, batch_size=64,
                        kd_batch_size=64)
    kept = run_method("fed-adi", uploads, cfg, ctx)
    monkeypatch.setattr(adi, "pool_targets", lambda *a, **k: None)
    asked = run_method("fed-adi", uploads, cfg, ctx)
    _same_run(kept, asked)


@pytest.mark.parametrize("preset", ["paper", "authors_code"])
def test_coboosting_with_kept_logits_is_the_run_without(two_per_client, preset,
                                                        monkeypatch) -> None:
    """Co-Boosting's weight step reads the teachers' kept logits of the pool: the same ensemble
    weights, student and curve as asking the teachers in every pass."""
    uploads, ctx = two_per_client
    cfg = method_config("coboosting", preset=preset, epochs=4, steps_per_epoch=2,
                        batch_size=64, kd_batch_size=64, nz=16, ngf=8)
    kept = run_method("coboosting", uploads, cfg, ctx)
    monkeypatch.setattr(coboosting_server, "cacheable", lambda augment: False)
    asked = run_method("coboosting", uploads, cfg, ctx)
    _same_run(kept, asked)
    assert kept.extras["ensemble_weights_per_epoch"] == asked.extras["ensemble_weights_per_epoch"]
    assert kept.extras["weight_loss"] == asked.extras["weight_loss"]
