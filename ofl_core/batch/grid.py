"""Run a grid of tasks on one executor: skip what finished, run each distinct task once, and
collect one :class:`~ofl_core.batch.tasks.TaskResult` per task, in order.

A task whose sidecar is present and valid is skipped (before submission, and again on the
worker); anything else is (re)done. Isolated tasks get ``OMP_NUM_THREADS`` = ``threads``
(default: the machine's cores divided by the tasks running at once): several notebook kernels
each starting PyTorch's default thread pool oversubscribe the cores (4–7x slower on 2 cores).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .config import ExecutorConfig
from .execute import code_version, run_task_spec
from .executors import InlineExecutor, SubmititExecutor, make_executor
from .slurm import SchedulerJobError
from .tasks import (
    NOTEBOOK_DIR,
    Task,
    TaskResult,
    TaskSpec,
    figures_dir_for,
    made_by,
    record_outcome,
    spec_finished,
)


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


class BookkeepingError(RuntimeError):
    """The batch could not write its own bookkeeping (a task's failure record in
    ``<out>/runs``: disk full, read-only folder): the batch stops, since nothing it runs next
    could be recorded either."""


def _bookkeeping_error(e: BaseException, out: str) -> BookkeepingError:
    what = (f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
            if isinstance(e, OSError) else f"{type(e).__name__}: {e}")
    return BookkeepingError(f"cannot record the batch's outcomes in {out}/runs ({what}); free "
                            "space or make it writable, then re-run the same command "
                            "(finished tasks are kept)")


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
        now = code_version() if results else ""
        for i in sorted(results):
            s = specs[i]
            old = made_by(Path(s.out), s.task, s.run_id)
            stale = (f" (stale: made by {old or 'code that recorded no version'}, this is "
                     f"{now}; --no-resume redoes it)" if old != now else "")
            print(f"[{i + 1}/{n}] {s.label}: already done, skipped{stale}", flush=True)
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

    fatal: list[BaseException] = []  # a bookkeeping write that failed: the batch stops
    stop = threading.Event()  # set when every result is in, or at the first fatal error

    def outcome(s: TaskSpec, fut: cf.Future) -> TaskResult:
        try:
            return fut.result()
        except cf.CancelledError as e:
            why = str(e) or "the run was interrupted before the task finished"
            return TaskResult(s.task, s.run_id, "failed", error=f"cancelled ({why})")
        except SchedulerJobError as e:  # its batch job ended: cancelled, walltime, ...
            return TaskResult(s.task, s.run_id, "failed", error=str(e), detail=e.detail)
        except Exception as e:  # noqa: BLE001 - e.g. KilledWorker, a lost SLURM job
            return _failed(s, e)

    def finish(i: int, fut: cf.Future) -> None:
        """A done-callback: concurrent.futures logs and drops what a callback raises, so
        nothing may escape here; every path stores a result (or a fatal error) and wakes the
        waiting thread."""
        s = specs[i]
        res = TaskResult(s.task, s.run_id, "failed", error="its outcome could not be read")
        try:
            res = outcome(s, fut)
            record_outcome(Path(s.out), res)
        except BaseException as e:  # noqa: BLE001 - see the docstring
            with guard:
                fatal.append(e)
            stop.set()
        with guard:
            for j in todo[(s.task.notebook, s.run_id)]:
                results[j] = res
                done_count[0] += 1
            k = done_count[0]
            if k >= n:
                stop.set()
        if log:
            msg = (f"{res.n_records} records" if res.status == "done"
                   else "finished meanwhile, skipped" if res.status == "skipped"
                   else f"FAILED: {res.error}")
            where = f"[{i + 1}/{n}]" if inline else f"[{k}/{n} finished]"
            try:
                print(f"{where} {s.label}: {res.status} in {res.seconds:.1f}s, {msg}",
                      flush=True)
            except OSError:  # a closed or full stdout loses a line, not the outcome
                pass

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
            if fatal:
                break
    while not stop.wait(0.5):  # every result in, or a fatal error (callbacks may lag)
        pass
    if fatal:
        raise _bookkeeping_error(fatal[0], specs[0].out) from fatal[0]
