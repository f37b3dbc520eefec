"""The cluster executors against a real scheduler: a single-node SLURM on localhost
(``scripts/slurm_localhost.sh``, the ``slurm`` fixture; skipped where it cannot run).

Grids of the tiny ``partitions`` notebook and of a test notebook that sleeps (so that a job can
be cancelled while its task runs): a submitit job array; dask-jobqueue worker jobs; a worker
job cancelled mid-grid (replaced, the grid completes, nothing finished is redone); an array
element cancelled (failed with the scheduler's reason, a re-run completes it); a walltime; and
``run_all.py`` killed while its jobs are queued, then re-run. Every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_batch_executors import partitions_tasks, write_grid

import run_all
from ofl_core.batch.config import ExecutorConfig
from ofl_core.batch.executors import make_executor
from ofl_core.batch.grid import run_grid
from ofl_core.batch.tasks import Task

pytestmark = pytest.mark.slurm
pytest.importorskip("submitit")
pytest.importorskip("dask_jobqueue")

ROOT = Path(__file__).resolve().parents[1]
#: one CPU and 1 GB per job: the two CPUs of a small machine run two jobs at once
JOB = {"partition": "debug", "cores": 1, "memory": "1GB", "walltime": "00:10:00",
       "poll_seconds": 1.0}

SLEEP_SOURCE = """\
import os, time
open(log, "a").write(f"start {name} {os.getpid()}\\n")
time.sleep(seconds)
open(log, "a").write(f"done {name} {os.getpid()}\\n")
"""


@pytest.fixture(scope="module")
def sleep_dir(tmp_path_factory) -> Path:
    """A notebook folder with ``sleep.ipynb``: parameters ``name``, ``seconds``, ``log``; it
    appends ``start <name>`` / ``done <name>`` to ``log``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell("name: str = 'x'\nseconds: float = 1.0\nlog: str = ''")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(SLEEP_SOURCE)]
    d = tmp_path_factory.mktemp("notebooks")
    nbformat.write(nb, str(d / "sleep.ipynb"))
    return d


def sleep_task(name: str, seconds: float, log: Path) -> Task:
    return Task("sleep", {"name": name, "seconds": seconds, "log": str(log)})


