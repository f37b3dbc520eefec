"""Keep a dask-jobqueue cluster at its ``--jobs`` worker jobs while a grid has tasks left.

A worker job that ends — ``scancel``, a walltime, preemption, a node failure, a job that never
started — leaves Dask's scheduler with fewer workers, and with none left the tasks wait
forever: ``cluster.scale(jobs=N)`` alone does not notice (the cluster still counts the lost job
in its plan), nor does ``cluster.adapt`` (same plan). :class:`JobKeeper` watches the jobs
(SLURM: ``squeue``, see :mod:`ofl_core.batch.slurm`; PBS: the workers the scheduler loses),
removes an ended job from the cluster and asks for a new one. The task that was running there
goes back to Dask's queue (at most ``--retries`` times per task, Dask's ``allowed-failures``);
finished tasks are not redone (their results are already collected, and the worker skips a
task whose outputs are there).

A job that ends before its worker ever connected (a broken ``--job-prologue``, a job
cancelled while queued) is also replaced, but after ``max_failed_starts`` such jobs in a row
the keeper gives up and fails the tasks still pending with the last reason, instead of
submitting jobs forever.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .slurm import SlurmQueue, describe


class JobKeeper:
    """A thread that replaces ended worker jobs of ``cluster`` (a dask-jobqueue cluster)."""

    def __init__(self, cluster: Any, jobs: int, queue: SlurmQueue | None,
                 poll_seconds: float = 5.0, max_failed_starts: int = 3,
                 log: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.jobs = jobs
        self.queue = queue
        self.poll_seconds = poll_seconds
        self.max_failed_starts = max_failed_starts
        self.log = log
        #: worker name → why its job ended (for the error of a task lost with it)
        self.lost: dict[str, str] = {}
        self.replaced = 0
        self.failed_starts = 0
        self.has_pending: Callable[[], bool] = lambda: True
        self.give_up: Callable[[str], None] = lambda reason: None
        self._job_ids: dict[str, str] = {}
        self._logs: dict[str, str] = {}
        self._connected: set[str] = set()
        #: the job ids already reported ended: dask-jobqueue removes an ended job from
        #: ``cluster.workers`` some time after ``scale_down``, and polls come meanwhile
        self._seen_ended: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="ofl-job-keeper")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(10.0, 3 * self.poll_seconds))

    def last_reason(self, worker_name: Any = None) -> str:
        """Why the job of ``worker_name`` (else the latest lost job) ended; '' if none."""
        if worker_name is not None and str(worker_name) in self.lost:
            return self.lost[str(worker_name)]
        return next(reversed(self.lost.values()), "")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - a hiccup (squeue timeout): try again
                self.log(f"job keeper: {type(e).__name__}: {e}")

    def ended_jobs(self) -> dict[str, str]:
        """Worker name → reason, for the cluster's jobs that are over and were not reported
        by an earlier call."""
        live = list(self.cluster.workers.items())
        jobs = {str(n): str(getattr(j, "job_id", "") or "") for n, j in live}
        self._job_ids.update({n: j for n, j in jobs.items() if j})
        self._logs.update({str(n): job_log(j) for n, j in live})
        workers = dict(self.cluster.scheduler_info.get("workers", {}))
        now_connected = {str(w.get("name")) for w in workers.values()}
        if now_connected - self._connected:
            self.failed_starts = 0  # a worker came up: the jobs do start
        self._connected |= now_connected
        ended: dict[str, str] = {}
        if self.queue is not None:
            self.queue.refresh(j for j in jobs.values() if j)
            for name, jid in jobs.items():
                state = self.queue.ended(jid) if jid and jid not in self._seen_ended else None
                if state is not None:
                    ended[name] = describe(jid, state) + self._logs.get(name, "")
                    self._seen_ended.add(jid)
        # jobs the cluster itself dropped after losing their worker (no scheduler query: PBS)
        dropped = {str(n) for n in self.cluster.worker_spec} & set(self._job_ids)
        for name in dropped - set(jobs) - set(ended):
            jid = self._job_ids.get(name, "?")
            if jid in self._seen_ended:
                continue
            ended[name] = f"batch job {jid}: its worker was lost"
            self._seen_ended.add(jid)
        return ended

    def check(self) -> None:
        """One look: replace the jobs that ended (if tasks are pending), or give up."""
        ended = self.ended_jobs()
        if not ended:
            return
        for name, why in ended.items():
            started = name in self._connected
            if not started:
                self.failed_starts += 1
            self.lost[name] = why
            self.log(f"worker job ended: {why}" + ("" if started else
                                                    " (its worker never connected)"))
        self.cluster.sync(self.cluster.scale_down, list(ended))
        if not self.has_pending():
            return
        if self.failed_starts >= self.max_failed_starts:
            reason = (f"no worker job could start: {self.failed_starts} in a row ended before "
                      f"their worker connected (last: {self.last_reason()})")
            self.log(f"giving up: {reason}")
            self.give_up(reason)
            return
        self.replaced += len(ended)
        self.cluster.scale(jobs=self.jobs)
        self.log(f"asked for {len(ended)} new worker job(s) ({self.replaced} replaced so far)")


def job_log(job: Any) -> str:
    """`` [log: <dir>/<name>-<id>.err]`` of a dask-jobqueue job that keeps its logs, else ''."""
    folder, name, jid = (getattr(job, a, None) for a in ("log_directory", "job_name", "job_id"))
    return f" [log: {folder}/{name}-{jid}.err]" if folder and name and jid else ""
