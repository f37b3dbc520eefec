"""Faults and untrusted inputs at the batch runner, the client cache, the report and the
uploads: each must be a clear error (naming what is wrong) or correct behaviour, never a hang,
a stale result or a value taken at its word (docs/pending_reliability.md)."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

import run_all
from ofl_core.batch import grid
from ofl_core.batch.tasks import TaskResult


def _full_disk_under(monkeypatch, root: Path) -> None:
    """Every write under ``root`` fails as on a full disk, after creating the (empty) file."""
    real = Path.write_text

    def write_text(self, *a, **k):
        if str(self.resolve()).startswith(str(root.resolve())):
            self.touch()
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_full_disk_under_out_ends_the_batch_with_one_clear_line(tmp_path, monkeypatch,
                                                                   capsys, jobs):
    out = tmp_path / "out"
    out.mkdir()

    def failing_task(spec):  # every task fails, so its failure record must be written
        return TaskResult(spec.task, spec.run_id, "failed", 0.1, error="boom")

    monkeypatch.setattr(grid, "run_task_spec", failing_task)
    _full_disk_under(monkeypatch, out)
    rc: list[int] = []
    t = threading.Thread(target=lambda: rc.append(run_all.main(
        ["--quick", "--only", "partitions,local_epochs", "--jobs", jobs, "--out", str(out)])),
        daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the batch hung on a failed bookkeeping write"
    assert rc and rc[0] != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "No space left" in err[0], err
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def _train(dataset, cache_dir):
    from ofl_core.client_training import train_clients
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.data.partition import make_partition
    from ofl_core.upload_cache import UploadCache

    part = make_partition(dataset.y_train.numpy(), 2, "iid", seed=0,
                          num_classes=dataset.num_classes)
    cache = UploadCache(cache_dir)
    ups = train_clients(dataset, part, LocalTrainConfig(epochs=1, batch_size=64), 0, cache=cache,
                        workers=1, progress=False, trainer="sequential")
    return ups, cache


def test_cached_clients_of_other_training_code_are_trained_again(tiny_dataset, tmp_path,
                                                                  monkeypatch):
    from ofl_core import client_training

    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert cache.misses == 2
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (2, 0)  # the same code: the cache is used
    # an edit of the clients' training code (e.g. the learning rate of train_local)
    monkeypatch.setattr(client_training, "source_digest", lambda files, root=None: "edited")
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (0, 2)
    # pinned on purpose: the edited code reuses the entries of the pinned version
    monkeypatch.setenv("OFL_CLIENT_CODE", "edited")
    monkeypatch.setattr(client_training, "source_digest", lambda files, root=None: "again")
    _, cache = _train(tiny_dataset, tmp_path / "c")
    assert (cache.hits, cache.misses) == (2, 0)
    assert client_training.client_code_version(client_training.CLASSIFIER) == (
        "edited", "edited (pinned; code again)")


def test_the_client_code_version_covers_client_training_and_nothing_else(tmp_path):
    import shutil

    import ofl_core
    from ofl_core.client_training import _SHARED_CODE, CLASSIFIER, source_digest
    from ofl_core.fedcvae.clients import DECODER

    root = tmp_path / "ofl_core"
    shutil.copytree(Path(ofl_core.__file__).parent, root,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pt", "embedded"))

    def version(kind):
        source_digest.cache_clear()
        return source_digest(tuple(sorted({*_SHARED_CODE, *kind.code})), root)

    before = {k.name: version(k) for k in (CLASSIFIER, DECODER)}
    for edited, changes in [("dense/server.py", set()), ("batch/report.py", set()),
                            ("clients.py", {"clients", "CVAE clients"}),
                            ("grouped_training.py", {"clients"}),
                            ("models/cnn.py", {"clients"}),
                            ("fedcvae/clients.py", {"CVAE clients"})]:
        p = root / edited
        p.write_text(p.read_text() + "\n# edited\n")
        now = {k.name: version(k) for k in (CLASSIFIER, DECODER)}
        assert {n for n in now if now[n] != before[n]} == changes, edited
        before = now
    source_digest.cache_clear()


def test_records_name_the_client_training_code(tiny_dataset, tmp_path):
    from ofl_core.clients import LocalTrainConfig
    from ofl_core.experiment import ExperimentConfig, run_one, setup_experiment

    cfg = ExperimentConfig(dataset="tiny", num_clients=2, partition="iid", seed=0,
                           local=LocalTrainConfig(epochs=1), cache_dir=str(tmp_path),
                           workers=1, progress=False)
    setup = setup_experiment(cfg, dataset=tiny_dataset)
    from ofl_core.methods.fedavg import FedAvgConfig

    rec, _ = run_one(setup, "fedavg", FedAvgConfig())
    assert len(rec.client_code) == 16
