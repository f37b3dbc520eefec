"""FedLPA (ofl_core.fedlpa): the clients' K-FAC factors against a direct computation, the
server's closed form and refinement on hand-made matrices, the factors' validation, and one
end-to-end run through the experiment layer (the method's client step)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.fedlpa.factors import _layer_input, kfac_factors, layer_matrix, validate_factors
from ofl_core.fedlpa.server import FedLPAConfig, attach_factors, closed_form, refine
from ofl_core.registry import method_config, method_spec, run_method
from ofl_core.results import ResultRecord
from ofl_core.uploads import UploadError

pytestmark = pytest.mark.usefixtures("one_thread")


def images(n: int, side: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, side, side), generator=g, dtype=torch.uint8)
    return x, torch.randint(0, 3, (n,), generator=g)


class Tiny(nn.Module):
    """conv 1→2 k2 (4 px → 3×3 positions), then Linear 18→3."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 2, 2)
        self.fc = nn.Linear(18, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.conv(x), 1))


def direct_factors(model: Tiny, x: torch.Tensor, y: torch.Tensor, damp: float) -> dict:
    """The factors from their definition, one sample and one position at a time."""
    n = len(y)
    xf = x.float() / 255
    a_conv = torch.zeros(5, 5)
    g_conv = torch.zeros(2, 2)
    a_fc = torch.zeros(19, 19)
    g_fc = torch.zeros(3, 3)
    for i in range(n):
        xi = xf[i : i + 1]
        h = model.conv(xi).detach().requires_grad_(True)
        z = model.fc(torch.flatten(h, 1))
        z.retain_grad()
        F.cross_entropy(z, y[i : i + 1]).backward()
        a = torch.cat([torch.flatten(h, 1)[0].detach(), torch.ones(1)])
        a_fc += torch.outer(a, a) / n
        g_fc += torch.outer(z.grad[0], z.grad[0]) / n
        for r in range(3):
            for c in range(3):
                patch = torch.cat([xi[0, 0, r : r + 2, c : c + 2].reshape(-1), torch.ones(1)]) / 9
                a_conv += torch.outer(patch, patch) / n
                gp = h.grad[0, :, r, c]
                g_conv += 9 * torch.outer(gp, gp) / n
    eye = torch.eye
    return {"conv": (a_conv + damp * eye(5), g_conv + damp * eye(2)),
            "fc": (a_fc + damp * eye(19), g_fc + damp * eye(3))}


