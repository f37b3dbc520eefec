"""Co-Boosting: each loss on hand-made tensors, which step differentiates what, the presets'
field values, and a tiny end-to-end run on the embedded FashionMNIST that beats chance."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ofl_core.clients import init_model
from ofl_core.coboosting import losses as cb
from ofl_core.coboosting.server import (
    CoBoostingConfig,
    distillation_stage,
    generator_step,
    start,
    weight_stage,
)
from ofl_core.experiment import configure_methods
from ofl_core.registry import METHODS, method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(epochs=4, steps_per_epoch=3, batch_size=32, kd_batch_size=32, nz=32, ngf=16)


# ---------------------------------------------------------------- configs


def test_presets_field_values() -> None:
    p = CoBoostingConfig.for_preset("paper")
    assert (p.epochs, p.steps_per_epoch, p.batch_size, p.kd_batch_size, p.nz, p.ngf) == (
        200, 30, 128, 128, 256, 64)
    assert (p.g_lr, p.g_betas, p.kd_lr, p.kd_momentum) == (1e-3, (0.5, 0.999), 0.01, 0.9)
    assert (p.ce_weight, p.adv_weight, p.bn_weight, p.hardness) == (1.0, 1.0, 0.0, 1.0)
    assert (p.adv_temperature, p.kd_temperature, p.perturb_temperature) == (3.0, 4.0, 4.0)
    assert (p.weight_lr, p.weight_lr_decay, p.weight_passes) == (0.01, 0.99, 1)
    assert p.perturb_eps == 8 / 255 and p.weights_include_new
    assert not (p.reinit_generator or p.optimize_z or p.sorted_labels)
    assert (p.grad_clip, p.kd_weight_decay, p.kd_lr_schedule, p.pool_augment) == (
        None, 0.0, "constant", "none")
    c = CoBoostingConfig.for_preset("authors_code")
    assert c.perturb_eps == 4 / 255 and not c.weights_include_new
    assert c.reinit_generator and c.optimize_z and not c.sorted_labels
    assert (c.grad_clip, c.kd_weight_decay, c.kd_lr_schedule, c.pool_augment) == (
        10.0, 1e-4, "cosine", "auto")
    flipped = {f for f in p.__dataclass_fields__ if getattr(p, f) != getattr(c, f)}
    assert flipped == {"preset", "perturb_eps", "weights_include_new", "reinit_generator",
                       "optimize_z", "grad_clip", "kd_weight_decay", "kd_lr_schedule",
                       "pool_augment", "input_norm", "pool_rounding"}
    assert "coboosting" in METHODS
    assert method_config("coboosting", "authors_code", epochs=2).grad_clip == 10.0
    # the notebooks' server sizes apply to Co-Boosting as to DENSE
    sizes = dict(epochs=15, steps_per_epoch=10, batch_size=32, kd_batch_size=32, ngf=32,
                 strat_steps=3)
    (_, cb), (_, de) = configure_methods(["coboosting", "dense"], common=sizes)
    for k in ("epochs", "steps_per_epoch", "batch_size", "kd_batch_size", "ngf"):
        assert getattr(cb, k) == getattr(de, k) == sizes[k]


@pytest.mark.parametrize(("field", "value", "match"), [
    ("kd_lr_schedule", "step", "kd_lr_schedule"), ("pool_augment", "rotate", "pool_augment"),
    ("weight_lr", -0.1, "weight_lr"), ("perturb_eps", -1.0, "perturb_eps"),
    ("grad_clip", 0.0, "grad_clip"), ("weight_passes", 0, "weight_passes"),
    ("adv_temperature", 0.0, "adv_temperature"), ("preset", "code", "preset"),
])
def test_config_validation(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CoBoostingConfig(**{field: value})


# ---------------------------------------------------------------- losses on hand-made tensors


def test_weighted_logits_is_the_weighted_mean() -> None:
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[5.0, -2.0]])
    logits = torch.stack([a, b])
    assert torch.allclose(cb.weighted_logits(logits, torch.tensor([1.0, 3.0])),
                          (a + 3 * b) / 4)
    assert torch.allclose(cb.weighted_logits(logits, torch.tensor([0.2, 0.2])), logits.mean(0))
    assert torch.equal(cb.weighted_logits(logits, torch.zeros(2)), torch.zeros(1, 2))


def test_hard_sample_loss_weighs_by_one_minus_p() -> None:
    """p_y = 3/4 → L_H = (1/4)·log(4/3); β = 0 is the plain CE; the weight carries no
    gradient, so ∇ = (1 − p)^β·(σ − onehot)/b."""
    logits = torch.tensor([[math.log(3.0), 0.0]], requires_grad=True)
    y = torch.tensor([0])
    loss = cb.hard_sample_loss(logits, y, hardness=1.0)
    assert loss.item() == pytest.approx(0.25 * math.log(4 / 3))
    loss.backward()
    assert torch.allclose(logits.grad, 0.25 * torch.tensor([[0.75 - 1.0, 0.25]]))
    assert cb.hard_sample_loss(logits, y, 0.0).item() == pytest.approx(math.log(4 / 3))
    assert cb.hard_sample_loss(logits, y, 2.0).item() == pytest.approx(math.log(4 / 3) / 16)
    easy = torch.tensor([[20.0, 0.0], [0.0, 0.0]])  # a confident sample counts ~0
    assert cb.hard_sample_loss(easy, torch.tensor([0, 0])).item() == pytest.approx(
        0.5 * 0.5 * math.log(2), rel=1e-6)


def test_adversarial_loss_is_minus_t2_kl() -> None:
    t = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    s = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    p, q = F.softmax(t / 3, 1), F.log_softmax(s / 3, 1)
    kl = (p * (p.log() - q)).sum(1)
    assert cb.adversarial_loss(t, s).item() == pytest.approx(-9 * kl.mean().item(), rel=1e-6)
    assert cb.adversarial_loss(t, t).item() == pytest.approx(0.0, abs=1e-7)


def test_ensemble_weight_step_moves_towards_the_right_teacher() -> None:
    """Teacher 0 is right, teacher 1 wrong on every sample: w_0 rises and w_1 falls by μ;
    the step clips to [0, 1]; only w is differentiated (the logits' leaf gets no gradient)."""
    right = torch.tensor([[4.0, 0.0], [0.0, 4.0]])
    leaf = torch.stack([right, -right]).requires_grad_(True)
    y = torch.tensor([0, 1])
    w, loss = cb.ensemble_weight_step(torch.tensor([0.5, 0.5]), leaf, y, lr=0.1)
    assert torch.allclose(w, torch.tensor([0.6, 0.4])) and not w.requires_grad
    assert loss.item() == pytest.approx(math.log(2), rel=1e-6) and leaf.grad is None
    w, _ = cb.ensemble_weight_step(torch.tensor([1.0, 0.05]), leaf, y, lr=0.1)
    assert torch.equal(w, torch.tensor([1.0, 0.0]))


def test_diversify_moves_every_pixel_by_eps_along_the_teachers_gradient() -> None:
    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(12, 3)
    x = torch.rand(4, 1, 3, 4)
    xp = cb.diversify(x, lambda v: lin(v.flatten(1)), 0.1, generator=gen)
    assert torch.allclose((xp - x).abs(), torch.full_like(x, 0.1))
    assert not xp.requires_grad and all(p.grad is None for p in lin.parameters())
    again = cb.diversify(x, lambda v: lin(v.flatten(1)), 0.1,
                      generator=torch.Generator().manual_seed(0))
    assert torch.equal(xp, again) and cb.diversify(x, lin, 0.0) is x


# ---------------------------------------------------------------- who gets gradients


def _fresh_uploads(m: int = 3) -> list[ClientUpload]:
    return [ClientUpload(client_id=k, arch="cnn_mnist",
                         state_dict=init_model("cnn_mnist", 4, 1, 28, seed=k).state_dict(),
                         num_classes=4, in_channels=1, image_size=28, num_samples=10)
            for k in range(m)]


@pytest.mark.parametrize("optimize_z", [False, True])
def test_generator_step_updates_only_the_generator(optimize_z: bool) -> None:
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, seed=0, progress=False)
    cfg = CoBoostingConfig(**TINY, optimize_z=optimize_z, grad_clip=10.0)
    c = start(_fresh_uploads(), cfg, ctx)
    z = torch.randn(8, cfg.nz, requires_grad=optimize_z)
    y = torch.randint(0, 4, (8,))
    c.run.student.eval().requires_grad_(False)
    opts = [torch.optim.Adam(c.gen.parameters(), lr=cfg.g_lr)]
    before = [p.detach().clone() for p in c.gen.parameters()]
    loss, x = generator_step(c, z, y, opts, 0)
    assert math.isfinite(loss.item()) and x.shape == (8, 1, 28, 28)
    assert all(p.grad is not None for p in c.gen.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, c.gen.parameters(), strict=True))
    assert (z.grad is not None) == optimize_z
    assert all(p.grad is None for p in c.run.student.parameters())
    assert all(p.grad is None for mdl in c.run.bank.models for p in mdl.parameters())
    assert not c.w.requires_grad and torch.equal(c.w, torch.full((3,), 1 / 3))
    c.run.finish()


