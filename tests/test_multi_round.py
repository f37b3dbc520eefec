"""Method-agnostic multi-round FL (ofl_core.multi_round): the global model goes back to every
client each round; FedHydra and FedAvg warm starts; records carry the paper's setting strings;
clear errors for what cannot be sent back."""

from __future__ import annotations

import pytest

from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig
from ofl_core.data.partition import make_partition
from ofl_core.experiment import ExperimentConfig, setup_experiment
from ofl_core.multi_round import run_multi_round_methods, run_rounds, server_for
from ofl_core.registry import method_config
from ofl_core.upload_cache import state_hash

LOCAL = LocalTrainConfig(arch="cnn_mnist", epochs=1, batch_size=32, lr=0.05)
DENSE_TINY = dict(epochs=2, steps_per_epoch=2, batch_size=16, kd_batch_size=16, nz=16, ngf=8)
HYDRA_TINY = dict(epochs=2, steps_per_epoch=2, batch_size=16, kd_batch_size=16, nz=16, ngf=8,
                  strat_steps=2, strat_batch_size=8)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def part(tiny_dataset):
    return make_partition(tiny_dataset.y_train.numpy(), 2, "dirichlet", alpha=0.5, seed=1)


def test_clients_of_round_two_start_from_the_global_model(tiny_dataset, part):
    """Round 2's uploads are what train_clients gives from round 1's global model, and round 1
    can reuse already-trained one-shot clients."""
    first = train_clients(tiny_dataset, part, LOCAL, 3, workers=1, progress=False)
    seen: list = []

    def server(uploads, ctx, state):
        seen.append((uploads, state))
        return server_for("fedavg", method_config("fedavg"))(uploads, ctx, state)

    res = run_rounds(tiny_dataset, part, LOCAL, server, rounds=2, seed=3, workers=1,
                     progress=False, first_uploads=first, method="fedavg")
    assert seen[0][0] is first and seen[0][1] is None
    g1 = res.results[0].model.state_dict()
    assert state_hash(seen[1][1]) == state_hash(g1)
    again = train_clients(tiny_dataset, part, LOCAL, 3, workers=1, progress=False,
                          init_state={k: v.cpu() for k, v in g1.items()})
    for a, b in zip(again, seen[1][0], strict=True):
        assert state_hash(a.state_dict) == state_hash(b.state_dict)
    assert all(0 <= r.last_acc <= 100 and r.best_acc >= r.last_acc for r in res.rounds)


def test_fedhydra_warm_start_uses_the_previous_global_model(tiny_dataset, part, monkeypatch):
    import ofl_core.fedhydra.server as fh
    import ofl_core.multi_round as mr

    states = []
    real = fh.run_fedhydra

    def spy(uploads, cfg, ctx, student_state=None, stratification=None):
        states.append(student_state)
        return real(uploads, cfg, ctx, student_state=student_state)

    monkeypatch.setattr(mr, "run_fedhydra", spy)  # the name multi_round calls
    cfg = method_config("fedhydra", **HYDRA_TINY)
    res = run_rounds(tiny_dataset, part, LOCAL, server_for("fedhydra", cfg), rounds=2, seed=0,
                     workers=1, progress=False, method="fedhydra")
    assert states[0] is None
    assert state_hash(states[1]) == state_hash(res.results[0].model.state_dict())
    assert len(res.rounds) == 2 and res.results[-1].method == "fedhydra"


def test_records_per_method_and_round_with_the_papers_setting_strings(tiny_dataset):
    cfg = ExperimentConfig(dataset="tiny", alpha=0.5, num_clients=2, seed=2, local=LOCAL,
                           workers=1, progress=False, paper="fedhydra", table="T5")
    setup = setup_experiment(cfg, dataset=tiny_dataset)
    recs, res = run_multi_round_methods(
        setup, [("fedavg", method_config("fedavg")),
                ("dense", method_config("dense", **DENSE_TINY))], rounds=2)
    assert [(r.method, r.setting) for r in recs] == [
        ("fedavg", "rounds=1;local_epochs=1"), ("fedavg", "rounds=2;local_epochs=1"),
        ("dense", "rounds=1;local_epochs=1"), ("dense", "rounds=2;local_epochs=1")]
    assert all(r.paper == "fedhydra" and r.table == "T5" and r.alpha == 0.5 for r in recs)
    # round 1 is the one-shot setup's clients
    assert recs[0].ensemble_acc == round(setup.ensemble_acc, 4)
    assert set(res) == {"fedavg", "dense"}
    recs, _ = run_multi_round_methods(setup, {"fedavg": method_config("fedavg")}, rounds=1,
                                      setting="rounds={round}")
    assert [r.setting for r in recs] == ["rounds=1"]


def test_heterogeneous_clients_and_non_model_methods_are_refused(tiny_dataset, part):
    mixed = [LOCAL, LocalTrainConfig(arch="lenet", epochs=1)]
    with pytest.raises(ValueError, match="share one architecture"):
        run_rounds(tiny_dataset, part, mixed, server_for("fedavg", method_config("fedavg")),
                   rounds=2, seed=0, workers=1, progress=False)
    with pytest.raises(ValueError, match="ensemble's global model is not a model"):
        run_rounds(tiny_dataset, part, LOCAL, server_for("ensemble", method_config("ensemble")),
                   rounds=2, seed=0, workers=1, progress=False, method="ensemble")
    with pytest.raises(ValueError, match="rounds must be"):
        run_rounds(tiny_dataset, part, LOCAL, server_for("fedavg", method_config("fedavg")),
                   rounds=0, seed=0)
