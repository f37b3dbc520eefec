"""Server checkpoints (:mod:`ofl_core.checkpoint`): a run interrupted after some
epochs and run again resumes from its checkpoint and ends bit-identical (CPU, one thread) to
an uninterrupted run, for every server with epochs; a corrupt or foreign checkpoint is
discarded with a warning; another config, seed, client set or test set never resumes from it;
a process killed with SIGKILL mid-distillation resumes too (:func:`test_a_killed_process_resumes`).

The interruption is an exception from the evaluation callback: the epoch it is raised in has
trained but is not checkpointed, as when a process dies between two checkpoints.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from ofl_core.checkpoint import CheckpointFile, ServerCheckpoint, server_payload
from ofl_core.distill import combiners
from ofl_core.fedcvae import classifier as fedcvae_classifier
from ofl_core.fedcvae.server import FedCVAEEnsConfig, FedCVAEKDConfig, run_ens, run_kd
from ofl_core.registry import method_config, run_method
from ofl_core.server import ServerContext

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(epochs=4, steps_per_epoch=2, batch_size=16, nz=16, ngf=8)
KD = dict(kd_batch_size=16)
STRAT = dict(strat_steps=2, strat_batch_size=8)
#: (method, preset, overrides): every distillation server, and the settings that add state
#: (DENSE's code: G and z re-initialised each epoch, augmentation; a weighted teacher and
#: FedHydra: the stratification; Co-Boosting's code: the cosine LR schedule; IntactOFL: the
#: gate, its optimiser and schedule)
CASES = {
    "dense": ("dense", "paper", {**SMALL, **KD}),
    "dense-authors-code": ("dense", "authors_code", {**SMALL, **KD}),
    "dense-sa-teacher": ("dense", "paper", {**SMALL, **KD, **STRAT, "teacher": "sa"}),
    "fedhydra": ("fedhydra", "paper", {**SMALL, **KD, **STRAT}),
    "fedhydra-replay": ("fedhydra", "paper", {**SMALL, **KD, **STRAT, "kd_data": "replay"}),
    "fed-dafl": ("fed-dafl", "paper", SMALL),
    "fed-dafl-pool": ("fed-dafl", "paper", {**SMALL, **KD, "kd_data": "pool"}),
    "fed-adi": ("fed-adi", "paper", {"epochs": 4, "steps_per_epoch": 2, "batch_size": 16, **KD}),
    "feddf": ("feddf", "paper", {"epochs": 4, "steps_per_epoch": 2, "batch_size": 16}),
    "coboosting": ("coboosting", "paper", {**SMALL, **KD}),
    "coboosting-authors-code": ("coboosting", "authors_code", {**SMALL, **KD}),
    "intactofl": ("intactofl", "paper", {**SMALL, **KD}),
    "intactofl-authors-code": ("intactofl", "authors_code",
                               {**SMALL, **KD, "input_norm": "fmnist"}),
}
STRATIFIED = {"dense-sa-teacher", "fedhydra", "fedhydra-replay"}


class Interrupted(Exception):
    """Stands for the process dying."""


def interrupting(evaluate, after: int):
    """``evaluate`` that raises :class:`Interrupted` on its call number ``after + 1``."""
    calls = []

    def ev(model: torch.nn.Module) -> float:
        calls.append(1)
        if len(calls) > after:
            raise Interrupted
        return evaluate(model)

    return ev


@pytest.fixture
def resumes(monkeypatch) -> list[int]:
    """The epochs each :meth:`ServerCheckpoint.resume` of the test returned (0 = started over)."""
    got: list[int] = []
    real = ServerCheckpoint.resume

    def spy(self, pieces):
        got.append(real(self, pieces))
        return got[-1]

    monkeypatch.setattr(ServerCheckpoint, "resume", spy)
    return got


def same(a, b) -> bool:
    """Equal values, tensors bit for bit (nested in dicts, lists, tuples)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def assert_same_result(res, ref) -> None:
    """The same model (state dict bit for bit), curve, images and extras (but timings)."""
    sa, sb = res.model.state_dict(), ref.model.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), "the final models differ"
    assert res.curve == ref.curve and res.last_acc == ref.last_acc
    assert same(res.images, ref.images)
    timing = {k for k in ref.extras if k.startswith("time_")}
    assert same({k: v for k, v in res.extras.items() if k not in timing},
                {k: v for k, v in ref.extras.items() if k not in timing})


