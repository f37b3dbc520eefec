"""Executors of run_all.py: inline, local pool, Dask (LocalCluster on 127.0.0.1), submitit
(local backend), a missing optional dependency, resume. No GPU, no SLURM needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import run_all
from ofl_core.batch.config import ExecutorConfig
from ofl_core.batch.executors import InlineExecutor, LocalPoolExecutor, make_executor
from ofl_core.batch.grid import run_grid
from ofl_core.batch.optional import MissingDependencyError
from ofl_core.batch.tasks import Task, TaskSpec, task_paths

os.environ.setdefault("TQDM_DISABLE", "1")


#: the cheapest real notebook at tiny settings (no client training; a few seconds)
TINY_PARTITIONS = {"fedcvae_alphas": [0.01]}


def partitions_tasks(n: int) -> list[Task]:
    return [Task("partitions", {**TINY_PARTITIONS, "alphas": [a]})
            for a in (0.1, 0.2, 0.3, 0.5)[:n]]


def write_grid(path: Path, tasks: list[Task]) -> Path:
    by_nb: dict[str, list[dict]] = {}
    for t in tasks:
        by_nb.setdefault(t.notebook, []).append(t.parameters)
    path.write_text(json.dumps(by_nb))
    return path


def test_local_jobs1_is_inline_and_jobs_n_limits_threads():
    assert isinstance(make_executor(ExecutorConfig()), InlineExecutor)
    assert not ExecutorConfig().isolate and ExecutorConfig().threads() is None
    pool = make_executor(ExecutorConfig(jobs=2))
    assert isinstance(pool, LocalPoolExecutor)
    pool.shutdown()
    assert ExecutorConfig(jobs=2).threads() == max(1, (os.cpu_count() or 1) // 2)
    assert ExecutorConfig(jobs=2, threads_per_task=3).threads() == 3
    assert ExecutorConfig(executor="submitit", cores=6).threads() == 6
    # a 4-GPU, 16-core dask-jobqueue job runs 4 one-GPU tasks with 4 threads each
    assert ExecutorConfig(executor="dask", cluster="slurm", cores=16, gpus_per_task=1,
                          gpus_per_job=4).threads() == 4
    spec = TaskSpec(Task("partitions", {"alphas": [0.1]}), "abc", "/o", "/o/f", threads=2)
    assert TaskSpec.from_json(spec.to_json()) == spec


def test_missing_optional_dependency_is_one_clear_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"pip install -e '\.\[cluster\]'"):
        make_executor(ExecutorConfig(executor="dask"))
    grid = write_grid(tmp_path / "g.json", partitions_tasks(1))
    rc = run_all.main(["--grid", str(grid), "--out", str(tmp_path), "--executor", "dask"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "pip install -e '.[cluster]'" in err, err


def kill_a_busy_worker(client, killed: list[str]) -> None:
    """SIGKILL the process of a worker that is in the middle of a task."""
    deadline = time.time() + 120
    while time.time() < deadline and not killed:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            time.sleep(1.5)  # let its task's child process and kernel start
            busy = [w for w, keys in client.processing().items() if keys]
            if busy:
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                killed.append(busy[0])
        time.sleep(0.1)


@pytest.mark.slow
def test_dask_local_cluster_runs_grid_survives_a_killed_worker_and_resumes(tmp_path, capsys):
    pytest.importorskip("distributed")
    tasks = partitions_tasks(2)  # one per worker: one of them is killed mid-task
    out = tmp_path / "out"
    cfg = ExecutorConfig(executor="dask", jobs=2, retries=2)
    ex = make_executor(cfg, out)
    assert all(a.startswith("tcp://127.0.0.1:") for a in ex.client.scheduler_info()["workers"])
    killed: list[str] = []
    killer = threading.Thread(target=kill_a_busy_worker, args=(ex.client, killed), daemon=True)
    killer.start()
    try:
        results = run_grid(tasks, out, cfg, executor=ex)
    finally:
        ex.shutdown()
    killer.join(5)
    assert killed, "no worker was killed mid-task"
    assert [r.status for r in results] == ["done"] * 2, [r.error for r in results]
    for r in results:
        nb, js = task_paths(out.resolve(), r.task, r.run_id)
        assert nb.is_file() and json.loads(js.read_text())["status"] == "done"

    grid = write_grid(tmp_path / "grid.json", tasks)
    capsys.readouterr()
    rc = run_all.main(["--grid", str(grid), "--out", str(out), "--executor", "dask",
                       "--jobs", "2", "--no-shipped"])
    text = capsys.readouterr().out
    assert rc == 0 and "2 tasks: 0 ran, 2 skipped (already done), 0 failed" in text, text


def test_a_killed_runs_half_written_notebook_is_removed_when_the_task_reruns(tmp_path, capsys):
    """``kill -9`` of run_all.py leaves ``.<run_id>.<pid>.tmp.ipynb``; the next run of the task
    (holding its lock) deletes it and leaves only the finished notebook."""
    task = partitions_tasks(1)[0]
    out = tmp_path / "out"
    nb, js = task_paths(out, task, task.run_id())
    nb.parent.mkdir(parents=True)
    stale = [nb.with_name(f".{task.run_id()}.{pid}.tmp.ipynb") for pid in (4242, 99999)]
    other = nb.with_name(".0123456789ab.4242.tmp.ipynb")  # another task's: not ours to touch
    for p in (*stale, other):
        p.write_text("{}")
    rc = run_all.main(["--grid", str(write_grid(tmp_path / "grid.json", [task])),
                       "--out", str(out), "--no-shipped"])
    assert rc == 0, capsys.readouterr().out
    assert not any(p.exists() for p in stale) and other.exists()
    assert nb.is_file() and json.loads(js.read_text())["status"] == "done"
    assert sorted(p.name for p in nb.parent.glob("*.ipynb")) == sorted([nb.name, other.name])


def start_run_all(grid: Path, out: Path) -> subprocess.Popen:
    """``run_all.py`` on ``grid`` in a local pool (a thread per task, a child per task)."""
    root = Path(run_all.__file__).resolve().parent
    return subprocess.Popen(
        [sys.executable, str(root / "run_all.py"), "--grid", str(grid), "--out", str(out),
         "--jobs", "1", "--threads-per-task", "1", "--no-shipped"],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def sigterm_after(proc: subprocess.Popen, marker: str) -> str:
    """Read ``proc``'s output up to a line with ``marker``, SIGTERM it, return the rest (it
    must exit within 120 s: after the interrupt it writes the report of what finished; a run
    that waited for the task instead would never end)."""
    seen = []
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if marker in line:
            break
    assert any(marker in ln for ln in seen), seen
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    return rest


def test_a_copy_waiting_on_the_task_lock_stops_at_sigterm(tmp_path):
    """A re-run whose task is still held by another run (its lock) waits — and SIGTERM (or
    Ctrl-C) ends it within seconds, not when the other run finishes."""
    import fcntl

    task = partitions_tasks(1)[0]
    out = tmp_path / "out"
    nb, _ = task_paths(out, task, task.run_id())
    nb.parent.mkdir(parents=True)
    with open(nb.with_name(f".{task.run_id()}.lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # "the other run"
        proc = start_run_all(write_grid(tmp_path / "grid.json", [task]), out)
        try:
            rest = sigterm_after(proc, "another run of this task holds")
        finally:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in rest, rest
    assert not nb.exists()


def test_sigterm_stops_a_running_task_of_the_local_pool(tmp_path):
    """``kill`` of run_all.py (SIGTERM to it alone) kills its running task's child process
    instead of waiting for the task to end; the re-run then runs it."""
    task = partitions_tasks(1)[0]
    out = tmp_path / "out"
    grid = write_grid(tmp_path / "grid.json", [task])
    proc = start_run_all(grid, out)
    try:
        rest = sigterm_after(proc, ": submitted")
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in rest, rest
    nb, js = task_paths(out, task, task.run_id())
    assert not js.exists()
    proc = start_run_all(grid, out)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "1 ran" in text, text
    assert json.loads(js.read_text())["status"] == "done"


@pytest.mark.slow
def test_submitit_local_backend_runs_two_tasks_and_redoes_a_half_written_one(tmp_path, capsys):
    pytest.importorskip("submitit")
    tasks = partitions_tasks(2)
    out = tmp_path / "out"
    rid = tasks[1].run_id()
    nb, js = task_paths(out, tasks[1], rid)
    nb.parent.mkdir(parents=True)
    nb.write_text("")  # a half-written task: truncated sidecar, empty notebook
    js.write_text('{"status": "do')
    grid = write_grid(tmp_path / "grid.json", tasks)
    conf = tmp_path / "cluster.yaml"
    conf.write_text("cluster: local\npoll-seconds: 0.5\nwalltime: '00:10:00'\n")
    rc = run_all.main(["--grid", str(grid), "--out", str(out), "--executor", "submitit",
                       "--cluster-config", str(conf), "--no-shipped"])
    text = capsys.readouterr().out
    assert rc == 0 and "2 tasks: 2 ran, 0 skipped (already done), 0 failed" in text, text
    assert json.loads(js.read_text())["status"] == "done"
    assert list((out / "submitit").rglob("*_result.pkl")), "ran through submitit jobs"
