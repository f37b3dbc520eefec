"""What the report says about one run: a title saying what ran, the command that re-makes it
(a one-task grid file written beside the report, and the shipped grid it came from where one
matches), its true compute and its machine, and the header of its rendered notebook page."""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

from .tasks import load_grid

#: parameters a title names first, in this order (the rest only in the run's settings)
TITLE_KEYS = ("dataset", "fedcvae_dataset", "arch", "alphas", "fedcvae_alphas", "num_clients",
              "fedcvae_num_clients", "methods", "fedcvae_methods", "presets", "seeds")


def run_title(run: dict) -> str:
    """``"main_tables: dataset fmnist · alphas 0.1 · methods dense · seeds 1"``; a run at the
    notebook's defaults says so."""
    params = run.get("parameters") or {}
    if not params:
        return f"{run['notebook']}: the notebook's quick defaults"
    shown = [k for k in TITLE_KEYS if k in params] or list(params)[:4]

    def text(v: object) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    return f"{run['notebook']}: " + " · ".join(f"{k} {text(params[k])}" for k in shown)


def machine_text(machine: dict | None) -> str:
    if not machine:
        return "machine not recorded"
    gpu = f"GPU: {machine['gpus']}" if machine.get("gpus") else "no GPU"
    threads = f", {machine['threads']} thread(s)" if machine.get("threads") else ""
    cpu = ", ".join(str(machine[k]) for k in ("cpu", "cpu_features") if machine.get(k))
    return (f"{machine.get('host', '?')}{f' ({cpu})' if cpu else ''}, "
            f"{machine.get('cores', '?')} cores{threads}, {gpu}")


def cost_text(run: dict) -> str:
    """The run's wall time and, when larger, the servers' own time over every resumed part
    (kept in their checkpoints) — what re-making it from nothing costs at least."""
    wall = float(run.get("seconds") or 0.0)
    servers = float(run.get("server_seconds") or 0.0)
    text = f"{wall:.0f} s wall"
    if servers > wall:
        text += f"; its servers' own compute {servers:.0f} s (resumed or cached work)"
    return text


def shipped_grids(grids_dir: Path | None) -> dict[str, str]:
    """``json(notebook, parameters)`` → the shipped grid file holding that task (read once per
    report)."""
    found: dict[str, str] = {}
    if grids_dir is None or not Path(grids_dir).is_dir():
        return found
    for f in sorted(Path(grids_dir).glob("*.yaml")):
        try:
            tasks = load_grid(f)
        except ValueError:
            continue
        for t in tasks:
            found.setdefault(json.dumps([t.notebook, t.parameters], sort_keys=True),
                             f"{Path(grids_dir).parent.name}/{Path(grids_dir).name}/{f.name}")
    return found


def _shortest(path: Path) -> str:
    """``path`` relative to the current folder when it lies below it, else absolute."""
    path = Path(path).resolve()
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def write_reproducer(run: dict, rep: Path, shipped: dict[str, str]) -> dict:
    """Write ``report/reproduce/<run_id>.yaml`` (a grid of this one task, its exact parameters)
    and return what the report says of it: the command, the shipped grid it belongs to (from
    :func:`shipped_grids`, or None), its title, cost and machine."""
    params = run.get("parameters") or {}
    folder = rep / "reproduce"
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / f"{run['run_id']}.yaml"
    f.write_text(yaml.safe_dump({run["notebook"]: [params]}, sort_keys=False))
    command = (f"python run_all.py --quick --only {run['notebook']}" if not params else
               f"python run_all.py --grid {_shortest(f)} --jobs 1")
    return {"command": command,
            "grid": shipped.get(json.dumps([run["notebook"], params], sort_keys=True)),
            "cost": cost_text(run), "machine": machine_text(run.get("machine")),
            "title": run_title(run)}


def page_header(run: dict) -> str:
    """The top of a run's rendered notebook page: its title, a link back to the scoreboard
    and to the run's row, seeds, wall time, machine, code and every parameter."""
    rp = run["reproduce"]
    e = html.escape
    params = "".join(f"<tr><th>{e(str(k))}</th><td><code>{e(json.dumps(v))}</code>"
                     f"{'*' if k in (run.get('parameters') or {}) else ''}</td></tr>"
                     for k, v in (run.get("effective") or {}).items())
    return (
        '<header style="font-family:system-ui,sans-serif;font-size:14px;margin:8px 16px;'
        'border-bottom:1px solid #ddd">'
        f'<p><a href="../index.html#scoreboard">← scoreboard</a> · '
        f'<a href="../index.html#run-{e(run["run_id"])}">this run in the list of runs</a></p>'
        f'<h1 style="font-size:19px">{e(rp["title"])}</h1>'
        f'<p>run {e(run["run_id"])} · seeds {e(", ".join(map(str, run.get("seeds", []))))} · '
        f'{e(rp["cost"])} · {e(rp["machine"])} · {e(run.get("code_version", ""))}</p>'
        f'<p>re-make it: <code>{e(rp["command"])}</code>'
        + (f' (a task of <code>{e(rp["grid"])}</code>)' if rp["grid"] else "") + "</p>"
        '<details><summary>parameters (* set by the grid, the rest the notebook\'s defaults)'
        f'</summary><table>{params}</table></details></header>')


__all__ = ["cost_text", "machine_text", "page_header", "run_title", "shipped_grids",
           "write_reproducer"]
