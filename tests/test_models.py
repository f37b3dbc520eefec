"""Tests of the model zoo (SPEC §2): shapes, features, registry errors, generator."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from ofl_core.models import MODEL_NAMES, Generator, build_model
from ofl_core.models.generator import init_generator_weights

EXPECTED_NAMES = {
    "cnn_mnist",
    "cnn_cifar",
    "cnn_cifar100",
    "cnn1",
    "mcmahan_cnn",
    "lenet",
    "simplecnn_mnist",
    "resnet18",
    "wrn16_1",
    "wrn40_1",
    "googlenet",
}


def test_model_names() -> None:
    assert set(MODEL_NAMES) == EXPECTED_NAMES


@pytest.mark.parametrize(
    ("name", "in_channels", "image_size"),
    list(itertools.product(sorted(EXPECTED_NAMES), (1, 3), (28, 32, 64))),
)
def test_forward_shapes(name: str, in_channels: int, image_size: int) -> None:
    torch.manual_seed(0)
    model = build_model(name, num_classes=10, in_channels=in_channels, image_size=image_size)
    assert isinstance(model.feature_dim, int)
    batch = 2
    x = torch.rand(batch, in_channels, image_size, image_size)
    with torch.no_grad():
        logits = model(x)  # train mode (BN uses batch statistics)
        logits2, features = model(x, return_features=True)
        model.eval()
        logits_eval, features_eval = model(x, return_features=True)
    assert logits.shape == (batch, 10)
    assert torch.isfinite(logits).all()
    assert features.shape == (batch, model.feature_dim)
    assert torch.isfinite(features).all()
    torch.testing.assert_close(logits, logits2)  # no dropout anywhere: calls agree
    assert logits_eval.shape == (batch, 10) and torch.isfinite(logits_eval).all()
    assert features_eval.shape == (batch, model.feature_dim)
    # the features are exactly what the final linear layer sees
    torch.testing.assert_close(model.fc(features), logits2)


def test_backward_through_features() -> None:
    model = build_model("cnn_mnist", num_classes=10)
    logits, features = model(torch.rand(2, 1, 28, 28), return_features=True)
    (logits.sum() + features.abs().mean()).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_unknown_name_lists_known_models() -> None:
    with pytest.raises(ValueError) as info:
        build_model("vgg16", num_classes=10)
    msg = str(info.value)
    assert "vgg16" in msg
    for name in EXPECTED_NAMES:
        assert name in msg


@pytest.mark.parametrize(("in_channels", "image_size"), [(2, 28), (4, 32), (1, 30), (3, 224)])
def test_bad_input_spec(in_channels: int, image_size: int) -> None:
    with pytest.raises(ValueError, match="in_channels|image_size"):
        build_model("cnn_mnist", num_classes=10, in_channels=in_channels, image_size=image_size)


def test_bad_num_classes_and_options() -> None:
    with pytest.raises(ValueError, match="num_classes"):
        build_model("lenet", num_classes=0)
    with pytest.raises(ValueError, match="conv_relu"):
        build_model("resnet18", num_classes=10, conv_relu=False)
    with pytest.raises(ValueError, match="bogus"):
        build_model("mcmahan_cnn", num_classes=10, bogus=1)


def test_fc_input_sizes() -> None:
    assert build_model("cnn_mnist", 10, 1, 28).fc.in_features == 1568
    assert build_model("cnn_cifar", 10, 3, 32).fc.in_features == 2048
    assert build_model("cnn_cifar100", 100, 3, 32).fc.in_features == 2048
    mc = build_model("mcmahan_cnn", 10, 3, 32)
    assert mc.fc1.in_features == 1600 and mc.fc1.out_features == 512
    c1 = build_model("cnn1", 10, 3, 32)
    assert c1.fc1.in_features == 1024 and c1.fc1.out_features == 64
    assert build_model("lenet", 10, 1, 28).hidden[0].in_features == 400
    assert build_model("lenet", 10, 3, 32).hidden[0].in_features == 400


def test_cnn_cifar100_widths() -> None:
    convs = [
        m for m in build_model("cnn_cifar100", 100, 3, 32).modules() if isinstance(m, nn.Conv2d)
    ]
    assert [c.out_channels for c in convs] == [256, 256, 128]


def test_mcmahan_conv_relu_variant() -> None:
    paper = build_model("mcmahan_cnn", 10, 1, 32)
    code = build_model("mcmahan_cnn", 10, 1, 32, conv_relu=False)
    assert sum(isinstance(m, nn.ReLU) for m in paper.conv) == 2
    assert not any(isinstance(m, nn.ReLU) for m in code.conv)
    # same parameters (state_dicts interchangeable), different function
    assert paper.state_dict().keys() == code.state_dict().keys()
    code.load_state_dict(paper.state_dict())
    x = torch.rand(2, 1, 32, 32) - 0.5
    assert not torch.allclose(paper(x), code(x))


def test_batchnorm_models_use_batchnorm2d() -> None:
    for name in ("cnn_mnist", "resnet18", "wrn16_1", "googlenet"):
        bns = [m for m in build_model(name, 10, 3, 32).modules() if isinstance(m, nn.BatchNorm2d)]
        assert bns, name
    assert not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm)
        for m in build_model("cnn_cifar", 10, 3, 32).modules()
    )


@pytest.mark.parametrize(("size", "channels"), [(28, 1), (28, 3), (32, 1), (32, 3)])
def test_generator_output(size: int, channels: int) -> None:
    torch.manual_seed(0)
    g = Generator(nz=256, ngf=64, img_size=size, channels=channels)
    out = g(torch.randn(4, 256))
    assert out.shape == (4, channels, size, size)
    assert out.min() >= 0 and out.max() <= 1
    g.eval()
    assert g(torch.randn(1, 256)).shape == (1, channels, size, size)


def test_generator_architecture() -> None:
    g = Generator()
    assert g.l1.out_features == 128 * 8 * 8
    convs = [m for m in g.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(128, 128), (128, 64), (64, 3)]
    assert [c.bias is None for c in convs] == [True, True, False]
    assert isinstance(g.conv_blocks[-1], nn.Sigmoid)
    with pytest.raises(ValueError):
        Generator(img_size=30)


def test_generator_init_statistics() -> None:
    g = Generator(nz=256, ngf=64, img_size=32, channels=3)
    gen = torch.Generator().manual_seed(0)
    g.init_weights(gen)
    for m in g.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)) and m.weight.numel() > 1000:
            assert abs(m.weight.std().item() - 0.02) < 0.002
            assert abs(m.weight.mean().item()) < 0.002
        if isinstance(m, nn.BatchNorm2d):
            assert abs(m.weight.mean().item() - 1.0) < 0.01
            assert m.weight.std().item() < 0.04
            assert torch.all(m.bias == 0)
    # reproducible with the same torch.Generator, independent of the global RNG
    g2 = Generator(nz=256, ngf=64, img_size=32, channels=3)
    torch.manual_seed(123)
    init_generator_weights(g2, torch.Generator().manual_seed(0))
    for a, b in zip(g.state_dict().values(), g2.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_simplecnn_mnist_is_niid_benchs_lenet() -> None:
    """FedLPA's client model: LeNet-5 without padding, FC 256→120 at 28 px, no BatchNorm."""
    m = build_model("simplecnn_mnist", 10, 1, 28)
    assert m.flat_dim == 256 and sum(p.numel() for p in m.parameters()) == 44_426
    assert not any(isinstance(x, torch.nn.BatchNorm2d) for x in m.modules())
