"""FedCVAE's FedAvg / FedOneShot baselines under both presets, on tiny data.

- the ``authors_code`` FedOneShot combines by hard vote with ties to the lowest class, exactly
  the rule of FedCVAE's code (``np.bincount(votes).argmax()``, servers/server_one_shot.py
  l. 134–142), and differs from the paper preset's mean softmax on a constructed case;
- the ``authors_code`` FedOneShot clients start each from their own weights (the code's
  default ``should_initialize_same=0``); FedAvg's clients and every ``paper`` client share one;
- the init scheme is part of the client cache key, and the shared-init keys, experiment hashes
  and initial weights are those of main before the field existed (constants recorded there);
- the notebooks' presets: FedAvg under both presets beside methods run under one, and the
  scoreboard keeps the two presets of a cell apart.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ofl_core.batch.scoreboard import boards, entries, split
from ofl_core.client_training import train_clients
from ofl_core.clients import LocalTrainConfig, train_key_payload, train_local
from ofl_core.combine import Ensemble
from ofl_core.data.datasets import ImageDataset
from ofl_core.data.partition import make_partition
from ofl_core.experiment import ExperimentConfig, configure_methods
from ofl_core.fedcvae.clients import baseline_local_config
from ofl_core.grouped_training import groupable, train_grouped
from ofl_core.models import build_model
from ofl_core.registry import method_config, run_method
from ofl_core.results import alpha_key, records_frame
from ofl_core.sections.fedcvae_runs import fedcvae_runs
from ofl_core.seeds import init_seed
from ofl_core.server import ServerContext
from ofl_core.tables import Serves
from ofl_core.upload_cache import payload_key, state_hash
from ofl_core.uploads import ClientUpload

pytestmark = pytest.mark.usefixtures("one_thread")

C = 4
CTX = ServerContext(num_classes=C, in_channels=1, image_size=32, progress=False)

# Recorded on main at 5922bcd (before ``shared_init`` existed) with the data below: the cache
# keys of shared-init clients, the experiment hash and the paper clients' initial weights must
# not change, so the clients cached (and the records hashed) before stay valid.
MAIN_KEY_DEFAULT = "f342f626c19bab8abe7b960d2da89e9e29ecdfeef5b767c7dbb85b5e4272721b"
MAIN_KEY_FEDONESHOT_PAPER = "a67f6fc6783612a936b35286702e173a6043adb118c12d9502013c9532cf351f"
MAIN_EXPERIMENT_HASH = "b596cd6a79b1"
MAIN_PAPER_INIT_STATES = ("e9b7482dd5c97212",) * 3  # one shared init


def squares(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4 classes of 32×32 images: a bright 9×9 square in quadrant c on a dim noisy ground."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % C
    x = torch.rand(n, 1, 32, 32, generator=g) * 60
    for c in range(C):
        r, q = divmod(c, 2)
        x[y == c, :, r * 16 + 3 : r * 16 + 12, q * 16 + 3 : q * 16 + 12] += 180
    return x.clamp(0, 255).to(torch.uint8), y


@pytest.fixture(scope="module")
def data() -> tuple[ImageDataset, object]:
    xtr, ytr = squares(120, 0)
    xte, yte = squares(40, 1)
    ds = ImageDataset("squares32", xtr, ytr, xte, yte, C)
    return ds, make_partition(ytr.numpy(), 3, "dirichlet", alpha=0.5, seed=0)


# ---------------------------------------------------------------- the vote, as the code does


class _Pick(nn.Module):
    """Member k of a fake ensemble: its logits are ``x[:, k]`` (x: (B, m, C))."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.k]


def _code_vote(logits: torch.Tensor) -> int:
    """FedCVAE's code, servers/server_one_shot.py l. 134–142, for one test image: each user's
    argmax of softmax, then ``np.bincount(votes).argmax()``."""
    votes = [int(torch.argmax(F.softmax(lg[None], dim=1), dim=1)[0]) for lg in logits]
    return int(np.bincount(np.array(votes)).argmax())


def test_hard_vote_is_the_codes_bincount_rule_ties_to_the_lowest_class() -> None:
    g = torch.Generator().manual_seed(0)
    m = 4  # an even ensemble: vote ties are frequent
    x = torch.randint(0, 3, (400, m, C), generator=g).float()  # ties inside members too
    vote = Ensemble([_Pick(k) for k in range(m)], "vote")(x).argmax(1)
    code = torch.tensor([_code_vote(x[i]) for i in range(len(x))])
    assert torch.equal(vote, code)
    counts = F.one_hot(x.argmax(-1), C).sum(1)
    tied = (counts == counts.max(1, keepdim=True).values).sum(1) > 1
    assert int(tied.sum()) > 50  # the case the rule decides is well represented
    soft = Ensemble([_Pick(k) for k in range(m)], "mean_softmax")(x).argmax(1)
    assert bool((soft != vote).any())


