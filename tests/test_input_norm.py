"""``input_norm``: the model normalises its own [0, 1] input, so local training, a server's
synthetic images, its pool and the test-set evaluation all see (x − 0.5)/0.5 under ``"half"``
and the raw pixels under ``"none"`` (unchanged); Co-Boosting's authors'-code preset sets it
and floors its 8-bit pool as its code does. Hand-made tensors throughout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, init_model, train_key_payload, train_local
from ofl_core.coboosting.losses import weighted_logits
from ofl_core.coboosting.server import CoBoostingConfig, start
from ofl_core.data.partition import make_partition
from ofl_core.distill.loop import server_student
from ofl_core.distill.pool import ImagePool
from ofl_core.distill.teachers import TeacherBank
from ofl_core.evaluate import accuracy
from ofl_core.grouped_training import groupable
from ofl_core.models import INPUT_NORMS, build_model, normalize_input
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload, UploadError, build_from_upload, validate_upload

pytestmark = pytest.mark.usefixtures("one_thread")


def _pair(arch: str = "cnn_mnist", seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights as a raw-input and a ``"half"`` model."""
    plain = init_model(arch, 4, 1, 28, seed).eval()
    half = init_model(arch, 4, 1, 28, seed, input_norm="half").eval()
    return plain, half


def _upload(model: torch.nn.Module, k: int, norm: str = "half") -> ClientUpload:
    return ClientUpload(client_id=k, arch="cnn_mnist", state_dict=model.state_dict(),
                        num_classes=4, in_channels=1, image_size=28, num_samples=10,
                        model_kwargs={} if norm == "none" else {"input_norm": norm})


def test_the_model_applies_the_named_normalisation_first() -> None:
    x = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    assert INPUT_NORMS == {"none": None, "half": (0.5, 0.5), "mnist": (0.1307, 0.3081),
                           "fmnist": (0.2860, 0.3530)}
    assert torch.equal(normalize_input(x, "half"), (x - 0.5) / 0.5)
    assert torch.equal(normalize_input(x, "fmnist"), (x - 0.2860) / 0.3530)
    assert normalize_input(x, "none") is x
    for arch in ("cnn_mnist", "lenet", "resnet18"):
        plain, half = _pair(arch)
        assert half.input_norm == "half" and plain.input_norm == "none"
        assert half.state_dict().keys() == plain.state_dict().keys()  # no parameter or buffer
        with torch.no_grad():
            assert torch.equal(half(x), plain((x - 0.5) / 0.5)), arch
            lg, ft = half(x, return_features=True)
            assert torch.equal(ft, plain((x - 0.5) / 0.5, return_features=True)[1])
        assert "input_norm='half'" in repr(half) and "input_norm" not in repr(plain)
    with pytest.raises(ValueError, match="input_norm"):
        build_model("cnn_mnist", 4, 1, 28, input_norm="imagenet")


def test_uploads_name_it_and_the_server_rebuilds_it() -> None:
    plain, half = _pair()
    model = build_from_upload(_upload(half, 0))
    x = torch.rand(3, 1, 28, 28)
    assert model.input_norm == "half" and torch.equal(model(x), half(x))
    with pytest.raises(UploadError, match="input_norm"):
        validate_upload(_upload(half, 0, norm="unit"))


def test_local_config_field_cache_key_and_upload(tiny_dataset) -> None:
    none, half = LocalTrainConfig(epochs=1), LocalTrainConfig(epochs=1, input_norm="half")
    assert "input_norm" not in none.key_fields()  # raw-input keys as before the field
    assert half.key_fields()["input_norm"] == "half"
    assert none.model_options == {} and half.model_options == {"input_norm": "half"}
    part = make_partition(tiny_dataset.y_train.numpy(), 2, "iid", seed=0)
    keys = [train_key_payload(tiny_dataset, part, 0, c, seed=1) for c in (none, half)]
    assert keys[0] != keys[1]
    with pytest.raises(ValueError, match="input_norm"):
        LocalTrainConfig(input_norm="minmax")
    assert groupable(none, 2) and not groupable(half, 2)  # the grouped forward is raw-only
    ups = train_clients(tiny_dataset, part, half, seed=1, workers=1, progress=False)
    assert all(u.model_kwargs == {"input_norm": "half"} for u in ups)
    assert accuracy(build_from_upload(ups[0]), tiny_dataset.x_test, tiny_dataset.y_test) > 40


def test_local_training_feeds_the_normalised_images(tiny_dataset, monkeypatch) -> None:
    """The first convolution sees (x/255 − 0.5)/0.5 of the client's uint8 images."""
    import ofl_core.clients as clients

    seen: list[torch.Tensor] = []
    build = clients.init_model

    def spy(*args, **kwargs):
        m = build(*args, **kwargs)
        first = next(mod for mod in m.modules() if isinstance(mod, torch.nn.Conv2d))
        first.register_forward_pre_hook(lambda mod, inp: seen.append(inp[0].detach().clone()))
        return m

    monkeypatch.setattr(clients, "init_model", spy)
    x, y = tiny_dataset.x_train[:32], tiny_dataset.y_train[:32]
    cfg = LocalTrainConfig(epochs=1, batch_size=32, input_norm="half", channels_last=False)
    train_local(x, y, cfg, 4, seed=3, progress=False)
    perm = torch.randperm(32, generator=torch.Generator().manual_seed(3))
    assert torch.equal(seen[0], (x[perm].float() / 255 - 0.5) / 0.5)
    assert float(seen[0].min()) < 0