def checkpoints(root: Path) -> list[Path]:
    return sorted((root / "servers").glob("*.ckpt")) if (root / "servers").is_dir() else []


def saved_epoch(path: Path) -> int:
    return torch.load(path, weights_only=True)["epoch"]


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_run_equals_an_uninterrupted_one(two_per_client, tmp_path, resumes,
                                                   monkeypatch, case) -> None:
    """Checkpoints after epochs 2 and 4 of 4; the run dies in epoch 3's evaluation, the rerun
    resumes after epoch 2 (the stratification too comes from the checkpoint) and ends as a run
    that was never interrupted."""
    uploads, ctx = two_per_client
    name, preset, overrides = CASES[case]
    cfg = method_config(name, preset, **overrides)
    ref = run_method(name, uploads, cfg, ctx)
    ck = dataclasses.replace(ctx, cache_dir=tmp_path, checkpoint_every=2)
    with pytest.raises(Interrupted):
        run_method(name, uploads, cfg, dataclasses.replace(
            ck, evaluate=interrupting(ctx.evaluate, after=2)))
    [path] = checkpoints(tmp_path)
    assert saved_epoch(path) == 2
    stratified = []
    real_stratify = combiners.stratify
    monkeypatch.setattr(combiners, "stratify",
                        lambda *a, **k: stratified.append(1) or real_stratify(*a, **k))
    res = run_method(name, uploads, cfg, ck)
    assert resumes == [0, 2]
    assert not stratified  # taken from the checkpoint (the first run computed it)
    assert_same_result(res, ref)
    # the first part's two epochs are kept as its cost: the record's wall time adds them
    assert ref.extras["time_resumed_s"] == 0 and res.extras["time_resumed_s"] > 0
    assert saved_epoch(path) == 4  # the final state is kept: a rerun returns at once
    again = run_method(name, uploads, cfg, ck)
    assert resumes[-1] == 4
    assert_same_result(again, ref)


FEDCVAE_KD = FedCVAEKDConfig(num_samples=200, kd_samples=200, kd_epochs=4, classifier_epochs=4,
                             batch_size=32)


def test_fedcvae_kd_resumes_its_decoder_and_its_classifier(fedcvae_tiny, tmp_path, resumes,
                                                           monkeypatch) -> None:
    """FedCVAE-KD has two trainings with epochs: the server decoder's KD (interrupted in its
    3rd epoch here) and the classifier's (interrupted in its 4th); each resumes from its own
    checkpoint, and the end is bit-identical to an uninterrupted run."""
    uploads, ctx = fedcvae_tiny["uploads"], fedcvae_tiny["context"]()
    ref = run_kd(uploads, FEDCVAE_KD, ctx)
    ck = dataclasses.replace(ctx, cache_dir=tmp_path, checkpoint_every=2)
    real_loss = fedcvae_classifier.reconstruction_loss
    batches = []

    def dying_loss(*a, **k):
        batches.append(1)
        if len(batches) > 2 * 7 + 3:  # 200 samples in batches of 32: 7 per epoch
            raise Interrupted
        return real_loss(*a, **k)

    monkeypatch.setattr(fedcvae_classifier, "reconstruction_loss", dying_loss)
    with pytest.raises(Interrupted):
        run_kd(uploads, FEDCVAE_KD, ck)
    monkeypatch.setattr(fedcvae_classifier, "reconstruction_loss", real_loss)
    with pytest.raises(Interrupted):
        run_kd(uploads, FEDCVAE_KD, dataclasses.replace(
            ck, evaluate=interrupting(ctx.evaluate, after=3)))
    res = run_kd(uploads, FEDCVAE_KD, ck)
    # decoder: started, resumed after epoch 2 (done), resumed at its end; classifier: started
    # (interrupted after 3 epochs: saved at 2), resumed after epoch 2
    assert resumes == [0, 2, 0, 4, 2]
    assert_same_result(res, ref)