def events(log: Path) -> list[str]:
    """``["start a", "done a", ...]`` from a sleep notebook's log."""
    if not log.is_file():
        return []
    return [" ".join(ln.split()[:2]) for ln in log.read_text().splitlines()]


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def within(seconds: float, slurm, fn: Callable, *args, stop: Callable | None = None,
           **kwargs):
    """``fn(*args, **kwargs)`` in a thread; past ``seconds`` the run is stopped (``stop``, and
    every job cancelled) and the test fails instead of hanging."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if stop is not None:
            stop()
        slurm.cancel_all()
        t.join(60)
        raise AssertionError(f"{getattr(fn, '__name__', fn)} did not finish within {seconds}s")
    if "error" in out:
        raise out["error"]
    return out["value"]


def cli(*extra: str) -> list[str]:
    return ["--partition", "debug", "--cores", "1", "--memory", "1GB", "--walltime",
            "00:10:00", *extra]


def poll_config(tmp_path: Path) -> str:
    conf = tmp_path / "executor.yaml"
    conf.write_text("poll_seconds: 1\n")
    return str(conf)


def test_the_local_node_offers_every_core_of_the_machine(slurm):
    """The node has all the cores, also when SLURM was brought up from a test worker, whose
    ``OMP_NUM_THREADS`` is 1 and which GNU ``nproc`` answers: with one CPU the node ran one
    1-core job at a time and every test below waited on the one before."""
    node = subprocess.run(["scontrol", "-o", "show", "node"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    cpus = [int(v) for v in re.findall(r"\bCPUTot=(\d+)", node)]
    assert cpus == [len(os.sched_getaffinity(0))], node


def test_submitit_job_array_runs_a_grid_without_sacct_warnings(slurm, tmp_path, capfd):
    grid = write_grid(tmp_path / "grid.json", partitions_tasks(2))
    out = tmp_path / "out"
    rc = within(400, slurm, run_all.main, ["--grid", str(grid), "--out", str(out),
                                           "--executor", "submitit", *cli(), "--no-shipped",
                                           "--cluster-config", poll_config(tmp_path)])
    text = "".join(capfd.readouterr())
    assert rc == 0 and "2 tasks: 2 ran, 0 skipped (already done), 0 failed" in text, text
    assert "Bypassing sacct" not in text and text.count("sacct is not usable") <= 1, text
    arrays = {p.name for p in (out / "submitit").iterdir() if p.is_dir() and "_" in p.name}
    assert len(arrays) == 2 and len({a.split("_")[0] for a in arrays}) == 1, arrays


def test_dask_jobqueue_worker_job_runs_a_grid(slurm, tmp_path, capfd):
    grid = write_grid(tmp_path / "grid.json", partitions_tasks(2))
    out = tmp_path / "out"
    rc = within(400, slurm, run_all.main, ["--grid", str(grid), "--out", str(out),
                                           "--executor", "dask", "--cluster", "slurm",
                                           "--jobs", "2", "--no-shipped", *cli()])
    text = "".join(capfd.readouterr())
    assert rc == 0 and "2 tasks: 2 ran, 0 skipped (already done), 0 failed" in text, text
    assert list((out / "dask-jobs").glob("*.out")), "worker job logs under <out>/dask-jobs"


def test_dask_worker_job_cancelled_mid_grid_is_replaced_and_the_grid_completes(
        slurm, tmp_path, sleep_dir, capsys):
    log = tmp_path / "log.txt"
    tasks = [sleep_task("a", 2, log), sleep_task("b", 15, log)]
    cfg = ExecutorConfig(executor="dask", cluster="slurm", jobs=1, retries=2, **JOB)
    ex = make_executor(cfg, tmp_path / "out")
    cancelled: list[str] = []

    def cancel_when_one_task_finished() -> None:
        wait_until(lambda: len([e for e in events(log) if e.startswith("start")]) == 2
                   and len([e for e in events(log) if e.startswith("done")]) == 1, 240,
                   "one task done and the other running")
        cancelled.extend(slurm.live())
        subprocess.run(["scancel", *cancelled], check=True, timeout=30)

    killer = threading.Thread(target=cancel_when_one_task_finished, daemon=True)
    killer.start()
    t0 = time.monotonic()
    try:
        results = within(400, slurm, run_grid, tasks, tmp_path / "out", cfg,
                         notebook_dir=sleep_dir, executor=ex,
                         stop=lambda: ex.shutdown(wait=False, cancel_futures=True))
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    took = time.monotonic() - t0
    killer.join(5)
    assert len(cancelled) == 1, cancelled
    assert [r.status for r in results] == ["done", "done"], [r.error for r in results]
    ev = events(log)
    first = ev[1].split()[1]  # the task that finished before the cancel
    assert ev.count(f"start {first}") == 1 and ev.count(f"done {first}") == 1, ev
    assert sorted(e for e in ev if e.startswith("done")) == ["done a", "done b"], ev
    printed = capsys.readouterr().out
    assert f"slurm: job {cancelled[0]} CANCELLED" in printed, printed
    assert ex.keeper.replaced == 1, printed
    print(f"grid with its worker job cancelled mid-run completed in {took:.0f}s")


def test_dask_worker_jobs_that_never_start_fail_the_grid_instead_of_hanging(slurm, tmp_path):
    cfg = ExecutorConfig(executor="dask", cluster="slurm", jobs=1, retries=1,
                         job_prologue=("exit 3",), **JOB)
    results = within(300, slurm, run_grid, partitions_tasks(1), tmp_path / "out", cfg)
    assert results[0].status == "failed", results[0]
    assert results[0].error.startswith("no worker job could start: 2 in a row ended before "
                                       "their worker connected"), results[0].error
    assert "FAILED" in results[0].error and "dask-worker-" in results[0].error


def test_submitit_element_cancelled_fails_with_its_reason_and_a_rerun_completes_it(
        slurm, tmp_path, sleep_dir):
    log = tmp_path / "log.txt"
    tasks = [sleep_task("a", 1, log), sleep_task("b", 20, log)]
    cfg = ExecutorConfig(executor="submitit", **JOB)
    out = tmp_path / "out"
    ex = make_executor(cfg, out)

    def cancel_b() -> None:
        wait_until(lambda: "start b" in events(log), 240, "task b to start")
        job_b = ex.jobs[1].job_id  # the array element of the second task
        subprocess.run(["scancel", job_b], check=True, timeout=30)

    killer = threading.Thread(target=cancel_b, daemon=True)
    killer.start()
    try:
        results = within(300, slurm, run_grid, tasks, out, cfg, notebook_dir=sleep_dir,
                         executor=ex)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    killer.join(5)
    assert [r.status for r in results] == ["done", "failed"], [r.error for r in results]
    assert results[1].error.startswith(f"slurm: job {ex.jobs[1].job_id} CANCELLED"), results[1]
    failed = json.loads((out / "runs" / "sleep" / f"{results[1].run_id}.failed.json")
                        .read_text())
    assert "CANCELLED" in failed["error"]

    again = within(300, slurm, run_grid, tasks, out, ExecutorConfig(executor="submitit", **JOB),
                   notebook_dir=sleep_dir)
    assert [r.status for r in again] == ["skipped", "done"], [r.error for r in again]
    assert events(log).count("done b") == 1 and events(log).count("done a") == 1


def test_submitit_walltime_fails_the_task_with_reason_walltime_and_the_batch_goes_on(
        slurm, tmp_path, sleep_dir):
    log = tmp_path / "log.txt"
    tasks = [sleep_task("long", 600, log), sleep_task("short", 1, log)]
    # submitit asks SLURM for USR2 90 s before the walltime, which SLURM may send up to 60 s
    # earlier: at once for a short walltime. 20 s here: between 40 s and 100 s of a 2-min job,
    # long after the short task ended.
    cfg = ExecutorConfig(executor="submitit", cluster_kwargs={"signal_delay_s": 20},
                         **{**JOB, "walltime": "00:02:00"})
    results = within(300, slurm, run_grid, tasks, tmp_path / "out", cfg,
                     notebook_dir=sleep_dir)
    assert [r.status for r in results] == ["failed", "done"], [r.error for r in results]
    assert "TIMEOUT" in results[0].error and "walltime" in results[0].error, results[0].error


def result_statuses(out: Path) -> dict[str, list[str]]:
    """run id → the statuses of every submitit job that ran it (its result pickles)."""
    seen: dict[str, list[str]] = {}
    for p in (out / "submitit").rglob("*_result.pkl"):
        outcome, res = pickle.loads(p.read_bytes())
        assert outcome == "success", res
        seen.setdefault(res.run_id, []).append(res.status)
    return seen


def test_run_all_killed_while_its_jobs_are_queued_then_rerun(slurm, tmp_path, capfd):
    """kill -9 of run_all.py leaves its job array queued; the re-run submits the unfinished
    tasks again; no task is lost and none runs twice to completion (a copy that starts while
    another runs waits on the task's lock, then skips it)."""
    grid = write_grid(tmp_path / "grid.json", partitions_tasks(2))
    out = tmp_path / "out"
    args = ["--grid", str(grid), "--out", str(out), "--executor", "submitit",
            "--array-parallelism", "1", "--no-shipped", *cli()]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_all.py"), *args], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_until(lambda: any(s == "RUNNING" for _, s in slurm.queue()), 120,
                   "the first array element to run")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert any(s == "PENDING" for _, s in slurm.queue()), slurm.queue()

    rc = within(400, slurm, run_all.main, [*args, "--cluster-config", poll_config(tmp_path)])
    text = "".join(capfd.readouterr())
    assert rc == 0 and "0 failed" in text, text
    wait_until(lambda: not slurm.live(), 180, "the first run's jobs to end")
    statuses = result_statuses(out)
    assert len(statuses) == 2, statuses
    for rid, st in statuses.items():
        assert st.count("done") == 1 and set(st) <= {"done", "skipped"}, (rid, statuses)
    # the first run's array ran on: a copy of a task found it finished (or running) and skipped
    assert any("skipped" in st for st in statuses.values()), statuses
