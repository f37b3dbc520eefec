"""Execute one task: papermill into ``<out>/runs/<notebook>/<run_id>.ipynb``, then the sidecar
``<run_id>.json`` (written last, atomically), figures in the task's figures folder.

:func:`run_task_spec` is what every executor runs on a worker. It skips a task that finished
meanwhile (a retried or duplicated task never runs twice after it finished; two copies of a
task running at once take turns on its lock file, :func:`task_lock`). Isolated tasks
(every backend except ``local --jobs 1``) run in a child Python process
(``python -m ofl_core.batch.execute --run-task``) with ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``
set to the task's thread count, its own GPUs (:mod:`ofl_core.batch.gpus`), and a wall-clock
limit past which it is killed. A failing notebook, a dead kernel, a cell timeout or the task
timeout marks the task failed with its reason; nothing here raises for a bad notebook.

Every notebook kernel runs with :data:`KERNEL_ENV` (``TQDM_DISABLE=1``): an executed notebook
keeps no progress bars (they stay on in a terminal and in JupyterLab).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..results import machine, read_records, write_json_atomic
from . import gpus
from .tasks import (
    NOTEBOOK_DIR,
    Task,
    TaskResult,
    TaskSpec,
    effective_parameters,
    result_from_dict,
    result_to_dict,
    spec_finished,
    task_paths,
)

#: The stop request of the executor running this task in one of its threads (``local --jobs
#: N``): set when the run is interrupted, so a task waiting for its lock or for its child
#: process gives up instead of keeping the interrupted ``run_all.py`` alive until it ends.
STOP_REQUEST: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "ofl_task_stop_request", default=None)

#: seconds between checks of the stop request while waiting for a lock or a child process
_POLL_SECONDS = 0.5


def stop_requested() -> bool:
    """Whether the executor running this task was interrupted (:data:`STOP_REQUEST`)."""
    stop = STOP_REQUEST.get()
    return stop is not None and stop.is_set()


_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: set in every notebook kernel's environment: no progress bars in executed notebooks
KERNEL_ENV = {"TQDM_DISABLE": "1"}
#: how many times a task's kernel may be started: jupyter_client picks free ports and binds
#: them later, so kernels starting at once (parallel tasks, test workers) can race for a port
#: and the loser dies before its first reply; no cell has run then, so starting again is safe
KERNEL_START_ATTEMPTS = 3
_KERNEL_START_FAILURES = ("Kernel died before replying to kernel_info", "Address already in use")


def _kernel_start_failed(e: BaseException) -> bool:
    """Whether ``e`` is a kernel that failed to start (no cell of the notebook ran)."""
    return any(s in f"{type(e).__name__}: {e}" for s in _KERNEL_START_FAILURES)


@contextmanager
def _kernel_env() -> Iterator[None]:
    """:data:`KERNEL_ENV` in this process's environment while a kernel starts (papermill's
    kernel inherits it), then the previous values back."""
    old = {k: os.environ.get(k) for k in KERNEL_ENV}
    os.environ.update(KERNEL_ENV)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def execute_task(
    task: Task, out: Path, figures_dir: Path, notebook_dir: Path = NOTEBOOK_DIR,
    cell_timeout: float | None = None, kernel_name: str | None = None, log_output: bool = False,
) -> TaskResult:
    """Execute one task with papermill; never raises for a failing notebook."""
    import papermill

    run_id = task.run_id(notebook_dir)
    nb_out, js_out = task_paths(out, task, run_id)
    nb_out.parent.mkdir(parents=True, exist_ok=True)
    tmp = nb_out.with_name(f".{run_id}.{os.getpid()}.tmp.ipynb")
    params = {**task.parameters, "figures_dir": str(figures_dir.resolve())}
    t0 = time.perf_counter()
    error = detail = ""
    for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
        try:
            with _kernel_env():
                papermill.execute_notebook(
                    str(notebook_dir / f"{task.notebook}.ipynb"), str(tmp), parameters=params,
                    kernel_name=kernel_name, progress_bar=False, log_output=log_output,
                    cwd=str(notebook_dir), execution_timeout=cell_timeout,
                )
        except Exception as e:  # noqa: BLE001 - a failed notebook marks its task, not the batch
            if _kernel_start_failed(e) and attempt < KERNEL_START_ATTEMPTS:
                continue
            error, detail = _short_error(e), _error_tail(e)
        break
    secs = time.perf_counter() - t0
    if error:
        if tmp.exists():
            os.replace(tmp, nb_out.with_name(f"{run_id}.failed.ipynb"))
        return TaskResult(task, run_id, "failed", secs, error, detail=detail)
    records = read_records(tmp)
    os.replace(tmp, nb_out)
    write_json_atomic(js_out, {
        "status": "done", "notebook": task.notebook, "run_id": run_id,
        "parameters": task.parameters, "seconds": round(secs, 2),
        "effective_parameters": effective_parameters(task, notebook_dir),
        "machine": machine(), "code_version": code_version(),
        "records": [r.to_dict() for r in records],
    })
    return TaskResult(task, run_id, "done", secs, n_records=len(records))


def _short_error(e: BaseException) -> str:
    name = type(e).__name__
    if name == "PapermillExecutionError":
        return f"cell {getattr(e, 'exec_count', '?')}: {e.ename}: {e.evalue}"  # type: ignore
    return "".join(traceback.format_exception_only(type(e), e)).strip()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _error_tail(e: BaseException, lines: int = 8) -> str:
    """The last lines of a failure's traceback (a notebook cell's, without colour codes)."""
    tb = getattr(e, "traceback", None)
    text = "\n".join(tb) if isinstance(tb, list) else "".join(traceback.format_exception(e))
    rows = [ln.rstrip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    return "\n".join(rows[-lines:])


def code_version(root: Path | None = None) -> str:
    """The library that produced a run: ``ofl_core`` version and the git commit of its
    checkout ``root`` (``+dirty`` when ``ofl_core/`` or a notebook's .py had uncommitted
    changes; the version alone outside git).

    The .ipynb twins are left out of the check: the .py is the notebook's source (the tests
    hold the pair equal), and git would run the nbstripout filter, a Python process, on every
    .ipynb whose stat data it cannot trust: 18 s per call in a fresh clone, once per task."""
    import ofl_core

    root = root or Path(ofl_core.__file__).resolve().parent.parent
    version = f"ofl_core {ofl_core.__version__}"
    if not shutil.which("git"):
        return version
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return version
        # --no-optional-locks: status would refresh the index under .git/index.lock, which a
        # run killed (or timed out) mid-call leaves behind, blocking the user's next commit
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status",
                                "--porcelain",
                                "--untracked-files=no", "--", "ofl_core",
                                ":(glob)notebooks/*.py"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}, git {rev.stdout.strip()}{'+dirty' if dirty else ''}"


def run_task_spec(spec: TaskSpec) -> TaskResult:
    """Run one task where this function is called (a worker); never raises for a bad notebook.

    Skips a task that finished meanwhile (a retry, a duplicate). Isolated tasks run in a child
    process with the task's thread count and GPUs, killed at ``task_timeout``.
    """
    try:
        with task_lock(spec) as locked:
            if spec.resume and spec_finished(spec):
                return TaskResult(spec.task, spec.run_id, "skipped")
            if locked:
                _remove_stale_partials(spec)
            if not spec.isolate:
                return execute_task(spec.task, Path(spec.out), Path(spec.figures_dir),
                                    Path(spec.notebook_dir), spec.cell_timeout)
            try:
                with gpus.GPU_POOL.take(spec.gpus) as devices:
                    return _run_in_child(spec, task_env(spec.threads, devices))
            except gpus.NoGpuError as e:
                return TaskResult(spec.task, spec.run_id, "failed", error=str(e))
    except LockWaitAbandoned as e:  # only the lock's wait raises it
        return TaskResult(spec.task, spec.run_id, "failed", error=str(e))


#: errnos of a filesystem without working locks (Lustre without ``-o flock``, some NFS mounts)
_NO_LOCK_ERRNOS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class LockWaitAbandoned(RuntimeError):
    """The process is exiting while this task waits for another run's lock."""


