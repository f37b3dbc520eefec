"""OT fusion (FedHydra Table 12; ofl_core.methods.ot_fusion) on randomly permuted copies of a
network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ofl_core.clients import init_model
from ofl_core.methods.ot_fusion import SUPPORTED_ARCHS, OTFusionConfig
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext
from ofl_core.uploads import ClientUpload

pytestmark = pytest.mark.usefixtures("one_thread")



def _fresh_upload(arch: str, k: int, n: int = 10, classes: int = 4) -> ClientUpload:
    model = init_model(arch, classes, 1, 28, seed=k)
    return ClientUpload(client_id=k, arch=arch, state_dict=model.state_dict(),
                        num_classes=classes, in_channels=1, image_size=28, num_samples=n)


# ---------------------------------------------------------------- OT fusion

_SPECS = {"cnn_mnist": (1, 28), "cnn_cifar": (3, 32), "cnn_cifar100": (3, 32), "cnn1": (3, 32),
          "lenet": (1, 28), "mcmahan_cnn": (1, 32), "simplecnn_mnist": (1, 28)}


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
