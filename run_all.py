#!/usr/bin/env python
"""Execute the ofl notebooks with papermill and build figures/ and report/index.html.

    python run_all.py --quick                 # every notebook at its quick CPU defaults
    python run_all.py --full                  # papers' settings (GPU; notebooks/grids/full/)
    python run_all.py --grid my_grid.yaml     # your own grid: {notebook: [ {param: value}, ... ]}
    python run_all.py --quick --only main_tables --out /tmp/ofl
    python run_all.py --quick --jobs 1                      # one notebook at a time
                                              # (default --quick: one per core, ≤ 4)
    python run_all.py --full --executor dask --cluster slurm --gpus-per-task 1 --jobs 8
    python run_all.py --full --executor submitit --partition gpu --gpus-per-task 1 --dry-run
    python run_all.py --grid results/grids/fedlpa_setting_fmnist.yaml --skip-shipped  # the rest

Finished runs are skipped when re-run (delete <out>/runs/ or pass --no-resume to redo them).
One failing notebook, a dead kernel or a --task-timeout never stops the batch; the exit status
is 1 if any run failed. Executors other than local need: pip install -e '.[cluster]'.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

# the notebooks, grids and results/ beside this script, whichever way ofl_core is installed
os.environ.setdefault("OFL_PROJECT_DIR", str(Path(__file__).resolve().parent))

from ofl_core.batch.client_arithmetic import arithmetic_warnings
from ofl_core.batch.config import EXECUTORS, ExecutorConfig, load_config_file, make_config
from ofl_core.batch.coverage import coverage, paper_cell_set, planned_cells, summarize_cells
from ofl_core.batch.gaps import load_gaps
from ofl_core.batch.gpus import NoGpuError
from ofl_core.batch.grid import BookkeepingError, make_specs, run_grid
from ofl_core.batch.jobs import job_script
from ofl_core.batch.optional import MissingDependencyError
from ofl_core.batch.report import RESULTS_DIR, build_report, shipped_for, shipped_runs
from ofl_core.batch.tasks import (
    NOTEBOOK_DIR,
    Task,
    check_parameters,
    effective_parameters,
    list_notebooks,
    load_grid,
    spec_finished,
)

FULL_GRID = NOTEBOOK_DIR / "grids" / "full"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help="each notebook once at its defaults (embedded data, CPU; default)")
    mode.add_argument("--full", action="store_true",
                      help="the papers' settings (notebooks/grids/full/; for GPUs)")
    mode.add_argument("--grid", metavar="FILE", help="YAML grid: {notebook: [ {param: value} ]}")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only these notebooks (repeat or comma-separate)")
    ap.add_argument("--out", default=".", metavar="DIR",
                    help="where runs/, figures/ and report/ go (default: current folder)")
    ap.add_argument("--no-resume", action="store_true", help="re-run finished tasks too")
    ap.add_argument("--cell-timeout", type=float, default=None, metavar="S",
                    help="per-cell timeout in seconds (default: none)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the task list (and the batch job script) and exit")
    ap.add_argument("--skip-shipped", action="store_true",
                    help="leave out the tasks whose run is shipped in results/ (same notebook "
                         "and parameters; the report reads those records anyway)")
    ap.add_argument("--no-shipped", action="store_true",
                    help="the report shows this --out folder's runs only, not the records "
                         "shipped in results/ (a report of one's own grid, built in seconds)")
    _add_executor_args(ap)
    return ap.parse_args(argv)


def _add_executor_args(ap: argparse.ArgumentParser) -> None:
    """Executor options; every default is None so that --cluster-config values show through."""
    g = ap.add_argument_group("executor", "where the tasks run (see README: 'Running the full "
                              "grids on a cluster')")
    g.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="local (default), dask or submitit")
    g.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="tasks at once: local processes / LocalCluster workers; with --cluster "
                        "slurm|pbs the number of worker jobs; submitit: array parallelism")
    g.add_argument("--task-timeout", type=float, default=None, metavar="S",
                   help="wall-clock limit of one task in seconds; past it the task is killed "
                        "and marked failed")
    g.add_argument("--retries", type=int, default=None, metavar="N",
                   help="dask: retries of a task whose worker died or raised (default 2)")
    g.add_argument("--threads-per-task", type=int, default=None, metavar="T",
                   help="OMP_NUM_THREADS of each concurrent task (default: cores // jobs)")
    g.add_argument("--gpus-per-task", type=int, default=None, metavar="G",
                   help="GPUs each task gets (its own CUDA_VISIBLE_DEVICES; default 0)")
    g.add_argument("--cluster", choices=("local", "slurm", "pbs"), default=None,
                   help="dask: LocalCluster (default) or dask-jobqueue slurm|pbs; "
                        "submitit: slurm (default) or local (submitit's local backend)")
    g.add_argument("--cluster-config", metavar="YAML", default=None,
                   help="executor settings from a YAML file (keys as the options, e.g. "
                        "gpus_per_task: 1); command-line options win")
    g.add_argument("--scheduler-address", default=None, metavar="tcp://HOST:PORT",
                   help="dask: use this running scheduler")
    g.add_argument("--scheduler-file", default=None, metavar="FILE",
                   help="dask: use the scheduler described in this file")
    g.add_argument("--cores", type=int, default=None,
                   help="CPUs per batch job (dask-jobqueue job / submitit array task; default 4)")
    g.add_argument("--memory", default=None, help="memory per batch job, e.g. 32GB (default 16GB)")
    g.add_argument("--walltime", default=None, metavar="HH:MM:SS",
                   help="time limit per batch job (default 01:00:00)")
    g.add_argument("--partition", default=None, help="SLURM partition / PBS queue")
    g.add_argument("--account", default=None, help="batch account (-A)")
    g.add_argument("--gpus-per-job", type=int, default=None, metavar="G",
                   help="dask-jobqueue: GPUs per worker job (default: --gpus-per-task)")
    g.add_argument("--job-directive", action="append", default=None, metavar="DIRECTIVE",
                   dest="job_directives",
                   help="extra #SBATCH/#PBS directive, e.g. --job-directive=--constraint=a100 "
                        "(repeatable)")
    g.add_argument("--job-prologue", action="append", default=None, metavar="LINE",
                   dest="job_prologue",
                   help="shell line run in each batch job first, e.g. 'module load cuda' "
                        "(repeatable)")
    g.add_argument("--array-parallelism", type=int, default=None, metavar="N",
                   help="submitit: array tasks running at once (SLURM --array=...%%N)")
    g.add_argument("--submitit-folder", default=None, dest="folder", metavar="DIR",
                   help="submitit logs and pickles (default <out>/submitit/%%j)")


_CLI_FIELDS = ("executor", "jobs", "task_timeout", "retries", "threads_per_task",
               "gpus_per_task", "cluster", "scheduler_address", "scheduler_file", "cores",
               "memory", "walltime", "partition", "account", "gpus_per_job", "job_directives",
               "job_prologue", "array_parallelism", "folder", "cell_timeout")


#: at most this many quick notebooks at once by default (one per CPU core)
QUICK_JOBS_MAX = 4

#: seconds each quick notebook took in a fresh clone on 2026-11-28 (2 cores, two at a time);
#: only an ordering hint: ``--quick`` starts the longest first, so that the longest one
#: does not start last and keep one core busy alone at the end (longest-processing-time-first
#: scheduling); a notebook missing here starts first, as if it were the longest
QUICK_SECONDS = {"main_tables": 172, "heterogeneous_models": 69, "cvae_security_shift": 60,
                 "two_classes_per_client": 43, "ablations": 41, "client_scaling": 40,
                 "multi_round": 36, "local_epochs": 29, "synthetic_data": 24, "partitions": 6}


def executor_config(args: argparse.Namespace) -> ExecutorConfig:
    """Defaults ← --cluster-config YAML ← command-line options.

    ``--quick`` defaults to one notebook per CPU core (at most :data:`QUICK_JOBS_MAX`), each
    with ``cores // jobs`` threads: the quick notebooks are small CPU jobs that keep about one
    core busy, so running them side by side finishes the batch sooner than giving one
    notebook every thread. ``--full`` and ``--grid`` default to one task at a time.
    """
    from_file = load_config_file(args.cluster_config) if args.cluster_config else {}
    defaults: dict = {}
    if not (args.full or args.grid):
        defaults["jobs"] = max(1, min(QUICK_JOBS_MAX, os.cpu_count() or 1))
    return make_config(defaults, from_file, {k: getattr(args, k) for k in _CLI_FIELDS})


def make_tasks(args: argparse.Namespace) -> list[Task]:
    if args.full:
        tasks = load_grid(FULL_GRID)
    elif args.grid:
        tasks = load_grid(args.grid)
    else:
        tasks = sorted((Task(nb) for nb in list_notebooks()),
                       key=lambda t: -QUICK_SECONDS.get(t.notebook, float("inf")))
    only = {n.strip() for o in args.only for n in o.split(",") if n.strip()}
    if only:
        known = set(list_notebooks())
        bad = sorted(only - known)
        if bad:
            raise SystemExit(f"--only: unknown notebook(s) {bad}; known: {sorted(known)}")
        tasks = [t for t in tasks if t.notebook in only]
    if not tasks:
        raise ValueError("no tasks to run: the grid is empty or --only matches none of its "
                         "notebooks")
    for t in tasks:
        check_parameters(t)
    return tasks


def dry_run(tasks: list[Task], cfg: ExecutorConfig, args: argparse.Namespace) -> int:
    """Print the tasks with the paper cells each will fill, the grid's coverage of the papers'
    cells (and, for SLURM / PBS, the job script) without running anything."""
    every = paper_cell_set()
    filled = []
    # under --skip-shipped the tasks left are unshipped: no second pass over results/
    marks = [None] * len(tasks) if args.skip_shipped else shipped_for(tasks, RESULTS_DIR)
    for t, shipped in zip(tasks, marks, strict=True):
        cells = planned_cells(t.notebook, effective_parameters(t), every)
        filled.append(cells)
        print(t.notebook, t.run_id(), t.parameters)
        print(f"    fills {len(cells)} paper cells" + (f": {summarize_cells(cells)}" if cells
                                                       else ""))
        if shipped:
            print(f"    shipped: {shipped['shipped']} ({shipped.get('code_version', '?')})"
                  + (" within a run of more methods, seeds, α or presets" if
                     shipped.get("covers") else ""))
    specs = make_specs(tasks, args.out, cfg, resume=not args.no_resume)
    todo = [s for s in specs if args.no_resume or not spec_finished(s)]
    print(f"# {len(tasks)} tasks, {len(tasks) - len(todo)} already finished; executor "
          f"{cfg.executor}" + (f" ({cfg.cluster})" if cfg.cluster else "")
          + (f", {cfg.jobs} at a time" if cfg.jobs > 1 else "")
          + (f", {cfg.threads()} thread(s) per task" if cfg.threads() else ""))
    script = job_script(cfg, len(todo), args.out)
    if script is not None:
        kind = ("the job array's sbatch file" if cfg.executor == "submitit"
                else "one dask worker job, dask-jobqueue's job_script()")
        print(f"# batch script ({kind}):\n{script}")
    cov = coverage(filled)
    if cov.missed_tables:
        print(f"# paper tables these tasks fill no cell of: {', '.join(cov.missed_tables)}")
    print(cov.line())
    return 0


def without_shipped(tasks: list[Task]) -> list[Task]:
    """``tasks`` less those with a run shipped in ``results/`` (:func:`shipped_for`), saying
    how many were left out."""
    runs = shipped_runs(RESULTS_DIR)
    left = [t for t, s in zip(tasks, shipped_for(tasks, RESULTS_DIR, runs), strict=True)
            if s is None]
    print(f"# --skip-shipped: {len(tasks) - len(left)} of {len(tasks)} tasks left out, "
          f"their runs shipped in {RESULTS_DIR}")
    for line in arithmetic_warnings(left, runs):
        print(line)
    return left


def check_out(out: str) -> None:
    """``--out`` must be a folder this process can write (made when missing), checked before
    any task runs."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder: give a folder for runs/, "
                         "figures/ and report/")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ValueError(f"--out {out}: cannot write there ({e.strerror or e}); give a "
                         "writable folder") from None


