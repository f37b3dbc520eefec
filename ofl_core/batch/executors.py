"""Where the tasks of a grid run: every backend is a :class:`concurrent.futures.Executor` that
runs :func:`ofl_core.batch.execute.run_task_spec` on a :class:`~ofl_core.batch.tasks.TaskSpec`.

- ``local``: ``--jobs 1`` runs each task in this process, one after another (the historical
  behaviour of ``run_all.py``); ``--jobs N`` runs N tasks at once, each in its own Python
  process (a thread pool whose threads each wait on one child process);
- ``dask``: a ``distributed`` client on a ``LocalCluster`` bound to 127.0.0.1, an existing
  scheduler (``scheduler_address`` / ``scheduler_file``), or SLURM / PBS jobs started through
  dask-jobqueue; failed attempts and lost workers are retried ``retries`` times;
- ``submitit``: one SLURM job array (one array element per task), or submitit's local backend.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .config import ExecutorConfig, walltime_minutes
from .gpus import NoGpuError, visible_gpus
from .jobs import jobqueue_class, jobqueue_kwargs, submitit_folder, submitit_slurm_parameters
from .optional import require
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


class DaskExecutor(cf.Executor):
    """A ``distributed`` client as a concurrent.futures executor (``client.get_executor``),
    closing the client and the cluster it started on shutdown."""

    def __init__(self, client: Any, cluster: Any = None, retries: int = 0,
                 resources: Mapping[str, float] | None = None) -> None:
        self.client = client
        self.cluster = cluster
        kw: dict[str, Any] = {"pure": False, "retries": retries}
        if resources:
            kw["resources"] = dict(resources)
        self._ex = client.get_executor(**kw)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        return self._ex.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        try:
            self._ex.shutdown(wait=wait and not cancel_futures)
        finally:
            self.client.close()
            if self.cluster is not None:
                self.cluster.close()


class SubmititExecutor(cf.Executor):
    """submitit jobs as concurrent.futures: :meth:`submit_tasks` sends one job array; a
    watcher thread resolves each future when its job ends."""

    def __init__(self, executor: Any, poll_seconds: float = 5.0) -> None:
        self.executor = executor
        self.poll_seconds = poll_seconds
        self.jobs: list[Any] = []
        self._pending: list[tuple[Any, cf.Future]] = []
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
            for job, fut in pending:
                try:
                    if not job.done():
                        continue
                except Exception:  # noqa: BLE001 - e.g. sacct briefly unavailable: ask again
                    continue
                try:
                    fut.set_result(job.result())
                except Exception as e:  # noqa: BLE001 - a lost job marks its task failed
                    fut.set_exception(e)
                with self._lock:
                    self._pending.remove((job, fut))
            self._stop.wait(self.poll_seconds)

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
        return _make_dask(config)
    return _make_submitit(config, out)


def _make_dask(config: ExecutorConfig) -> DaskExecutor:
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
            cluster = jobqueue_class(config.cluster)(**jobqueue_kwargs(config))
            cluster.scale(jobs=config.jobs)
        else:
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
    return SubmititExecutor(ex, config.poll_seconds)
