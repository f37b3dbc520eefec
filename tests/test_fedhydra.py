"""FedHydra (stratification, stratified aggregation, the server method) and OT fusion.

Stratified aggregation is checked against a loop-by-loop transcription of Eqs. 8–11 and on
hand-made weights; stratification on 2c/c teachers trained here on a synthetic 6-class dataset
built in this file (not the embedded one); OT fusion on randomly permuted copies of a network.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.client_training import train_clients
from ofl_core.clients import (
    ClientUpload,
    LocalTrainConfig,
    build_from_upload,
    init_model,
)
from ofl_core.data.datasets import ImageDataset
from ofl_core.data.partition import make_partition
from ofl_core.ensemble import Ensemble, SAEnsemble, sa_logits
from ofl_core.evaluate import accuracy
from ofl_core.methods import METHODS, ServerContext, method_config, run_method
from ofl_core.methods.fedhydra import FedHydraConfig, run_fedhydra
from ofl_core.methods.ot_fusion import SUPPORTED_ARCHS, OTFusionConfig
from ofl_core.stratification import (
    Stratification,
    exact_cross_entropy,
    guidance_capability,
    stratified_weights,
    stratify,
)

C6 = 6


def make_bars(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """6 classes of 28×28 grayscale images: a bright 9×7 bar at one of 2×3 positions (jittered
    by a few pixels) on a dim noisy background. uint8 (n, 1, 28, 28) and labels."""
    y = torch.randint(0, C6, (n,), generator=gen)
    r0 = 2 + (y // 3) * 13 + torch.randint(0, 4, (n,), generator=gen)
    c0 = 1 + (y % 3) * 9 + torch.randint(0, 3, (n,), generator=gen)
    idx = torch.arange(28)
    rows = (idx[None] >= r0[:, None]) & (idx[None] < r0[:, None] + 9)
    cols = (idx[None] >= c0[:, None]) & (idx[None] < c0[:, None] + 7)
    bar = (rows[:, :, None] & cols[:, None, :]).float()
    x = torch.rand(n, 28, 28, generator=gen) * 0.3 * (1 - bar) + 0.85 * bar
    return (x * 255).round().to(torch.uint8).unsqueeze(1), y


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: these tiny models only lose time to threading on a shared CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def bars() -> ImageDataset:
    g = torch.Generator().manual_seed(0)
    xtr, ytr = make_bars(480, g)
    xte, yte = make_bars(300, g)
    return ImageDataset("bars", xtr, ytr, xte, yte, num_classes=C6)


def _clients(data: ImageDataset, scheme: str) -> tuple[list[ClientUpload], ServerContext]:
    part = make_partition(data.y_train.numpy(), 3, scheme, seed=1, classes_per_client=2,
                          num_classes=C6)
    local = LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32)
    uploads = train_clients(data, part, local, seed=1, workers=1, progress=False)

    def evaluate(model: nn.Module) -> float:
        return accuracy(model, data.x_test, data.y_test)

    ctx = ServerContext(num_classes=C6, in_channels=1, image_size=28, seed=3, evaluate=evaluate,
                        progress=False)
    return uploads, ctx


@pytest.fixture(scope="module")
def two_per_client(bars: ImageDataset):
    """Three cnn_mnist clients on 2c/c (client k holds classes 2k, 2k+1)."""
    return _clients(bars, "classes_per_client")


@pytest.fixture(scope="module")
def iid_clients(bars: ImageDataset):
    """Three cnn_mnist clients on an IID split (their mean ensemble is ≈ 100% accurate)."""
    return _clients(bars, "iid")


TINY = dict(epochs=8, steps_per_epoch=4, batch_size=32, kd_batch_size=32, nz=32, ngf=16,
            strat_steps=6, strat_batch_size=16)


@pytest.fixture(scope="module")
def hydra(iid_clients):
    uploads, ctx = iid_clients
    return run_method("fedhydra", uploads, FedHydraConfig.for_preset("paper", **TINY), ctx)


def _normalised(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return u / u.sum(1, keepdim=True), u / u.sum(0, keepdim=True)


# ---------------------------------------------------------------- stratified aggregation


def test_stratified_weights_rows_and_columns_sum_to_one() -> None:
    U = torch.tensor([[1.0, 3.0], [2.0, 2.0], [0.0, 5.0]], dtype=torch.float64)  # (C=3, m=2)
    U_r, U_c = stratified_weights(U)
    torch.testing.assert_close(U_r.sum(1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(U_c.sum(0), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(U_r[0], torch.tensor([0.25, 0.75], dtype=torch.float64))  # Eq. 4
    torch.testing.assert_close(U_c[:, 0], torch.tensor([1 / 3, 2 / 3, 0.0],
                                                       dtype=torch.float64))  # Eq. 6
    # guards: an all-zero row/column gets uniform weights; huge u do not overflow
    Z = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    zr, zc = stratified_weights(Z)
    torch.testing.assert_close(zr[0], torch.tensor([0.5, 0.5], dtype=torch.float64))
    torch.testing.assert_close(zc[:, 1], torch.tensor([0.5, 0.5], dtype=torch.float64))
    hr, hc = stratified_weights(torch.tensor([[1e300, 1e300], [1e300, 1.0]],
                                             dtype=torch.float64))
    assert torch.isfinite(hr).all() and torch.isfinite(hc).all()
    torch.testing.assert_close(hr[0], torch.tensor([0.5, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        stratified_weights(-U)


def _sa_by_the_paper(P: torch.Tensor, y: torch.Tensor, U_r: torch.Tensor, U_c: torch.Tensor
                     ) -> torch.Tensor:
    """Eqs. 8–11 transcribed with loops."""
    m, b, c = P.shape
    P_hat = [P[k] * (torch.ones(b, 1) @ U_c[:, k][None, :]) for k in range(m)]  # Eq. 8
    V = torch.stack([U_r[y[i], :] for i in range(b)])  # Eq. 10, (b, m)
    rows = []
    for i in range(b):
        P_i = torch.stack([P_hat[k][i, :] for k in range(m)])  # Eq. 9, (m, c)
        rows.append(V[i, :] @ P_i)  # Eq. 11
    return torch.stack(rows)


def test_sa_logits_follow_eqs_8_to_11_and_the_label_free_form() -> None:
    g = torch.Generator().manual_seed(0)
    m, b, c = 3, 5, 4
    P = torch.randn(m, b, c, generator=g) * 3
    U_r, U_c = _normalised(torch.rand(c, m, generator=g) + 0.1)
    y = torch.randint(0, c, (b,), generator=g)
    torch.testing.assert_close(sa_logits(P, y, U_r, U_c), _sa_by_the_paper(P, y, U_r, U_c))
    torch.testing.assert_close(sa_logits(P, y, U_r, U_c, rescale=True),
                               c * _sa_by_the_paper(P, y, U_r, U_c))
    # label-free: P_ij = Σ_k Ū_r(j,k)·Ū_c(j,k)·P_k[i,j]
    free = torch.zeros(b, c)
    for i in range(b):
        for j in range(c):
            free[i, j] = sum(U_r[j, k] * U_c[j, k] * P[k, i, j] for k in range(m))
    torch.testing.assert_close(sa_logits(P, None, U_r, U_c), free)
    # the label-conditioned form equals the label-free one on each class's own column
    for j in range(c):
        yj = torch.full((b,), j)
        torch.testing.assert_close(sa_logits(P, yj, U_r, U_c)[:, j], free[:, j])
    with pytest.raises(ValueError, match=r"\(C, m\)"):
        sa_logits(P, y, U_r.T, U_c)
    with pytest.raises(ValueError, match="y must have shape"):
        sa_logits(P, y[:2], U_r, U_c)


def test_uniform_weights_give_the_mean_ensemble_over_c() -> None:
    g = torch.Generator().manual_seed(1)
    m, b, c = 4, 6, 5
    P = torch.randn(m, b, c, generator=g) * 4
    U_r, U_c = torch.full((c, m), 1 / m), torch.full((c, m), 1 / c)
    mean = P.mean(0)
    y = torch.randint(0, c, (b,), generator=g)
    for labels in (y, None):
        sa = sa_logits(P, labels, U_r, U_c)
        torch.testing.assert_close(sa, mean / c)
        assert torch.equal(sa.argmax(1), mean.argmax(1))  # same predictions ...
        ent = [-(F.softmax(t, 1) * F.log_softmax(t, 1)).sum(1) for t in (sa, mean)]
        assert bool((ent[0] > ent[1]).all())  # ... but a softer softmax (temperature C)
        torch.testing.assert_close(sa_logits(P, labels, U_r, U_c, rescale=True), mean)


class _Fixed(nn.Module):
    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.register_buffer("logits", torch.tensor(logits))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(x.shape[0], -1)


def test_sa_ensemble_module() -> None:
    members = [_Fixed([4.0, 0.0, 1.0]), _Fixed([0.0, 2.0, 3.0])]
    x = torch.zeros(2, 1)
    U_r, U_c = torch.full((3, 2), 0.5), torch.full((3, 2), 1 / 3)
    sa = SAEnsemble(members, U_r, U_c)
    torch.testing.assert_close(sa(x), Ensemble(members)(x) / 3)
    torch.testing.assert_close(SAEnsemble(members, U_r, U_c, rescale=True)(x),
                               Ensemble(members)(x))
    # expert weights: class 0 from member 0, classes 1-2 from member 1
    U_r = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    U_c = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.0, 0.5]])
    out = SAEnsemble(members, U_r, U_c)(x)
    torch.testing.assert_close(out[0], torch.tensor([4.0, 1.0, 1.5]))
    y = torch.tensor([0, 2])
    torch.testing.assert_close(SAEnsemble(members, U_r, U_c)(x, y),
                               sa_logits(torch.stack([mm(x) for mm in members]), y, U_r, U_c))
    sa.train()
    assert not any(mm.training for mm in sa.members)
    with pytest.raises(ValueError, match=r"\(C, 2\)"):
        SAEnsemble(members, torch.ones(3, 3), torch.ones(3, 3))


# ---------------------------------------------------------------- stratification


def test_guidance_capability_eq2_and_zero_min_guard() -> None:
    L = torch.tensor([[3.0, 2.0, 1.0],      # ordinary: (3 − 1)/1 = 2
                      [0.5, 0.0, 0.0],      # min 0: guarded, huge but finite
                      [0.0, 0.0, 0.0],      # 0 throughout: no guidance, u = 0
                      [0.25, 0.25, 0.25]])  # constant: u = 0
    u = guidance_capability(L)
    assert u.dtype == torch.float64 and bool(torch.isfinite(u).all())
    assert u[0] == 2.0 and u[2] == 0.0 and u[3] == 0.0
    assert u[1] == pytest.approx(0.5 / 1e-300, rel=1e-12)
    assert guidance_capability(L, min_loss_floor=1e-3)[1] == pytest.approx(500.0)
    # the guarded client takes its whole class row
    U_r, _ = stratified_weights(torch.stack([u[0:2], u[0:2]]))
    assert U_r[0, 1] == pytest.approx(1.0) and U_r[0, 0] < 1e-200
    with pytest.raises(ValueError, match="min_loss_floor"):
        guidance_capability(L, min_loss_floor=0.0)


def test_exact_cross_entropy_keeps_tiny_losses() -> None:
    g = torch.Generator().manual_seed(0)
    logits, t = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    torch.testing.assert_close(exact_cross_entropy(logits, t).float(),
                               F.cross_entropy(logits, t, reduction="none"))
    big = torch.tensor([[60.0, 0.0, -3.0]])
    assert F.cross_entropy(big, torch.tensor([0])) == 0.0  # float32 rounds it away
    assert exact_cross_entropy(big, torch.tensor([0])).item() == pytest.approx(
        math.exp(-60) + math.exp(-63), rel=1e-9)


class _Brightness(nn.Module):
    """A two-class 'teacher': logit of class 0 = scale·(mean pixel − 0.55), class 1 = the
    opposite. A fresh generator's images have mean ≈ 0.5, so with a large scale class 1's loss
    is ≈ 0 (and flat: no gradient) from the start and class 0's reaches exactly 0 once the
    images are bright."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.scale * (x.mean((1, 2, 3)) - 0.55)
        return torch.stack([s, -s], 1)


