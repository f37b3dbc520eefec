"""The HTML report ``<out>/report/index.html``: the scoreboard first (every paper table a run
touched, the paper's number beside ours with a verdict), the failures, the coverage of the
papers' cells, the measurements no paper table has, every run's settings one click away, and
the figures. Each executed notebook is rendered without its inputs (nbconvert) beside it.

Built from ``templates/report.html.j2`` (jinja2, autoescaped) and pandas Styler; written
atomically.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from ..project import project_dir
from .beyond import beyond_table
from .coverage import coverage, paper_cell_set, planned_cells
from .gaps import DECISIONS_DIR, Gap, doc_sections, load_gaps, unused_gaps
from .runfiles import BadRunFile, check_failure, check_run, read_json
from .runpages import page_header, shipped_grids, write_reproducer
from .scale import run_scale
from .scoreboard import (
    EXPORT_COLUMNS,
    annotated_frame,
    boards,
    dataset_summaries,
    entries,
    export_rows,
    further,
    paper_verdicts,
    split,
    summary,
)
from .tasks import (
    NOTEBOOK_DIR,
    Task,
    TaskResult,
    effective_parameters,
    list_notebooks,
    load_grid,
    notebook_defaults,
    parameters_agree,
)
from .yamlfile import load_yaml

FULL_GRID = NOTEBOOK_DIR / "grids" / "full"
#: paper-scale records shipped with the project (sidecar JSONs, as <out>/runs holds them)
RESULTS_DIR = NOTEBOOK_DIR.parent / "results"  # the checkout of ofl_core.project


def _problem(problems: list[dict] | None, js: Path, root: Path, error: str) -> None:
    if problems is not None:
        try:
            name = js.relative_to(root).as_posix()
        except ValueError:
            name = str(js)
        problems.append({"file": name, "error": error})


def _load(js: Path, check, notebooks: set[str], problems: list[dict] | None,
          root: Path) -> dict | None:
    """``check(json)`` of one run file, or None with its problem listed (naming the file)."""
    try:
        return check(read_json(js), js, notebooks)
    except BadRunFile as e:
        _problem(problems, js, root, str(e))
        return None


def finished_runs(out: Path, problems: list[dict] | None = None) -> list[dict]:
    """Every finished task's sidecar JSON under ``<out>/runs``, each checked
    (:mod:`~ofl_core.batch.runfiles`); a bad one is left out and listed in ``problems``."""
    runs = []
    notebooks = set(list_notebooks())
    for js in sorted((Path(out) / "runs").glob("*/*.json")):
        if js.name.endswith(".failed.json"):
            continue
        d = _load(js, check_run, notebooks, problems, Path(out))
        if d is not None:
            d["_ipynb"] = str(js.with_suffix(".ipynb"))
            runs.append(d)
    return runs


def failed_runs(out: Path, failures: Iterable[TaskResult] = (),
                problems: list[dict] | None = None) -> list[dict]:
    """Failures kept in ``<out>/runs`` (earlier runs too) and this batch's, newest first; a
    task that has since finished is not a failure."""
    found: dict[tuple[str, str], dict] = {}
    notebooks = set(list_notebooks())
    for js in sorted((Path(out) / "runs").glob("*/*.failed.json")):
        d = _load(js, check_failure, notebooks, problems, Path(out))
        if d is not None:
            found[(d["notebook"], d["run_id"])] = d
    for f in failures:
        if f.status == "failed":
            found[(f.task.notebook, f.run_id)] = {
                "notebook": f.task.notebook, "run_id": f.run_id, "error": f.error,
                "detail": f.detail, "parameters": f.task.parameters}
    done = {(r["notebook"], r["run_id"]) for r in finished_runs(out)}
    return [d for k, d in found.items() if k not in done]


def _references() -> dict[str, list[dict]]:
    """Effective parameters of every full-grid task, per notebook (what paper scale is)."""
    refs: dict[str, list[dict]] = {}
    for t in load_grid(FULL_GRID):
        refs.setdefault(t.notebook, []).append(effective_parameters(t))
    return refs


def _render_notebook(src: Path, page: Path, header: str = "", title: str = "") -> str | None:
    """Render an executed notebook without inputs, ``header`` (HTML) at the top of its body
    and ``title`` as the page's title; the error text when it cannot be read (or when nbconvert,
    part of the notebook extra, is not installed: the records are reported all the same)."""
    try:
        from nbconvert import HTMLExporter
    except ImportError:
        return "nbconvert is not installed, so the executed notebook is not rendered"

    # no script from a CDN (MathJax, require.js, widgets): the page must open offline and from
    # a copied report folder; the notebooks' outputs are tables, text and PNGs
    offline = dict.fromkeys(("mathjax_url", "require_js_url", "jquery_url", "widget_renderer_url",
                             "mermaid_js_url", "mermaid_layout_elk_js_url",
                             "jupyter_widgets_base_url"), "")
    try:
        body, _ = HTMLExporter(exclude_input=True, exclude_output_prompt=True,
                               exclude_input_prompt=True, **offline).from_filename(str(src))
    except Exception as e:  # noqa: BLE001 - one unreadable notebook is a listed failure
        return str(e)[:300] or type(e).__name__
    body = re.sub(r'<script[^>]*\ssrc=""[^>]*>\s*</script>', "", body)
    if title:
        body = re.sub(r"<title>.*?</title>", lambda _: f"<title>{html.escape(title)}</title>",
                      body, count=1, flags=re.S)
    if header:
        body = re.sub(r"<body[^>]*>", lambda m: m.group(0) + header, body, count=1)
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(body)
    return None


def shipped_runs(results: Path = RESULTS_DIR, problems: list[dict] | None = None) -> list[dict]:
    """Finished runs shipped in ``results/`` (``<notebook>/<run_id>.json`` for each of the
    project's notebooks), marked shipped; each checked as a sidecar is, a bad one left out and
    listed in ``problems`` (other folders of ``results/`` hold other measurements)."""
    runs = []
    notebooks = set(list_notebooks())
    results = Path(results)
    for js in sorted(results.glob("*/*.json")):
        if js.parent.name not in notebooks:
            continue
        d = _load(js, check_run, notebooks, problems, results.parent)
        if d is not None:
            runs.append({**d, "shipped": js.relative_to(results.parent).as_posix()})
    return runs


#: list parameters a shipped run covers a task on when the task's values are among the run's
#: (a run of methods [feddf, fed-dafl] at seeds [1, 2] holds the task of fed-dafl at seed 2:
#: each method and seed is seeded and computed on its own)
COVERING_PARAMETERS = frozenset({"methods", "seeds", "alphas", "presets", "fedcvae_methods"})


def _holds(run_values: list, task_values: list) -> bool:
    return all(v in run_values for v in task_values)


def shipped_for(tasks: Sequence[Task], results: Path = RESULTS_DIR,
                runs: Sequence[dict] | None = None) -> list[dict | None]:
    """For each task, the shipped run of ``results/`` made with the very same notebook and
    parameters (its sidecar's ``shipped`` path and ``code_version`` say which), else one that
    holds it (the same parameters but for :data:`COVERING_PARAMETERS`, where the run's lists
    include the task's; marked ``covers``), or None. ``runs``: :func:`shipped_runs` of
    ``results``, when already read.

    Matched on the parameters, not the run id: the run id also hashes the notebook's source,
    so a record shipped from an earlier commit of the notebook has another id for the same
    grid task."""
    def key(notebook: str, parameters: dict) -> str:
        return json.dumps([notebook, parameters], sort_keys=True)

    runs = shipped_runs(results) if runs is None else runs
    by_key: dict[str, dict] = {}
    for run in runs:
        by_key.setdefault(key(run["notebook"], run.get("parameters", {})), run)
    holds = dict.fromkeys(COVERING_PARAMETERS, _holds)
    # each shipped run's effective parameters, read only for the notebooks of tasks with no
    # exact match (each notebook inspected once, not every shipped run's)
    effective: dict[int, dict] = {}
    out: list[dict | None] = []
    for t in tasks:
        exact = by_key.get(key(t.notebook, t.parameters))
        if exact is None:
            mine = effective_parameters(t)
            for i, run in enumerate(runs):
                if run["notebook"] != t.notebook:
                    continue
                if i not in effective:
                    effective[i] = effective_parameters(Task(run["notebook"],
                                                             run.get("parameters", {})))
                if parameters_agree(effective[i], mine, holds):
                    exact = {**run, "covers": True}
                    break
        out.append(exact)
    return out


def shipped_compute(results: Path, problems: list[dict]) -> dict[str, float]:
    """``results/compute.yaml``: run id → the servers' own seconds over every resumed part, for
    shipped runs whose records predate the records keeping it (read from their checkpoints
    when they were shipped). A malformed file is listed in ``problems`` and ignored."""
    import yaml

    f = Path(results) / "compute.yaml"
    if not f.is_file():
        return {}
    try:
        data = load_yaml(f) or {}
        if not isinstance(data, dict):
            raise ValueError("expected a mapping of run id → {server_seconds, source}")
        out = {}
        for rid, v in data.items():
            secs = v.get("server_seconds") if isinstance(v, dict) else None
            if not isinstance(secs, int | float) or secs < 0 or not v.get("source"):
                raise ValueError(f"{rid}: needs server_seconds (a number ≥ 0) and a source")
            out[str(rid)] = float(secs)
        return out
    except (yaml.YAMLError, ValueError) as e:
        problems.append({"file": f.name, "error": str(e)})
        return {}


def prepare_runs(runs: list[dict], rep: Path, problems: list[dict],
                 grids: Path | None = None, compute: dict[str, float] | None = None
                 ) -> list[dict]:
    """``runs`` with what the report shows of each (scale, seeds, compute, re-make command,
    its rendered page): a run whose notebook cannot be read is left out, listed in
    ``problems``."""
    refs = _references()
    shipped = shipped_grids(grids)
    defaults: dict[str, dict] = {}
    kept = []
    for r in runs:
        nb, rid = r["notebook"], r["run_id"]
        r["href"] = f"{nb}/{rid}.html" if "_ipynb" in r else None
        if nb not in defaults:
            defaults[nb] = notebook_defaults(nb) if (NOTEBOOK_DIR / f"{nb}.ipynb").is_file() \
                else {}
        # a parameter added to the notebook after the run was made is at its default in that
        # run (a new parameter's default keeps the earlier behaviour): older shipped runs keep
        # their scale
        eff = {**defaults[nb], **(r.get("effective_parameters") or r.get("parameters", {}))}
        r["effective"] = eff
        r["scale"] = run_scale(eff, refs.get(nb, []), quick=not r.get("parameters"),
                               notebook=nb)
        recs = r.get("records", [])
        r["seeds"] = sorted({x["seed"] for x in recs})
        r["sources"] = sorted({x.get("data_source") or x["dataset"] for x in recs})
        r["server_seconds"] = max(server_seconds(recs),
                                  (compute or {}).get(rid, 0.0) if "shipped" in r else 0.0)
        r["commits_behind"] = _commits_behind(r.get("code_version", ""))
        r["reproduce"] = write_reproducer(r, rep, shipped)
        err = (_render_notebook(Path(r["_ipynb"]), rep / nb / f"{rid}.html",
                                page_header(r), r["reproduce"]["title"])
               if "_ipynb" in r else None)
        if err is not None:
            problems.append({"notebook": nb, "run_id": rid, "detail": "",
                             "error": f"its executed notebook could not be read: {err}"})
            continue
        kept.append(r)
    return kept


def _commits_behind(code_version: str) -> int | None:
    """How many commits the checkout the report is made in has beyond the run's commit
    (``code_version`` = "ofl_core <v>, git <commit>"); None where git cannot tell."""
    m = re.search(r"git ([0-9a-f]{7,40})", code_version or "")
    try:
        root = project_dir()
    except FileNotFoundError:
        return None
    if m is None or not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-list", "--count",
                              f"{m.group(1)}..HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() \
        else None


def _failure_pages(fails: list[dict], out: Path, rep: Path) -> None:
    for f in fails:
        src = out / "runs" / f["notebook"] / f"{f['run_id']}.failed.ipynb"
        page = rep / "failed" / f["notebook"] / f"{f['run_id']}.html"
        f["href"] = (f"failed/{f['notebook']}/{f['run_id']}.html"
                     if src.is_file() and _render_notebook(src, page) is None else None)


def _further_html(frame) -> str:
    if frame.empty:
        return ""
    return (frame.style.hide(axis="index").format(precision=2, na_rep="", escape="html")
            .set_table_attributes('class="further"').to_html())


def _taxonomy_html() -> str:
    """The method taxonomy (what each method needs and uploads) as an HTML table."""
    from ..taxonomy import taxonomy_frame  # imports every method (torch): not at run_all's start

    frame = taxonomy_frame().reset_index().replace({True: "yes", False: "no"})
    frame.columns = ["method", "source", "data-free", "rounds", "server stages",
                     "client uploads", "server needs", "output", "mixed archs"]
    return (frame.style.hide(axis="index").format(escape="html")
            .set_table_attributes('class="taxonomy"').to_html())


def _figures(out: Path, rep: Path) -> dict[str, list[str]]:
    """The runs' figures, copied into the report's own ``figures/`` folder (a copied or
    attached report shows them), by notebook, as paths relative to the report."""
    figs: dict[str, list[str]] = {}
    for f in sorted((out / "figures").glob("*/**/*.png")):
        rel = f.relative_to(out / "figures")
        dst = rep / "figures" / rel
        if not dst.exists() or dst.stat().st_mtime < f.stat().st_mtime:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
        figs.setdefault(rel.parts[0], []).append(dst.relative_to(rep).as_posix())
    return figs


def _scoreboard_figures(rows: list[dict], rep: Path) -> dict[str, str]:
    """Paper vs ours for each table with paper-scale entries, saved under
    ``report/figures/scoreboard/``; ``{board anchor: path relative to the report}``."""
    import matplotlib.pyplot as plt

    from ..plots import plot_scoreboard, save_figure

    frame = pd.DataFrame(rows, columns=list(EXPORT_COLUMNS))
    frame = frame[frame["paper_scale"].astype(bool) & frame["paper_acc"].notna()]
    out = {}
    for (paper, table), t in frame.groupby(["paper", "table"], sort=False):
        name = f"{paper}-{table}"
        fig = plot_scoreboard(t, f"{paper} {table}: the paper's number and ours (paper scale)")
        save_figure(fig, rep / "figures" / "scoreboard", name)
        plt.close(fig)
        out[name] = f"figures/scoreboard/{name}.png"
    return out


def _see_links(rep: Path, docs: Path = DECISIONS_DIR):
    """``links(gap)``: ``(href, title)`` of each decisions section a gap names, the href relative
    to the report's folder (``docs/decisions/<file>.md#<anchor>``)."""
    titles = doc_sections(docs) if docs.is_dir() else {}

    def links(gap: Gap) -> list[tuple[str, str]]:
        out = []
        for ref in gap.see:
            name, anchor = ref.split("#", 1)
            out.append((f"{Path(os.path.relpath(docs / name, rep)).as_posix()}#{anchor}",
                        titles.get(ref, ref)))
        return out

    return links


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def server_seconds(records: Iterable[dict]) -> float:
    """The servers' own time of a run's records: more than the run's wall time when it resumed
    from checkpoints or reused cached clients, so that a run's cost is not understated. One
    computation labelled for several tables (the same method, config hash, seed and preset)
    counts once."""
    once = {(x.get("method"), x.get("config_hash"), x.get("seed"), x.get("preset")):
            float(x.get("wall_time_s") or 0.0) for x in records}
    return sum(once.values())


def build_report(out: str | os.PathLike, failures: Iterable[TaskResult] = (),
                 results: Path | None = RESULTS_DIR) -> Path:
    """Write ``<out>/report/index.html`` (and one page per executed notebook) and return it.
    The runs shipped in ``results`` (paper-scale records) are on the scoreboard too, and a
    gap's explanation from ``results/gaps.yaml`` under its entry."""
    import jinja2

    out = Path(out)
    rep = out / "report"
    rep.mkdir(parents=True, exist_ok=True)
    problems: list[dict] = []  # files the report does not believe, one entry each
    fails = failed_runs(out, failures, problems)
    mine = finished_runs(out, problems)
    have = {(r["notebook"], r["run_id"]) for r in mine}
    shipped = [r for r in (shipped_runs(results, problems) if results is not None else [])
               if (r["notebook"], r["run_id"]) not in have]
    runs = prepare_runs(mine + shipped, rep, fails,
                        None if results is None else results / "grids",
                        shipped_compute(results, problems) if results is not None else {})
    _failure_pages(fails, out, rep)
    matched, unmatched = split(annotated_frame(runs))
    gaps: list[Gap] = []
    if results is not None:
        try:
            gaps = load_gaps(results / "gaps.yaml")
        except ValueError as e:  # the scoreboard without explanations, the file listed
            problems.append({"file": (results / "gaps.yaml").name, "error": str(e)})
    ent = entries(matched, gaps)
    problems += [{"file": "gaps.yaml", "error": e}
                 for e in unused_gaps(gaps, [x.gap for x in ent.get("entry", ())])]
    every = paper_cell_set()
    cov = coverage([planned_cells(t.notebook, effective_parameters(t), every)
                    for t in load_grid(FULL_GRID)])
    env = jinja2.Environment(loader=jinja2.PackageLoader("ofl_core.batch", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    rows = export_rows(ent)
    board_figures = _scoreboard_figures(rows, rep)
    figures = {**({"scoreboard": list(board_figures.values())} if board_figures else {}),
               **_figures(out, rep)}
    html = env.get_template("report.html.j2").render(
        runs=runs, fails=fails, boards=boards(ent, unmatched, matched), summary=summary(ent),
        datasets=dataset_summaries(ent),
        verdict_lines=paper_verdicts(ent), repro={r["run_id"]: r["reproduce"] for r in runs},
        further=_further_html(further(unmatched)), beyond=beyond_table(runs),
        coverage=cov, figures=figures,
        board_figures=board_figures,
        taxonomy=_taxonomy_html(), see_links=_see_links(rep), json=json, problems=problems)
    frame = pd.DataFrame(rows, columns=list(EXPORT_COLUMNS))
    _write_atomic(rep / "scoreboard.csv", frame.to_csv(index=False))
    _write_atomic(rep / "scoreboard.json", json.dumps(rows, indent=1))
    index = rep / "index.html"
    _write_atomic(index, html)  # never a 0-byte report
    return index


__all__ = ["Task", "build_report", "failed_runs", "finished_runs"]