#: path variables the notebooks' kernels read; a relative one is resolved against the caller's
#: folder before any kernel starts (kernels run in notebooks/, where it would land otherwise)
PATH_VARIABLES = ("OFL_CACHE_DIR", "OFL_DATA_ROOT")


def resolve_path_variables(env: dict | None = None) -> None:
    """Make each relative :data:`PATH_VARIABLES` entry of ``env`` (default: this process's
    environment, which the kernels inherit) absolute against the current folder."""
    env = os.environ if env is None else env
    for name in PATH_VARIABLES:
        value = env.get(name)
        if value and not os.path.isabs(os.path.expanduser(value)):
            env[name] = os.path.abspath(value)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    resolve_path_variables()
    try:
        tasks = make_tasks(args)
        cfg = executor_config(args)
        if args.skip_shipped:
            tasks = without_shipped(tasks)
            if not tasks:
                print(f"every task is shipped in {RESULTS_DIR}: nothing to run")
                return 0
        load_gaps(RESULTS_DIR / "gaps.yaml")  # the report needs it: checked before any task
        if args.dry_run:
            return dry_run(tasks, cfg, args)
        check_out(args.out)
    except (ValueError, MissingDependencyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shipped = None if args.no_shipped else RESULTS_DIR
    t0 = time.perf_counter()
    try:
        results = run_grid(tasks, args.out, cfg, resume=not args.no_resume)
    except (MissingDependencyError, NoGpuError, OSError, BookkeepingError) as e:
        print(f"error: {e}", file=sys.stderr)  # OSError: no scheduler there
        return 2
    except KeyboardInterrupt:
        try:
            index = build_report(args.out, results=shipped)
        except OSError as e:
            print(f"\ninterrupted; the report could not be written ({e})", file=sys.stderr)
            return 130
        print(f"\ninterrupted: re-run the same command to finish the grid "
              f"(finished tasks are kept); report of what finished: {index}")
        return 130
    try:
        index = build_report(args.out, results, results=shipped)
    except OSError as e:
        print(f"error: the report could not be written ({e.strerror or e}"
              + (f": {e.filename}" if e.filename else "") + ")", file=sys.stderr)
        return 2
    n = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "failed")}
    print(f"\n{len(results)} tasks: {n['done']} ran, {n['skipped']} skipped (already done), "
          f"{n['failed']} failed, in {time.perf_counter() - t0:.0f}s")
    for r in results:
        if r.status == "failed":
            print(f"  FAILED {r.task.notebook} {r.run_id}: {r.error}")
    print(f"report: {index}")
    return 1 if n["failed"] else 0


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a batch system stopping us) as Ctrl-C: queued and running batch jobs
    are cancelled and the report of what finished is written."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())
