"""ofl_core.fedhydra.server: FedHydra end to end on IID bars clients (tests/conftest.py), the
kd_data modes, a given stratification, heterogeneous clients and config validation."""

from __future__ import annotations

import math

import pytest
import torch

from ofl_core.clients import init_model
from ofl_core.distill.stratification import Stratification
from ofl_core.fedhydra.server import FedHydraConfig, run_fedhydra
from ofl_core.methods.ot_fusion import OTFusionConfig
from ofl_core.registry import METHODS, method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload

pytestmark = pytest.mark.usefixtures("one_thread")

C6 = 6


TINY = dict(epochs=8, steps_per_epoch=4, batch_size=32, kd_batch_size=32, nz=32, ngf=16,
            strat_steps=6, strat_batch_size=16)


@pytest.fixture(scope="module")
def hydra(iid_clients):
    uploads, ctx = iid_clients
    return run_method("fedhydra", uploads, FedHydraConfig.for_preset("paper", **TINY), ctx)


# ---------------------------------------------------------------- FedHydra end to end


def test_fedhydra_end_to_end_beats_chance(hydra) -> None:
    res = hydra
    assert res.method == "fedhydra" and res.preset == "paper"
    assert len(res.curve) == TINY["epochs"] and res.last_acc == res.curve[-1]
    assert res.best_acc == max(res.curve)
    # chance is 16.7%; with broken SA/KD wiring the student stays ≤ 22% (2c/c-like collapse)
    assert res.best_acc > 35.0, res.curve
    ex = res.extras
    assert ex["mean_ensemble_acc"] > 90.0
    torch.testing.assert_close(torch.tensor(ex["U_r"]).sum(1), torch.ones(C6))
    assert len(ex["strat_losses"][0][0]) == TINY["strat_steps"]
    assert 0 <= ex["sa_ensemble_acc"] <= 100 and 0 <= ex["mean_ensemble_acc"] <= 100
    assert ex["kd_data"] == "intermediate"
    assert ex["kd_steps"] == TINY["epochs"] * TINY["steps_per_epoch"]
    assert ex["strat_generator_steps"] == 3 * C6 * TINY["strat_steps"]
    assert all(math.isfinite(v) for v in ex["losses"]["total"]) and max(ex["losses"]["bn"]) > 0
    assert max(ex["losses"]["ad"]) <= 0  # L_AD = −KL ≤ 0
    assert res.images.shape == (32, 1, 28, 28) and 0 <= res.images.min() <= res.images.max() <= 1
    assert ex["image_labels"] == sorted(ex["image_labels"])
    assert all(p.requires_grad for p in res.model.parameters())


@pytest.mark.parametrize(("kd_data", "steps"), [("fresh", [1, 1]), ("pool", [1, 2])])
def test_kd_data_modes_and_a_given_stratification(iid_clients, hydra, kd_data, steps) -> None:
    uploads, ctx = iid_clients
    strat = Stratification(U=torch.tensor(hydra.extras["U"], dtype=torch.float64),
                           U_r=torch.tensor(hydra.extras["U_r"], dtype=torch.float64),
                           U_c=torch.tensor(hydra.extras["U_c"], dtype=torch.float64),
                           losses=torch.tensor(hydra.extras["strat_losses"]))
    cfg = FedHydraConfig(**{**TINY, "epochs": 2, "steps_per_epoch": 2, "kd_batch_size": 16},
                         kd_data=kd_data, sa_rescale=True)
    res = run_fedhydra(uploads, cfg, ctx, stratification=strat)
    assert res.extras["U_r"] == hydra.extras["U_r"] and res.extras["sa_rescale"]
    assert res.extras["time_stratification_s"] < 0.5  # not recomputed
    # fresh: one student step per epoch (Alg. 1); pool: epoch e passes over e batches of 32
    assert res.extras["kd_steps"] == sum(steps) * (2 if kd_data == "pool" else 1)
    assert len(res.curve) == 2
    bad = Stratification(U=strat.U[:, :2], U_r=strat.U_r[:, :2], U_c=strat.U_c[:, :2],
                         losses=strat.losses[:2])
    with pytest.raises(ValueError, match="stratification"):
        run_fedhydra(uploads, cfg, ctx, stratification=bad)


def _fresh_upload(arch: str, k: int, n: int = 10, classes: int = 4) -> ClientUpload:
    model = init_model(arch, classes, 1, 28, seed=k)
    return ClientUpload(client_id=k, arch=arch, state_dict=model.state_dict(),
                        num_classes=classes, in_channels=1, image_size=28, num_samples=n)


def test_heterogeneous_clients_need_a_student_arch() -> None:
    ups = [_fresh_upload("cnn_mnist", 0), _fresh_upload("lenet", 1)]
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False)
    small = dict(epochs=1, steps_per_epoch=1, batch_size=8, nz=8, ngf=4, strat_steps=2,
                 strat_batch_size=4)
    with pytest.raises(ValueError, match="student_arch"):
        run_method("fedhydra", ups, FedHydraConfig(**small), ctx)
    res = run_method("fedhydra", ups, FedHydraConfig(**small, student_arch="lenet"), ctx)
    assert res.extras["student_arch"] == "lenet" and res.curve == [] and res.last_acc is None
    assert "sa_ensemble_acc" not in res.extras  # no evaluation callback
    assert torch.tensor(res.extras["U_r"]).shape == (4, 2)


def test_fedhydra_config_presets_and_validation() -> None:
    p, c = FedHydraConfig.for_preset("paper"), FedHydraConfig.for_preset("authors_code")
    assert (p.epochs, p.steps_per_epoch, p.batch_size, p.g_lr, p.kd_lr) == (
        200, 30, 128, 1e-3, 0.01)
    assert (p.bn_weight, p.adv_weight, p.kd_ce_weight, p.sa_rescale) == (1.0, 0.5, 1.0, False)
    assert (p.strat_steps, p.strat_batch_size, p.strat_lr) == (30, 128, 1e-3)
    assert c.preset == "authors_code" and FedHydraConfig(preset="authors_code") == c
    assert method_config("fedhydra", sa_rescale=True).sa_rescale
    assert METHODS["fedhydra"].config is FedHydraConfig and METHODS["ot"].config is OTFusionConfig
    for field, value in [("kd_data", "best"), ("steps_per_epoch", 0), ("strat_group", 0),
                         ("student_arch", "vgg"), ("min_loss_floor", 0.0), ("preset", "x"),
                         ("kd_ce_weight", -1.0)]:
        with pytest.raises(ValueError, match=field):
            FedHydraConfig(**{field: value})
