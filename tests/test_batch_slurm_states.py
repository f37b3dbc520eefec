"""Scheduler states without a scheduler: squeue / sacct output parsing, SlurmQueue on fake
``squeue`` / ``sacct`` commands (a cluster without accounting), the submitit watcher's
verdicts (cancelled, walltime, a result written while cancelled) and the dask-jobqueue
JobKeeper on a stand-in cluster. The same paths on a real SLURM: test_batch_slurm.py."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from ofl_core.batch.executors import SubmititExecutor
from ofl_core.batch.keeper import JobKeeper
from ofl_core.batch.slurm import (
    GONE,
    UNKNOWN,
    SchedulerJobError,
    SlurmQueue,
    describe,
    expand_job_ids,
    parse_rows,
)
from ofl_core.batch.tasks import Task, TaskResult


def test_parse_squeue_and_sacct_rows():
    assert expand_job_ids("12_[4-6,9%2]") == ["12_4", "12_5", "12_6", "12_9"]
    assert expand_job_ids("12_3") == ["12_3"] and expand_job_ids("7") == ["7"]
    text = "12_[4-5%2]|PENDING\n12_3|CANCELLED by 0\n12_3.batch|CANCELLED\n13|TIMEOUT\n\n"
    assert parse_rows(text) == {"12_4": "PENDING", "12_5": "PENDING", "12_3": "CANCELLED",
                                "13": "TIMEOUT"}
    assert describe("12_3", "CANCELLED") == "slurm: job 12_3 CANCELLED (scancel or preemption)"
    assert "walltime" in describe("13", "TIMEOUT")
    assert "out of memory" in describe("13", "OUT_OF_MEMORY")
    assert "node failure" in describe("13", "NODE_FAIL")


class Rows(type(Path())):
    """The fake squeue's output file, replaced atomically (squeue never answers half a list)."""

    def write_text(self, text: str) -> None:  # type: ignore[override]
        tmp = self.with_name(self.name + ".tmp")
        Path(tmp).write_text(text)
        os.replace(tmp, self)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """``squeue`` printing the file ``rows`` (``%i|%T`` lines); ``sacct`` failing as on a
    cluster without accounting."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rows = Rows(tmp_path / "rows")
    rows.write_text("")
    (bin_dir / "squeue").write_text(f"#!/bin/sh\ncat {rows}\n")
    (bin_dir / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage "
                                   "is disabled' >&2\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return rows


def test_slurm_queue_without_accounting_notes_once_and_reports_ended_jobs(fake_slurm):
    notes: list[str] = []
    q = SlurmQueue(grace_seconds=0, note=notes.append)
    fake_slurm.write_text("5_0|RUNNING\n5_1|PENDING\n6|RUNNING\n")
    q.refresh(["5_0", "5_1", "6"])
    assert [q.ended(j) for j in ("5_0", "5_1", "6")] == [None, None, None]
    fake_slurm.write_text("5_0|CANCELLED\n6|RUNNING\n")  # 5_1 cancelled while pending
    for _ in range(3):
        q.refresh(["5_0", "5_1", "6", "7"])
    assert q.ended("5_0") == "CANCELLED" and q.ended("5_1") == GONE and q.ended("6") is None
    assert q.ended("7") == UNKNOWN  # never seen, past the grace period
    assert len(notes) == 1 and "squeue" in notes[0] and q.use_sacct is False, notes


class FakeJob:
    def __init__(self, folder: Path, job_id: str, result=None, error: Exception | None = None):
        self.job_id = job_id
        self.paths = SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl",
                                     stderr=folder / f"{job_id}.err")
        self._result, self._error = result, error

    def finish(self) -> None:
        self.paths.result_pickle.write_text("x")

    def result(self):
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self, check: bool = False) -> None:
        pass


def test_submitit_watcher_reports_the_scheduler_reason(fake_slurm, tmp_path):
    task = Task("partitions", {})
    killed = TaskResult(task, "r1", "failed", error="the task process died (killed by signal 15)")
    jobs = [FakeJob(tmp_path, "8_0"),  # cancelled while queued: no result
            FakeJob(tmp_path, "8_1", result=killed),  # cancelled while running
            FakeJob(tmp_path, "8_2", error=RuntimeError("Job not requeued because: timed-out "
                                                        "and not checkpointable.")),
            FakeJob(tmp_path, "8_3", result=TaskResult(task, "r3", "done"))]
    (tmp_path / "8_0.err").write_text("slurmstepd: *** JOB 8 CANCELLED ***\n")
    fake_slurm.write_text("8_0|PENDING\n8_1|RUNNING\n8_2|RUNNING\n8_3|RUNNING\n")
    ex = SubmititExecutor(None, poll_seconds=0.05, queue=SlurmQueue(note=lambda m: None),
                          result_grace=0)
    futs = ex._track(jobs)
    # the results before the final states: a poll in between would see 8_1 CANCELLED with no
    # result (result_grace=0) instead of its result written while it was being cancelled
    for j in jobs[1:]:
        j.finish()
    fake_slurm.write_text("8_0|CANCELLED\n8_1|CANCELLED\n8_2|FAILED\n8_3|COMPLETED\n")
    done, pending = cf.wait(futs, timeout=30)
    ex.shutdown(wait=False)
    assert not pending
    e0 = futs[0].exception()
    assert isinstance(e0, SchedulerJobError) and str(e0) == describe("8_0", "CANCELLED")
    assert "JOB 8 CANCELLED" in e0.detail
    assert futs[1].result().error.startswith("slurm: job 8_1 CANCELLED (scancel or preemption); "
                                             "the task process died")
    e2 = futs[2].exception()
    assert isinstance(e2, SchedulerJobError) and str(e2).startswith("slurm: job 8_2 TIMEOUT "
                                                                    "(walltime")
    assert futs[3].result().status == "done"


class FakeCluster:
    """The parts of a dask-jobqueue cluster that JobKeeper uses."""

    def __init__(self) -> None:
        self.n = 0
        self.worker_spec: dict[str, dict] = {}
        self.workers: dict[str, SimpleNamespace] = {}
        self.scheduler_info: dict = {"workers": {}}
        self.scale(jobs=1)

    def scale(self, jobs: int) -> None:
        while len(self.worker_spec) < jobs:
            name = f"w-{self.n}"
            self.worker_spec[name] = {}
            self.workers[name] = SimpleNamespace(job_id=str(100 + self.n))
            self.n += 1

    async def scale_down(self, names) -> None:
        for n in names:
            self.worker_spec.pop(n, None)
            self.workers.pop(n, None)

    def sync(self, fn, *args):
        return asyncio.run(fn(*args))

    def connect(self, name: str) -> None:
        self.scheduler_info["workers"][f"tcp://{name}"] = {"name": name}


def watching(cluster: FakeCluster) -> tuple[JobKeeper, list[str], list[str]]:
    """A keeper of one job on ``cluster`` that gives up after 2 failed starts; its log lines
    and the reasons it gave up with."""
    logs: list[str] = []
    reasons: list[str] = []
    keeper = JobKeeper(cluster, 1, SlurmQueue(note=lambda m: None), log=logs.append,
                       max_failed_starts=2)
    keeper.give_up = reasons.append
    return keeper, logs, reasons


def test_job_keeper_replaces_ended_jobs_and_gives_up_on_jobs_that_never_start(fake_slurm):
    cluster = FakeCluster()
    keeper, logs, reasons = watching(cluster)
    fake_slurm.write_text("100|RUNNING\n")
    cluster.connect("w-0")
    keeper.check()
    assert list(cluster.workers) == ["w-0"] and not logs
    fake_slurm.write_text("100|CANCELLED\n")  # a worker that ran is cancelled: replaced
    cluster.scheduler_info["workers"].clear()
    keeper.check()
    assert list(cluster.workers) == ["w-1"] and keeper.replaced == 1
    assert keeper.last_reason("w-0") == describe("100", "CANCELLED")
    for jid in ("101", "102"):  # two jobs in a row that never connect: give up
        fake_slurm.write_text(f"{jid}|FAILED\n")
        keeper.check()
    assert keeper.replaced == 2 and len(reasons) == 1, (keeper.replaced, reasons, logs)
    assert reasons[0].startswith("no worker job could start: 2 in a row") and "102 FAILED" in \
        reasons[0]


def test_job_keeper_counts_an_ended_job_once_while_the_cluster_is_still_removing_it(
        fake_slurm):
    """dask-jobqueue drops an ended job from ``cluster.workers`` some time after
    ``scale_down`` (later still on a loaded machine); the keeper polls meanwhile and must not
    replace it again, nor count it twice towards giving up."""

    class SlowCluster(FakeCluster):
        async def scale_down(self, names) -> None:
            for n in names:  # the spec goes at once, the job object only later
                self.worker_spec.pop(n, None)

        def scale(self, jobs: int) -> None:
            if self.n and "w-0" in self.workers:  # dask-jobqueue reuses the worker's name
                return
            super().scale(jobs)

    cluster = SlowCluster()
    keeper, logs, reasons = watching(cluster)
    fake_slurm.write_text("100|CANCELLED\n")  # cancelled while queued: never connected
    for _ in range(3):  # polls before the cluster has removed the job object
        keeper.check()
    assert keeper.replaced == 1 and keeper.failed_starts == 1 and not reasons, logs
    assert sum("worker job ended" in m for m in logs) == 1, logs


def test_a_replacement_worker_job_never_gets_the_lost_workers_name():
    """distributed closes the job that holds a lost worker's name 15 s later if no worker of
    that name is connected: a queued replacement with the same name would be cancelled."""
    pytest.importorskip("dask_jobqueue")
    from ofl_core.batch.jobs import jobqueue_class

    cluster = jobqueue_class("slurm")(cores=1, memory="1GB", processes=1,
                                      scheduler_options={"dashboard_address": None})
    try:
        names = []
        for _ in range(3):  # a job is lost and scaled down, and a new one asked for
            spec = cluster.new_worker_spec()
            names += list(spec)
            cluster.worker_spec.update(spec)
            cluster.worker_spec.pop(names[-1])
        assert len(set(names)) == 3 and names[0] == "SLURMCluster-0", names
        assert type(cluster).__name__ == "SLURMCluster"
    finally:
        cluster.close()


def test_a_task_lost_with_its_worker_too_often_fails_with_the_jobs_reason():
    from ofl_core.batch.executors import DaskExecutor

    class KilledWorker(Exception):  # what distributed raises, as the client sees it
        last_worker = SimpleNamespace(name="SLURMCluster-1", address="tcp://10.0.0.1:1")

    ex = DaskExecutor(client=None)
    plain = KilledWorker("task", "...", 2)
    assert ex.explain(plain) is plain  # no keeper: unchanged
    ex.keeper = SimpleNamespace(last_reason=lambda name: {
        "SLURMCluster-1": describe("41", "TIMEOUT")}.get(name, ""))
    e = ex.explain(plain)
    assert isinstance(e, SchedulerJobError)
    assert str(e).startswith("slurm: job 41 TIMEOUT (walltime") and "KilledWorker" in str(e)
    other = ValueError("x")
    assert ex.explain(other) is other
