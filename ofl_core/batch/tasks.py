"""Execute the notebooks with papermill: quick/full/grid task lists, resume, report.

A *task* is one notebook executed with one parameter dict. Its ``run_id`` is a stable hash of
the notebook's cell sources and the parameters, so editing a notebook or changing a parameter
makes a new task while re-running the same grid skips what already finished. A task writes,
atomically, ``<out>/runs/<notebook>/<run_id>.ipynb`` (the executed notebook) and
``<run_id>.json`` (its records plus the task's parameters and status): a task whose JSON exists
and parses (and whose notebook is there) is finished. :mod:`ofl_core.executors` runs the same
tasks concurrently (a local pool, Dask, SLURM through submitit) in this layout. Figures go to
``<out>/figures/<notebook>/`` and the HTML report to ``<out>/report/index.html``.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .results import (
    compare_with_paper,
    paper_results,
    read_records,
    records_frame,
    write_json_atomic,
)

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
#: Parameters the runner sets itself (a grid may not override them).
RUNNER_PARAMETERS = ("figures_dir",)


@dataclass(frozen=True)
class Task:
    notebook: str
    parameters: dict = field(default_factory=dict)

    def run_id(self, notebook_dir: Path = NOTEBOOK_DIR) -> str:
        return task_id(notebook_dir / f"{self.notebook}.ipynb", self.parameters)


@dataclass
class TaskResult:
    task: Task
    run_id: str
    status: str  # "done" | "skipped" | "failed"
    seconds: float = 0.0
    error: str = ""
    n_records: int = 0


def notebook_source_hash(path: Path) -> str:
    """Hash of a notebook's cell types and sources (outputs and metadata ignored)."""
    nb = json.loads(path.read_text())
    h = hashlib.sha256()
    for c in nb.get("cells", []):
        src = c.get("source", "")
        h.update(c.get("cell_type", "").encode())
        h.update(("".join(src) if isinstance(src, list) else src).encode())
    return h.hexdigest()


