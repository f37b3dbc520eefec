"""IntactOFL (ofl_core.intactofl): the gate, the gated mixture, the two losses on hand-made
tensors, that training reaches only the gate, the presets, and one end-to-end run."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.distill.generator import build_generator, sample_latents
from ofl_core.distill.losses import kl_per_sample
from ofl_core.distill.pool import ImagePool
from ofl_core.distill.teachers import TeacherBank
from ofl_core.intactofl.server import (
    GatedMixture,
    IntactOFLConfig,
    LinearGate,
    _Log,
    gate_loss,
    gate_stage,
    generator_loss,
    synthesis_stage,
)
from ofl_core.registry import method_config, run_method

pytestmark = pytest.mark.usefixtures("one_thread")


class Fixed(nn.Module):
    """An expert whose logits are a fixed linear map of the flattened image."""

    def __init__(self, seed: int, pixels: int = 4) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(pixels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


def mixture(m: int = 3, k: int | None = None, softmax: bool = False) -> GatedMixture:
    bank = TeacherBank([Fixed(s) for s in range(m)], batched=False, channels_last=False,
                       fuse=False)
    torch.manual_seed(9)
    return GatedMixture(bank, LinearGate(4, m, k or m, softmax, "none"))


def test_gate_keeps_the_top_k_raw_weights_and_zeros_the_rest() -> None:
    gate = mixture(k=2).gate
    x = torch.rand(5, 1, 2, 2)
    raw = gate.linear(x.flatten(1))
    w = gate(x)
    assert ((w != 0).sum(1) == 2).all()
    top = raw.topk(2, dim=1)
    torch.testing.assert_close(w.gather(1, top.indices), top.values)  # no softmax: raw values
    soft = mixture(k=2, softmax=True).gate(x)
    torch.testing.assert_close(soft.sum(1), torch.ones(5))
    half = LinearGate(4, 3, 3, False, "half")
    half.load_state_dict(gate.state_dict())
    torch.testing.assert_close(half(x), half.linear((x.flatten(1) - 0.5) / 0.5))


def test_the_mixture_is_the_mean_of_gate_weighted_logits() -> None:
    moe = mixture()
    x = torch.rand(4, 1, 2, 2)
    mix, w, ens, bn = moe.mixture(x)
    experts = torch.stack([e(x) for e in moe.bank.models])  # (m, B, C)
    want = sum(w[:, k : k + 1] * experts[k] for k in range(3)) / 3
    torch.testing.assert_close(mix, want)
    torch.testing.assert_close(ens, experts.mean(0))
    assert bn is None and list(moe.state_dict()) == ["gate.linear.weight", "gate.linear.bias"]


def test_evaluation_runs_the_frozen_experts_once_per_batch_and_matches_a_fresh_call(
        monkeypatch) -> None:
    """Eval mode without gradients: the experts' logits of a batch are kept, so a second
    evaluation of the same test batches runs only the gate; every output equals the mixture
    computed afresh, bit for bit, also after the gate has changed."""
    moe = mixture().eval()
    batches = [torch.rand(4, 1, 2, 2) for _ in range(2)]
    calls = []
    real = moe.bank.forward
    monkeypatch.setattr(moe.bank, "forward", lambda x, **k: calls.append(1) or real(x, **k))
    with torch.no_grad():
        first = [moe(x) for x in batches]
        assert len(calls) == 2
        moe.gate.linear.weight.mul_(-2.0)  # the gate moves between evaluations
        again = [moe(x.clone()) for x in batches]  # equal bytes, other tensors
        assert len(calls) == 2
        fresh = [moe.mixture(x)[0] for x in batches]
    for a, f, b in zip(again, fresh, first, strict=True):
        assert torch.equal(a, f) and not torch.equal(a, b)
    moe.train()
    with torch.no_grad():
        moe(batches[0])
    assert len(calls) == 5  # training mode always runs the experts


def test_generator_loss_adversarial_term_counts_only_disagreements() -> None:
    cfg = IntactOFLConfig()
    y = torch.tensor([0, 1])
    mix = torch.tensor([[3.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    agree = torch.tensor([[2.0, 1.0, 0.0], [0.0, 1.0, 0.5]])  # same argmax: L_adv = 0
    torch.testing.assert_close(generator_loss(mix, agree, y, None, cfg), F.cross_entropy(mix, y))
    differ = torch.tensor([[0.0, 2.0, 0.0], [0.0, 1.0, 0.5]])  # sample 0 disagrees
    adv = -(kl_per_sample(mix[:1], differ[:1], 3.0) * 9).sum() / 2
    bn = torch.tensor(0.7)
    torch.testing.assert_close(generator_loss(mix, differ, y, bn, cfg),
                               F.cross_entropy(mix, y) + adv + 0.7)


def test_gate_loss_terms() -> None:
    cfg = IntactOFLConfig()
    mix, ens = torch.randn(6, 3), torch.randn(6, 3)
    w, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    kd = F.kl_div(F.log_softmax(mix / 4, 1), F.softmax(ens / 4, 1), reduction="batchmean") * 16
    torch.testing.assert_close(gate_loss(mix, w, ens, y, cfg),
                               F.cross_entropy(mix, y) + 0.01 * w.std() + kd)


def test_gate_training_reaches_only_the_gate() -> None:
    moe = mixture()
    experts = copy.deepcopy([e.state_dict() for e in moe.bank.models])
    gate0 = copy.deepcopy(moe.gate.state_dict())
    pool = ImagePool()
    g = torch.Generator().manual_seed(0)
    pool.add(torch.rand(8, 1, 2, 2, generator=g), torch.randint(0, 3, (8,), generator=g))
    cfg = IntactOFLConfig(kd_batch_size=4)
    opt = torch.optim.SGD(moe.gate.parameters(), lr=0.1)
    log = _Log()
    gate_stage(moe, pool, opt, cfg, cfg.ods_eps, g, log)
    assert len(log.gate_losses) == 1
    for e, before in zip(moe.bank.models, experts, strict=True):
        assert all(torch.equal(v, before[k]) for k, v in e.state_dict().items())
        assert all(p.grad is None for p in e.parameters())
    assert not torch.equal(moe.gate.linear.weight, gate0["linear.weight"])


def test_synthesis_reaches_only_the_generator_and_its_latents(monkeypatch) -> None:
    """The generator stage: T_G Adam steps of G (and z) against the mixture; the gate and the
    experts stay as they were and get no gradient, and the gate trains again afterwards."""
    import ofl_core.intactofl.server as server

    latents: list[torch.Tensor] = []

    def kept(*args, **kwargs):
        z, y = sample_latents(*args, **kwargs)
        latents.append(z)
        return z, y

    monkeypatch.setattr(server, "sample_latents", kept)
    bank = TeacherBank([Fixed(s, 28 * 28) for s in range(3)], batched=False,
                       channels_last=False, fuse=False)
    torch.manual_seed(9)
    moe = GatedMixture(bank, LinearGate(28 * 28, 3, 3, False, "none"))
    experts = copy.deepcopy([e.state_dict() for e in moe.bank.models])
    gate0 = copy.deepcopy(moe.gate.state_dict())
    g = torch.Generator().manual_seed(0)
    cfg = IntactOFLConfig(batch_size=6, nz=8, ngf=4, steps_per_epoch=2)
    gen = build_generator(cfg.nz, cfg.ngf, 28, 1, g)
    log = _Log()
    x, y = synthesis_stage(moe, gen, cfg, 3, g, torch.device("cpu"), log)
    assert x.shape == (6, 1, 28, 28) and 0 <= x.min() and x.max() <= 1
    assert y.shape == (6,) and ((0 <= y) & (y < 3)).all() and len(log.g_losses) == 1
    assert all(p.grad is not None for p in gen.parameters())
    (z,) = latents
    assert z.grad is not None and z.grad.abs().sum() > 0  # z is optimised with G
    for e, before in zip(moe.bank.models, experts, strict=True):
        assert all(torch.equal(v, before[k]) for k, v in e.state_dict().items())
        assert all(p.grad is None for p in e.parameters())
    assert all(torch.equal(v, gate0[k]) for k, v in moe.gate.state_dict().items())
    assert all(p.grad is None and p.requires_grad for p in moe.gate.parameters())


def test_presets_name_the_codes_differences() -> None:
    paper, code = IntactOFLConfig.for_preset("paper"), IntactOFLConfig.for_preset("authors_code")
    assert (paper.steps_per_epoch, paper.epochs, paper.ods_eps) == (20, 40, 8 / 255)
    assert (code.steps_per_epoch, code.epochs, code.ods_eps) == (30, 200, 8.0)
    assert (paper.pool_rounding, code.pool_rounding) == ("round", "floor")
    with pytest.raises(ValueError, match="topk"):
        IntactOFLConfig(topk=0.0)
    with pytest.raises(ValueError, match="pool_rounding"):
        IntactOFLConfig(pool_rounding="ceil")


def test_the_config_refuses_fields_intactofl_has_no_use_for() -> None:
    with pytest.raises(ValueError, match="student_arch must stay None"):
        IntactOFLConfig(student_arch="resnet18")
    with pytest.raises(ValueError, match="channels_last must be False or 'auto'"):
        IntactOFLConfig(channels_last=True)


def test_the_mixture_moves_only_where_its_experts_are() -> None:
    """The experts sit outside the module tree, so a conversion that would leave them behind
    is refused with a message; one that changes nothing is allowed."""
    moe = mixture()
    assert moe.to("cpu") is moe and moe.float() is moe
    with pytest.raises(ValueError, match="cannot be moved to cpu / torch.float64"):
        moe.double()
    assert moe.gate.linear.weight.dtype == torch.float32


def test_a_run_is_deterministic_needs_two_experts_and_runs_under_amp(two_per_client) -> None:
    """The same seed gives the same gate bit for bit; ``amp`` reaches the stages (bfloat16
    autocast gives another, finite gate); one upload is refused before any work."""
    uploads, ctx = two_per_client
    cfg = method_config("intactofl", epochs=1, steps_per_epoch=2, batch_size=8,
                        kd_batch_size=8, nz=8, ngf=4)
    gates = [run_method("intactofl", uploads, c, ctx).model.gate.state_dict()
             for c in (cfg, cfg, dataclasses.replace(cfg, amp=True))]
    assert all(torch.equal(v, gates[1][k]) for k, v in gates[0].items())
    assert all(torch.isfinite(v).all() for v in gates[2].values())
    assert not all(torch.equal(v, gates[2][k]) for k, v in gates[0].items())
    with pytest.raises(ValueError, match="needs at least two uploads, got 1"):
        run_method("intactofl", uploads[:1], cfg, ctx)


@pytest.mark.parametrize("rounding", ["round", "floor"])
def test_the_pool_stores_what_the_config_rounds(two_per_client, rounding) -> None:
    """The run's pool holds the synthetic batch as the config's rounding says: floor(255·x)
    under ``"floor"`` (the code's ``astype('uint8')``), round(255·x) under ``"round"``."""
    import ofl_core.intactofl.server as server

    pools: list[ImagePool] = []
    added: list[torch.Tensor] = []

    class Recording(ImagePool):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            pools.append(self)

        def add(self, batch: torch.Tensor, labels: torch.Tensor | None = None) -> None:
            added.append(batch.detach().clone())
            super().add(batch, labels)

    uploads, ctx = two_per_client
    cfg = method_config("intactofl", epochs=1, steps_per_epoch=1, batch_size=8,
                        kd_batch_size=8, nz=8, ngf=4, pool_rounding=rounding)
    mp = pytest.MonkeyPatch()
    mp.setattr(server, "ImagePool", Recording)
    try:
        run_method("intactofl", uploads, cfg, ctx)
    finally:
        mp.undo()
    (pool,), (batch,) = pools, added
    x = batch.float().clamp(0, 1) * 255
    want = x.floor() if rounding == "floor" else x.round()
    assert torch.equal(pool.stored().float(), want)


def test_intactofl_end_to_end_above_chance(two_per_client) -> None:
    """2c/c clients on the bars data (chance 1/6): the mixture beats chance after 3 short
    epochs; the result is the deployed mixture with its cost beside one expert's."""
    uploads, ctx = two_per_client
    cfg = method_config("intactofl", epochs=3, steps_per_epoch=3, batch_size=32,
                        kd_batch_size=32, nz=16, ngf=8)
    res = run_method("intactofl", uploads, cfg, ctx)
    assert len(res.curve) == 3 and res.last_acc > 100 / 6 + 10
    assert res.last_acc == pytest.approx(ctx.evaluate(res.model), abs=1e-4)
    assert isinstance(res.model, GatedMixture) and res.extras["pool_size"] == 3 * 32
    e = res.extras
    assert e["params"] == 3 * e["params_one_expert"] + res.model.gate.linear.weight.numel() + 3
    assert e["flops_per_image"] > 3 * e["flops_one_expert"]


def test_the_gate_reads_the_codes_normalisation_of_the_dataset() -> None:
    """``authors_code``: the gate and the ODS step in the code's per-dataset normalisation
    (FashionMNIST mean 0.2860, std 0.3530, also for the embedded subset and a resized copy);
    None keeps the experts' own; an unknown dataset is a clear error."""
    from ofl_core.intactofl.server import gate_input_norm

    assert IntactOFLConfig.for_preset("authors_code").input_norm == "by_dataset"
    assert IntactOFLConfig.for_preset("paper").input_norm is None
    assert gate_input_norm("by_dataset", "none", "fmnist") == "fmnist"
    assert gate_input_norm("by_dataset", "none", "fmnist_embedded@32") == "fmnist"
    assert gate_input_norm("by_dataset", "none", "cifar10") == "half"
    assert gate_input_norm(None, "half", "fmnist") == "half"
    assert gate_input_norm("mnist", "none", "") == "mnist"
    with pytest.raises(ValueError, match="ServerContext.dataset"):
        gate_input_norm("by_dataset", "none", "")
    with pytest.raises(ValueError, match="input_norm"):
        IntactOFLConfig(input_norm="zscore")
    gate = LinearGate(4, 3, 3, False, "fmnist")
    x = torch.rand(5, 1, 2, 2)
    want = gate.linear((x - 0.2860).div(0.3530).flatten(1))
    assert torch.allclose(gate(x), want, atol=1e-6)


def test_authors_code_gate_on_raw_experts_uses_the_codes_normalisation(two_per_client) -> None:
    """On raw-input experts, ``by_dataset`` builds the gate in FashionMNIST's normalisation
    and the result says which normalisation the experts and the gate read."""
    from dataclasses import replace

    uploads, ctx = two_per_client
    cfg = method_config("intactofl", preset="authors_code", epochs=1, steps_per_epoch=1,
                        batch_size=8, kd_batch_size=8, nz=8, ngf=4)
    res = run_method("intactofl", uploads, cfg, replace(ctx, dataset="fmnist_embedded"))
    assert res.model.gate.input_norm == "fmnist"
    assert res.extras["input_norm"] == {"experts": "none", "gate": "fmnist"}
    with pytest.raises(ValueError, match="ServerContext.dataset"):
        run_method("intactofl", uploads, cfg, replace(ctx, dataset=""))


@pytest.mark.parametrize("preset", ["paper", "authors_code"])
def test_intactofl_on_the_embedded_fashion_mnist(fmnist_cnn_clients, preset) -> None:
    """Three cnn_mnist experts (one local epoch on 3 000 embedded FashionMNIST images, Dirichlet
    α = 1): after 3 short epochs the gated mixture is far above chance (10 %); under
    ``authors_code`` its gate reads FashionMNIST's mean/std normalisation, as the code's."""
    uploads, ctx = fmnist_cnn_clients
    cfg = method_config("intactofl", preset, epochs=3, steps_per_epoch=3, batch_size=32,
                        kd_batch_size=32, nz=16, ngf=8)
    res = run_method("intactofl", uploads, cfg, ctx)
    assert len(res.curve) == 3 and res.last_acc > 30, res.curve
    assert res.extras["input_norm"]["gate"] == ("fmnist" if preset == "authors_code" else "none")