def test_fedcvae_ens_resumes_its_classifier(fedcvae_tiny, tmp_path, resumes) -> None:
    uploads, ctx = fedcvae_tiny["uploads"], fedcvae_tiny["context"]()
    cfg = FedCVAEEnsConfig(num_samples=200, classifier_epochs=4, batch_size=32)
    ref = run_ens(uploads, cfg, ctx)
    ck = dataclasses.replace(ctx, cache_dir=tmp_path, checkpoint_every=1)
    with pytest.raises(Interrupted):
        run_ens(uploads, cfg, dataclasses.replace(ck, evaluate=interrupting(ctx.evaluate, 2)))
    res = run_ens(uploads, cfg, ck)
    assert resumes == [0, 2]
    assert_same_result(res, ref)


# ---------------------------------------------------------------- bad checkpoints

DENSE = ("dense", method_config("dense", "paper", **SMALL, **KD))


def interrupted_dense(two_per_client, root: Path) -> tuple[ServerContext, Path]:
    """A DENSE run with its checkpoint after epoch 2 on disk (it died in epoch 3)."""
    uploads, ctx = two_per_client
    ck = dataclasses.replace(ctx, cache_dir=root, checkpoint_every=2)
    with pytest.raises(Interrupted):
        run_method(*DENSE[:1], uploads, DENSE[1], dataclasses.replace(
            ck, evaluate=interrupting(ctx.evaluate, after=2)))
    [path] = checkpoints(root)
    return ck, path


def flip_a_state_byte(path: Path) -> None:
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0xFF  # inside the state's bytes (the bulk of the file)
    path.write_bytes(bytes(b))


def another_keys_checkpoint(path: Path) -> None:
    """A whole, valid checkpoint of another run (another seed) under this run's name."""
    record = torch.load(path, weights_only=True)
    payload = json.loads(record["meta"])
    other = CheckpointFile(path.parent, {**payload, "seed": payload["seed"] + 1})
    epoch, state = CheckpointFile(path.parent, payload).read()
    other.write(epoch, state)
    other.path.replace(path)


def a_state_that_does_not_fit(path: Path) -> None:
    """A checkpoint whose last piece (the pool) cannot be loaded: the pieces loaded before it
    (student, RNGs, generator, optimisers) must be put back when the run starts over."""
    f = CheckpointFile(path.parent, json.loads(torch.load(path, weights_only=True)["meta"]))
    epoch, state = f.read()
    assert list(state["pieces"])[-1] == "pool"
    state["pieces"]["pool"]["images"] = state["pieces"]["pool"]["images"].float()
    f.write(epoch, state)


