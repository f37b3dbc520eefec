"""FedAvg, FedOneShot, the ensemble and the method registry, on hand-made inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ofl_core.combine import Ensemble
from ofl_core.models import build_model
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext, average_states
from ofl_core.uploads import ClientUpload

CTX = ServerContext(num_classes=4, in_channels=1, image_size=28, progress=False)


def _uploads(n_samples=(1, 3), arch="cnn_mnist", fill=None):
    ups = []
    for k, n in enumerate(n_samples):
        m = build_model(arch, 4, 1, 28)
        sd = m.state_dict()
        if fill is not None:
            sd = {key: (torch.full_like(v, fill[k]) if v.is_floating_point() else v)
                  for key, v in sd.items()}
        ups.append(ClientUpload(client_id=k, arch=arch, state_dict=sd, num_classes=4,
                                in_channels=1, image_size=28, num_samples=n))
    return ups


def test_average_states_weights():
    a = {"w": torch.tensor([0.0, 2.0]), "n": torch.tensor(5)}
    b = {"w": torch.tensor([4.0, 6.0]), "n": torch.tensor(9)}
    avg = average_states([a, b], [1, 3])
    torch.testing.assert_close(avg["w"], torch.tensor([3.0, 5.0]))
    assert avg["n"].item() == 5  # integer buffers: first client's


@pytest.mark.parametrize("preset,expected", [("paper", 1.0 * 0.25 + 5.0 * 0.75),
                                             ("authors_code", 3.0)])
def test_fedavg_paper_is_weighted_authors_code_is_not(preset, expected):
    ups = _uploads(n_samples=(1, 3), fill=(1.0, 5.0))
    res = run_method("fedavg", ups, method_config("fedavg", preset), CTX)
    w = res.model.state_dict()["fc.weight"]
    assert torch.allclose(w, torch.full_like(w, expected))
    assert res.preset == preset and res.method == "fedavg"


def test_fedavg_refuses_mixed_architectures_clearly():
    ups = _uploads(n_samples=(1,)) + _uploads(n_samples=(1,), arch="lenet")
    with pytest.raises(ValueError, match="same architecture.*cnn_mnist.*lenet"):
        run_method("fedavg", ups, method_config("fedavg"), CTX)


class _Fixed(nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits)
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return self.logits.expand(x.shape[0], -1)


def test_vote_ties_go_to_the_lowest_class_and_softmax_differs_from_vote():
    members = [_Fixed([0.0, 5.0, 0.0]), _Fixed([0.0, 0.0, 5.0]), _Fixed([3.0, 0.0, 2.9])]
    x = torch.zeros(1, 1)
    vote = Ensemble(members, "vote")(x)
    assert vote.argmax(1).item() == 0  # one vote each: tie -> class 0
    soft = Ensemble(members, "mean_softmax")(x)
    torch.testing.assert_close(soft.sum(1), torch.ones(1))
    assert soft.argmax(1).item() == 2
    mean = Ensemble(members, "mean_logits")(x)
    torch.testing.assert_close(mean, torch.tensor([[1.0, 5 / 3, 7.9 / 3]]))


def test_ensemble_members_stay_frozen_in_eval_mode():
    ens = Ensemble([build_model("cnn_mnist", 4, 1, 28)])
    ens.train()
    assert not ens.members[0].training


def test_fedoneshot_presets_and_heterogeneous_clients():
    assert method_config("fedoneshot").combine == "mean_softmax"
    assert method_config("fedoneshot", "authors_code").combine == "vote"
    ups = _uploads(n_samples=(1,)) + _uploads(n_samples=(1,), arch="lenet")
    res = run_method("fedoneshot", ups, method_config("fedoneshot"), CTX)
    out = res.model(torch.rand(3, 1, 28, 28))
    assert out.shape == (3, 4)


def test_method_registry_errors():
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        method_config("nope")
    with pytest.raises(ValueError, match="unknown config field"):
        method_config("fedavg", bogus=1)
    with pytest.raises(ValueError, match="preset must be one of"):
        method_config("fedavg", "mine")
