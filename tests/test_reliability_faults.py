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