def test_kfac_factors_equal_their_definition_for_any_batching() -> None:
    model = Tiny()
    x, y = images(12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    want = direct_factors(model, x, y, damp=math.sqrt(1 - 0.999))
    for bs in (1, 5, 64):
        got = kfac_factors(model, x, y, coor=0.999, batch_size=bs)
        assert set(got) == {"conv", "fc"}
        for name in want:
            for g, w in zip(got[name], want[name], strict=True):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    validate_factors(got, model, "client 0")


@pytest.mark.parametrize("layer, shape", [
    (nn.Conv2d(3, 4, 3, padding=1, stride=2), (5, 3, 9, 9)),
    (nn.Conv2d(2, 3, 2, bias=False), (4, 2, 6, 6)),
    (nn.Linear(12, 3), (5, 3, 2, 2)),
    (nn.Linear(12, 3, bias=False), (5, 12)),
])
def test_layer_input_rows_are_patches_with_a_bias_column_over_positions(layer, shape) -> None:
    """The rows of A, bit for bit: unfolded patches (or flat inputs), a column of ones where
    the layer has a bias, divided by the number of output positions."""
    x = torch.randn(*shape)
    if isinstance(layer, nn.Conv2d):
        p = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
        rows, positions = p.transpose(1, 2).reshape(-1, p.shape[1]), p.shape[2]
    else:
        rows, positions = x.reshape(x.shape[0], -1), 1
    if layer.bias is not None:
        rows = torch.cat([rows, torch.ones(rows.shape[0], 1)], 1)
    assert torch.equal(_layer_input(layer, x), rows / positions)


def test_layer_matrix_puts_the_bias_last() -> None:
    conv = nn.Conv2d(2, 3, 2)
    m = layer_matrix(conv.weight, conv.bias)
    assert m.shape == (3, 9)
    torch.testing.assert_close(m[:, -1], conv.bias)
    torch.testing.assert_close(m[:, :-1].reshape(conv.weight.shape), conv.weight)


def spd(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(d, d, generator=g, dtype=torch.float64)
    # eigenvalues in about [0.3, 1.5]: gradient steps of size 1 are stable on these
    return 0.3 * q @ q.T / d + 0.3 * torch.eye(d, dtype=torch.float64)


def test_closed_form_recovers_m_when_all_clients_are_equal() -> None:
    m = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    facs = [(spd(5, 2), spd(3, 3))] * 3
    got, z = closed_form([0.2, 0.3, 0.5], [m] * 3, facs)
    torch.testing.assert_close(got, m)
    # the refinement starts at the exact solution and stays there
    torch.testing.assert_close(refine(got, z, [0.2, 0.3, 0.5], facs, 50, 1.0), m)


def test_refinement_moves_towards_the_exact_solution() -> None:
    """Equal weights M but different factors: Σ w G_k M A_k = Z has the solution M, which the
    closed form (Ḡ⁻¹ Z Ā⁻¹) misses and the gradient refinement approaches."""
    m = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    facs = [(spd(5, s), spd(3, s + 10)) for s in range(3)]
    w = [0.2, 0.3, 0.5]
    m0, z = closed_form(w, [m] * 3, facs)
    m1 = refine(m0, z, w, facs, 2000, 1.0)
    assert (m1 - m).norm() < 0.5 * (m0 - m).norm()

    def loss(mm: torch.Tensor) -> torch.Tensor:
        return (sum(wk * g @ mm @ a for wk, (a, g) in zip(w, facs, strict=True)) - z
                ).pow(2).mean()

    # the written-out gradient step equals autograd's on the same objective
    mm = m0.clone().requires_grad_(True)
    loss(mm).backward()
    torch.testing.assert_close(refine(m0, z, w, facs, 1, 0.1), m0 - 0.1 * mm.grad)


@pytest.mark.parametrize("bad, why", [
    ("missing", "but the model's Linear/Conv2d layers"), ("shape", r"must be a float 19×19"),
    ("nan", "non-finite"), ("asymmetric", "not symmetric"), ("negative", "not positive semi"),
    ("type", "must be a pair of tensors"), ("huge", "beyond any client's"),
    ("sparse", "dense tensor"), ("meta", "dense tensor"), ("key", "keyed by layer name")])
def test_validate_factors_rejects_bad_uploads(bad: str, why: str) -> None:
    model = Tiny()
    x, y = images(6)
    f = kfac_factors(model, x, y, coor=0.999)
    a, g = f["fc"]
    if bad == "missing":
        f.pop("conv")
    elif bad == "shape":
        f["fc"] = (a[:-1, :-1], g)
    elif bad == "nan":
        f["fc"] = (a, g.clone().fill_(float("nan")))
    elif bad == "asymmetric":
        g2 = g.clone()
        g2[0, 1] += 1.0
        f["fc"] = (a, g2)
    elif bad == "negative":
        f["fc"] = (a, g - 10 * torch.eye(3))
    elif bad == "huge":  # finite, symmetric, positive: but it would swamp every client's Ā
        f["fc"] = (1e30 * torch.eye(a.shape[0]), g)
    elif bad == "sparse":
        f["fc"] = (a.to_sparse(), g)
    elif bad == "meta":
        f["fc"] = (a.to("meta"), g)
    elif bad == "key":
        f[0] = f.pop("fc")
    else:
        f["fc"] = "A, G"
    with pytest.raises(UploadError, match=f"client 7: .*{why}"):
        validate_factors(f, model, "client 7")


def test_validate_factors_needs_factors() -> None:
    with pytest.raises(UploadError, match="client 7: FedLPA needs the clients' curvature"):
        validate_factors(None, Tiny(), "client 7")


class Twice(Tiny):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.conv(x), 1)) + self.fc(torch.flatten(self.conv(x), 1))


class Unused(Tiny):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.flatten(self.conv(x), 1)
        self.fc(h)  # computed, not in the loss
        return h[:, :3]


@pytest.mark.parametrize("change, why", [
    ({"x": "float"}, "uint8 images"), ({"y": "short"}, "6 images but 5 labels"),
    ({"y": "range"}, r"labels must be in \[0, 3\)"), ({"batch_size": 0}, "batch_size"),
    ({"coor": 1.0}, r"coor must be in \[0, 1\)"), ({"x": "none"}, "without data"),
    ({"model": nn.Flatten()}, "no nn.Linear or nn.Conv2d"),
    ({"model": Twice()}, "runs more than once"), ({"model": Unused()}, "does not reach")])
def test_kfac_factors_refuses_bad_inputs(change: dict, why: str) -> None:
    x, y = images(6)
    kw = {"model": Tiny(), "coor": 0.999, "batch_size": 64}
    x = {"float": x.float(), "none": x[:0]}.get(change.get("x"), x)
    y = {"short": y[:5], "range": y + 3}.get(change.get("y"), y[: len(x)])
    kw.update({k: v for k, v in change.items() if k not in ("x", "y")})
    with pytest.raises(ValueError, match=why):
        kfac_factors(kw.pop("model"), x, y, **kw)


def test_kfac_factors_leave_the_model_as_it_was() -> None:
    """The pass runs in eval mode without writing the parameters' gradients; the caller's
    model keeps its mode and its (absent) gradients."""
    model = Tiny().train()
    x, y = images(6)
    kfac_factors(model, x, y, coor=0.999)
    assert model.training and all(p.grad is None for p in model.parameters())
    model.eval()
    kfac_factors(model, x, y, coor=0.999)
    assert not model.training


