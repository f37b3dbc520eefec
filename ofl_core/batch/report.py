"""The HTML report ``<out>/report/index.html``: paper-vs-ours tables of every finished run,
figures, each executed notebook rendered without inputs, and the failed runs."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..results import compare_with_paper, paper_results, records_frame
from .tasks import TaskResult


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
            try:
                body, _ = exporter.from_filename(r["_ipynb"])
            except Exception as e:  # noqa: BLE001 - one unreadable notebook is a listed failure
                parts.append(f"<p class='fail'>run {html.escape(rid)}: its executed notebook "
                             f"could not be read ({html.escape(str(e)[:200])})</p>")
                continue
            page.write_text(body)
            params = html.escape(json.dumps(r.get("parameters", {})))
            link = html.escape(f"{nb}/{rid}.html", quote=True)
            parts.append(f"<p><a href='{link}'>run {html.escape(rid)}</a> "
                         f"({r.get('seconds', 0):.0f} s) parameters: <code>{params}</code></p>")
        figs = sorted((out / "figures" / nb).rglob("*.png"))
        for f in figs:
            rel = os.path.relpath(f, rep)
            parts.append(f"<figure><img src='{html.escape(rel, quote=True)}'><figcaption>"
                         f"{html.escape(f.name)}"
                         "</figcaption></figure>")
    parts.append("</body></html>")
    index = rep / "index.html"
    tmp = index.with_name(f".index.html.{os.getpid()}.tmp")  # atomic: never a 0-byte report
    try:
        tmp.write_text("\n".join(parts))
        os.replace(tmp, index)
    finally:
        tmp.unlink(missing_ok=True)
    return index