CORRUPTIONS = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
                  "unreadable"),
    "flipped byte": (flip_a_state_byte, "corrupt \\(its checksum does not match\\)"),
    "not a torch file": (lambda p: p.write_bytes(b"not a checkpoint"), "unreadable"),
    "another key's": (another_keys_checkpoint, "for another key"),
    "state that does not fit": (a_state_that_does_not_fit, "not a checkpoint of this run"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_bad_checkpoint_is_discarded_with_a_warning(two_per_client, tmp_path, resumes,
                                                      corruption) -> None:
    uploads, ctx = two_per_client
    ref = run_method(*DENSE[:1], uploads, DENSE[1], ctx)
    ck, path = interrupted_dense(two_per_client, tmp_path)
    corrupt, problem = CORRUPTIONS[corruption]
    corrupt(path)
    with pytest.warns(UserWarning, match=f"server checkpoint {re.escape(str(path))} is "
                                         f"{problem}.*removed, the run starts over"):
        res = run_method(*DENSE[:1], uploads, DENSE[1], ck)
    assert resumes[-1] == 0
    assert_same_result(res, ref)
    assert saved_epoch(path) == 4  # replaced by the new run's


def changed(two_per_client, what: str):
    """(uploads, config, context) of the DENSE run with one input changed."""
    uploads, ctx = two_per_client
    cfg = DENSE[1]
    if what == "config":
        cfg = dataclasses.replace(cfg, kd_lr=cfg.kd_lr * 2)
    elif what == "seed":
        ctx = dataclasses.replace(ctx, seed=ctx.seed + 1)
    elif what == "uploads":
        state = {k: v.clone() for k, v in uploads[0].state_dict.items()}
        first = next(k for k, v in state.items() if v.is_floating_point())
        state[first].view(-1)[0] += 1e-3
        uploads = [dataclasses.replace(uploads[0], state_dict=state), *uploads[1:]]
    elif what == "test set":
        ctx = dataclasses.replace(ctx, eval_key="another test set")
    return uploads, cfg, ctx


@pytest.mark.parametrize("what", ["config", "seed", "uploads", "test set"])
def test_another_run_never_resumes_from_a_checkpoint(two_per_client, tmp_path, resumes,
                                                     what) -> None:
    ck, path = interrupted_dense(two_per_client, tmp_path)
    uploads, cfg, ctx = changed(two_per_client, what)
    ref = run_method("dense", uploads, cfg, ctx)
    res = run_method("dense", uploads, cfg, dataclasses.replace(
        ctx, cache_dir=tmp_path, checkpoint_every=2))
    assert resumes[-1] == 0
    assert_same_result(res, ref)
    assert saved_epoch(path) == 2 and len(checkpoints(tmp_path)) == 2  # both kept


def test_what_the_key_covers(two_per_client, monkeypatch) -> None:
    """Every input that changes a result changes the key (the library's code too); how the
    run is shown, where it is kept and how often it is checkpointed do not."""
    from ofl_core.checkpoint import key as key_module

    uploads, ctx = two_per_client
    cfg = DENSE[1]

    def key(uploads=uploads, cfg=cfg, ctx=ctx, **inputs) -> str:
        return CheckpointFile("/x", server_payload(ctx, "dense", uploads, cfg, inputs)).key

    base = key()
    variants = [key(cfg=dataclasses.replace(cfg, epochs=5)), key(uploads=uploads[:2]),
                key(ctx=dataclasses.replace(ctx, seed=4)),
                key(ctx=dataclasses.replace(ctx, device="cuda")),
                key(ctx=dataclasses.replace(ctx, eval_key="t")),
                key(ctx=dataclasses.replace(ctx, evaluate=None)),
                key(student={"w": torch.zeros(2)}), key(student={"w": torch.ones(2)})]
    assert key(ctx=dataclasses.replace(ctx, progress=True, checkpoint_every=7,
                                       cache_dir="/elsewhere", evaluate=lambda m: 0.0)) == base
    monkeypatch.setattr(key_module, "library_digest", lambda: "edited code")
    variants.append(key())
    assert len({base, *variants}) == 1 + len(variants)


def test_checkpointing_off_and_failed_writes(two_per_client, tmp_path) -> None:
    """No cache folder or ``checkpoint_every=0``: nothing is written; a cache folder that
    cannot be written warns once per checkpoint and the run's result is unchanged."""
    uploads, ctx = two_per_client
    ref = run_method(*DENSE[:1], uploads, DENSE[1], ctx)
    run_method(*DENSE[:1], uploads, DENSE[1],
               dataclasses.replace(ctx, cache_dir=tmp_path, checkpoint_every=0))
    assert not (tmp_path / "servers").exists()
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should be")
    with pytest.warns(UserWarning, match="could not write the server checkpoint"):
        res = run_method(*DENSE[:1], uploads, DENSE[1],
                         dataclasses.replace(ctx, cache_dir=blocked, checkpoint_every=2))
    assert_same_result(res, ref)
    with pytest.raises(ValueError, match="checkpoint_every must be an int ≥ 0"):
        ServerContext(4, 1, 28, checkpoint_every=-1)


# ---------------------------------------------------------------- a real kill

WORKER = textwrap.dedent("""
    import sys, time, logging
    import torch
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.datasets import ImageDataset
    from ofl_core.data.partition import make_partition
    from ofl_core.evaluate import accuracy
    from ofl_core.registry import method_config, run_method
    from ofl_core.server import ServerContext

    out, cache = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    g = torch.Generator().manual_seed(0)
    y = torch.arange(400) % 4
    x = torch.rand(400, 1, 28, 28, generator=g) * 60
    for c in range(4):
        r, q = divmod(c, 2)
        x[y == c, :, r * 14 + 3 : r * 14 + 11, q * 14 + 3 : q * 14 + 11] += 180
    x = x.clamp(0, 255).to(torch.uint8)
    ds = ImageDataset("kill", x[:300], y[:300], x[300:], y[300:], num_classes=4)
    part = make_partition(ds.y_train.numpy(), 3, "iid", seed=0)
    uploads = train_clients(ds, part, LocalTrainConfig(epochs=1, batch_size=32), seed=0,
                            workers=1, progress=False)

    def evaluate(model):
        time.sleep(0.25)  # slow epochs down (no effect on results): time to kill mid-run
        return accuracy(model, ds.x_test, ds.y_test)

    ctx = ServerContext(4, 1, 28, seed=1, evaluate=evaluate, progress=False,
                        cache_dir=cache, checkpoint_every=1)
    cfg = method_config("dense", "paper", epochs=12, steps_per_epoch=2, batch_size=16,
                        kd_batch_size=16, nz=16, ngf=8)
    res = run_method("dense", uploads, cfg, ctx)
    torch.save({"state": res.model.state_dict(), "curve": res.curve}, out)
""")


def worker(tmp_path: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "OFL_CACHE_DIR": str(tmp_path / "clients")}
    return subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_process_resumes(tmp_path) -> None:
    """A DENSE server (12 epochs, a checkpoint after each) is killed with SIGKILL once its
    checkpoint of epoch 3 is on disk; run again, it resumes after the last checkpoint written
    and ends bit-identical to an uninterrupted run."""
    cache = tmp_path / "cache"
    killed = worker(tmp_path, str(tmp_path / "killed.pt"), str(cache))
    ref = worker(tmp_path, str(tmp_path / "ref.pt"))  # uninterrupted, without checkpoints
    deadline = time.monotonic() + 120
    seen = 0
    while seen < 3 and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
        for p in checkpoints(cache):
            try:
                seen = max(seen, saved_epoch(p))
            except Exception:  # noqa: BLE001 - only a whole checkpoint counts
                pass
    killed.send_signal(signal.SIGKILL)
    log = killed.communicate(timeout=60)[0]
    assert killed.returncode == -signal.SIGKILL, log
    assert 3 <= seen < 12 and not (tmp_path / "killed.pt").exists()
    resumed = worker(tmp_path, str(tmp_path / "resumed.pt"), str(cache))
    ref_log, log = ref.communicate(timeout=300)[0], resumed.communicate(timeout=300)[0]
    assert ref.returncode == 0 and resumed.returncode == 0, ref_log + log
    after = [int(w) for line in log.splitlines() if line.startswith("resuming after epoch")
             for w in line.split()[3:4]]
    assert len(after) == 1 and after[0] >= 3, log
    a, b = (torch.load(tmp_path / f, weights_only=True) for f in ("resumed.pt", "ref.pt"))
    assert a["curve"] == b["curve"]
    assert a["state"].keys() == b["state"].keys()
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


def test_checkpoint_file_round_trip(tmp_path) -> None:
    """The file keeps the epoch and the state (tensors bit for bit) and refuses a payload it
    was not written for."""
    f = CheckpointFile(tmp_path, {"run": 1})
    state = {"pieces": {"w": torch.randn(3, generator=torch.Generator().manual_seed(0))},
             "stages": {}}
    assert f.read() is None
    assert f.write(3, state)
    epoch, back = f.read()
    assert epoch == 3 and torch.equal(back["pieces"]["w"], state["pieces"]["w"])
    buf = io.BytesIO(f.path.read_bytes())
    assert torch.load(buf, weights_only=True)["epoch"] == 3
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("run, cfg", [
    (run_ens, FedCVAEEnsConfig(num_samples=200, classifier_epochs=3, batch_size=32)),
    (run_kd, dataclasses.replace(FEDCVAE_KD, kd_epochs=3, classifier_epochs=3)),
])
def test_a_resumed_fedcvae_server_counts_the_time_of_its_earlier_parts(fedcvae_tiny, tmp_path,
                                                                        run, cfg) -> None:
    """The FedCVAE trainings keep their epochs' seconds in their checkpoints, as the
    distillation loop does: a run resumed at its end reports what the first run spent (the
    record's ``wall_time_s`` adds it), not only the seconds of its own last part."""
    uploads, ctx = fedcvae_tiny["uploads"], fedcvae_tiny["context"]()
    ck = dataclasses.replace(ctx, cache_dir=tmp_path, checkpoint_every=1)
    first = run(uploads, cfg, ck)
    assert first.extras["time_resumed_s"] == 0
    again = run(uploads, cfg, ck)  # every epoch was done: it resumes at the end
    assert again.extras["time_resumed_s"] > 0
    assert_same_result(again, first)