def test_config_checks_and_names() -> None:
    assert FedLPAConfig().coor == 0.999 and FedLPAConfig().newton_steps == 10_000
    assert method_config("fedlpa", "authors_code").preset == "authors_code"
    assert FedLPAConfig(solution="max_on_test").method_name == "fedlpa-max-on-test"
    assert FedLPAConfig.for_preset("authors_code", newton_steps=5).newton_steps == 5
    for field, value in (("coor", 1.0), ("newton_steps", -1), ("newton_lr", 0.0),
                         ("factor_batch_size", 0), ("solution", "best")):
        with pytest.raises(ValueError, match=f"FedLPAConfig.{field} must be .*got {value!r}"):
            FedLPAConfig(**{field: value})


def test_fedlpa_end_to_end_through_the_experiment(bars, tmp_path) -> None:
    """cnn_mnist clients (with BatchNorm, averaged like FedAvg) from one initialisation on an
    IID split of the bars data: the experiment runs the method's client step (factors on each
    client's data), then the server; both solutions are far above chance (1/6), the refinement
    lowers every layer's residual, and the server refuses uploads without factors."""
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.experiment import ExperimentConfig, run_methods, setup_experiment

    cfg = ExperimentConfig(dataset="fmnist_embedded", partition="iid", num_clients=3, seed=1,
                           local=LocalTrainConfig(arch="cnn_mnist", epochs=3, batch_size=32),
                           cache_dir=str(tmp_path), progress=False)
    setup = setup_experiment(cfg, dataset=bars)
    mcfg = method_config("fedlpa", newton_steps=200)
    records, results = run_methods(setup, [("fedlpa", mcfg),
                                           ("fedlpa", dataclasses.replace(mcfg,
                                                                          solution="biased"))])
    assert list(results) == ["fedlpa/paper", "fedlpa/paper#2"]  # one method, two configs
    res = results["fedlpa/paper"]
    assert [r.method for r in records] == ["fedlpa", "fedlpa-biased"]
    assert results["fedlpa/paper#2"].extras["chosen"] == "biased"
    assert res.extras["acc_newton"] > 50 and res.extras["acc_biased"] > 50
    assert records[0].last_acc == pytest.approx(res.extras["acc_newton"], abs=1e-3)
    # the record keeps both solutions (its spec's `recorded` extras), through JSON and back
    notes = ResultRecord.from_dict(json.loads(json.dumps(records[0].to_dict()))).notes
    assert notes == {"acc_newton": res.extras["acc_newton"],
                     "acc_biased": res.extras["acc_biased"], "chosen": "newton"}
    assert "notes" not in setup.record("x", mcfg, 1.0, 1.0).to_dict()  # none: no key
    for layer in res.extras["layers"].values():
        assert layer["residual_newton"] <= layer["residual_biased"] + 1e-12
    assert method_spec("fedlpa").client_step is not None
    with pytest.raises(UploadError, match="curvature"):
        run_method("fedlpa", setup.uploads, mcfg, setup.context())
    # max-of-two without a test set is refused before any work (these uploads have no factors)
    with pytest.raises(ValueError, match="picks a solution on the test set"):
        run_method("fedlpa", setup.uploads, dataclasses.replace(mcfg, solution="max_on_test"),
                   dataclasses.replace(setup.context(), evaluate=None))
    # with factors: a refinement that diverges, and a run with nothing to evaluate on
    ups = attach_factors(setup.uploads, setup.dataset, setup.partition, mcfg, "cpu")
    with pytest.raises(ValueError, match="layer '.*': the gradient refinement diverged "
                                         r"\(newton_lr=1000000.0"):
        run_method("fedlpa", ups, dataclasses.replace(mcfg, newton_lr=1e6), setup.context())
    blind = dataclasses.replace(setup.context(), evaluate=None)
    assert run_method("fedlpa", ups, mcfg, blind).last_acc is None
    with pytest.raises(ValueError, match="picks a solution on the test set"):
        run_method("fedlpa", ups, dataclasses.replace(mcfg, solution="max_on_test"), blind)


def test_fedlpa_on_the_embedded_fashion_mnist(fmnist_subset) -> None:
    """FedLPA's own client model (BN-free ``simplecnn_mnist``, its local SGD, batch 32) on
    3 000 embedded FashionMNIST images in 3 Dirichlet clients, 10 local epochs (clients at
    53–67 %): both solutions far above chance, 10 % (measured: refined 63.7, closed form 66.8)."""
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig

    ds, part, ctx = fmnist_subset
    local = LocalTrainConfig(arch="simplecnn_mnist", epochs=10, batch_size=32,
                             weight_decay=1e-5)
    uploads = train_clients(ds, part, local, seed=1, workers=1, progress=False)
    cfg = method_config("fedlpa", newton_steps=200)
    res = run_method("fedlpa", attach_factors(uploads, ds, part, cfg, "cpu"), cfg, ctx)
    assert res.extras["acc_newton"] > 40 and res.extras["acc_biased"] > 40, res.extras
    assert res.last_acc == pytest.approx(res.extras["acc_newton"], abs=1e-3)
    assert res.last_acc == pytest.approx(ctx.evaluate(res.model), abs=1e-3)