@contextlib.contextmanager
def task_lock(spec: TaskSpec, poll_seconds: float = _POLL_SECONDS) -> Iterator[bool]:
    """Hold the task's lock, ``<out>/runs/<notebook>/.<run_id>.lock`` (``flock``), while it
    runs: a second copy of the task (a re-run while the first run's jobs are still queued, a
    duplicate job) waits here, then finds it finished and skips it. The OS releases the lock
    when its holder dies. Yields whether the lock is held; without file locks (Windows, Lustre
    without ``-o flock``): no lock, ``False``.

    The wait polls, so a waiting copy stays interruptible: Ctrl-C reaches it in the main thread,
    and in an executor's thread it gives up with :class:`LockWaitAbandoned` once the run is
    interrupted (:func:`stop_requested`) instead of waiting, possibly for hours, for the other
    run to finish."""
    nb, _ = task_paths(Path(spec.out), spec.task, spec.run_id)
    path = nb.with_name(f".{spec.run_id}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            import fcntl
        except ImportError:
            yield False
            return
        try:
            locked = _wait_for_flock(f, fcntl, path, spec.label, poll_seconds)
        except OSError as e:
            if e.errno not in _NO_LOCK_ERRNOS:
                raise
            locked = False
        yield locked


def _wait_for_flock(f: Any, fcntl: Any, path: Path, label: str, poll_seconds: float) -> bool:
    """Take ``flock(LOCK_EX)`` on ``f``, polling; say once that another run holds it."""
    said = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if not said:
            print(f"{label}: another run of this task holds {path}; waiting for it to "
                  "finish (then this one is skipped)", flush=True)
            said = True
        if stop_requested():
            raise LockWaitAbandoned(f"interrupted while another run of this task held {path}")
        time.sleep(poll_seconds)


def _remove_stale_partials(spec: TaskSpec) -> None:
    """Delete the half-written ``.<run_id>.<pid>.tmp.ipynb`` of runs killed with their parent
    (``kill -9`` of run_all.py, a session's end): with the lock held, no live process writes
    one. Without locks they stay, since another host's run may still be writing."""
    nb_out, _ = task_paths(Path(spec.out), spec.task, spec.run_id)
    for stale in nb_out.parent.glob(f".{spec.run_id}.*.tmp.ipynb"):
        stale.unlink(missing_ok=True)


def task_env(threads: int | None, devices: Sequence[str] | None,
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a task's child process (and so of its notebook kernel)."""
    env = dict(os.environ if base is None else base)
    pkg_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
    env.update(KERNEL_ENV)
    if threads is not None:
        env.update({k: str(threads) for k in _THREAD_VARS})
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return env


def _run_in_child(spec: TaskSpec, env: dict[str, str]) -> TaskResult:
    """Execute ``spec`` in ``python -m ofl_core.batch.execute``; kill it at ``task_timeout``.

    The spec, the result and the child's (and its kernel's) output go through files, not pipes,
    so nothing waits on a pipe that a lingering grandchild still holds open.
    """
    env = {**env, "OFL_TASK_PARENT_PID": str(os.getpid())}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ofl-task-") as tmp:
        spec_file, result_file, log_file = (Path(tmp) / n for n in
                                            ("spec.json", "result.json", "log.txt"))
        spec_file.write_text(spec.to_json())
        cmd = [sys.executable, "-m", "ofl_core.batch.execute", "--run-task", str(spec_file),
               str(result_file)]
        with open(log_file, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    env=env)
            try:
                why = _wait_child(proc, spec.task_timeout)
            except BaseException:
                proc.kill()
                raise
            if why:
                proc.kill()  # its kernel exits by itself once its parent is gone
                proc.wait()
                _keep_partial_notebook(spec, proc.pid)
                return TaskResult(spec.task, spec.run_id, "failed", time.perf_counter() - t0,
                                  why)
        if result_file.is_file():
            return result_from_dict(json.loads(result_file.read_text()))
        lines = log_file.read_text(errors="replace").strip().splitlines()
    _keep_partial_notebook(spec, proc.pid)
    tail = " | ".join(ln for ln in lines[-3:])[-500:]
    how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
           else f"exit status {proc.returncode}")
    return TaskResult(spec.task, spec.run_id, "failed", time.perf_counter() - t0,
                      f"the task process died ({how}): {tail or 'no output'}")


def _wait_child(proc: subprocess.Popen, timeout: float | None) -> str:
    """Wait for the task's child process; "" when it exits, else why it must be killed: past
    ``timeout`` seconds, or the run was interrupted (:func:`stop_requested`)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _POLL_SECONDS if deadline is None else deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(_POLL_SECONDS, left)))
            return ""
        except subprocess.TimeoutExpired:
            pass
        if deadline is not None and time.monotonic() >= deadline:
            return (f"timeout: the task ran past its limit of {timeout:g} s (--task-timeout) "
                    "and was killed")
        if stop_requested():
            return "cancelled (the run was interrupted before the task finished)"


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


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--run-task":
        # submitit asks SLURM for SIGUSR2 ahead of the walltime, and SLURM signals every
        # process of the job step: only the submitit process (our parent) acts on it — it ends
        # the job as TIMEOUT and kills this process. Ignored here and, inherited, in the kernel.
        if hasattr(signal, "SIGUSR2"):  # POSIX
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        sys.exit(_child_main(sys.argv[2], sys.argv[3]))
    sys.exit("usage: python -m ofl_core.batch.execute --run-task SPEC.json RESULT.json")
