"""Tasks: one notebook with one parameter dict, its run id, its outputs, and the grids.

A *task* is one notebook executed with one parameter dict. Its ``run_id`` is a stable hash of
the notebook's cell sources and the parameters, so editing a notebook or changing a parameter
makes a new task while re-running the same grid skips what already finished. A task writes,
atomically, ``<out>/runs/<notebook>/<run_id>.ipynb`` (the executed notebook) and
``<run_id>.json`` (its records plus the task's parameters and status): a task whose JSON exists
and parses (and whose notebook is there) is finished. Figures go to
``<out>/figures/<notebook>/``. A :class:`TaskSpec` is what a worker needs to run one task
(:mod:`ofl_core.batch.execute`); :mod:`ofl_core.batch.grid` runs a grid of them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..project import notebook_dir
from ..results import write_json_atomic
from .param_types import check_value, literal_default
from .param_values import check_values
from .scale import LEGACY_SERVER_SIZES
from .yamlfile import load_yaml


def _default_notebook_dir() -> Path:
    """The checkout's ``notebooks/`` (:mod:`ofl_core.project`); where none is found, the folder
    beside the package, so that importing this module never fails (running a task then names
    the missing notebook)."""
    try:
        return notebook_dir()
    except FileNotFoundError:
        return Path(__file__).resolve().parents[2] / "notebooks"


#: the notebooks run_all.py executes, found once at import (``$OFL_PROJECT_DIR``)
NOTEBOOK_DIR = _default_notebook_dir()
#: the most tasks one grid file may expand to (a product of long lists is refused, not built)
MAX_TASKS = 100_000
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
    detail: str = ""  # a failure's last traceback lines


def _stat_key(path: Path) -> tuple[str, int, int]:
    """What a file's cached inspection is keyed on: its path, modification time and size (an
    edited notebook is inspected again)."""
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_mtime_ns, st.st_size


def notebook_source_hash(path: Path) -> str:
    """Hash of a notebook's cell types and sources (outputs and metadata ignored); computed
    once per notebook file version and process (a grid of 10⁶ tasks reads each notebook once)."""
    return _source_hash(*_stat_key(path))


@functools.lru_cache(maxsize=256)
def _source_hash(path: str, mtime_ns: int, size: int) -> str:
    nb = json.loads(Path(path).read_text())
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
    return list(_notebooks(*_stat_key(notebook_dir)))


@functools.lru_cache(maxsize=16)
def _notebooks(notebook_dir: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    names = sorted(p.stem for p in Path(notebook_dir).glob("*.ipynb"))
    return tuple(sorted(names, key=lambda n: (n != "partitions", n)))


def notebook_parameters(path: Path) -> dict:
    """The notebook's ``parameters`` cell as papermill sees it (name → info dict), inspected
    once per notebook file version and process (about 2 ms each time otherwise)."""
    return copy.deepcopy(_inspect(*_stat_key(path)))


@functools.lru_cache(maxsize=256)
def _inspect(path: str, mtime_ns: int, size: int) -> dict:
    import papermill

    return papermill.inspect_notebook(path)


def check_parameters(task: Task, notebook_dir: Path = NOTEBOOK_DIR) -> None:
    """Reject parameters the notebook does not declare, that are not plain JSON, or whose
    values the notebook cannot run (:mod:`~ofl_core.batch.param_values`)."""
    known_names = list_notebooks(notebook_dir)
    if task.notebook not in known_names:  # a name, never a path: outputs stay under --out
        raise ValueError(f"unknown notebook {task.notebook!r}; known: {', '.join(known_names)}")
    path = notebook_dir / f"{task.notebook}.ipynb"
    known_params = notebook_parameters(path)
    unknown = sorted(set(task.parameters) - set(known_params))
    if unknown:
        old = [k for k in unknown if k in LEGACY_SERVER_SIZES]
        hint = (" (the server sizes are one parameter now: server: {"
                + ", ".join(f"{LEGACY_SERVER_SIZES[k]}: ..." for k in old) + "}, a size left "
                "out = each method's paper default)" if old and "server" in known_params else "")
        raise ValueError(
            f"notebook {task.notebook!r} has no parameter(s) {unknown}; "
            f"its parameters are: {', '.join(sorted(known_params))}{hint}"
        )
    reserved = sorted(set(task.parameters) & set(RUNNER_PARAMETERS))
    if reserved:
        raise ValueError(f"{task.notebook}: parameter(s) {reserved} are set by the runner")
    try:
        json.dumps(task.parameters, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{task.notebook}: parameters must be plain JSON values ({e})") from None
    for name, value in task.parameters.items():
        check_value(task.notebook, name, value, known_params[name]["inferred_type_name"])
    check_values(task.notebook, task.parameters,
                 {**notebook_defaults(task.notebook, notebook_dir), **task.parameters})


def notebook_defaults(notebook: str, notebook_dir: Path = NOTEBOOK_DIR) -> dict:
    """The notebook's ``parameters`` cell values (its quick defaults), the runner's own
    parameters left out."""
    params = notebook_parameters(notebook_dir / f"{notebook}.ipynb")
    return {k: literal_default(v["default"]) for k, v in params.items()
            if k not in RUNNER_PARAMETERS}


def effective_parameters(task: Task, notebook_dir: Path = NOTEBOOK_DIR) -> dict:
    """Every parameter the task runs with: the notebook's defaults overridden by the task's."""
    return {**notebook_defaults(task.notebook, notebook_dir), **task.parameters}


def parameters_agree(a: dict, b: dict, lists: dict[str, Callable[[list, list], bool]],
                     ignore: frozenset[str] = frozenset()) -> bool:
    """Whether two tasks' parameters are equal but for ``ignore``d keys and the list
    parameters of ``lists``, each compared by its own rule (``rule(a_value, b_value)``)."""
    for key in (set(a) | set(b)) - ignore:
        va, vb = a.get(key), b.get(key)
        if key in lists and isinstance(va, list) and isinstance(vb, list):
            if not lists[key](va, vb):
                return False
        elif va != vb:
            return False
    return True


def load_grid(path: str | os.PathLike) -> list[Task]:
    """Tasks from a YAML grid: ``{notebook: [ {param: value, ...}, ... ]}``, or from every
    ``*.yaml`` file of a folder (``notebooks/grids/full/`` holds one file per notebook).

    An entry may also hold ``grid: {param: [v1, v2], ...}`` (with optional fixed keys beside
    it), expanded to the Cartesian product; a key in ``grid`` replaces the same fixed key (an
    entry merged from another with ``<<: *anchor`` varies what the anchor fixed).
    """
    p = Path(path)
    if p.is_dir():
        return [t for f in sorted(p.glob("*.yaml")) for t in load_grid(f)]
    return _load_grid_file(p)


def _load_grid_file(path: Path) -> list[Task]:
    import yaml

    if not Path(path).is_file():
        raise ValueError(f"grid file {path} not found")
    try:
        data = load_yaml(path) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid YAML ({str(e).splitlines()[0]})"
                         ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a grid file maps notebook names to lists of parameter dicts")
    tasks = []
    for nb, entries in data.items():
        if entries is None:
            entries = [{}]
        if not isinstance(entries, list):
            raise ValueError(f"{path}: {nb!r} must map to a list of parameter dicts")
        for e in entries:
            if not isinstance(e, dict | None):
                raise ValueError(f"{path}: {nb!r}: each entry must be a mapping of parameters "
                                 f"(got {e!r})")
            e = dict(e or {})
            grid = e.pop("grid", None)
            if grid is not None and (not isinstance(grid, dict) or not all(
                    isinstance(v, list) for v in grid.values())):
                raise ValueError(f"{path}: {nb!r}: 'grid' must map parameters to lists of "
                                 f"values (got {grid!r})")
            if grid:
                n = math.prod(len(v) for v in grid.values())
                if len(tasks) + n > MAX_TASKS:
                    raise ValueError(
                        f"{path}: {nb!r}: 'grid' expands to {n:,} tasks ("
                        + " × ".join(f"{len(v)} {k}" for k, v in grid.items())
                        + f"); a grid file holds at most {MAX_TASKS:,}: split it or shorten "
                        "its lists")
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


def is_finished(out: Path, task: Task, run_id: str) -> bool:
    """Whether the task finished: its sidecar JSON (written last, atomically) parses as a dict
    with ``status: done``, and its executed notebook is there and readable (a notebook the
    report cannot read is listed as failed, so the task is redone). Anything else is redone."""
    nb, js = task_paths(out, task, run_id)
    if not js.is_file() or not nb.is_file():
        return False
    try:
        d = json.loads(js.read_text())
        saved = json.loads(nb.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return (isinstance(d, dict) and d.get("status") == "done" and isinstance(saved, dict)
            and isinstance(saved.get("cells"), list))


def made_by(out: Path, task: Task, run_id: str) -> str | None:
    """The ``code_version`` a finished task's sidecar names (None when it names none)."""
    try:
        d = json.loads(task_paths(out, task, run_id)[1].read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    v = d.get("code_version") if isinstance(d, dict) else None
    return v if isinstance(v, str) else None


def failure_path(out: Path, notebook: str, run_id: str) -> Path:
    return Path(out) / "runs" / notebook / f"{run_id}.failed.json"


def record_outcome(out: Path, res: TaskResult) -> None:
    """Keep a failure in ``<out>/runs`` until the task is re-run (its ``.failed.json``); a
    task that finished removes its old failure."""
    path = failure_path(out, res.task.notebook, res.run_id)
    if res.status == "failed":
        write_json_atomic(path, {"status": "failed", "notebook": res.task.notebook,
                                 "run_id": res.run_id, "parameters": res.task.parameters,
                                 "error": res.error, "detail": res.detail,
                                 "seconds": round(res.seconds, 2)})
    elif res.status == "done":
        path.unlink(missing_ok=True)


def figures_dir_for(out: Path, task: Task, run_id: str, single: bool) -> Path:
    base = out / "figures" / task.notebook
    return base if single else base / run_id


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


def spec_finished(spec: TaskSpec) -> bool:
    """Whether the task's sidecar is present and valid (and its notebook is there)."""
    return is_finished(Path(spec.out), spec.task, spec.run_id)


def result_to_dict(res: TaskResult) -> dict:
    """A :class:`TaskResult` as plain JSON data."""
    return {**dataclasses.asdict(res), "task": {"notebook": res.task.notebook,
                                                "parameters": res.task.parameters}}


def result_from_dict(d: dict) -> TaskResult:
    return TaskResult(**{**d, "task": Task(d["task"]["notebook"], d["task"]["parameters"])})
