"""run_grid without notebooks: finished tasks are skipped before any executor starts, identical
tasks run once, a lost task is marked failed, results come back in task order."""

from __future__ import annotations

import concurrent.futures as cf
import json

from ofl_core.batch import grid
from ofl_core.batch.config import ExecutorConfig
from ofl_core.batch.grid import run_grid
from ofl_core.batch.tasks import NOTEBOOK_DIR, Task, TaskResult, task_paths


class RecordingExecutor(cf.Executor):
    """Resolves each submitted spec at once: "done", or an exception for notebook "lost"."""

    def __init__(self) -> None:
        self.submitted: list = []

    def submit(self, fn, /, *args, **kwargs) -> cf.Future:
        (spec,) = args
        self.submitted.append(spec)
        fut: cf.Future = cf.Future()
        if spec.task.parameters.get("lost"):
            fut.set_exception(RuntimeError("worker died"))
        else:
            fut.set_result(TaskResult(spec.task, spec.run_id, "done", 0.1, n_records=2))
        return fut


def test_run_grid_skips_finished_runs_duplicates_once_and_marks_lost_tasks(tmp_path,
                                                                           monkeypatch):
    done, todo = (Task("partitions", {"alphas": [a]}) for a in (0.1, 0.2))
    lost = Task("partitions", {"alphas": [0.3], "lost": True})
    nb, js = task_paths(tmp_path, done, done.run_id(NOTEBOOK_DIR))
    nb.parent.mkdir(parents=True)
    nb.write_text('{"cells": []}')
    js.write_text(json.dumps({"status": "done"}))
    ex = RecordingExecutor()
    res = run_grid([done, todo, todo, lost], tmp_path, ExecutorConfig(), log=False, executor=ex)
    assert [r.status for r in res] == ["skipped", "done", "done", "failed"]
    assert [s.task for s in ex.submitted] == [todo, lost]
    assert res[1] is res[2] and "the worker lost the task" in res[3].error

    def no_executor(*args, **kwargs):
        raise AssertionError("a finished grid starts no executor")

    monkeypatch.setattr(grid, "make_executor", no_executor)
    assert [r.status for r in run_grid([done], tmp_path, log=False)] == ["skipped"]
