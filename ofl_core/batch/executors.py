"""Run a grid of notebook tasks on one executor: local (in-process or a pool), Dask, or SLURM.

Every backend is a :class:`concurrent.futures.Executor` that runs :func:`run_task_spec` on a
:class:`TaskSpec` and returns a :class:`ofl_core.runner.TaskResult`:

- ``local``: ``--jobs 1`` runs each task in this process, one after another (the historical
  behaviour of ``run_all.py``); ``--jobs N`` runs N tasks at once, each in its own Python
  process (a thread pool whose threads each wait on one child process);
- ``dask``: a ``distributed`` client on a ``LocalCluster`` bound to 127.0.0.1, an existing
  scheduler (``scheduler_address`` / ``scheduler_file``), or SLURM / PBS jobs started through
  dask-jobqueue; failed attempts and lost workers are retried ``retries`` times;
- ``submitit``: one SLURM job array (one array element per task), or submitit's local backend.

A task keeps the runner's layout: ``<out>/runs/<notebook>/<run_id>.ipynb`` plus the sidecar
``<run_id>.json`` written last, both atomically; ``run_id`` hashes the notebook's cells and the
parameters. A task whose sidecar is present and valid is skipped (before submission, and again on
the worker, so a retried or duplicated task never runs twice after it finished); anything else is
(re)done. A failing notebook, a dead kernel, a cell timeout or the per-task wall-clock limit
marks that task failed with its reason; it never stops the batch.

Isolated tasks (every backend except ``local --jobs 1``) run in a child Python process with
``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` set to ``threads`` (default: the machine's cores
divided by the tasks running at once): several notebook kernels each starting PyTorch's default
thread pool oversubscribe the cores (4–7x slower on 2 cores). A task that needs GPUs takes them
from the worker's pool of visible devices (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi``) and
sees only them (``CUDA_VISIBLE_DEVICES`` set in its kernel), so ``device="cuda"`` is its own GPU.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runner import (
    NOTEBOOK_DIR,
    Task,
    TaskResult,
    execute_task,
    figures_dir_for,
    is_finished,
    task_paths,
)

EXECUTORS = ("local", "dask", "submitit")
#: ``cluster`` values each executor accepts (None: its default).
CLUSTERS = {"local": (None, "local"), "dask": (None, "local", "slurm", "pbs"),
            "submitit": (None, "slurm", "local")}
INSTALL_HINT = "pip install -e '.[cluster]'"
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class MissingDependencyError(ImportError):
    """An executor's optional dependency is not installed (the message says how to get it)."""