def task_id(notebook_path: Path, parameters: dict) -> str:
    blob = json.dumps({"nb": notebook_path.stem, "src": notebook_source_hash(notebook_path),
                       "params": parameters}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def list_notebooks(notebook_dir: Path = NOTEBOOK_DIR) -> list[str]:
    """Notebook names (without .ipynb) in ``notebook_dir``, sorted; partitions first."""
    names = sorted(p.stem for p in notebook_dir.glob("*.ipynb"))
    return sorted(names, key=lambda n: (n != "partitions", n))


def notebook_parameters(path: Path) -> dict:
    """The notebook's ``parameters`` cell as papermill sees it (name → info dict)."""
    import papermill

    return papermill.inspect_notebook(str(path))


def check_parameters(task: Task, notebook_dir: Path = NOTEBOOK_DIR) -> None:
    """Reject parameters the notebook does not declare, or that are not plain JSON."""
    path = notebook_dir / f"{task.notebook}.ipynb"
    if not path.is_file():
        known = ", ".join(list_notebooks(notebook_dir))
        raise ValueError(f"unknown notebook {task.notebook!r}; known: {known}")
    known_params = notebook_parameters(path)
    unknown = sorted(set(task.parameters) - set(known_params))
    if unknown:
        raise ValueError(
            f"notebook {task.notebook!r} has no parameter(s) {unknown}; "
            f"its parameters are: {', '.join(sorted(known_params))}"
        )
    reserved = sorted(set(task.parameters) & set(RUNNER_PARAMETERS))
    if reserved:
        raise ValueError(f"{task.notebook}: parameter(s) {reserved} are set by the runner")
    try:
        json.dumps(task.parameters, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{task.notebook}: parameters must be plain JSON values ({e})") from None


def load_grid(path: str | os.PathLike) -> list[Task]:
    """Tasks from a YAML grid: ``{notebook: [ {param: value, ...}, ... ]}``, or from every
    ``*.yaml`` file of a folder (``notebooks/grids/full/`` holds one file per notebook).

    An entry may also hold ``grid: {param: [v1, v2], ...}`` (with optional fixed keys beside
    it), expanded to the Cartesian product.
    """
    p = Path(path)
    if p.is_dir():
        return [t for f in sorted(p.glob("*.yaml")) for t in load_grid(f)]
    return _load_grid_file(p)


def _load_grid_file(path: Path) -> list[Task]:
    import itertools

    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a grid file maps notebook names to lists of parameter dicts")
    tasks = []
    for nb, entries in data.items():
        if entries is None:
            entries = [{}]
        if not isinstance(entries, list):
            raise ValueError(f"{path}: {nb!r} must map to a list of parameter dicts")
        for e in entries:
            e = dict(e or {})
            grid = e.pop("grid", None)
            if grid:
                keys = list(grid)
                for combo in itertools.product(*(grid[k] for k in keys)):
                    tasks.append(Task(nb, {**e, **dict(zip(keys, combo, strict=True))}))
            else:
                tasks.append(Task(nb, e))
    return tasks


def task_paths(out: Path, task: Task, run_id: str) -> tuple[Path, Path]:
    """``(<out>/runs/<notebook>/<run_id>.ipynb, <run_id>.json)``: a task's two outputs."""
    d = out / "runs" / task.notebook
    return d / f"{run_id}.ipynb", d / f"{run_id}.json"


_paths = task_paths  # older private name


def is_finished(out: Path, task: Task, run_id: str) -> bool:
    """Whether the task finished: its sidecar JSON (written last, atomically) parses as a dict
    with ``status: done``, and its executed notebook is there. Anything else is redone."""
    nb, js = task_paths(out, task, run_id)
    if not js.is_file() or not nb.is_file():
        return False
    try:
        d = json.loads(js.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(d, dict) and d.get("status") == "done"


def figures_dir_for(out: Path, task: Task, run_id: str, single: bool) -> Path:
    base = out / "figures" / task.notebook
    return base if single else base / run_id


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
    error = ""
    try:
        papermill.execute_notebook(
            str(notebook_dir / f"{task.notebook}.ipynb"), str(tmp), parameters=params,
            kernel_name=kernel_name, progress_bar=False, log_output=log_output,
            cwd=str(notebook_dir), execution_timeout=cell_timeout,
        )
    except Exception as e:  # noqa: BLE001 - a failed notebook marks its task, not the batch
        error = _short_error(e)
    secs = time.perf_counter() - t0
    if error:
        if tmp.exists():
            os.replace(tmp, nb_out.with_name(f"{run_id}.failed.ipynb"))
        return TaskResult(task, run_id, "failed", secs, error)
    records = read_records(tmp)
    os.replace(tmp, nb_out)
    write_json_atomic(js_out, {
        "status": "done", "notebook": task.notebook, "run_id": run_id,
        "parameters": task.parameters, "seconds": round(secs, 2),
        "records": [r.to_dict() for r in records],
    })
    return TaskResult(task, run_id, "done", secs, n_records=len(records))


def _short_error(e: BaseException) -> str:
    name = type(e).__name__
    if name == "PapermillExecutionError":
        return f"cell {getattr(e, 'exec_count', '?')}: {e.ename}: {e.evalue}"  # type: ignore
    return "".join(traceback.format_exception_only(type(e), e)).strip()


def run_tasks(
    tasks: Sequence[Task], out: str | os.PathLike, notebook_dir: Path = NOTEBOOK_DIR,
    resume: bool = True, cell_timeout: float | None = None, log: bool = True,
) -> list[TaskResult]:
    """Execute tasks one after another (finished ones skipped when ``resume``)."""
    out = Path(out)
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.notebook] = counts.get(t.notebook, 0) + 1
    results = []
    for i, task in enumerate(tasks, 1):
        run_id = task.run_id(notebook_dir)
        label = f"[{i}/{len(tasks)}] {task.notebook} {run_id}"
        if resume and is_finished(out, task, run_id):
            results.append(TaskResult(task, run_id, "skipped"))
            if log:
                print(f"{label}: already done, skipped", flush=True)
            continue
        if log:
            print(f"{label}: running {json.dumps(task.parameters)}", flush=True)
        fig = figures_dir_for(out, task, run_id, counts[task.notebook] == 1)
        res = execute_task(task, out, fig, notebook_dir, cell_timeout)
        results.append(res)
        if log:
            msg = f"{res.n_records} records" if res.status == "done" else f"FAILED: {res.error}"
            print(f"{label}: {res.status} in {res.seconds:.1f}s, {msg}", flush=True)
    return results


def finished_runs(out: Path) -> list[dict]:
    """Every finished task's sidecar JSON under ``<out>/runs``."""
    runs = []
    for js in sorted((out / "runs").glob("*/*.json")):
        try:
            d = json.loads(js.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if d.get("status") == "done":
            d["_ipynb"] = str(js.with_suffix(".ipynb"))
            runs.append(d)
    return runs


def paper_tables_for(records: list[dict]) -> list[tuple[str, str, object]]:
    """Every paper table with at least one cell matching these records (plus the tables the
    records name themselves), each as a paper-vs-ours comparison."""
    if not records:
        return []
    own = records_frame(records)[["paper", "table"]].drop_duplicates()
    keys = {(p, t) for p, t in own.itertuples(index=False) if p}
    cells = paper_results()[["paper", "table"]].drop_duplicates()
    out = []
    for paper, table in sorted({*keys, *cells.itertuples(index=False)}):
        cmp = compare_with_paper(records, paper, table)
        if (paper, table) in keys or cmp["paper"].notna().any():
            out.append((paper, table, cmp))
    return out


def build_report(out: str | os.PathLike, failures: Iterable[TaskResult] = ()) -> Path:
    """``<out>/report/index.html``: paper-vs-ours tables of every finished run, figures,
    links to each executed notebook rendered without inputs (nbconvert), and failures."""
    from nbconvert import HTMLExporter

    out = Path(out)
    rep = out / "report"
    rep.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(exclude_input=True)
    runs = finished_runs(out)
    by_nb: dict[str, list[dict]] = {}
    for r in runs:
        by_nb.setdefault(r["notebook"], []).append(r)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ofl report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}"
        ".fail{color:#b00}</style></head><body>",
        "<h1>ofl: one-shot federated learning, reproduced</h1>",
        f"<p>{len(runs)} finished runs. Paper numbers are the papers' tables; ours are the mean "
        "over seeds of the last-epoch and best-epoch test accuracy.</p>",
    ]
    fails = [f for f in failures if f.status == "failed"]
    if fails:
        parts.append("<h2 class='fail'>Failed runs</h2><ul>")
        for f in fails:
            parts.append(f"<li class='fail'>{html.escape(f.task.notebook)} {f.run_id}: "
                         f"{html.escape(f.error)}</li>")
        parts.append("</ul>")
    for nb, nb_runs in sorted(by_nb.items()):
        parts.append(f"<h2>{html.escape(nb)}</h2>")
        records = [rec for r in nb_runs for rec in r.get("records", [])]
        for paper, table, cmp in paper_tables_for(records):
            parts.append(f"<h3>{html.escape(paper)} {html.escape(table)}: paper vs ours</h3>")
            parts.append(cmp.to_html(index=False, na_rep="n/a", float_format="%.2f"))
        for r in nb_runs:
            rid = r["run_id"]
            page = rep / nb / f"{rid}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            body, _ = exporter.from_filename(r["_ipynb"])
            page.write_text(body)
            params = html.escape(json.dumps(r.get("parameters", {})))
            parts.append(f"<p><a href='{nb}/{rid}.html'>run {rid}</a> "
                         f"({r.get('seconds', 0):.0f} s) parameters: <code>{params}</code></p>")
        figs = sorted((out / "figures" / nb).rglob("*.png"))
        for f in figs:
            rel = os.path.relpath(f, rep)
            parts.append(f"<figure><img src='{rel}'><figcaption>{html.escape(f.name)}"
                         "</figcaption></figure>")
    parts.append("</body></html>")
    index = rep / "index.html"
    index.write_text("\n".join(parts))
    return index
