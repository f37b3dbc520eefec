"""Evaluation: channels-last convolutions on the CPU and the batch size change the speed, not
the outputs, and leave the evaluated model as it was."""

from __future__ import annotations

import pytest
import torch

from ofl_core.evaluate import channels_last_weights, predict_logits
from ofl_core.models import build_model


@pytest.mark.parametrize("arch,channels,size", [("cnn_mnist", 1, 28), ("cnn_cifar", 3, 32)])
def test_predict_logits_equals_the_plain_forward_and_leaves_the_model_alone(arch, channels,
                                                                           size):
    torch.manual_seed(0)
    model = build_model(arch, num_classes=10, in_channels=channels, image_size=size)
    x = torch.randint(0, 256, (300, channels, size, size), dtype=torch.uint8)
    with torch.no_grad():
        model.train()(x.float().div(255))  # BN running statistics away from their init
        ref = model.eval()(x.float().div(255))
    model.train()
    strides = [p.stride() for p in model.parameters()]
    # every convolution weight, the 1-input-channel one included, gets a channels-last copy
    assert len(channels_last_weights(model)) == sum(p.dim() == 4 for p in model.parameters())

    out = predict_logits(model, x)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5), (out - ref).abs().max()
    assert torch.equal(out.argmax(1), ref.argmax(1))
    assert model.training and [p.stride() for p in model.parameters()] == strides
    other = predict_logits(model, x, batch_size=64)
    assert torch.allclose(other, out, rtol=1e-5, atol=1e-5)