def _bias_upload(k: int, logits: list[float]) -> ClientUpload:
    """A McMahan-CNN upload whose output is ``logits`` for every input (last layer: weight 0,
    bias = logits)."""
    sd = build_model("mcmahan_cnn", C, 1, 32).state_dict()
    sd["fc.weight"] = torch.zeros_like(sd["fc.weight"])
    sd["fc.bias"] = torch.tensor(logits)
    return ClientUpload(client_id=k, arch="mcmahan_cnn", state_dict=sd, num_classes=C,
                        in_channels=1, image_size=32, num_samples=10)


def test_fedoneshot_presets_disagree_on_a_constructed_case() -> None:
    # one vote each for classes 1, 2, 0: the vote tie goes to class 0; the mean softmax picks
    # class 2 (client 2 is nearly undecided between 0 and 2)
    ups = [_bias_upload(0, [0.0, 5.0, 0.0, -9.0]), _bias_upload(1, [0.0, 0.0, 5.0, -9.0]),
           _bias_upload(2, [3.0, 0.0, 2.9, -9.0])]
    x = torch.rand(2, 1, 32, 32)
    paper = run_method("fedoneshot", ups, method_config("fedoneshot", "paper"), CTX)
    code = run_method("fedoneshot", ups, method_config("fedoneshot", "authors_code"), CTX)
    assert paper.model(x).argmax(1).tolist() == [2, 2]
    assert code.model(x).argmax(1).tolist() == [0, 0]
    assert (paper.preset, code.preset) == ("paper", "authors_code")


# ------------------------------------------------------------------------- initialisation


def test_baseline_init_scheme_per_preset_and_method() -> None:
    for ds in ("mnist", "fmnist", "svhn"):
        assert baseline_local_config(ds, "fedavg", "paper").shared_init
        assert baseline_local_config(ds, "fedoneshot", "paper").shared_init
        assert baseline_local_config(ds, "fedavg", "authors_code").shared_init  # server's model
        assert not baseline_local_config(ds, "fedoneshot", "authors_code").shared_init
    assert LocalTrainConfig().shared_init  # DENSE's clients: one init, both presets
    assert LocalTrainConfig.for_preset("authors_code").shared_init


def _initial_states(data, cfg: LocalTrainConfig, seed: int = 3) -> list[dict]:
    ds, part = data
    ups = train_clients(ds, part, dataclasses.replace(cfg, epochs=0), seed=seed, workers=1,
                        progress=False)
    return [u.state_dict for u in ups]


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_per_client_init_differs_per_client_shared_init_is_identical(data) -> None:
    shared = _initial_states(data, baseline_local_config("fmnist", "fedavg", "authors_code"))
    own = _initial_states(data, baseline_local_config("fmnist", "fedoneshot", "authors_code"))
    assert all(_same(shared[0], s) for s in shared[1:])
    assert not any(_same(own[i], own[j]) for i in range(3) for j in range(i + 1, 3))
    assert not any(_same(shared[0], s) for s in own)
    again = _initial_states(data, baseline_local_config("fmnist", "fedoneshot", "authors_code"))
    assert all(_same(a, b) for a, b in zip(own, again, strict=True))  # seeded, reproducible
    other_seed = _initial_states(data, baseline_local_config("fmnist", "fedoneshot",
                                                             "authors_code"), seed=4)
    assert not _same(own[0], other_seed[0])


def test_per_client_init_trains_one_at_a_time_not_grouped() -> None:
    sgd = LocalTrainConfig(arch="cnn_mnist", epochs=1)
    assert groupable(sgd, 3)
    assert not groupable(dataclasses.replace(sgd, shared_init=False), 3)
    with pytest.raises(ValueError, match="one shared initialisation"):
        train_grouped([], dataclasses.replace(sgd, shared_init=False), C)


def test_cache_keys_differ_by_init_scheme_and_shared_keys_are_mains(data) -> None:
    ds, part = data
    paper = baseline_local_config("fmnist", "fedoneshot", "paper")
    own = dataclasses.replace(paper, shared_init=False)
    k_paper = payload_key(train_key_payload(ds, part, 0, paper, 3))
    k_own = payload_key(train_key_payload(ds, part, 0, own, 3))
    assert k_paper != k_own
    assert train_key_payload(ds, part, 0, own, 3)["init_scheme"] == "per-client"
    assert k_paper == MAIN_KEY_FEDONESHOT_PAPER
    assert payload_key(train_key_payload(ds, part, 1, LocalTrainConfig(), 0)) == MAIN_KEY_DEFAULT
    assert ExperimentConfig().hash() == MAIN_EXPERIMENT_HASH
    assert ExperimentConfig(local=LocalTrainConfig(shared_init=False)).hash() != \
        MAIN_EXPERIMENT_HASH