def test_weight_stage_updates_only_the_weights() -> None:
    """One pool batch: w moves by exactly −μ·γ^e·sign(∇_w CE) (checked against autograd on the
    teachers' logits); nothing else changes or gets a gradient."""
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, seed=0, progress=False)
    c = start(_fresh_uploads(), CoBoostingConfig(**TINY), ctx)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(32, 1, 28, 28, generator=g), torch.randint(0, 4, (32,), generator=g)
    c.pool.add(x, y)
    w0 = c.w.clone().requires_grad_(True)
    with torch.no_grad():
        logits = c.run.bank.logits(c.pool.all())
    F.cross_entropy(cb.weighted_logits(logits, w0), y).backward()
    gen_before = [p.detach().clone() for p in c.gen.parameters()]
    weight_stage(c, epoch=2)
    step = 0.01 * 0.99 ** 2
    assert torch.allclose(c.w, (w0 - step * w0.grad.sign()).detach(), atol=1e-7)
    assert (w0.grad != 0).sum() >= 2  # A_w is scale-free: Σ_k w_k ∂/∂w_k = 0
    assert not c.w.requires_grad and len(c.weight_losses) == 1
    assert all(p.grad is None for p in c.gen.parameters())
    assert all(torch.equal(a, p) for a, p in zip(gen_before, c.gen.parameters(), strict=True))
    assert all(p.grad is None for p in c.run.student.parameters())
    assert all(p.grad is None for mdl in c.run.bank.models for p in mdl.parameters())
    c.run.finish()


