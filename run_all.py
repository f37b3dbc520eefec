#!/usr/bin/env python
"""Execute the ofl notebooks with papermill and build figures/ and report/index.html.

    python run_all.py --quick                 # every notebook at its quick CPU defaults
    python run_all.py --full                  # papers' settings (GPU; notebooks/grids/full/)
    python run_all.py --grid my_grid.yaml     # your own grid: {notebook: [ {param: value}, ... ]}
    python run_all.py --quick --only main_tables --out /tmp/ofl

Finished runs are skipped when re-run (delete <out>/runs/ or pass --no-resume to redo them).
One failing notebook never stops the batch; the exit status is 1 if any run failed.
"""

from __future__ import annotations

import argparse
import sys
import time

from ofl_core.runner import (
    NOTEBOOK_DIR,
    Task,
    build_report,
    check_parameters,
    list_notebooks,
    load_grid,
    run_tasks,
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
    ap.add_argument("--dry-run", action="store_true", help="print the task list and exit")
    return ap.parse_args(argv)


def make_tasks(args: argparse.Namespace) -> list[Task]:
    if args.full:
        tasks = load_grid(FULL_GRID)
    elif args.grid:
        tasks = load_grid(args.grid)
    else:
        tasks = [Task(nb) for nb in list_notebooks()]
    only = {n.strip() for o in args.only for n in o.split(",") if n.strip()}
    if only:
        known = set(list_notebooks())
        bad = sorted(only - known)
        if bad:
            raise SystemExit(f"--only: unknown notebook(s) {bad}; known: {sorted(known)}")
        tasks = [t for t in tasks if t.notebook in only]
    for t in tasks:
        check_parameters(t)
    return tasks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        tasks = make_tasks(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        for t in tasks:
            print(t.notebook, t.run_id(), t.parameters)
        return 0
    t0 = time.perf_counter()
    results = run_tasks(tasks, args.out, resume=not args.no_resume,
                        cell_timeout=args.cell_timeout)
    index = build_report(args.out, results)
    n = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "failed")}
    print(f"\n{len(results)} tasks: {n['done']} ran, {n['skipped']} skipped (already done), "
          f"{n['failed']} failed, in {time.perf_counter() - t0:.0f}s")
    for r in results:
        if r.status == "failed":
            print(f"  FAILED {r.task.notebook} {r.run_id}: {r.error}")
    print(f"report: {index}")
    return 1 if n["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