# --------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class ExecutorConfig:
    """Where and how the tasks of a grid run (``run_all.py``'s executor options).

    ``cores``, ``memory``, ``walltime``, ``partition``, ``account``, ``job_directives`` and
    ``job_prologue`` describe one batch job: one dask-jobqueue worker job, or one array element
    of a submitit job array. ``gpus_per_task`` is what one task needs (0 or 1 in practice);
    ``gpus_per_job`` (dask-jobqueue) how many GPUs one worker job asks for (default
    ``gpus_per_task``), so a job runs ``gpus_per_job // gpus_per_task`` tasks at once.
    ``cluster_kwargs`` are passed through unchanged to ``LocalCluster`` / the dask-jobqueue
    cluster / submitit's ``update_parameters`` (a YAML-only escape hatch).
    """

    executor: str = "local"
    jobs: int = 1
    cluster: str | None = None
    scheduler_address: str | None = None
    scheduler_file: str | None = None
    cores: int = 4
    memory: str = "16GB"
    walltime: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    gpus_per_task: int = 0
    gpus_per_job: int | None = None
    job_directives: tuple[str, ...] = ()
    job_prologue: tuple[str, ...] = ()
    array_parallelism: int | None = None
    retries: int = 2
    task_timeout: float | None = None
    cell_timeout: float | None = None
    threads_per_task: int | None = None
    folder: str | None = None
    python: str | None = None
    poll_seconds: float = 5.0
    cluster_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS} (got {self.executor!r})")
        if self.cluster not in CLUSTERS[self.executor]:
            ok = [c for c in CLUSTERS[self.executor] if c]
            raise ValueError(f"--cluster {self.cluster} does not go with --executor "
                             f"{self.executor} (choose from {ok})")
        remote = self.scheduler_address or self.scheduler_file
        if remote and (self.executor != "dask" or self.cluster is not None):
            raise ValueError("--scheduler-address/--scheduler-file need --executor dask "
                             "and no --cluster")
        if self.scheduler_address and self.scheduler_file:
            raise ValueError("give --scheduler-address or --scheduler-file, not both")
        for name in ("jobs", "cores"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1")
        if self.gpus_per_task < 0 or self.retries < 0:
            raise ValueError("gpus_per_task and retries must be ≥ 0")
        if self.threads_per_task is not None and self.threads_per_task < 1:
            raise ValueError("threads_per_task must be ≥ 1")
        for name in ("task_timeout", "cell_timeout"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"{name} must be > 0 seconds")
        walltime_minutes(self.walltime)  # validates
        memory_gb(self.memory)

    @property
    def jobs_gpus(self) -> int:
        """GPUs one dask-jobqueue worker job asks for."""
        return self.gpus_per_job if self.gpus_per_job is not None else self.gpus_per_task

    @property
    def isolate(self) -> bool:
        """Whether tasks run in a child process (all but plain ``local --jobs 1``)."""
        return not (self.executor == "local" and self.jobs == 1 and self.task_timeout is None
                    and self.threads_per_task is None and self.gpus_per_task == 0)

    def threads(self) -> int | None:
        """Intra-op threads (``OMP_NUM_THREADS``) each isolated task gets; None: unchanged."""
        if self.threads_per_task is not None:
            return self.threads_per_task
        cpus = os.cpu_count() or 1
        if self.executor == "submitit":
            return self.cores
        if self.cluster in ("slurm", "pbs"):
            per_job = self.jobs_gpus // self.gpus_per_task if self.gpus_per_task else self.cores
            return max(1, self.cores // max(1, per_job))
        if self.executor == "dask" and (self.scheduler_address or self.scheduler_file):
            return None  # unknown workers: the user says (--threads-per-task)
        return max(1, cpus // self.jobs) if self.isolate else None


def config_fields() -> tuple[str, ...]:
    """Names an executor YAML file (``--cluster-config``) may set."""
    return tuple(f.name for f in dataclasses.fields(ExecutorConfig))


def make_config(*layers: Mapping[str, Any]) -> ExecutorConfig:
    """An :class:`ExecutorConfig` from mappings applied in order (later wins; None ignored)."""
    merged: dict[str, Any] = {}
    names = set(config_fields())
    for layer in layers:
        bad = sorted(set(layer) - names)
        if bad:
            raise ValueError(f"unknown executor setting(s) {bad}; known: {sorted(names)}")
        merged.update({k: v for k, v in layer.items() if v is not None})
    for k in ("job_directives", "job_prologue"):
        if k in merged:
            v = merged[k]
            merged[k] = (v,) if isinstance(v, str) else tuple(v)
    return ExecutorConfig(**merged)


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The settings of an executor YAML file (``--cluster-config``): keys as
    :class:`ExecutorConfig`'s fields, dashes allowed (``gpus-per-task: 1``)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: an executor config maps setting names to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def walltime_minutes(walltime: str | int | float) -> int:
    """Minutes (rounded up) in a SLURM time: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``,
    ``D-HH:MM``, ``D-HH:MM:SS``, or a number of minutes."""
    if isinstance(walltime, int | float):
        return max(1, int(-(-float(walltime) // 1)))
    text = str(walltime).strip()
    try:
        days, _, rest = text.rpartition("-")
        parts = [int(x) for x in rest.split(":")]
        if len(parts) > 3 or min(parts) < 0:
            raise ValueError
        if days:  # D-HH[:MM[:SS]]
            h, m, sec = (parts + [0, 0])[:3]
            secs = int(days) * 86400 + h * 3600 + m * 60 + sec
        else:  # MM, MM:SS or HH:MM:SS
            h, m, sec = ([0, 0] + parts)[-3:] if len(parts) == 3 else (0, *(parts + [0])[:2])
            secs = h * 3600 + m * 60 + sec
    except ValueError:
        raise ValueError(f"walltime {walltime!r}: use a SLURM time (MM, HH:MM:SS, "
                         "D-HH:MM:SS) or a number of minutes") from None
    return max(1, -(-secs // 60))


def walltime_hms(walltime: str | int | float) -> str:
    """``walltime`` as ``HH:MM:SS`` (what SLURM's ``-t`` and PBS's ``walltime`` accept)."""
    minutes = walltime_minutes(walltime)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def memory_gb(memory: str | int | float) -> float:
    """Gigabytes (10⁹ bytes; ``GiB`` is 2³⁰) in a memory string such as ``"16GB"``."""
    if isinstance(memory, int | float):
        return float(memory)
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(i?)b?\s*", str(memory).lower())
    if not m:
        raise ValueError(f"memory {memory!r}: use e.g. 16GB, 500MB or 1.5TB")
    num, unit, binary = float(m.group(1)), m.group(2), m.group(3)
    power = {"": 3, "k": 1, "m": 2, "g": 3, "t": 4}[unit]
    return num * (1024 if binary else 1000) ** power / 1e9


# --------------------------------------------------------------------------------------------
# one task


@dataclass(frozen=True)
class TaskSpec:
    """Everything a worker needs to run one task (plain data; pickled to remote workers)."""

    task: Task
    run_id: str
    out: str
    figures_dir: str
    notebook_dir: str = str(NOTEBOOK_DIR)
    cell_timeout: float | None = None
    task_timeout: float | None = None
    threads: int | None = None
    gpus: int = 0
    isolate: bool = False
    resume: bool = True

    @property
    def label(self) -> str:
        return f"{self.task.notebook} {self.run_id}"

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "task": {
            "notebook": self.task.notebook, "parameters": self.task.parameters}})

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        d = json.loads(text)
        return cls(**{**d, "task": Task(d["task"]["notebook"], d["task"]["parameters"])})


def result_to_dict(res: TaskResult) -> dict:
    """A :class:`TaskResult` as plain JSON data."""
    return {**dataclasses.asdict(res), "task": {"notebook": res.task.notebook,
                                                "parameters": res.task.parameters}}


def result_from_dict(d: dict) -> TaskResult:
    return TaskResult(**{**d, "task": Task(d["task"]["notebook"], d["task"]["parameters"])})


def make_specs(
    tasks: Sequence[Task], out: str | os.PathLike, config: ExecutorConfig,
    notebook_dir: Path = NOTEBOOK_DIR, resume: bool = True,
) -> list[TaskSpec]:
    """One :class:`TaskSpec` per task (absolute paths: remote workers see the same files)."""
    out = Path(out).resolve()
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.notebook] = counts.get(t.notebook, 0) + 1
    specs = []
    for t in tasks:
        rid = t.run_id(notebook_dir)
        fig = figures_dir_for(out, t, rid, counts[t.notebook] == 1)
        specs.append(TaskSpec(
            task=t, run_id=rid, out=str(out), figures_dir=str(fig),
            notebook_dir=str(Path(notebook_dir).resolve()), cell_timeout=config.cell_timeout,
            task_timeout=config.task_timeout, threads=config.threads(),
            gpus=config.gpus_per_task, isolate=config.isolate, resume=resume))
    return specs


def spec_finished(spec: TaskSpec) -> bool:
    """Whether the task's sidecar is present and valid (and its notebook is there)."""
    return is_finished(Path(spec.out), spec.task, spec.run_id)


def run_task_spec(spec: TaskSpec) -> TaskResult:
    """Run one task where this function is called (a worker); never raises for a bad notebook.

    Skips a task that finished meanwhile (a retry, a duplicate). Isolated tasks run in a child
    process with the task's thread count and GPUs, killed at ``task_timeout``.
    """
    if spec.resume and spec_finished(spec):
        return TaskResult(spec.task, spec.run_id, "skipped")
    if not spec.isolate:
        return execute_task(spec.task, Path(spec.out), Path(spec.figures_dir),
                            Path(spec.notebook_dir), spec.cell_timeout)
    try:
        with _GPU_POOL.take(spec.gpus) as devices:
            return _run_in_child(spec, task_env(spec.threads, devices))
    except NoGpuError as e:
        return TaskResult(spec.task, spec.run_id, "failed", error=str(e))


def task_env(threads: int | None, devices: Sequence[str] | None,
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a task's child process (and so of its notebook kernel)."""
    env = dict(os.environ if base is None else base)
    pkg_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    if threads is not None:
        env.update({k: str(threads) for k in _THREAD_VARS})
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return env


def _run_in_child(spec: TaskSpec, env: dict[str, str]) -> TaskResult:
    """Execute ``spec`` in ``python -m ofl_core.executors``; kill it at ``task_timeout``.

    The spec, the result and the child's (and its kernel's) output go through files, not pipes,
    so nothing waits on a pipe that a lingering grandchild still holds open.
    """
    env = {**env, "OFL_TASK_PARENT_PID": str(os.getpid())}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ofl-task-") as tmp:
        spec_file, result_file, log_file = (Path(tmp) / n for n in
                                            ("spec.json", "result.json", "log.txt"))
        spec_file.write_text(spec.to_json())
        cmd = [sys.executable, "-m", "ofl_core.executors", "--run-task", str(spec_file),
               str(result_file)]
        with open(log_file, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env)
            try:
                proc.wait(timeout=spec.task_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # its kernel exits by itself once its parent is gone
                proc.wait()
                _keep_partial_notebook(spec, proc.pid)
                return TaskResult(spec.task, spec.run_id, "failed", time.perf_counter() - t0,
                                  f"timeout: the task ran past its limit of "
                                  f"{spec.task_timeout:g} s (--task-timeout) and was killed")
            except BaseException:
                proc.kill()
                raise
        if result_file.is_file():
            return result_from_dict(json.loads(result_file.read_text()))
        lines = log_file.read_text(errors="replace").strip().splitlines()
    _keep_partial_notebook(spec, proc.pid)
    tail = " | ".join(ln for ln in lines[-3:])[-500:]
    how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
           else f"exit status {proc.returncode}")
    return TaskResult(spec.task, spec.run_id, "failed", time.perf_counter() - t0,
                      f"the task process died ({how}): {tail or 'no output'}")


def _keep_partial_notebook(spec: TaskSpec, pid: int) -> None:
    """Move a killed child's half-written notebook to ``<run_id>.failed.ipynb``."""
    nb_out, _ = task_paths(Path(spec.out), spec.task, spec.run_id)
    tmp = nb_out.with_name(f".{spec.run_id}.{pid}.tmp.ipynb")
    if tmp.exists():
        os.replace(tmp, nb_out.with_name(f"{spec.run_id}.failed.ipynb"))


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the process that started us dies (a killed dask worker or
    run_all.py), so no task outlives its worker; the kernel then exits on its own."""
    parent = int(os.environ.get("OFL_TASK_PARENT_PID", "0"))
    if not sys.platform.startswith("linux") or not parent:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _child_main(spec_file: str, result_file: str) -> int:
    """Entry point of a task's child process: read the spec, run it, write the result."""
    _die_with_parent()
    spec = TaskSpec.from_json(Path(spec_file).read_text())
    res = execute_task(spec.task, Path(spec.out), Path(spec.figures_dir),
                       Path(spec.notebook_dir), spec.cell_timeout)
    tmp = Path(f"{result_file}.tmp")
    tmp.write_text(json.dumps(result_to_dict(res)))
    os.replace(tmp, result_file)
    return 0


# --------------------------------------------------------------------------------------------
# GPUs


class NoGpuError(RuntimeError):
    """A task asked for more GPUs than its worker can see."""


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [x.strip() for x in out.splitlines() if x.strip()]


class GpuPool:
    """The visible GPUs of one worker process, handed out to its concurrent tasks."""

    def __init__(self, devices: Sequence[str] | None = None) -> None:
        self._cond = threading.Condition()
        self._free: list[str] | None = list(devices) if devices is not None else None
        self._total = len(self._free) if self._free is not None else 0

    @contextmanager
    def take(self, n: int) -> Iterator[list[str] | None]:
        """``n`` GPUs for the duration (waits while others hold them); None when ``n`` is 0."""
        if n <= 0:
            yield None
            return
        with self._cond:
            if self._free is None:
                self._free = visible_gpus()
                self._total = len(self._free)
            if n > self._total:
                raise NoGpuError(f"the task needs {n} GPU(s) but its worker sees "
                                 f"{self._total} (CUDA_VISIBLE_DEVICES / nvidia-smi)")
            while len(self._free) < n:
                self._cond.wait()
            got, self._free = self._free[:n], self._free[n:]
        try:
            yield got
        finally:
            with self._cond:
                self._free.extend(got)
                self._cond.notify_all()


_GPU_POOL = GpuPool()


# --------------------------------------------------------------------------------------------
# executors


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


def _require(modules: Sequence[str], executor: str) -> None:
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError:
            raise MissingDependencyError(
                f"--executor {executor} needs the optional package {m!r}: {INSTALL_HINT}"
            ) from None


def make_executor(config: ExecutorConfig, out: str | os.PathLike = ".") -> cf.Executor:
    """The executor ``config`` asks for (starting its cluster, if any)."""
    if config.executor == "local":
        return LocalPoolExecutor(config.jobs) if config.isolate else InlineExecutor()
    if config.executor == "dask":
        return _make_dask(config)
    return _make_submitit(config, out)


def _make_dask(config: ExecutorConfig) -> DaskExecutor:
    _require(("dask", "distributed"), "dask")
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
            _require(("dask_jobqueue",), "dask --cluster " + config.cluster)
            cluster = _jobqueue_class(config.cluster)(**jobqueue_kwargs(config))
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


def _jobqueue_class(cluster: str) -> Any:
    from dask_jobqueue import PBSCluster, SLURMCluster

    return {"slurm": SLURMCluster, "pbs": PBSCluster}[cluster]


def jobqueue_kwargs(config: ExecutorConfig) -> dict[str, Any]:
    """Keyword arguments of the dask-jobqueue cluster: one worker process per job with
    ``cores`` threads; GPUs as ``--gres=gpu:N`` (SLURM) or ``ngpus=N`` (PBS Pro ``select``)
    and declared to the scheduler as the worker resource ``GPU=N``."""
    gpus = config.jobs_gpus
    directives = list(config.job_directives)
    kw: dict[str, Any] = {
        "cores": config.cores, "memory": config.memory, "processes": 1,
        "walltime": walltime_hms(config.walltime), "queue": config.partition,
        "account": config.account, "job_script_prologue": list(config.job_prologue),
        "python": config.python or sys.executable,
    }
    if gpus:
        kw["worker_extra_args"] = ["--resources", f"GPU={gpus}"]
        if config.cluster == "slurm":
            directives.insert(0, f"--gres=gpu:{gpus}")
        else:
            kw["resource_spec"] = (f"select=1:ncpus={config.cores}:ngpus={gpus}"
                                   f":mem={config.memory}")
    kw["job_extra_directives"] = directives
    kw.update(config.cluster_kwargs)
    return kw


def _make_submitit(config: ExecutorConfig, out: str | os.PathLike) -> SubmititExecutor:
    _require(("submitit",), "submitit")
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


def submitit_folder(config: ExecutorConfig, out: str | os.PathLike) -> str:
    """submitit's log/pickle folder (``%j``: the job id)."""
    return config.folder or str(Path(out).resolve() / "submitit" / "%j")


def _directive_params(directives: Sequence[str]) -> dict[str, Any]:
    """``["--constraint=a100", "--qos high", "--exclusive"]`` → sbatch parameters."""
    params: dict[str, Any] = {}
    for d in directives:
        m = re.fullmatch(r"\s*-*([^=\s]+)(?:(?:=|\s+)(.*))?", d)
        if not m:
            raise ValueError(f"job directive {d!r}: use --name=value, '--name value' or --flag")
        value = m.group(2)
        params[m.group(1).replace("-", "_")] = value.strip() if value else True
    return params


def submitit_slurm_parameters(config: ExecutorConfig) -> dict[str, Any]:
    """``SlurmExecutor.update_parameters`` arguments: one array element = one task with
    ``gpus_per_task`` GPUs (``--gpus-per-node``), ``cores`` CPUs, ``memory``, ``walltime``."""
    gb = memory_gb(config.memory)
    params: dict[str, Any] = {
        "job_name": "ofl", "time": walltime_minutes(config.walltime),
        "cpus_per_task": config.cores, "ntasks_per_node": 1,
        "mem": f"{int(gb)}GB" if gb == int(gb) else f"{int(gb * 1024)}MB",
    }
    if config.gpus_per_task:
        params["gpus_per_node"] = config.gpus_per_task
    if config.partition:
        params["partition"] = config.partition
    if config.account:
        params["account"] = config.account
    parallel = config.array_parallelism or (config.jobs if config.jobs > 1 else None)
    if parallel:
        params["array_parallelism"] = parallel
    if config.job_prologue:
        params["setup"] = list(config.job_prologue)
    if config.job_directives:
        params["additional_parameters"] = _directive_params(config.job_directives)
    params.update(config.cluster_kwargs)
    return params


def job_script(config: ExecutorConfig, n_tasks: int, out: str | os.PathLike = ".") -> str | None:
    """The batch script ``config`` would submit (None for local and existing clusters):
    dask-jobqueue's ``job_script()`` of one worker job, or submitit's sbatch file of the job
    array for ``n_tasks`` tasks."""
    if config.executor == "dask" and config.cluster in ("slurm", "pbs"):
        _require(("dask_jobqueue",), "dask --cluster " + config.cluster)
        from dask_jobqueue.pbs import PBSJob
        from dask_jobqueue.slurm import SLURMJob

        job_cls = {"slurm": SLURMJob, "pbs": PBSJob}[config.cluster]
        # what cluster.job_script() shows, without starting a scheduler
        return job_cls("tcp://<scheduler-address>:8786", name="dummy-name",
                       **jobqueue_kwargs(config)).job_script()
    if config.executor == "submitit" and config.cluster is None:
        _require(("submitit",), "submitit")
        from submitit.slurm import slurm

        folder = submitit_folder(config, out)
        python = config.python or shlex.quote(sys.executable)
        command = f"{python} -u -m submitit.core._submit {shlex.quote(folder)}"
        return slurm._make_sbatch_string(command=command, folder=folder,
                                         map_count=max(1, n_tasks),
                                         **submitit_slurm_parameters(config))
    return None


# --------------------------------------------------------------------------------------------
# a grid


def _failed(spec: TaskSpec, e: BaseException) -> TaskResult:
    msg = " ".join(f"{type(e).__name__}: {e}".split())[:500]
    return TaskResult(spec.task, spec.run_id, "failed", error=f"the worker lost the task ({msg})")


def run_grid(
    tasks: Sequence[Task], out: str | os.PathLike, config: ExecutorConfig | None = None,
    notebook_dir: Path = NOTEBOOK_DIR, resume: bool = True, log: bool = True,
    executor: cf.Executor | None = None,
) -> list[TaskResult]:
    """Run ``tasks`` on the executor ``config`` asks for (or ``executor``); one result per task,
    in order. Finished tasks are skipped without starting any cluster; duplicates run once."""
    config = config or ExecutorConfig()
    specs = make_specs(tasks, out, config, notebook_dir, resume)
    results: dict[int, TaskResult] = {}
    todo: dict[tuple[str, str], list[int]] = {}
    for i, s in enumerate(specs):
        if resume and spec_finished(s):
            results[i] = TaskResult(s.task, s.run_id, "skipped")
        else:
            todo.setdefault((s.task.notebook, s.run_id), []).append(i)
    n = len(specs)
    if log:
        for i in sorted(results):
            print(f"[{i + 1}/{n}] {specs[i].label}: already done, skipped", flush=True)
    if todo:
        own = executor is None
        ex = make_executor(config, out) if own else executor
        try:
            _run_pending(ex, specs, todo, results, log)
        except BaseException:
            if own:
                ex.shutdown(wait=False, cancel_futures=True)
            raise
        if own:
            ex.shutdown(wait=True)
    return [results[i] for i in range(n)]


def _run_pending(ex: cf.Executor, specs: Sequence[TaskSpec],
                 todo: Mapping[tuple[str, str], list[int]],
                 results: dict[int, TaskResult], log: bool) -> None:
    n = len(specs)
    first = [idx[0] for idx in todo.values()]
    inline = isinstance(ex, InlineExecutor)
    done_count = [n - sum(len(v) for v in todo.values())]
    guard = threading.Lock()

    def finish(i: int, fut: cf.Future) -> None:
        s = specs[i]
        try:
            res = fut.result()
        except cf.CancelledError as e:
            res = TaskResult(s.task, s.run_id, "failed", error=f"cancelled ({e})")
        except Exception as e:  # noqa: BLE001 - e.g. KilledWorker, a lost SLURM job
            res = _failed(s, e)
        with guard:
            for j in todo[(s.task.notebook, s.run_id)]:
                results[j] = res
                done_count[0] += 1
            k = done_count[0]
        if log:
            msg = (f"{res.n_records} records" if res.status == "done"
                   else "finished meanwhile, skipped" if res.status == "skipped"
                   else f"FAILED: {res.error}")
            where = f"[{i + 1}/{n}]" if inline else f"[{k}/{n} finished]"
            print(f"{where} {s.label}: {res.status} in {res.seconds:.1f}s, {msg}", flush=True)

    futs: list[cf.Future] = []
    if isinstance(ex, SubmititExecutor):
        futs = ex.submit_tasks(run_task_spec, [specs[i] for i in first])
        for i, fut in zip(first, futs, strict=True):
            fut.add_done_callback(lambda f, i=i: finish(i, f))
        if log:
            print(f"submitted {len(futs)} task(s) as submitit job(s) "
                  f"{sorted({j.job_id.split('_')[0] for j in ex.jobs})}", flush=True)
    else:
        for i in first:
            if log:
                what = "running" if inline else "submitted"
                print(f"[{i + 1}/{n}] {specs[i].label}: {what} "
                      f"{json.dumps(specs[i].task.parameters)}", flush=True)
            fut = ex.submit(run_task_spec, specs[i])
            fut.add_done_callback(lambda f, i=i: finish(i, f))  # inline: runs at once
            futs.append(fut)
    cf.wait(futs)
    while any(j not in results for idx in todo.values() for j in idx):  # callbacks may lag
        time.sleep(0.01)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--run-task":
        sys.exit(_child_main(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m ofl_core.executors --run-task SPEC.json RESULT.json")