def test_the_student_takes_the_servers_choice_and_the_teachers_keep_theirs() -> None:
    plain, half = _pair()
    ups = [_upload(half, k) for k in range(2)]
    s, _ = server_student(ups, None, 4, 1, 28, seed=0)
    assert s.input_norm == "half"  # None: the clients'
    s, _ = server_student(ups, None, 4, 1, 28, seed=0, input_norm="none")
    assert s.input_norm == "none"
    s, _ = server_student([_upload(plain, 0, "none")], None, 4, 1, 28, seed=0,
                          input_norm="half")
    assert s.input_norm == "half"
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, seed=0, progress=False)
    tiny = dict(epochs=1, steps_per_epoch=1, batch_size=8, kd_batch_size=8, nz=8, ngf=8)
    c = start(ups, CoBoostingConfig.for_preset("authors_code", **tiny), ctx)
    assert c.run.student.input_norm == "half" and c.pool.rounding == "floor"
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # A_w on a synthetic [0, 1] batch = the plain nets on (x − 0.5)/0.5
        want = weighted_logits(torch.stack([plain((x - 0.5) / 0.5)] * 2), c.w)
        assert torch.allclose(c.teacher(x), want, atol=1e-5)
    c.run.finish()
    c = start(ups, CoBoostingConfig.for_preset("paper", **tiny), ctx)
    assert c.run.student.input_norm == "none" and c.pool.rounding == "round"
    c.run.finish()


def test_batched_teachers_normalise_too() -> None:
    models = [init_model("cnn_mnist", 4, 1, 28, s, input_norm="half") for s in (0, 1)]
    plain = [init_model("cnn_mnist", 4, 1, 28, s).eval() for s in (0, 1)]
    x = torch.rand(4, 1, 28, 28)
    bank = TeacherBank(models, batched=True, channels_last=False, fuse=False)
    assert bank.batched
    with torch.no_grad():
        want = torch.stack([m((x - 0.5) / 0.5) for m in plain])
        assert torch.allclose(bank.logits(x), want, atol=1e-6)
    # models that differ only in input_norm never share a vmapped group
    mixed = TeacherBank([init_model("cnn_mnist", 4, 1, 28, 0),
                         init_model("cnn_mnist", 4, 1, 28, 0, input_norm="half")],
                        batched=True, channels_last=False, fuse=False)
    assert len(mixed.groups) == 2


def test_fedavg_keeps_the_normalisation_and_refuses_mixed_ones() -> None:
    plain, half = _pair()
    other = init_model("cnn_mnist", 4, 1, 28, 5, input_norm="half")
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False)
    cfg = method_config("fedavg")
    res = run_method("fedavg", [_upload(half, 0), _upload(other, 1)], cfg, ctx)
    assert res.model.input_norm == "half"
    with pytest.raises(ValueError, match="input_norm"):
        run_method("fedavg", [_upload(half, 0), _upload(plain, 1, "none")], cfg, ctx)


def test_floor_rounding_of_the_pool_is_the_codes_astype_uint8() -> None:
    x = torch.tensor([0.0, 0.4 / 255, 1.7 / 255, 128.5 / 255, 254.99 / 255, 1.0, 1.2, -0.1])
    x = x.view(1, 1, 2, 4)
    floor, nearest = ImagePool(rounding="floor"), ImagePool()
    floor.add(x)
    nearest.add(x)
    assert floor.stored().flatten().tolist() == [0, 0, 1, 128, 254, 255, 255, 0]
    assert nearest.stored().flatten().tolist() == [0, 0, 2, 128, 255, 255, 255, 0]
    code = (x.clamp(0, 1).numpy() * 255).astype("uint8")  # the code's save_image_batch
    assert np.array_equal(floor.stored().numpy(), code)


def test_paper_preset_fields_unchanged_and_authors_code_sets_both() -> None:
    p, c = CoBoostingConfig.for_preset("paper"), CoBoostingConfig.for_preset("authors_code")
    assert (p.input_norm, p.pool_rounding) == ("none", "round")
    assert (c.input_norm, c.pool_rounding) == ("half", "floor")
    assert c.perturb_eps == 4 / 255  # 8/255 on (x − 0.5)/0.5 = 4/255 on [0, 1] pixels
    with pytest.raises(ValueError, match="input_norm"):
        CoBoostingConfig(input_norm="z")
    with pytest.raises(ValueError, match="pool_rounding"):
        CoBoostingConfig(pool_rounding="ceil")
    assert LocalTrainConfig.for_preset("authors_code").input_norm == "none"  # DENSE's code