def test_stratify_guards_losses_that_reach_zero() -> None:
    teachers = [_Brightness(1e4), _Brightness(2.0)]
    s = stratify(teachers, 2, 1, 28, steps=20, batch_size=8, nz=8, ngf=4, lr=0.05, seed=0)
    assert s.losses.shape == (2, 2, 20) and s.U.shape == (2, 2)
    L = s.losses[0]
    assert L[0, 0] > 100 and float(L[0].amin()) == 0.0  # class 0: from large to exactly 0
    assert float(L[1].max()) < 1e-200 and bool((L[1] == L[1, 0]).all())  # class 1: ≈ 0, flat
    assert bool(torch.isfinite(s.U).all() & torch.isfinite(s.U_r).all())
    assert s.U[0, 0] > 1e250 and s.U[1, 0] == 0.0  # guarded: huge; no change: 0
    assert s.U_r[0, 0] > 0.999 and s.U_r[1, 1] == 1.0
    torch.testing.assert_close(s.U_r.sum(1), torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(s.U_c.sum(0), torch.ones(2, dtype=torch.float64))


def test_stratify_result_does_not_depend_on_grouping() -> None:
    models = [init_model("lenet", 3, 1, 28, seed=k) for k in range(2)]
    kw = dict(steps=3, batch_size=4, nz=8, ngf=4, seed=7)
    ref = stratify(models, 3, 1, 28, group=1, **kw)
    for group in (4, 6, "auto"):
        other = stratify(models, 3, 1, 28, group=group, **kw)
        torch.testing.assert_close(other.losses, ref.losses, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(other.U_r, ref.U_r, rtol=1e-3, atol=1e-6)
    # the loss sequences differ between clients and classes (each has its own generator)
    assert ref.losses.flatten(0, 1).unique(dim=0).shape[0] == 6
    with pytest.raises(ValueError, match="group"):
        stratify(models, 3, 1, 28, group=0, **kw)


def test_stratification_of_2c_per_client_favours_each_clients_own_classes(two_per_client
                                                                          ) -> None:
    uploads, _ = two_per_client
    models = [build_from_upload(u) for u in uploads]
    s = stratify(models, C6, 1, 28, steps=8, batch_size=16, nz=32, ngf=16, seed=1)
    owner = torch.arange(C6) // 2
    assert torch.equal(s.U_r.argmax(1), owner), s.U_r  # each class: its owner's weight is top
    assert bool((s.U_r[torch.arange(C6), owner] > 0.8).all()), s.U_r
    for k in range(3):  # each client: its two classes have its two largest weights
        assert set(s.U_c[:, k].topk(2).indices.tolist()) == {2 * k, 2 * k + 1}, s.U_c
    torch.testing.assert_close(s.U_r.sum(1), torch.ones(C6, dtype=torch.float64))
    torch.testing.assert_close(s.U_c.sum(0), torch.ones(3, dtype=torch.float64))
    # every loss curve is recorded before each of the T_G updates and is finite
    assert s.losses.shape == (3, C6, 8) and bool(torch.isfinite(s.losses).all())


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
    assert ((p.epochs, p.steps_per_epoch, p.batch_size, p.g_lr, p.kd_lr)
            == (200, 30, 128, 1e-3, 0.01))
    assert (p.bn_weight, p.adv_weight, p.kd_ce_weight, p.sa_rescale) == (1.0, 0.5, 1.0, False)
    assert (p.strat_steps, p.strat_batch_size, p.strat_lr) == (30, 128, 1e-3)
    assert c.preset == "authors_code" and FedHydraConfig(preset="authors_code") == c
    assert method_config("fedhydra", sa_rescale=True).sa_rescale
    assert METHODS["fedhydra"][0] is FedHydraConfig and METHODS["ot"][0] is OTFusionConfig
    for field, value in [("kd_data", "best"), ("steps_per_epoch", 0), ("strat_group", 0),
                         ("student_arch", "vgg"), ("min_loss_floor", 0.0), ("preset", "x"),
                         ("kd_ce_weight", -1.0)]:
        with pytest.raises(ValueError, match=field):
            FedHydraConfig(**{field: value})


# ---------------------------------------------------------------- OT fusion

_SPECS = {"cnn_mnist": (1, 28), "cnn_cifar": (3, 32), "cnn_cifar100": (3, 32), "cnn1": (3, 32),
          "lenet": (1, 28), "mcmahan_cnn": (1, 32)}


def _upload(model: nn.Module, arch: str, k: int, n: int, ch: int, size: int) -> ClientUpload:
    return ClientUpload(client_id=k, arch=arch, state_dict=model.state_dict(), num_classes=5,
                        in_channels=ch, image_size=size, num_samples=n)


@torch.no_grad()
def _permuted_copy(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """The same function with every hidden layer's units randomly permuted (test-side
    implementation, independent of ofl_core.methods.ot_fusion)."""
    import copy

    out = copy.deepcopy(model)
    layers = [m for m in out.modules() if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d))]
    perm, prev_out = None, None
    for i, mod in enumerate(layers):
        if isinstance(mod, nn.BatchNorm2d):
            for t in (mod.weight, mod.bias, mod.running_mean, mod.running_var):
                t.copy_(t[perm])
            continue
        w = mod.weight
        if perm is not None:  # inputs follow the previous layer's permutation
            if isinstance(mod, nn.Linear) and w.shape[1] != prev_out:
                s = w.shape[1] // prev_out
                w.copy_(w.view(w.shape[0], prev_out, s)[:, perm].reshape(w.shape[0], -1))
            else:
                w.copy_(w[:, perm])
        if i == len(layers) - 1:
            break
        perm = torch.randperm(w.shape[0], generator=gen)
        w.copy_(w[perm])
        if mod.bias is not None:
            mod.bias.copy_(mod.bias[perm])
        prev_out = w.shape[0]
    return out


@pytest.mark.parametrize("arch", SUPPORTED_ARCHS)
def test_ot_fusion_of_permuted_copies_recovers_the_network(arch: str) -> None:
    ch, size = _SPECS[arch]
    g = torch.Generator().manual_seed(0)
    net = init_model(arch, 5, ch, size, seed=0).eval()
    with torch.no_grad():  # non-trivial BN statistics, so they must be permuted too
        for mod in net.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.normal_(0, 0.3, generator=g)
                mod.running_var.uniform_(0.5, 2.0, generator=g)
    twin = _permuted_copy(net, g).eval()
    x = torch.rand(4, ch, size, size, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(twin(x), net(x), rtol=1e-4, atol=1e-5)  # same function
    ups = [_upload(net, arch, 0, 10, ch, size), _upload(twin, arch, 1, 30, ch, size)]
    ctx = ServerContext(num_classes=5, in_channels=ch, image_size=size, progress=False)
    fused = run_method("ot", ups, OTFusionConfig(), ctx)
    assert fused.method == "ot" and fused.extras["anchor"] == 1  # "largest"
    assert fused.extras["fraction_neurons_moved"][0] > 0.5
    with torch.no_grad():
        torch.testing.assert_close(fused.model(x), net(x), rtol=1e-4, atol=1e-5)
        # the plain average of the two (unaligned) copies is a different network
        avg = run_method("fedavg", ups, method_config("fedavg"), ctx)
        assert not torch.allclose(avg.model(x), net(x), rtol=1e-3, atol=1e-3)


def test_ot_fusion_weights_by_sample_count() -> None:
    net = init_model("cnn_mnist", 5, 1, 28, seed=1)
    twice = {k: (2 * v if v.is_floating_point() else v) for k, v in net.state_dict().items()}
    ups = [_upload(net, "cnn_mnist", 0, 1, 1, 28),
           ClientUpload(client_id=1, arch="cnn_mnist", state_dict=twice, num_classes=5,
                        in_channels=1, image_size=28, num_samples=3)]
    ctx = ServerContext(num_classes=5, in_channels=1, image_size=28, progress=False)
    for weighted, factor in ((True, 1 + 3 / 4), (False, 1.5)):
        res = run_method("ot", ups, OTFusionConfig(weighted=weighted, anchor=0), ctx)
        sd = res.model.state_dict()
        for k, v in net.state_dict().items():
            if v.is_floating_point():
                torch.testing.assert_close(sd[k], factor * v, rtol=1e-5, atol=1e-6)
        assert res.extras["anchor"] == 0 and res.extras["fraction_neurons_moved"][1] == 0.0


def test_ot_fusion_refuses_mixed_and_unsupported_architectures() -> None:
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False)
    with pytest.raises(ValueError, match="same architecture.*cnn_mnist.*lenet"):
        run_method("ot", [_fresh_upload("cnn_mnist", 0), _fresh_upload("lenet", 1)],
                   OTFusionConfig(), ctx)
    with pytest.raises(ValueError, match="supports cnn_mnist.*wrn16_1"):
        run_method("ot", [_fresh_upload("wrn16_1", 0), _fresh_upload("wrn16_1", 1)],
                   OTFusionConfig(), ctx)
    with pytest.raises(ValueError, match="anchor"):
        run_method("ot", [_fresh_upload("lenet", 0)], OTFusionConfig(anchor=3), ctx)
    with pytest.raises(ValueError, match="anchor"):
        OTFusionConfig(anchor=-1)


def test_sa_probs_space_weights_probabilities_and_a_zero_weight_removes_a_vote() -> None:
    # client 0 saw only class 0, client 1 only class 1; client 0 is very negative on class 1
    logits = torch.tensor([[[4.0, -20.0]], [[-1.0, 2.0]]])  # (m=2, B=1, C=2)
    U = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (C, m): class j owned by client j
    # label-free, weights on probabilities: P[j] = p_j(client j)
    out = sa_logits(logits, None, U, U, space="probs")
    p = logits.softmax(-1)
    torch.testing.assert_close(out.exp(), torch.stack([p[0, :, 0], p[1, :, 1]], -1))
    # the label-free logit form gives each class only its owner's logit too
    torch.testing.assert_close(sa_logits(logits, None, U, U), torch.tensor([[4.0, 2.0]]))
    with pytest.raises(ValueError, match="space"):
        sa_logits(logits, None, U, U, space="soft")
    with pytest.raises(ValueError, match="sa_space"):
        FedHydraConfig(sa_space="soft")
