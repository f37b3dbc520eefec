"""Where the tasks of a grid run: every backend is a :class:`concurrent.futures.Executor` that
runs :func:`ofl_core.batch.execute.run_task_spec` on a :class:`~ofl_core.batch.tasks.TaskSpec`.

- ``local``: ``--jobs 1`` runs each task in this process, one after another (the historical
  behaviour of ``run_all.py``); ``--jobs N`` runs N tasks at once, each in its own Python
  process (a thread pool whose threads each wait on one child process);
- ``dask``: a ``distributed`` client on a ``LocalCluster`` bound to 127.0.0.1, an existing
  scheduler (``scheduler_address`` / ``scheduler_file``), or SLURM / PBS jobs started through
  dask-jobqueue; failed attempts and lost workers are retried ``retries`` times, and worker
  jobs that end (cancelled, walltime, preempted) are replaced (:mod:`ofl_core.batch.keeper`);
- ``submitit``: one SLURM job array (one array element per task), or submitit's local backend;
  job states from ``squeue`` / ``sacct`` (:mod:`ofl_core.batch.slurm`), so an element that
  ends without a result fails its task with the scheduler's reason.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import ExecutorConfig, walltime_minutes
from .execute import STOP_REQUEST
from .gpus import NoGpuError, visible_gpus
from .jobs import jobqueue_class, jobqueue_kwargs, submitit_folder, submitit_slurm_parameters
from .keeper import JobKeeper
from .optional import require
from .slurm import ACTIVE, SchedulerJobError, SlurmQueue, describe, log_tail
from .tasks import TaskResult, TaskSpec


class InlineExecutor(cf.Executor):
    """Runs each submitted call at once, in this thread (``local --jobs 1``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - delivered through the future
            fut.set_exception(e)
        return fut


class LocalPoolExecutor(cf.ThreadPoolExecutor):
    """``local --jobs N``: N threads, each running one isolated task (a child process) at a
    time. Threads, not a process pool: a task that kills its process cannot break the pool."""

    def __init__(self, jobs: int) -> None:
        super().__init__(max_workers=jobs, thread_name_prefix="ofl-task")
        self.stopping = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        return super().submit(_with_stop_request, self.stopping, fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """``cancel_futures`` (an interrupted run): also stop the running tasks — their child
        processes are killed and a task waiting for its lock gives up — so that Python's join
        of the pool's threads at exit does not wait for them to finish."""
        if cancel_futures:
            self.stopping.set()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def _with_stop_request(stop: threading.Event, fn: Callable[..., Any], /, *args: Any,
                       **kwargs: Any) -> Any:
    """Run ``fn`` with ``stop`` as the task's :data:`~ofl_core.batch.execute.STOP_REQUEST`."""
    token = STOP_REQUEST.set(stop)
    try:
        return fn(*args, **kwargs)
    finally:
        STOP_REQUEST.reset(token)


class DaskExecutor(cf.Executor):
    """A ``distributed`` client as a concurrent.futures executor, closing the client and the
    cluster it started on shutdown.

    A task's Dask future is released as soon as its result is in, so a finished task is never
    recomputed when its worker is lost later. With a dask-jobqueue cluster, ``keeper``
    (:class:`~ofl_core.batch.keeper.JobKeeper`) replaces worker jobs that end while tasks are
    pending, and a task lost with its worker too often fails with the job's reason."""

    def __init__(self, client: Any, cluster: Any = None, retries: int = 0,
                 resources: Mapping[str, float] | None = None,
                 keeper: JobKeeper | None = None) -> None:
        self.client = client
        self.cluster = cluster
        self.keeper = keeper
        self._kw: dict[str, Any] = {"pure": False, "retries": retries}
        if resources:
            self._kw["resources"] = dict(resources)
        self._pending: dict[cf.Future, Any] = {}
        self._lock = threading.Lock()
        if keeper is not None:
            keeper.has_pending = lambda: bool(self._pending)
            keeper.give_up = self.fail_pending
            keeper.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        outer: cf.Future = cf.Future()
        dfut = self.client.submit(fn, *args, **self._kw, **kwargs)
        with self._lock:
            self._pending[outer] = dfut
        dfut.add_done_callback(lambda f: self._deliver(f, outer))
        return outer

    def _deliver(self, dfut: Any, outer: cf.Future) -> None:
        """Hand a finished Dask future's outcome to ``outer``, then release it."""
        with self._lock:
            if self._pending.pop(outer, None) is None:
                return  # already failed by fail_pending
        try:
            if dfut.status == "cancelled":
                outer.cancel()
                outer.set_running_or_notify_cancel()
            else:
                outer.set_result(dfut.result())
        except Exception as e:  # noqa: BLE001 - delivered through the future
            outer.set_exception(self.explain(e))
        finally:
            dfut.release()

    def explain(self, e: BaseException) -> BaseException:
        """A task lost with its worker too often (``KilledWorker``): the lost job's reason."""
        if self.keeper is None or type(e).__name__ != "KilledWorker":
            return e
        worker = getattr(getattr(e, "last_worker", None), "name", None)
        why = self.keeper.last_reason(worker)
        if not why:
            return e
        msg = " ".join(str(e).split())[:300]
        return SchedulerJobError(f"{why}; the task lost its worker too often (KilledWorker: "
                                 f"{msg})")

    def fail_pending(self, reason: str | None = None) -> None:
        """Fail every task not finished yet with ``reason`` (the keeper gave up), or cancel
        them (None: the run was interrupted)."""
        with self._lock:
            items = list(self._pending.items())
            self._pending.clear()
        for outer, dfut in items:
            if reason is None:
                outer.cancel()
                outer.set_running_or_notify_cancel()
            else:
                outer.set_exception(SchedulerJobError(reason))
            dfut.cancel()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            if cancel_futures:
                self.fail_pending()
            elif wait:
                cf.wait(list(self._pending))
        finally:
            if self.keeper is not None:
                self.keeper.stop()
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


class SubmititExecutor(cf.Executor):
    """submitit jobs as concurrent.futures: :meth:`submit_tasks` sends one job array; a
    watcher thread resolves each future when its job ends.

    On SLURM (``queue`` given) a job is over when its result file is there or when ``queue``
    (:class:`~ofl_core.batch.slurm.SlurmQueue`: ``squeue``, and ``sacct`` where the cluster keeps
    accounting) says it ended; submitit's own status calls (``sacct`` only) are not used, so a
    cluster without accounting gives no warning flood, and a job that ended without a result
    (cancelled, walltime, out of memory, node failure) fails its task with that reason instead
    of being waited on forever; a failed task waits (``settle_seconds`` at most) for its job's
    final state, which then leads its error. ``queue=None``: submitit's local backend."""

    def __init__(self, executor: Any, poll_seconds: float = 5.0,
                 queue: SlurmQueue | None = None, result_grace: float = 10.0,
                 settle_seconds: float = 60.0) -> None:
        self.executor = executor
        self.poll_seconds = poll_seconds
        self.queue = queue
        self.result_grace = result_grace
        self.settle_seconds = settle_seconds
        self.jobs: list[Any] = []
        self._pending: list[tuple[Any, cf.Future]] = []
        self._ended_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        return self._track([self.executor.submit(fn, *args, **kwargs)])[0]

    def submit_tasks(self, fn: Callable[[TaskSpec], TaskResult],
                     specs: Sequence[TaskSpec]) -> list[cf.Future]:
        """All ``specs`` as one job array (SLURM ``--array=0-(n-1)%parallelism``)."""
        if len(specs) == 1:
            return [self.submit(fn, specs[0])]
        return self._track(self.executor.map_array(fn, list(specs)))

    def _track(self, jobs: Sequence[Any]) -> list[cf.Future]:
        futs: list[cf.Future] = [cf.Future() for _ in jobs]
        with self._lock:
            self.jobs.extend(jobs)
            self._pending.extend(zip(jobs, futs, strict=True))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="ofl-submitit-watch")
                self._thread.start()
        return futs

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                pending = list(self._pending)
            if pending and self.queue is not None:
                try:
                    self.queue.refresh(job.job_id for job, _ in pending)
                except Exception:  # noqa: BLE001 - the scheduler did not answer: ask again
                    pass
            for job, fut in pending:
                outcome = self._outcome(job)
                if outcome is None:
                    continue
                ok, value = outcome
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
                with self._lock:
                    self._pending.remove((job, fut))
            self._stop.wait(self.poll_seconds)

    def _outcome(self, job: Any) -> tuple[bool, Any] | None:
        """``(True, result)`` / ``(False, exception)`` for a job that is over, else None."""
        try:
            if self.queue is None:
                if not job.done():
                    return None
            elif not job.paths.result_pickle.exists():
                state = self.queue.ended(job.job_id)
                if state is None:
                    return None
                first = self._ended_at.setdefault(job.job_id, time.monotonic())
                if time.monotonic() - first < self.result_grace:
                    return None  # its result file may still be on its way (shared filesystem)
                return False, SchedulerJobError(describe(job.job_id, state),
                                                log_tail(job.paths.stderr))
        except Exception:  # noqa: BLE001 - e.g. a file system hiccup: look again next time
            return None
        try:
            value, ok = job.result(), True
        except Exception as e:  # noqa: BLE001 - a failed job marks its task failed
            value, ok = e, False
        failed = not ok or (isinstance(value, TaskResult) and value.status == "failed")
        if failed and self._still_ending(job):
            return None  # wait for the job's final state: it says why the task failed
        return (True, self._annotate(job, value)) if ok else (False, self._explain(job, value))

    def _still_ending(self, job: Any) -> bool:
        """Whether the job is still listed as running / completing (a cancelled job is
        COMPLETING until its processes are gone), for at most ``settle_seconds``."""
        if self.queue is None or self.queue.state(job.job_id) not in ACTIVE:
            return False
        first = self._ended_at.setdefault(job.job_id, time.monotonic())
        return time.monotonic() - first < self.settle_seconds

    def _bad_end(self, job: Any) -> str | None:
        """The job's final state when it ended badly (cancelled, walltime, ...), else None."""
        state = self.queue.state(job.job_id) if self.queue is not None else None
        return state if state and state not in ACTIVE and state != "COMPLETED" else None

    def _annotate(self, job: Any, res: Any) -> Any:
        """A failed task whose job was cancelled / timed out says so first (its process was
        killed by the scheduler's signal, and submitit still wrote its result)."""
        if isinstance(res, TaskResult) and res.status == "failed":
            state = self._bad_end(job)
            if state:
                res.error = f"{describe(job.job_id, state)}; {res.error}"
        return res

    def _explain(self, job: Any, e: BaseException) -> BaseException:
        """submitit's error for a job that ended early, as the scheduler's reason."""
        text = str(e)
        rows = [ln for ln in text.splitlines() if ln.strip() and set(ln.strip()) != {"-"}]
        detail = "\n".join(rows[-8:])
        if "timed-out" in text:  # submitit's USR2 handler: the walltime is (nearly) over
            return SchedulerJobError(describe(job.job_id, "TIMEOUT"), detail)
        state = self._bad_end(job)
        if state:
            return SchedulerJobError(describe(job.job_id, state), detail)
        return e

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                for job, fut in self._pending:
                    job.cancel(check=False)
                    fut.cancel()
        if wait and not cancel_futures:
            cf.wait([f for _, f in self._pending])
        self._stop.set()


def make_executor(config: ExecutorConfig, out: str | os.PathLike = ".") -> cf.Executor:
    """The executor ``config`` asks for (starting its cluster, if any)."""
    if config.executor == "local":
        return LocalPoolExecutor(config.jobs) if config.isolate else InlineExecutor()
    if config.executor == "dask":
        return _make_dask(config, out)
    return _make_submitit(config, out)


def _make_dask(config: ExecutorConfig, out: str | os.PathLike = ".") -> DaskExecutor:
    require(("dask", "distributed"), "dask")
    import dask
    from distributed import Client

    resources = {"GPU": config.gpus_per_task} if config.gpus_per_task else None
    if config.scheduler_address:
        return DaskExecutor(Client(config.scheduler_address), None, config.retries, resources)
    if config.scheduler_file:
        return DaskExecutor(Client(scheduler_file=config.scheduler_file), None,
                            config.retries, resources)
    # allowed-failures: how often a task may lose its worker (killed, OOM) before it fails
    with dask.config.set({"distributed.scheduler.allowed-failures": config.retries}):
        if config.cluster in ("slurm", "pbs"):
            require(("dask_jobqueue",), "dask --cluster " + config.cluster)
            kw = jobqueue_kwargs(config)
            kw.setdefault("log_directory", str(Path(out).resolve() / "dask-jobs"))
            cluster = jobqueue_class(config.cluster)(**kw)
            cluster.scale(jobs=config.jobs)
            queue = SlurmQueue() if config.cluster == "slurm" else None
            keeper = JobKeeper(cluster, config.jobs, queue, config.poll_seconds,
                               max_failed_starts=config.retries + 1)
            return DaskExecutor(Client(cluster), cluster, config.retries, resources, keeper)
        cluster = _local_cluster(config)
    return DaskExecutor(Client(cluster), cluster, config.retries, resources)


def _local_cluster(config: ExecutorConfig) -> Any:
    """A ``LocalCluster`` on 127.0.0.1: ``jobs`` one-thread worker processes; with GPUs, one
    worker with ``jobs`` threads and ``GPU=<visible GPUs>`` so its pool gives each task its own."""
    import logging

    from distributed import LocalCluster

    kw: dict[str, Any] = {"host": "127.0.0.1", "dashboard_address": None, "processes": True,
                          "silence_logs": logging.ERROR}
    if config.gpus_per_task:
        n = len(visible_gpus())
        if n < config.gpus_per_task:
            raise NoGpuError(f"--gpus-per-task {config.gpus_per_task} but this machine "
                             f"sees {n} GPU(s)")
        kw.update(n_workers=1, threads_per_worker=config.jobs, resources={"GPU": n})
    else:
        kw.update(n_workers=config.jobs, threads_per_worker=1)
    kw.update(config.cluster_kwargs)
    return LocalCluster(**kw)


def _make_submitit(config: ExecutorConfig, out: str | os.PathLike) -> SubmititExecutor:
    require(("submitit",), "submitit")
    import submitit

    folder = submitit_folder(config, out)
    if config.cluster == "local":
        ex = submitit.LocalExecutor(folder=folder, python=config.python)
        params: dict[str, Any] = {"timeout_min": walltime_minutes(config.walltime),
                                  "gpus_per_node": config.gpus_per_task}
        if config.job_prologue:
            params["setup"] = list(config.job_prologue)
        ex.update_parameters(**params, **dict(config.cluster_kwargs))
    else:
        ex = submitit.SlurmExecutor(folder=folder, python=config.python)
        ex.update_parameters(**submitit_slurm_parameters(config))
        return SubmititExecutor(ex, config.poll_seconds, SlurmQueue())
    return SubmititExecutor(ex, config.poll_seconds)