def test_distillation_stage_updates_only_the_student() -> None:
    ctx = ServerContext(num_classes=4, in_channels=1, image_size=28, seed=0, progress=False)
    c = start(_fresh_uploads(), CoBoostingConfig(**TINY, grad_clip=10.0), ctx)
    g = torch.Generator().manual_seed(0)
    c.pool.add(torch.rand(40, 1, 28, 28, generator=g), torch.randint(0, 4, (40,), generator=g))
    w = c.w.clone()
    student_before = [p.detach().clone() for p in c.run.student.parameters()]
    distillation_stage(c)
    assert c.kd_steps == 2 and math.isfinite(c.kd_losses[0].item())
    assert any(not torch.equal(a, p) for a, p in
               zip(student_before, c.run.student.parameters(), strict=True))
    assert torch.equal(c.w, w) and all(p.grad is None for p in c.gen.parameters())
    assert all(p.grad is None for mdl in c.run.bank.models for p in mdl.parameters())
    c.run.finish()


# ---------------------------------------------------------------- end to end


def test_coboosting_end_to_end_beats_chance(fmnist_cnn_clients) -> None:
    """6 server epochs: 42–55 % over server seeds 2–4 (measured), chance 10 %."""
    uploads, ctx = fmnist_cnn_clients
    tiny = {**TINY, "epochs": 6}
    res = run_method("coboosting", uploads, CoBoostingConfig.for_preset("paper", **tiny), ctx)
    assert res.method == "coboosting" and res.preset == "paper"
    assert len(res.curve) == 6 and res.last_acc == res.curve[-1]
    assert res.last_acc > 25.0, res.curve
    ex = res.extras
    assert ex["pool_size"] == 6 * TINY["batch_size"]
    assert ex["kd_steps"] == sum(range(1, 7))  # epoch e: e batches
    w = ex["ensemble_weights_per_epoch"]
    assert len(w) == 6 and w[0] != [1 / 3] * 3  # boosted from epoch 0
    assert all(0.0 <= v <= 1.0 for v in ex["ensemble_weights"])
    assert 0 <= ex["weighted_ensemble_acc"] <= 100 and ex["mean_ensemble_acc"] > 25.0
    assert all(math.isfinite(v) for v in ex["losses"]["total"] + ex["kd_loss"])
    assert res.images.shape == (32, 1, 28, 28)
    assert all(p.requires_grad for p in res.model.parameters())


def test_coboosting_authors_code_preset_runs(fmnist_cnn_clients) -> None:
    uploads, ctx = fmnist_cnn_clients
    cfg = CoBoostingConfig.for_preset("authors_code", **{**TINY, "epochs": 2})
    res = run_method("coboosting", uploads, cfg, ctx)
    w = res.extras["ensemble_weights_per_epoch"]
    assert w[0] == pytest.approx([1 / 3] * 3)  # the code: no weight step at epoch 0
    assert res.extras["pool_augment"] == "none"  # grayscale: the code's FMNIST transform
    assert len(res.curve) == 2 and all(0.0 <= a <= 100.0 for a in res.curve)
    ens = cb.WeightedEnsemble([init_model("cnn_mnist", 10, 1, 28, seed=0)], torch.ones(1))
    assert ens(torch.rand(2, 1, 28, 28)).shape == (2, 10)