def test_paper_preset_clients_are_mains(data) -> None:
    ds, part = data
    cfg = baseline_local_config("fmnist", "fedoneshot", "paper")
    init = _initial_states(data, cfg)
    assert tuple(state_hash(s) for s in init) == MAIN_PAPER_INIT_STATES
    # trained: the shared init is init_seed(seed, arch), main's formula, bit for bit
    one = dataclasses.replace(cfg, epochs=1, amp=False)
    idx = torch.as_tensor(part.client_indices[1])
    x, y = ds.x_train[idx], ds.y_train[idx]
    got = train_local(x, y, one, C, seed=11, progress=False, init_from=3, client_id=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(3, "mcmahan_cnn"))
        start = build_model("mcmahan_cnn", C, 1, 32, conv_relu=True).state_dict()
    want = train_local(x, y, one, C, seed=11, progress=False, init_state=start)
    assert _same(got, want)


# -------------------------------------------------------------- notebooks and scoreboard


def test_fedavg_runs_under_both_presets_beside_paper_only_methods() -> None:
    pairs = configure_methods(["fedavg", "fedoneshot", "ensemble"], ["paper"],
                              method_presets={"fedavg": ["paper", "paper", "authors_code"]})
    got = [(n, c.preset) for n, c in pairs]
    assert got == [("fedavg", "paper"), ("fedavg", "authors_code"), ("fedoneshot", "paper"),
                   ("ensemble", "paper")]
    assert [c.weighted for n, c in pairs if n == "fedavg"] == [True, False]  # Eq. 2 / DENSE code
    with pytest.raises(ValueError, match="unknown method"):
        configure_methods(["fedavg"], method_presets={"fedavgg": ["paper"]})


def test_fedcvae_baselines_of_both_presets_share_the_partition_not_the_clients() -> None:
    exp = ExperimentConfig(dataset="fmnist", partition="dirichlet_fedcvae", alpha=0.01,
                           num_clients=10, seed=1588, resize=32, subset=0.5)
    methods = configure_methods(["fedavg", "fedoneshot"], ["paper", "authors_code"],
                                overrides={"fedavg": {"weighted": True}})
    runs = fedcvae_runs(exp, methods, [Serves("fedcvae", "T1")], partition_seed=1693)
    assert {r.partition_seed for r in runs} == {1693}
    by = {(m[0], m[1].preset): r.clients for r in runs for m in r.methods}
    assert by[("fedoneshot", "authors_code")].shared_init is False
    assert by[("fedavg", "authors_code")].shared_init is True
    assert dict(by[("fedavg", "authors_code")].model_kwargs) == {"conv_relu": False}
    assert len({repr(c) for c in by.values()}) == 4  # four client trainings
    assert all(m[1].weighted for r in runs for m in r.methods if m[0] == "fedavg")


def _record(method: str, preset: str, last: float, seed: int) -> dict:
    return {"experiment": "main_tables", "paper": "fedcvae", "table": "T1", "dataset": "fmnist",
            "partition": "dirichlet", "alpha": 0.01, "num_clients": 10, "seed": seed,
            "method": method, "preset": preset, "last_acc": last, "best_acc": last,
            "ensemble_acc": None, "wall_time_s": 1.0, "config_hash": "h", "version": "0",
            "setting": "", "data_source": "fmnist"}


def test_scoreboard_keeps_the_two_presets_apart_paper_first() -> None:
    recs = [_record("fedavg", p, v, s) for p, v in (("authors_code", 44.0), ("paper", 30.0))
            for s in (1693, 1588)]
    frame = records_frame(recs)
    frame = frame.assign(run_id="r", notebook="main_tables", href="", paper_scale=True,
                         scale_reason="", scale="paper", akey=frame["alpha"].map(alpha_key))
    matched, _ = split(frame)
    ent = entries(matched)
    assert sorted(ent["preset"]) == ["authors_code", "paper"]
    board = next(b for b in boards(ent) if (b.paper, b.table) == ("fedcvae", "T1"))
    cell = dict(board.rows)["fedavg"][0]
    assert [e.preset for e in cell.entries] == ["paper", "authors_code"]
    assert [e.verdict for e in cell.entries] == ["below", "reproduced"]  # paper 45.85 ± 2.95
