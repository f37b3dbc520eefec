"""DENSE (and Fed-DAFL, Fed-ADI, FedDF): configs and presets, clear errors, a tiny end-to-end
run on a synthetic 4-class dataset built here (not the embedded one), multi-round DENSE."""

from __future__ import annotations

import math

import pytest
import torch

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, init_model
from ofl_core.data.datasets import ImageDataset
from ofl_core.data.partition import make_partition
from ofl_core.dense.server import DenseConfig, DenseSynthesizer
from ofl_core.distill.teachers import TeacherBank
from ofl_core.evaluate import accuracy
from ofl_core.methods.adi import FedADIConfig
from ofl_core.methods.dafl import FedDAFLConfig
from ofl_core.methods.feddf import FedDFConfig, adapt_images
from ofl_core.multi_round import run_rounds, server_for
from ofl_core.precision import native_bf16
from ofl_core.registry import METHODS, method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload


def make_quadrants(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes of 28×28 grayscale images: a bright 9×9 square in quadrant y (jittered by up to
    4 px) on a dim noisy background. uint8 (n, 1, 28, 28) and labels."""
    y = torch.randint(0, 4, (n,), generator=gen)
    r0 = 2 + (y // 2) * 13 + torch.randint(0, 5, (n,), generator=gen)
    c0 = 2 + (y % 2) * 13 + torch.randint(0, 5, (n,), generator=gen)
    idx = torch.arange(28)
    rows = (idx[None, :] >= r0[:, None]) & (idx[None, :] < r0[:, None] + 9)
    cols = (idx[None, :] >= c0[:, None]) & (idx[None, :] < c0[:, None] + 9)
    square = (rows[:, :, None] & cols[:, None, :]).float()
    bright = 0.7 + 0.3 * torch.rand(n, 1, 1, generator=gen)
    x = torch.rand(n, 28, 28, generator=gen) * 0.3 * (1 - square) + bright * square
    return (x * 255).round().to(torch.uint8).unsqueeze(1), y


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def quadrants() -> ImageDataset:
    g = torch.Generator().manual_seed(0)
    xtr, ytr = make_quadrants(480, g)
    xte, yte = make_quadrants(400, g)
    return ImageDataset("quadrants", xtr, ytr, xte, yte, num_classes=4)


@pytest.fixture(scope="module")
def setup(quadrants: ImageDataset):
    """Three cnn_mnist clients on a non-IID (Dirichlet α = 0.5) split — each misses a class,
    so each alone scores about 75% while their ensemble is near 100% — and a server context."""
    part = make_partition(quadrants.y_train.numpy(), 3, "dirichlet", alpha=0.5, seed=1)
    local = LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32, lr=0.05)
    uploads = train_clients(quadrants, part, local, seed=1, workers=1, progress=False)

    def evaluate(model: torch.nn.Module) -> float:
        return accuracy(model, quadrants.x_test, quadrants.y_test)

    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, seed=3, evaluate=evaluate,
                        progress=False)
    return part, uploads, ctx


TINY = dict(epochs=6, steps_per_epoch=4, batch_size=32, kd_batch_size=32, nz=32, ngf=16)


# ---------------------------------------------------------------- configs


def test_presets_field_values() -> None:
    p = DenseConfig.for_preset("paper")
    assert (p.epochs, p.steps_per_epoch, p.batch_size, p.nz, p.g_lr, p.g_betas) == (
        200, 30, 128, 256, 1e-3, (0.5, 0.999))
    assert (p.bn_weight, p.adv_weight, p.kd_temperature, p.kd_lr, p.kd_momentum) == (
        1.0, 0.5, 1.0, 0.01, 0.9)
    assert not (p.reinit_generator or p.optimize_z or p.sorted_labels or p.augment)
    assert p.kd_data == "pool" and p.synthesis_student_mode == "eval"
    c = DenseConfig.for_preset("authors_code")
    assert (c.bn_weight, c.adv_weight, c.kd_temperature, c.kd_lr) == (0.0, 1.0, 20.0, 0.005)
    assert c.reinit_generator and c.optimize_z and c.sorted_labels and c.augment
    assert (c.kd_data, c.batch_size, c.kd_batch_size, c.synthesis_student_mode) == (
        "pool", 256, 256, "train_first")
    assert (p.pool_rounding, c.pool_rounding) == ("round", "floor")
    assert (c.epochs, c.steps_per_epoch, c.g_lr) == (200, 30, 1e-3)
    assert DenseConfig.for_preset("paper", epochs=3).epochs == 3
    assert method_config("dense", "authors_code", epochs=2).kd_temperature == 20.0
    for name in ("dense", "fed-dafl", "fed-adi", "feddf"):
        assert name in METHODS
        assert METHODS[name].config.for_preset("authors_code").preset == "authors_code"
    assert (FedDAFLConfig().act_weight, FedDAFLConfig().ie_weight) == (0.1, 5.0)
    assert (FedADIConfig().bn_weight, FedADIConfig().tv_weight, FedADIConfig().pixel_lr) == (
        10.0, 1e-3, 0.1)
    assert FedDFConfig().proxy == "noise" and FedDFConfig().init_from_fedavg


def test_ablations_and_method_names() -> None:
    cfg = DenseConfig()
    assert cfg.method_name == "dense" and cfg.loss_weights == (1.0, 1.0, 0.5)
    expected = {"ce_only": ("dense-ce-only", (1.0, 0.0, 0.0)),
                "no_bn": ("dense-no-bn", (1.0, 0.0, 0.5)),
                "no_div": ("dense-no-div", (1.0, 1.0, 0.0))}
    for ab, (name, w) in expected.items():
        c = DenseConfig(ablation=ab)
        assert (c.method_name, c.loss_weights) == (name, w)
    assert DenseConfig(label="dense+ldam").method_name == "dense+ldam"
    names = {"fed-dafl": FedDAFLConfig(), "fed-adi": FedADIConfig(), "feddf": FedDFConfig()}
    assert all(c.method_name == n for n, c in names.items())


@pytest.mark.parametrize(("field", "value", "match"), [
    ("kd_data", "both", "kd_data"), ("ablation", "no_ce", "ablation"),
    ("student_arch", "vgg", "student_arch"), ("steps_per_epoch", 0, "steps_per_epoch"),
    ("kd_temperature", 0.0, "kd_temperature"), ("preset", "code", "preset"),
])
def test_config_validation(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DenseConfig(**{field: value})


def _fresh_upload(arch: str, k: int) -> ClientUpload:
    model = init_model(arch, 4, 1, 28, seed=k)
    return ClientUpload(client_id=k, arch=arch, state_dict=model.state_dict(), num_classes=4,
                        in_channels=1, image_size=28, num_samples=10)


def test_heterogeneous_clients_need_student_arch() -> None:
    ups = [_fresh_upload("cnn_mnist", 0), _fresh_upload("lenet", 1)]
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False)
    with pytest.raises(ValueError, match="student_arch"):
        run_method("dense", ups, DenseConfig(**TINY), ctx)
    res = run_method("dense", ups, DenseConfig(**{**TINY, "epochs": 1, "steps_per_epoch": 1},
                                                student_arch="lenet"), ctx)
    assert res.extras["student_arch"] == "lenet" and res.curve == [] and res.last_acc is None


def test_amp_default_is_bf16_where_native_and_false_keeps_float32() -> None:
    """DENSE's server runs in bfloat16 by default where the CPU has it (measured unchanged,
    docs/decisions/clients.md#precision), float32 with ``amp=False``; the result says which,
    and the autocast really is on: the same run differs from the float32 one only where
    bfloat16 is native."""
    ups = [_fresh_upload("cnn_mnist", k) for k in range(2)]
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False, seed=3)
    tiny = {**TINY, "epochs": 1, "steps_per_epoch": 2}
    assert DenseConfig().amp == "auto" and DenseConfig.for_preset("authors_code").amp == "auto"
    auto = run_method("dense", ups, DenseConfig(**tiny), ctx)
    fp32 = run_method("dense", ups, DenseConfig(**tiny, amp=False), ctx)
    assert auto.extras["amp"] is native_bf16("cpu") and fp32.extras["amp"] is False
    same = all(torch.equal(a, b) for a, b in zip(auto.model.state_dict().values(),
                                                 fp32.model.state_dict().values(), strict=True))
    assert same is not native_bf16("cpu")


def test_multi_round_rejects_heterogeneous_clients(quadrants: ImageDataset) -> None:
    part = make_partition(quadrants.y_train.numpy(), 2, "iid", seed=0)
    cfgs = [LocalTrainConfig(arch="cnn_mnist", epochs=1), LocalTrainConfig(arch="lenet", epochs=1)]
    with pytest.raises(ValueError, match="share one architecture"):
        run_rounds(quadrants, part, cfgs, server_for("dense", DenseConfig(**TINY)), rounds=2,
                   seed=0, progress=False)
    with pytest.raises(ValueError, match="student_arch"):
        run_rounds(quadrants, part, cfgs[0],
                   server_for("dense", DenseConfig(**TINY, student_arch="lenet")), rounds=2,
                   seed=0, progress=False, workers=1, method="dense")


# ---------------------------------------------------------------- end to end


def test_dense_end_to_end_beats_chance(setup) -> None:
    _, uploads, ctx = setup
    res = run_method("dense", uploads, DenseConfig.for_preset("paper", **TINY), ctx)
    assert res.method == "dense" and res.preset == "paper"
    assert len(res.curve) == TINY["epochs"] and res.extras["curve_epochs"][-1] == TINY["epochs"]
    assert res.last_acc == res.curve[-1] and res.best_acc == max(res.curve)
    assert res.last_acc > 60.0, res.curve  # chance is 25%; single clients ≈ 75%
    assert res.images.shape == (32, 1, 28, 28) and 0 <= res.images.min() <= res.images.max() <= 1
    labels = res.extras["image_labels"]
    assert labels == sorted(labels) and len(labels) == 32
    assert res.extras["pool_size"] == TINY["epochs"] * TINY["batch_size"]
    assert res.extras["kd_steps"] == sum(range(1, TINY["epochs"] + 1))  # epoch e: e batches
    losses = res.extras["losses"]
    assert all(math.isfinite(v) for v in losses["total"]) and max(losses["bn"]) > 0
    assert not any(p.requires_grad is False for p in res.model.parameters())
    assert repr(res.model) == repr(init_model("cnn_mnist", 4, 1, 28, seed=0))  # stock modules
    # the same seed gives the same student
    short = DenseConfig.for_preset("paper", **{**TINY, "epochs": 2})
    a, b = (run_method("dense", uploads, short, ctx) for _ in range(2))
    assert a.curve == b.curve == res.curve[:2]


def test_dense_authors_code_and_fresh_variants(setup) -> None:
    _, uploads, ctx = setup
    code = run_method("dense", uploads, DenseConfig.for_preset(
        "authors_code", **{**TINY, "epochs": 3}, eval_every=2), ctx)
    assert code.extras["curve_epochs"] == [2, 3]
    assert code.extras["loss_weights"] == {"ce": 1.0, "bn": 0.0, "div": 1.0}
    assert max(code.extras["losses"]["bn"]) == 0.0
    fresh = run_method("dense", uploads, DenseConfig(**{**TINY, "epochs": 3}, kd_data="fresh",
                                                     ablation="no_div", amp=True), ctx)
    assert fresh.method == "dense-no-div" and fresh.extras["amp"]
    assert all(math.isfinite(v) for v in fresh.extras["losses"]["total"])
    assert fresh.extras["kd_steps"] == 3 and fresh.extras["pool_size"] == 0
    assert max(fresh.extras["losses"]["div"]) == 0.0


@pytest.mark.parametrize(("mode", "expected"), [
    ("eval", [False, False, False]), ("train", [True, True, True]),
    ("train_first", [True, False, False])])
def test_synthesis_student_mode_per_epoch(mode: str, expected: list[bool]) -> None:
    """The student's mode during each epoch's generator steps: DENSE's code trains the
    generator against a train-mode student in epoch 0 only (its per-epoch test leaves the
    student in eval mode), ``"train"`` in every epoch; the weights stay frozen either way."""
    cfg = DenseConfig(synthesis_student_mode=mode)
    student = init_model("cnn_mnist", 4, 1, 28, seed=0)
    bank = TeacherBank([init_model("cnn_mnist", 4, 1, 28, seed=1)])
    synth = DenseSynthesizer(torch.nn.Identity(), bank, student, cfg, torch.Generator(),
                             torch.device("cpu"))
    seen = []
    for epoch in range(3):
        student.train()  # as the distillation stage leaves it
        synth.freeze_student(epoch)
        seen.append(student.training)
        assert not any(q.requires_grad for q in student.parameters())
    assert seen == expected


def test_baselines_smoke(setup) -> None:
    _, uploads, ctx = setup
    small = dict(epochs=2, batch_size=16, student_arch=None)
    dafl = run_method("fed-dafl", uploads, FedDAFLConfig(**small, steps_per_epoch=2, nz=16,
                                                         ngf=8), ctx)
    adi = run_method("fed-adi", uploads,
                     FedADIConfig(**small, steps_per_epoch=3, kd_batch_size=16), ctx)
    df = run_method("feddf", uploads, FedDFConfig(**small, steps_per_epoch=3), ctx)
    for res, name in ((dafl, "fed-dafl"), (adi, "fed-adi"), (df, "feddf")):
        assert res.method == name and len(res.curve) == 2
        assert all(0.0 <= a <= 100.0 for a in res.curve)
        assert all(math.isfinite(v) for v in res.extras["kd_loss"])
        out = res.model(torch.rand(3, 1, 28, 28))
        assert out.shape == (3, 4) and torch.isfinite(out).all()
    assert dafl.images.shape == (16, 1, 28, 28) and adi.images.shape == (16, 1, 28, 28)
    assert dafl.extras["kd_data"] == "fresh" and dafl.extras["kd_steps"] == 4
    pooled = run_method("fed-dafl", uploads, FedDAFLConfig(
        **small, steps_per_epoch=2, nz=16, ngf=8, kd_data="pool", kd_batch_size=16), ctx)
    # one best batch per epoch joins the pool; epoch e distils over e batches
    assert pooled.extras["pool_size"] == 32 and pooled.extras["kd_steps"] == 1 + 2
    assert len(pooled.extras["kd_loss"]) == 2 and all(math.isfinite(v) for v in
                                                      pooled.extras["kd_loss"])
    with pytest.raises(ValueError, match=r"kd_data must be one of \('fresh', 'pool'\)"):
        FedDAFLConfig(kd_data="replay")
    assert adi.extras["pool_size"] == 32
    assert df.extras["proxy"] == "noise" and df.extras["student_init"] == "fedavg"


def test_feddf_proxy_fallback_and_adapt(setup, tmp_path) -> None:
    _, uploads, ctx = setup
    cfg = FedDFConfig(epochs=1, steps_per_epoch=1, batch_size=8, proxy="cifar10",
                      proxy_data_root=str(tmp_path))
    res = run_method("feddf", uploads, cfg, ctx)
    assert res.extras["proxy"].startswith("noise (cifar10 not found")
    with pytest.raises(FileNotFoundError):
        run_method("feddf", uploads, FedDFConfig(**{**cfg.__dict__, "fallback_to_noise": False}),
                   ctx)
    rgb = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert adapt_images(rgb, 1, 28).shape == (2, 1, 28, 28)
    gray = torch.full((2, 1, 28, 28), 200, dtype=torch.uint8)
    assert torch.equal(adapt_images(gray, 3, 28), gray.repeat(1, 3, 1, 1))


def test_feddf_student_mode_eval_keeps_fedavgs_bn_statistics(setup) -> None:
    """``kd_student_mode="eval"``: the student's BN running statistics stay the FedAvg
    model's while its weights move; "train" (the literal reading) replaces them with the noise
    proxy's."""
    from ofl_core.server import average_states

    _, uploads, ctx = setup
    avg = average_states([u.state_dict for u in uploads], [float(u.num_samples) for u in uploads])
    stats = [k for k in avg if k.endswith(("running_mean", "running_var"))]
    assert stats
    out = {}
    for mode in ("train", "eval"):
        cfg = FedDFConfig(epochs=2, steps_per_epoch=3, batch_size=16, kd_student_mode=mode)
        out[mode] = run_method("feddf", uploads, cfg, ctx).model.state_dict()
    assert all(torch.equal(out["eval"][k], avg[k]) for k in stats)
    assert not all(torch.allclose(out["train"][k], avg[k]) for k in stats)
    weights = [k for k in avg if k.endswith("weight")]
    assert not all(torch.allclose(out["eval"][k], avg[k]) for k in weights)
    with pytest.raises(ValueError, match="kd_student_mode"):
        FedDFConfig(kd_student_mode="frozen")  # type: ignore[arg-type]


def test_multi_round_dense(quadrants: ImageDataset) -> None:
    part = make_partition(quadrants.y_train.numpy(), 2, "dirichlet", alpha=0.5, seed=2)
    local = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=32)
    server = server_for("dense", DenseConfig(**{**TINY, "epochs": 2}))
    out = run_rounds(quadrants, part, local, server, rounds=2, seed=0, progress=False, workers=1,
                     method="dense")
    assert [r.round for r in out.rounds] == [1, 2]
    assert all(r.last_acc is not None and len(r.client_accs) == 2 for r in out.rounds)
    assert len(out.accuracies) == 2 and len(out.results) == 2
    assert out.model(torch.rand(2, 1, 28, 28)).shape == (2, 4)
