"""The HTML report: finished runs only, each rendered, with its parameters, and the failures."""

from __future__ import annotations

import json

import nbformat

from ofl_core.batch.report import build_report, finished_runs
from ofl_core.batch.tasks import Task, TaskResult


def test_report_lists_finished_runs_and_failures(tmp_path):
    runs = tmp_path / "runs" / "nb"
    runs.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("hi")]),
                   runs / "r1.ipynb")
    (runs / "r1.json").write_text(json.dumps({
        "status": "done", "notebook": "nb", "run_id": "r1", "parameters": {"a": 1},
        "seconds": 3.0, "records": []}))
    (runs / "r2.json").write_text('{"status": "do')  # half-written: not a finished run
    assert [r["run_id"] for r in finished_runs(tmp_path)] == ["r1"]
    fail = TaskResult(Task("nb", {"a": 2}), "r3", "failed", error="ValueError: <boom>")
    index = build_report(tmp_path, [fail])
    text = index.read_text()
    assert "1 finished runs" in text and "<a href='nb/r1.html'>run r1</a>" in text
    assert "ValueError: &lt;boom&gt;" in text and (index.parent / "nb" / "r1.html").is_file()
