"""One whole DENSE Table 1 column end to end on this machine: the clients and every method of
the column (FedAvg and the ensemble, DENSE under both presets, FedHydra, Fed-DAFL, Fed-ADI,
FedDF), through ``run_all.py``, with the wall time of each phase and each task.

The column is one (α, seed) of ``results/grids/dense_fedhydra_table1_fmnist.yaml`` (the grid
the shipped records come from), so the records it leaves in ``--out`` are that grid's, with its
run ids, ready to be shipped. Two phases, each one ``run_all.py`` call:

1. the column's first task (the baselines, which train the five clients) alone, with every
   core (``--threads-per-task`` = ``--cores``);
2. the column's server tasks, ``--cores`` at a time at one thread each, in the grid's order
   (longest first: DENSE's two presets, FedHydra, Fed-DAFL, Fed-ADI, then FedDF).

It prints each phase's wall time, each task's seconds and its servers' own time (the records'
``wall_time_s``), and draws the tasks on a timeline (``--figure``, PNG): which task ran when.
A measurement runs everything: it refuses an ``--out`` that already holds a finished task of
the column, and warns when the clients came from the cache (phase 1 then measures no training).
The servers' checkpoints live in the client cache (``$OFL_CACHE_DIR``; ``--cache-dir`` sets it
for the run): a server that finds one resumes from it, so measure from a frozen checkout whose
column has not run before, or pass a fresh ``--cache-dir``.

    python benchmarks/bench_column.py --alpha 0.3 --seed 1 --out runs/column_a03 \\
        --figure runs/column_a03/timeline.png --log runs/column_a03/bench.json

A column whose run was interrupted and finished over several runs has no single wall time;
``--summarise`` runs nothing and reads its finished tasks in ``--out``: each task's compute (the
clients' task its seconds, a server task its servers' own time, kept across resumed parts) and
the wall time of their ideal packing on ``--cores`` (the clients first, then the servers
longest first on the core that frees up first), drawn with ``--figure``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from ofl_core.batch.tasks import Task, load_grid

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "results" / "grids" / "dense_fedhydra_table1_fmnist.yaml"
NOTEBOOK = "main_tables"


def column_tasks(grid: Path, alpha: float, seed: int) -> list[Task]:
    """The grid's tasks of one (α, seed), in the grid's order; the first trains the clients."""
    tasks = [t for t in load_grid(grid) if t.notebook == NOTEBOOK
             and t.parameters.get("alphas") == [alpha] and t.parameters.get("seeds") == [seed]]
    if not tasks:
        raise SystemExit(f"{grid} has no task with alphas [{alpha}] and seeds [{seed}]; "
                         "pick a column the grid runs")
    if "fedavg" not in tasks[0].parameters.get("methods", []):
        raise SystemExit(f"the column's first task must be its baselines (it trains the clients): "
                         f"got methods {tasks[0].parameters.get('methods')}")
    return tasks


def write_grid(tasks: list[Task], path: Path) -> None:
    """A grid file holding exactly these tasks (each as a plain entry: the same run ids)."""
    path.write_text(yaml.safe_dump({NOTEBOOK: [dict(t.parameters) for t in tasks]},
                                   sort_keys=False))


def run_phase(grid: Path, out: Path, jobs: int, threads: int, env: dict) -> float:
    """``run_all.py --grid`` on ``grid``; its wall seconds (a failed task stops the benchmark)."""
    cmd = [sys.executable, str(ROOT / "run_all.py"), "--grid", str(grid), "--out", str(out),
           "--jobs", str(jobs), "--threads-per-task", str(threads)]
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} ended with status {rc}: see {out}/report/index.html")
    return seconds


def sidecar(out: Path, task: Task) -> Path:
    return out / "runs" / NOTEBOOK / f"{task.run_id()}.json"


def task_rows(out: Path, tasks: list[Task]) -> list[dict]:
    """Per task: run id, methods, seconds, its servers' own seconds, start and end (the sidecar
    is written as the task ends: its mtime, less its seconds, is when it started)."""
    rows = []
    for t in tasks:
        p = sidecar(out, t)
        d = json.loads(p.read_text())
        end = p.stat().st_mtime
        servers = {f"{r['method']}/{r['preset']}": r["wall_time_s"] for r in d["records"]
                   if r.get("wall_time_s") is not None}
        rows.append({"run_id": d["run_id"], "methods": t.parameters["methods"],
                     "seconds": d["seconds"], "start": end - d["seconds"], "end": end,
                     "servers_s": servers, "threads": d["machine"]["threads"]})
    return rows


def lanes(rows: list[dict]) -> list[int]:
    """A lane per task such that tasks on one lane do not overlap (first free lane)."""
    ends: list[float] = []
    out = []
    for r in sorted(rows, key=lambda r: r["start"]):
        free = [i for i, e in enumerate(ends) if e <= r["start"] + 1.0]
        i = free[0] if free else len(ends)
        if i == len(ends):
            ends.append(0.0)
        ends[i] = r["end"]
        out.append((rows.index(r), i))
    return [lane for _, lane in sorted(out)]


def draw_timeline(rows: list[dict], t0: float, path: Path, title: str,
                  xlabel: str = "minutes since the column started",
                  target_min: float | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lane = lanes(rows)
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * (max(lane) + 1)))
    for r, y in zip(rows, lane, strict=True):
        start, width = (r["start"] - t0) / 60, r["seconds"] / 60
        ax.barh(y, width, left=start, height=0.8, edgecolor="black")
        ax.text(start + width / 2, y, "+".join(r["methods"]), ha="center", va="center",
                fontsize=8)
    if target_min is not None:
        ax.axvline(target_min, color="black", linestyle="--", linewidth=1)
        ax.text(target_min, max(lane) + 0.45, f" target {target_min:.0f} min", fontsize=8,
                va="bottom")
    ax.set_yticks(range(max(lane) + 1), [f"process {i + 1}" for i in range(max(lane) + 1)])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compute_s(row: dict, first: bool) -> float:
    """A task's compute: the clients' task its wall seconds (it trains the clients, which no
    record times), a server task its servers' own seconds, kept across interrupted and resumed
    parts (the records' ``wall_time_s``)."""
    return row["seconds"] if first or not row["servers_s"] else sum(row["servers_s"].values())


def pack(rows: list[dict], cores: int) -> list[dict]:
    """The ideal schedule of the measured compute on ``cores``: the clients' task first (every
    server needs its clients), then the server tasks longest first, each on the core that frees
    up first. Each row gains ``start`` and ``end`` (seconds from 0) and its ``compute_s``."""
    first, servers = rows[0], sorted(rows[1:], key=lambda r: -compute_s(r, False))
    t = compute_s(first, True)
    placed = [dict(first, compute_s=t, start=0.0, end=t)]
    free = [t] * cores
    for r in servers:
        i = min(range(cores), key=free.__getitem__)
        c = compute_s(r, False)
        placed.append(dict(r, compute_s=c, start=free[i], end=free[i] + c))
        free[i] += c
    return placed


def summarise(tasks: list[Task], out: Path, cores: int, figure: Path | None,
              title: str) -> None:
    """For a column finished over several (interrupted, resumed) runs: each task's compute and
    the wall time of its ideal packing on ``cores`` (no run)."""
    missing = [t.run_id() for t in tasks if not sidecar(out, t).exists()]
    if missing:
        raise SystemExit(f"{out} lacks finished tasks of this column: {missing}")
    placed = pack(task_rows(out, tasks), cores)
    for r in placed:
        servers = ", ".join(f"{k} {v:.0f} s" for k, v in r["servers_s"].items())
        print(f"  {r['run_id']}  {'+'.join(r['methods']):30s} {r['compute_s']:8.1f} s  "
              f"servers: {servers}")
    span = max(r["end"] for r in placed)
    busy = sum(r["compute_s"] for r in placed)
    print(f"compute {busy:.0f} s; packed on {cores} cores: {span:.0f} s = {span / 60:.1f} min")
    if figure is not None:
        bars = [dict(r, seconds=r["compute_s"], methods=["clients"] if i == 0 else r["methods"])
                for i, r in enumerate(placed)]
        draw_timeline(bars, 0.0, figure,
                      f"{title}: {span / 60:.0f} min packed on {cores} cores "
                      f"({busy / 60:.0f} core-minutes)", xlabel="minutes (ideal packing)",
                      target_min=60.0)
        print(f"figure: {figure}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", type=Path, default=GRID)
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                    help="phase 1's threads and phase 2's tasks at once (default: all cores)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="$OFL_CACHE_DIR of the run (default: the user's cache)")
    ap.add_argument("--figure", type=Path, default=None, help="the timeline, as a PNG")
    ap.add_argument("--log", type=Path, default=None, help="the measurement, as JSON")
    ap.add_argument("--summarise", action="store_true",
                    help="run nothing: read the column's finished tasks in --out (made over "
                         "several runs) and print each task's compute and its ideal packing on "
                         "--cores (--figure draws it)")
    args = ap.parse_args()

    tasks = column_tasks(args.grid, args.alpha, args.seed)
    if args.summarise:
        summarise(tasks, args.out, args.cores, args.figure,
                  f"DENSE Table 1 column, FMNIST α = {args.alpha}, seed {args.seed}")
        return
    done = [t.run_id() for t in tasks if sidecar(args.out, t).exists()]
    if done:
        raise SystemExit(f"{args.out} already holds finished tasks of this column ({done}): a "
                         "measurement runs the whole column; pass an empty --out")
    env = dict(os.environ)
    if args.cache_dir is not None:
        env["OFL_CACHE_DIR"] = str(args.cache_dir)
    print(f"column α = {args.alpha}, seed {args.seed}: {len(tasks)} tasks from {args.grid}; "
          f"{args.cores} cores; cache {env.get('OFL_CACHE_DIR', 'the default')}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        first, rest = Path(tmp) / "clients.yaml", Path(tmp) / "servers.yaml"
        write_grid(tasks[:1], first)
        write_grid(tasks[1:], rest)
        t0 = time.time()
        phase1 = run_phase(first, args.out, 1, args.cores, env)
        phase2 = run_phase(rest, args.out, args.cores, 1, env)
    total = phase1 + phase2
    rows = task_rows(args.out, tasks)
    print(f"\nphase 1 (clients + baselines, {args.cores} threads): {phase1:8.1f} s")
    print(f"phase 2 (servers, {args.cores} at a time, 1 thread): {phase2:8.1f} s")
    print(f"column end to end: {total:8.1f} s = {total / 60:.1f} min")
    busy = sum(r["seconds"] for r in rows[1:])
    print(f"phase 2 busy {busy:.0f} task-s over {args.cores} × {phase2:.0f} s "
          f"({busy / (args.cores * phase2):.0%} of the cores)")
    for r in rows:
        servers = ", ".join(f"{k} {v:.0f} s" for k, v in r["servers_s"].items())
        print(f"  {r['run_id']}  {'+'.join(r['methods']):30s} {r['seconds']:8.1f} s  "
              f"({r['threads']} threads)  servers: {servers}")
    if phase1 < 120:
        print("warning: phase 1 took under two minutes: the clients came from the cache, so "
              "this is no end-to-end measurement of the column")
    if args.figure is not None:
        draw_timeline(rows, t0, args.figure,
                      f"DENSE Table 1 column, FMNIST α = {args.alpha}, seed {args.seed}: "
                      f"{total / 60:.1f} min on {args.cores} cores")
        print(f"timeline: {args.figure}")
    if args.log is not None:
        args.log.parent.mkdir(parents=True, exist_ok=True)
        args.log.write_text(json.dumps({
            "alpha": args.alpha, "seed": args.seed, "cores": args.cores, "grid": str(args.grid),
            "phase1_s": phase1, "phase2_s": phase2, "total_s": total, "tasks": rows}, indent=1))


if __name__ == "__main__":
    main()
