"""The HTML report: the scoreboard (paper beside ours, a verdict, a link per cell), further
measurements apart, failures kept until re-run, every run's settings, notebooks rendered."""

from __future__ import annotations

import json
import re
import sys

import nbformat
import pytest
from bs4 import BeautifulSoup

from ofl_core.batch.coverage import paper_cell_set, planned_cells
from ofl_core.batch.gaps import load_gaps
from ofl_core.batch.report import (
    RESULTS_DIR,
    _references,
    build_report,
    failed_runs,
    finished_runs,
    shipped_runs,
)
from ofl_core.batch.scale import current_names, run_scale
from ofl_core.batch.scoreboard import verdict
from ofl_core.batch.tasks import NOTEBOOK_DIR, Task, TaskResult, effective_parameters, load_grid
from ofl_core.results import paper_results


def _rec(method: str, last: float, seed: int = 1, table: str = "T1", alpha: float = 0.1,
         setting: str = "") -> dict:
    return {"experiment": "main_tables", "paper": "dense", "table": table, "dataset": "fmnist",
            "partition": "dirichlet", "alpha": alpha, "num_clients": 5, "seed": seed,
            "method": method, "preset": "paper", "last_acc": last, "best_acc": last + 1,
            "ensemble_acc": 50.0, "wall_time_s": 1.0, "config_hash": "h", "version": "0",
            "setting": setting, "data_source": "fmnist"}


def _run(out, run_id: str, parameters: dict, records: list[dict], effective: dict) -> None:
    d = out / "runs" / "main_tables"
    d.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("hi")]),
                   d / f"{run_id}.ipynb")
    (d / f"{run_id}.json").write_text(json.dumps({
        "status": "done", "notebook": "main_tables", "run_id": run_id, "parameters": parameters,
        "effective_parameters": effective, "seconds": 3.0, "records": records,
        "machine": {"host": "h", "cores": 2, "threads": "1", "gpus": ""}}))


def _shipped(tmp_path, records: list[dict]) -> None:
    """``records`` as a shipped paper-scale run (FMNIST, α 0.1 and 0.5) under tmp/results."""
    shipped = tmp_path / "results" / "main_tables"
    shipped.mkdir(parents=True)
    full = [effective_parameters(t) for t in load_grid(NOTEBOOK_DIR / "grids" / "full")
            if t.notebook == "main_tables" and t.parameters.get("dataset") == "fmnist"]
    (shipped / "zzz.json").write_text(json.dumps({
        "status": "done", "notebook": "main_tables", "run_id": "zzz", "parameters": {},
        "effective_parameters": {**full[0], "alphas": [0.1, 0.5]}, "seconds": 9000.0,
        "records": records}))


@pytest.mark.parametrize("ours, paper, std, comparable, expected", [
    (42.0, 41.69, None, True, "reproduced"), (43.6, 41.69, None, True, "reproduced"),
    (44.0, 41.69, None, True, "above"), (30.0, 41.69, None, True, "below"),
    (30.0, 40.0, 13.0, True, "reproduced"), (41.69, 41.69, None, False, "not comparable"),
])
def test_verdict(ours, paper, std, comparable, expected):
    assert verdict(ours, paper, std, comparable) == expected


def test_scale_is_paper_only_where_every_setting_agrees_with_a_full_grid_task():
    full = [effective_parameters(t) for t in load_grid(NOTEBOOK_DIR / "grids" / "full")
            if t.notebook == "main_tables"]
    first = full[0]
    nb = "main_tables"
    assert run_scale(first, full, notebook=nb).paper
    part = {**first, "alphas": [0.1], "seeds": [7], "device": "cpu", "data_root": "/d"}
    assert run_scale(part, full, notebook=nb).paper  # part of the lists, other seeds, elsewhere
    # presets picked per method run fewer presets, at the same sizes
    assert run_scale({**first, "method_presets": {"dense": ["paper"]}}, full, notebook=nb).paper
    assert run_scale({**first, "alphas": []}, full, notebook=nb).paper  # none of a list: runs less
    assert not run_scale({**first, "alphas": [0.2]}, full, notebook=nb).paper
    fewer = {**first, "local_epochs": 20}
    s = run_scale(fewer, full, notebook=nb)
    assert not s.paper and "local_epochs=20 (paper 200)" in s.reason
    quick = effective_parameters(Task("main_tables"))
    s = run_scale(quick, full, quick=True, notebook=nb)
    assert not s.paper and s.short == "quick" and "fmnist_embedded" in s.reason


def test_report_scoreboard_structure(tmp_path):
    full = [effective_parameters(t) for t in load_grid(NOTEBOOK_DIR / "grids" / "full")
            if t.notebook == "main_tables" and t.parameters.get("dataset") == "fmnist"]
    paper_scale = {**full[0], "alphas": [0.1]}
    _run(tmp_path, "aaa", {"alphas": [0.1]}, [_rec("fedavg", 41.0, 1), _rec("fedavg", 42.0, 2),
                                               _rec("dense", 30.0), _rec("ensemble", 75.0)],
         paper_scale)
    quick = effective_parameters(Task("main_tables"))
    _run(tmp_path, "bbb", {}, [_rec("fedavg", 20.0), _rec("ensemble", 55.0),
                               _rec("coboosting", 44.0),
                               _rec("dense", 11.0, table="Fig3", setting="local_epochs=1")],
         quick)
    (tmp_path / "runs" / "main_tables" / "ccc.failed.ipynb").write_text(
        nbformat.writes(nbformat.v4.new_notebook()))
    earlier = TaskResult(Task("main_tables", {"local_epochs": 3}), "ccc", "failed",
                         error="cell 4: ValueError: <boom>", detail="Traceback\nValueError: <boom>")
    index = build_report(tmp_path, [earlier], results=None)
    soup = BeautifulSoup(index.read_text(), "html.parser")

    # the scoreboard comes first, DENSE Table 1 in it, in the paper's layout
    first_h2 = soup.find("h2")
    assert first_h2["id"] == "scoreboard"
    board = soup.find(id="dense-T1").find_next("table")
    assert [th.text for th in board.find("tr").find_all("th")] == ["method", "FMNIST α=0.1"]
    rows = {tr.find("th").text: tr.find("td") for tr in board.find_all("tr")[1:]}
    assert list(rows) == ["fedavg", "feddf", "fed-dafl", "fed-adi", "dense"]  # paper's rows
    fedavg = rows["fedavg"]
    assert "paper 41.69" in fedavg.text
    entries = fedavg.find_all(class_="ours")
    assert len(entries) == 2
    assert "v-reproduced" in entries[0]["class"] and "41.50 ± 0.71" in entries[0].text
    assert "n=2" in entries[0].text and "paper" in entries[0].text
    assert "v-not-comparable" in entries[1]["class"] and "quick" in entries[1].text
    assert "v-below" in rows["dense"].find(class_="ours")["class"]
    assert rows["feddf"].find(class_="notrun")
    for td in board.find_all("td"):  # every cell of a paper table has the paper's number
        assert td.text.strip() == "" or "paper " in td.text
    link = entries[0].find("a")["href"]
    assert link == "#run-aaa" and soup.find(id="run-aaa")
    assert soup.find(id="run-aaa").find("a")["href"] == "main_tables/aaa.html"
    assert (index.parent / "main_tables" / "aaa.html").is_file()
    assert "paper scale" in soup.find(id="run-aaa").text
    assert "reduced scale" in soup.find(id="run-bbb").text
    # records that are no paper cell go to "further measurements", not into the tables
    further = soup.find(id="further").find_next("table")
    assert "ensemble" in further.text and "Fig3" in further.text
    assert "ensemble" not in board.text
    extras = board.find_next("table")  # ...but beside the table, as "also on these clients"
    assert "extras" in extras["class"] and "ensemble" in extras.text and "55.00" in extras.text
    assert "coboosting" in extras.text and "44.00" in extras.text  # beside DENSE's rows
    # a paper-scale and a quick record (other clients) are two rows, never one mean
    ens = [tr.text for tr in extras.find_all("tr") if "ensemble" in tr.text]
    assert len(ens) == 2 and "65.00" not in extras.text
    assert any("75.00" in t and "paper" in t for t in ens)
    assert any("55.00" in t and "quick" in t for t in ens)
    # the method taxonomy: what each method needs and what a client uploads
    methods = soup.find(id="methods").find_next("table")
    assert "taxonomy" in methods["class"] and "CVAE decoder + label counts" in methods.text
    assert [tr.find("td").text for tr in methods.find_all("tr")[1:]][-4:] == [
        "coboosting", "intactofl", "fedcvae-ens", "fedcvae-kd"]
    # the summary counts cells, and the failure is listed with its tail and its notebook
    summary = soup.find(class_="summary").text
    assert ("2 run at paper scale (1 reproduced, 0 above, 1 below; 0 of these 1 gaps explained)"
            in " ".join(summary.split()))
    assert "not explained yet" in rows["dense"].find(class_="why").text
    assert not entries[0].find(class_="why")  # a reproduced entry needs no explanation
    fail = soup.find(id="fail-ccc")
    assert "ValueError: <boom>" in fail.text and fail.find("pre")
    assert fail.find("a")["href"] == "failed/main_tables/ccc.html"


def test_shipped_results_are_on_the_scoreboard(tmp_path):
    _shipped(tmp_path, [_rec("dense", 49.0)])
    out = tmp_path / "out"
    soup = BeautifulSoup(build_report(out, results=tmp_path / "results").read_text(),
                         "html.parser")
    cell = soup.find(id="dense-T1").find_next("table").find_all("tr")[-1]
    assert "v-reproduced" in cell.find(class_="ours")["class"]
    assert "shipped: results/main_tables/zzz.json" in soup.find(id="run-zzz").text


def test_failures_stay_until_the_task_is_rerun(tmp_path):
    from ofl_core.batch.tasks import record_outcome

    t = Task("main_tables", {"local_epochs": 3})
    record_outcome(tmp_path, TaskResult(t, "r1", "failed", error="boom"))
    assert [f["run_id"] for f in failed_runs(tmp_path)] == ["r1"]  # a later batch still sees it
    _run(tmp_path, "r1", t.parameters, [], {})
    record_outcome(tmp_path, TaskResult(t, "r1", "done"))
    assert failed_runs(tmp_path) == [] and [r["run_id"] for r in finished_runs(tmp_path)] == ["r1"]


def test_report_lists_an_unreadable_notebook_and_escapes_names(tmp_path):
    _run(tmp_path, "r2", {}, [], {})
    (tmp_path / "runs" / "main_tables" / "r2.ipynb").write_text("{not json")
    fig = tmp_path / "figures" / "main_tables" / "<svg onload=x>.png"
    fig.parent.mkdir(parents=True)
    fig.write_bytes(b"")
    text = build_report(tmp_path).read_text()
    assert "could not be read" in text and "<svg onload" not in text


def test_a_copied_report_shows_its_figures_and_loads_nothing_from_the_network(tmp_path):
    """The figures are copied into report/figures (a report folder copied alone still shows
    them) and no page of the report, the per-run pages included, loads a script or a style
    sheet from a URL (MathJax and require.js from a CDN: blank or slow offline)."""
    import shutil

    _run(tmp_path, "r3", {}, [_rec("fedavg", 20.0)], effective_parameters(Task("main_tables")))
    nb = tmp_path / "runs" / "main_tables" / "r3.ipynb"
    nb.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("a formula $x^2$")])))
    fig = tmp_path / "figures" / "main_tables" / "sub" / "paper_vs_ours.png"
    fig.parent.mkdir(parents=True)
    fig.write_bytes(b"\x89PNG\r\n\x1a\n")
    build_report(tmp_path, results=None)
    copy = tmp_path / "elsewhere" / "report"
    shutil.copytree(tmp_path / "report", copy)
    pages = sorted(copy.rglob("*.html"))
    assert len(pages) >= 2  # the index and the run's page
    srcs = []
    for page in pages:
        soup = BeautifulSoup(page.read_text(), "html.parser")
        srcs += [(page, t.get("src") or t.get("href")) for t in soup.find_all(["script", "link",
                                                                              "img"])]
        for img in soup.find_all("img"):
            assert (page.parent / img["src"]).is_file(), img["src"]
    assert not [s for s in srcs if s[1] and re.match(r"(https?:)?//", s[1])], srcs
    index = BeautifulSoup((copy / "index.html").read_text(), "html.parser")
    assert [i["src"] for i in index.find_all("img")] == [
        "figures/main_tables/sub/paper_vs_ours.png"]


def test_the_scoreboard_exports_as_csv_and_json_that_match_the_html(tmp_path):
    """report/scoreboard.csv and .json: one row per cell × preset × scale, the same rows in
    both files (the CSV read back equals the JSON), and the numbers the HTML shows."""
    import pandas as pd

    from ofl_core.batch.scoreboard import EXPORT_COLUMNS

    _shipped(tmp_path, [_rec("fedavg", 41.0, 1), _rec("fedavg", 42.0, 2),
                        {**_rec("fedavg", 30.0), "preset": "authors_code"},
                        _rec("dense", 85.0, alpha=0.5)])
    _run(tmp_path / "out", "q1", {}, [_rec("fedavg", 20.0)],
         effective_parameters(Task("main_tables")))
    index = build_report(tmp_path / "out", results=tmp_path / "results")
    soup = BeautifulSoup(index.read_text(), "html.parser")
    assert {a["href"] for a in soup.select("p.export a")} == {"scoreboard.csv", "scoreboard.json"}
    rows = json.loads((index.parent / "scoreboard.json").read_text())
    csv = pd.read_csv(index.parent / "scoreboard.csv", keep_default_na=False)
    assert list(csv.columns) == list(EXPORT_COLUMNS) and len(csv) == len(rows) == 4
    back = [{k: (None if v == "" and rows[i][k] is None else v) for k, v in r.items()}
            for i, r in enumerate(csv.to_dict("records"))]
    for mine, theirs in zip(back, rows, strict=True):
        for k in EXPORT_COLUMNS:
            want = theirs[k]
            got = mine[k]
            if isinstance(want, float):
                assert float(got) == pytest.approx(want), k
            elif isinstance(want, bool):
                assert str(got) == str(want), k
            else:
                assert got == want or str(got) == str(want), k
    by = {(r["method"], r["preset"], r["scale"], r["alpha"]): r for r in rows}
    fedavg = by[("fedavg", "paper", "paper", "0.1")]
    assert fedavg["paper_acc"] == 41.69 and fedavg["ours_last"] == 41.5 and fedavg["n_seeds"] == 2
    assert fedavg["gap"] == pytest.approx(41.5 - 41.69) and fedavg["verdict"] == "reproduced"
    assert fedavg["run_ids"] == "zzz" and fedavg["paper_scale"] is True
    assert by[("fedavg", "paper", "quick", "0.1")]["verdict"] == "not comparable"
    assert by[("fedavg", "authors_code", "paper", "0.1")]["verdict"] == "below"
    html = soup.find(id="dense-T1").find_next("table").text
    for r in rows:  # every exported number is on the page
        assert f"{r['ours_last']:.2f}" in html
    # the verdict line per paper, at the top; the gap and a single seed flagged in the cell
    lines = [li.text for li in soup.select("ul.verdicts li")]
    assert lines[0].startswith("DENSE — Table 1: 2 of 2 judged cells reproduced under the "
                               "paper preset; 90 cells in all")
    assert "its own method" not in lines[0]
    assert "FedCVAE: no cell run at paper scale yet" in lines
    assert "(-0.19)" in html and "(-0.94)" in html and "1 seed" in html


def test_borderline_entries_and_a_paper_whose_method_never_ran(tmp_path):
    """A gap within 0.5 points of the threshold is marked borderline; a paper whose own
    method has no paper-scale record says so in its verdict line."""
    _shipped(tmp_path, [_rec("fedavg", 41.69 - 2.3)])
    index = build_report(tmp_path / "out", results=tmp_path / "results")
    soup = BeautifulSoup(index.read_text(), "html.parser")
    cell = soup.find(id="dense-T1").find_next("table").find(class_="ours")
    assert "v-below" in cell["class"] and cell.find(class_="borderline")
    line = soup.select("ul.verdicts li")[0].text
    assert "0 of 1 judged cells" in line and "its own method (dense) not run at paper scale" \
        in line


def test_a_runs_cost_counts_its_servers_and_its_age_in_commits(tmp_path):
    """A run whose servers took longer than its wall time (resumed from checkpoints) shows
    the servers' total; a run made at an earlier commit says how many commits before this
    checkout (where git can tell)."""
    import subprocess

    from ofl_core.project import project_dir

    prev = subprocess.run(["git", "-C", str(project_dir()), "rev-parse", "--short", "HEAD~1"],
                          capture_output=True, text=True)
    _run(tmp_path, "r4", {}, [{**_rec("fedavg", 20.0), "wall_time_s": 700.0},
                              {**_rec("dense", 11.0), "wall_time_s": 900.0}],
         effective_parameters(Task("main_tables")))
    side = tmp_path / "runs" / "main_tables" / "r4.json"
    run = json.loads(side.read_text())
    if prev.returncode == 0:
        run["code_version"] = f"ofl_core 0.1.0, git {prev.stdout.strip()}"
    side.write_text(json.dumps(run))
    soup = BeautifulSoup(build_report(tmp_path, results=None).read_text(), "html.parser")
    row = soup.find(id="run-r4").text
    assert "3 s" in row and "servers 1600 s in all" in row
    if prev.returncode == 0:
        assert "1 commit before this checkout" in row


def test_a_gap_shows_its_explanation_for_the_presets_it_names(tmp_path):
    _shipped(tmp_path, [_rec("fedavg", 45.5), {**_rec("fedavg", 30.0), "preset": "authors_code"},
                        _rec("dense", 30.0), _rec("dense", 85.0, alpha=0.5)])
    (tmp_path / "results" / "gaps.yaml").write_text(
        "- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1,\n"
        "   presets: [paper], why: 'Eq. 2 weights by n_k <b>',\n"
        "   see: [paper-gaps.md#dense-t1-fedavg, authors-code.md#dense-coupled-check]}\n"
        "- {paper: dense, table: T1, dataset: fmnist, method: dense, alpha: 0.5, why: other}\n")
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    rows = {tr.find("th").text: tr.find_all("td")
            for tr in soup.find(id="dense-T1").find_next("table").find_all("tr")[1:]}
    paper, code = rows["fedavg"][0].find_all(class_="ours")
    assert "v-above" in paper["class"] and "v-below" in code["class"]
    why = paper.find(class_="why")
    assert why.name == "details" and why.find("summary").text == "why?"
    assert "Eq. 2 weights by n_k <b>" in why.text
    links = [(a["href"], a.text) for a in why.find_all("a")]  # each section, by its anchor
    assert [h.rsplit("/", 3)[-3:] for h, _ in links] == [
        ["docs", "decisions", "paper-gaps.md#dense-t1-fedavg"],
        ["docs", "decisions", "authors-code.md#dense-coupled-check"]]
    assert links[0][1] == "DENSE Table 1: FedAvg, FedOneShot and the ensemble"
    report_dir = tmp_path / "out" / "report"
    for href, _ in links:  # relative to the report's folder, to the file that holds the anchor
        doc, anchor = href.split("#")
        assert f'<a id="{anchor}"></a>' in (report_dir / doc).resolve().read_text()
    assert "not explained yet" in code.find(class_="why").text  # the entry names `paper` only
    assert "not explained yet" in rows["dense"][0].find(class_="why").text  # other α
    assert "v-reproduced" in rows["dense"][1].find(class_="ours")["class"]
    assert not rows["dense"][1].find(class_="why")
    summary = " ".join(soup.find(class_="summary").text.split())
    assert "3 run at paper scale (1 reproduced, 1 above, 1 below; 1 of these 2 gaps explained)" \
        in summary
    assert "authors_code" not in summary  # the authors_code entry is below too
    # the α = 0.5 entry explains a cell that reproduces: a stale entry, listed as a problem
    stale = [li.text for li in soup.find(id="problems").find_next("ul").find_all("li")]
    assert len(stale) == 1 and "gaps.yaml" in stale[0], stale
    assert "entry 2 (dense T1 fmnist dense α=0.5)" in stale[0]


def test_the_summary_counts_gaps_that_another_reading_reproduces(tmp_path):
    _shipped(tmp_path, [_rec("fedavg", 45.5), {**_rec("fedavg", 41.0), "preset": "authors_code"},
                        _rec("dense", 30.0)])
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    summary = " ".join(soup.find(class_="summary").text.split())
    assert ("2 run at paper scale (0 reproduced, 1 above, 1 below; 0 of these 2 gaps explained, "
            "1 reproduced by another reading (authors_code or a named one))") in summary, summary


@pytest.mark.parametrize("text, message", [
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.7, why: x}",
     "names no cell of the papers' tables"),
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1}", "missing why"),
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1, why: x, a: 1}",
     "unknown key(s) a"),
    ("paper: dense", "must be a YAML list"),
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1, why: x,\n"
     "   see: paper-gaps.md#no-such-section}", "see 'paper-gaps.md#no-such-section' names no"
     " section"),
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1, why: x,\n"
     "   see: [no-such-file.md#dense-t1-fedavg]}", "there is no no-such-file.md"),
    ("- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1, why: x,\n"
     "   see: 'decisions: Paper-scale FMNIST records'}", "is not '<file>.md#<anchor>'"),
    ("- [1, 2]", "entry 1 must be a mapping"),
    ("- {paper: [", "not valid YAML"),
])
def test_bad_gap_files_get_a_clear_error(tmp_path, text, message):
    f = tmp_path / "gaps.yaml"
    f.write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)):
        load_gaps(f)


def test_the_shipped_gap_explanations_name_real_cells_and_sections():
    gaps = load_gaps(RESULTS_DIR / "gaps.yaml")  # also checks every anchor exists
    assert gaps and all(g.why and g.see for g in gaps)


@pytest.fixture(scope="module")
def shipped_report(tmp_path_factory) -> BeautifulSoup:
    """The report built from this checkout's results/ alone (built once for its tests)."""
    out = tmp_path_factory.mktemp("shipped")
    return BeautifulSoup(build_report(out, results=RESULTS_DIR).read_text(), "html.parser")


def test_every_shipped_gap_explanation_is_shown_on_the_report(shipped_report):
    """Each entry of results/gaps.yaml explains a cell the report built from this checkout
    shows above or below the paper: none is left over from records that since reproduce."""
    head = shipped_report.find(id="problems")
    stale = [li.text for li in head.find_next("ul").find_all("li")] if head else []
    assert not [s for s in stale if s.startswith("gaps.yaml")], stale


def test_a_gap_anchor_is_checked_against_the_given_docs(tmp_path):
    docs = tmp_path / "decisions"
    docs.mkdir()
    (docs / "t.md").write_text('# T\n\n<a id="here"></a>\n\n## Here\n\n`<a id="quoted"></a>`\n')
    f = tmp_path / "gaps.yaml"
    entry = "- {paper: dense, table: T1, dataset: fmnist, method: fedavg, alpha: 0.1, why: x, "
    f.write_text(entry + "see: t.md#here}\n")
    assert load_gaps(f, docs=docs)[0].see == ("t.md#here",)
    f.write_text(entry + "see: t.md#quoted}\n")  # an anchor inside a code span is no section
    with pytest.raises(ValueError, match="t.md has the anchors here"):
        load_gaps(f, docs=docs)
    assert load_gaps(f, docs=None)[0].see == ("t.md#quoted",)  # docs=None: not checked


@pytest.mark.parametrize("again", [40.0, 36.0])
def test_a_seed_in_two_runs_counts_once(again):
    """The same cell, preset, scale and seed in two runs (a grid's task overlap, a record made
    again, the same or, on another CPU's arithmetic, other clients) is one measurement, the
    mean of its records: n counts seeds, the mean and std are over distinct seeds, and both
    runs are linked."""
    import pandas as pd

    from ofl_core.batch.scoreboard import entries, split

    rows = []
    for run_id, seed, last in (("a", 1, 40.0), ("a", 2, 44.0), ("b", 1, again), ("b", 3, 48.0),
                               ("c", 1, again)):  # c: b's computation again, counted once
        rows.append({**_rec("fedavg", last, seed), "run_id": run_id, "notebook": "main_tables",
                     "href": f"{run_id}.html", "paper_scale": True, "scale_reason": "",
                     "scale": "paper", "precision": "", "akey": "0.1"})
    matched, _ = split(pd.DataFrame(rows))
    (e,) = entries(matched)["entry"]
    one = (40.0 + again) / 2
    assert e.n_seeds == 3 and e.last == pytest.approx((one + 44.0 + 48.0) / 3)
    assert e.best == pytest.approx(e.last + 1)
    assert e.std == pytest.approx(pd.Series([one, 44.0, 48.0]).std())  # seed 1 once
    assert [run for run, _ in e.links] == ["a", "b", "c"]


def test_every_entry_says_how_to_remake_it_and_the_grid_file_holds_that_task(tmp_path):
    """Per entry and per run: a one-task grid file beside the report with the run's exact
    parameters, the command that runs it, the shipped grid holding the task, the true compute
    (the servers' time when larger than the wall time) and the machine."""
    params = {"dataset": "fmnist", "alphas": [0.1], "methods": ["fedavg"], "seeds": [1]}
    grids = tmp_path / "results" / "grids"
    grids.mkdir(parents=True)
    (grids / "mine.yaml").write_text("main_tables:\n  - grid:\n      alphas: [[0.1], [0.5]]\n"
                                     "    dataset: fmnist\n    methods: [fedavg]\n    seeds: [1]\n")
    # one computation, labelled for two tables (same config hash, seed and preset): 50 s once
    recs = [{**_rec("fedavg", 41.0), "wall_time_s": 50.0},
            {**_rec("fedavg", 41.0, table="T3"), "wall_time_s": 50.0}]
    _run(tmp_path / "out", "r9", params, recs, {**effective_parameters(Task("main_tables")),
                                                 **params})
    index = build_report(tmp_path / "out", results=tmp_path / "results")
    grid_file = index.parent / "reproduce" / "r9.yaml"
    (task,) = load_grid(grid_file)
    assert task == Task("main_tables", params)
    soup = BeautifulSoup(index.read_text(), "html.parser")
    repro = soup.select("div.ours details.repro")[0].text
    assert str(grid_file.resolve()) in repro and "--grid" in repro
    assert "results/grids/mine.yaml" in repro
    assert "3 s wall" in repro and "servers' own compute 50 s" in repro
    assert "h, 2 cores, 1 thread(s), no GPU" in repro
    row = soup.find(id="run-r9").text
    assert "main_tables: dataset fmnist · alphas 0.1 · methods fedavg · seeds 1" in row
    assert "results/grids/mine.yaml" in row


def test_the_run_page_says_what_ran_and_links_back(tmp_path):
    params = {"alphas": [0.5], "seeds": [1, 2]}
    recs = [_rec("fedavg", 41.0, alpha=0.5), _rec("fedavg", 40.0, 2, alpha=0.5)]
    _run(tmp_path, "r8", params, recs, {**effective_parameters(Task("main_tables")), **params})
    build_report(tmp_path, results=None)
    page = BeautifulSoup((tmp_path / "report" / "main_tables" / "r8.html").read_text(),
                         "html.parser")
    assert page.title.text == "main_tables: alphas 0.5 · seeds 1, 2"
    links = {a["href"] for a in page.header.find_all("a")}
    assert links == {"../index.html#scoreboard", "../index.html#run-r8"}
    assert (tmp_path / "report" / "main_tables" / "../index.html").resolve().is_file()
    text = page.header.text
    assert "seeds 1, 2" in text and "3 s wall" in text and "alphas" in text


def test_the_scoreboard_can_be_filtered_without_any_external_script(tmp_path):
    """The filter bar's controls, and the data they filter on: each board's paper, each
    row's method, each entry's scale and verdict (a small inline script, no URL)."""
    _shipped(tmp_path, [_rec("fedavg", 41.0), _rec("dense", 10.0)])
    _run(tmp_path / "out", "q2", {}, [_rec("fedavg", 20.0)],
         effective_parameters(Task("main_tables")))
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    form = soup.find(id="filters")
    assert {c["id"] for c in form.find_all(["input", "select"])} == {
        "f-paper-scale", "f-paper", "f-method", "f-verdict"}
    assert [o.get("value", o.text) for o in form.find(id="f-paper").find_all("option")] == [
        "", "dense"]
    assert all(not s.get("src") for s in soup.find_all("script"))
    entries = soup.select("div.ours")
    assert sorted((e["data-scale"], e["data-verdict"]) for e in entries) == [
        ("paper", "below"), ("paper", "reproduced"), ("quick", "not-comparable")]
    assert {b["data-paper"] for b in soup.select("div.board")} == {"dense"}
    assert {"FedAvg", "DENSE"} <= {tr["data-method"] for tr in soup.select("tr[data-method]")} \
        or {"fedavg", "dense"} <= {tr["data-method"] for tr in soup.select("tr[data-method]")}


def test_each_judged_table_has_a_paper_vs_ours_figure(tmp_path):
    _shipped(tmp_path, [_rec("fedavg", 41.0), _rec("dense", 60.0), _rec("dense", 80.0,
                                                                          alpha=0.5)])
    index = build_report(tmp_path / "out", results=tmp_path / "results")
    fig = index.parent / "figures" / "scoreboard" / "dense-T1.png"
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    soup = BeautifulSoup(index.read_text(), "html.parser")
    assert soup.find(id="dense-T1").find("a")["href"] == "figures/scoreboard/dense-T1.png"
    assert "figures/scoreboard/dense-T1.png" in [i["src"] for i in soup.find_all("img")]


def test_the_filters_hide_what_they_should_in_a_real_browser(tmp_path):
    """The filter script run by headless Chromium (where installed): a link's query selects
    one paper and one verdict; only those entries stay visible."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no Chromium here (apt-get install chromium)")
    _shipped(tmp_path, [_rec("fedavg", 41.0), _rec("dense", 10.0), _rec("fedavg", 10.0,
                                                                          alpha=0.5)])
    index = build_report(tmp_path / "out", results=tmp_path / "results")
    dom = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", f"file://{index}?paper=dense&verdict=below"],
                         capture_output=True, text=True, timeout=120).stdout
    soup = BeautifulSoup(dom, "html.parser")
    shown = [e for e in soup.select("div.ours") if not e.find_parent(class_="hidden")
             and "hidden" not in e.get("class", [])]
    assert len(shown) == 2 and {e["data-verdict"] for e in shown} == {"below"}
    assert soup.find(id="f-count").text == "2 entries shown"


def test_a_parameter_added_to_the_notebook_later_keeps_a_shipped_runs_scale(tmp_path):
    """A run made before a notebook parameter existed ran at that parameter's default: it stays
    at paper scale (the shipped records would otherwise all turn "reduced")."""
    _shipped(tmp_path, [_rec("dense", 49.0)])
    js = tmp_path / "results" / "main_tables" / "zzz.json"
    run = json.loads(js.read_text())
    assert "local_options" in run["effective_parameters"]
    del run["effective_parameters"]["local_options"]
    js.write_text(json.dumps(run))
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    assert soup.select("div.ours")[0]["data-scale"] == "paper"


def test_the_shipped_grids_runs_are_at_paper_scale_on_the_report(shipped_report):
    """Every run shipped in results/ that a task of results/grids/ made (by its parameters) is
    judged at paper scale by the report built from this checkout."""
    grids = {json.dumps([t.notebook, t.parameters], sort_keys=True)
             for f in sorted((RESULTS_DIR / "grids").glob("*.yaml")) for t in load_grid(f)}
    shipped = [json.loads(p.read_text()) for p in sorted(RESULTS_DIR.glob("main_tables/*.json"))]
    # a run made when the server sizes were six parameters is read under today's names
    made = [r["run_id"] for r in shipped
            if json.dumps([r["notebook"], current_names(r["parameters"])], sort_keys=True) in grids]
    assert len(made) >= 10, f"only {made} of the shipped runs match a task of results/grids"
    scales = {rid: shipped_report.find(id=f"run-{rid}").find_all("td")[2].text for rid in made}
    assert all(s.startswith("paper") for s in scales.values()), scales


def test_the_shipped_grids_cover_every_fmnist_cell_at_paper_scale():
    """The grids in results/grids/ plan every FashionMNIST cell of the papers (the datasets
    this project's CPU runs can load), and every one of their tasks is at paper scale against
    notebooks/grids/full/: run to the end, they give each FMNIST cell a verdict."""
    every = paper_cell_set()
    full = _references()  # the report's own paper-scale references
    planned: set = set()
    for f in sorted((RESULTS_DIR / "grids").glob("*.yaml")):
        for t in load_grid(f):
            eff = effective_parameters(t)
            scale = run_scale(eff, full[t.notebook], notebook=t.notebook)
            assert scale.paper, (f.name, t.parameters, scale.reason)
            planned |= planned_cells(t.notebook, eff, every)
    fmnist = {c for c in every if c[2] == "fmnist"}
    assert fmnist, "paper_results.csv has FashionMNIST cells"
    assert not fmnist - planned, sorted(fmnist - planned)[:10]


def test_the_full_grids_plan_every_cell_of_the_papers():
    """notebooks/grids/full/ (``run_all.py --full``) plans each of the papers' cells, every
    dataset included: the README's "covers all 867 cells"."""
    every = paper_cell_set()
    planned: set = set()
    for t in load_grid(NOTEBOOK_DIR / "grids" / "full"):
        planned |= planned_cells(t.notebook, effective_parameters(t), every)
    assert len(every) == 867
    assert not every - planned, sorted(every - planned)[:10]


def test_a_report_without_nbconvert_still_reports_the_records(tmp_path, monkeypatch):
    """Where nbconvert (the notebook extra) is missing, as on a bare GPU node, each run's page
    is a listed problem and the scoreboard is written all the same."""
    monkeypatch.setitem(sys.modules, "nbconvert", None)  # import nbconvert → ImportError
    _run(tmp_path, "r5", {}, [_rec("fedavg", 20.0)], effective_parameters(Task("main_tables")))
    index = build_report(tmp_path, results=None)
    text = index.read_text()
    assert "nbconvert is not installed" in text and "r5" in text


def test_the_summary_counts_each_dataset_and_its_one_seed_cells(tmp_path):
    _shipped(tmp_path, [_rec("fedavg", 45.5, seed=1), _rec("fedavg", 44.5, seed=2),
                        _rec("dense", 30.0)])
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    lines = [" ".join(li.text.split()) for li in soup.find(class_="datasets").find_all("li")]
    fmnist = int((paper_results()["dataset"] == "fmnist").sum())
    assert lines == [f"FMNIST: 2 of {fmnist} cells at paper scale (0 reproduced, 1 above, "
                     f"1 below; 0 of these 2 gaps explained; 1 on one seed), "
                     f"{fmnist - 2} not run"], lines


def test_the_results_readme_lists_each_shipped_run_once_and_nothing_else():
    """results/README.md holds one row per shipped record (its task, commit, machine and cost):
    a record without a row has no provenance on file, a row without its record is stale (a
    replaced run's row left behind)."""
    rows = re.findall(r"^\| `([\w-]+/\w+\.json)` \|", (RESULTS_DIR / "README.md").read_text(),
                      flags=re.M)
    shipped = sorted(f"{r['notebook']}/{r['run_id']}.json" for r in shipped_runs(RESULTS_DIR))
    assert shipped, "the project ships paper-scale records"
    assert len(rows) == len(set(rows)), sorted({r for r in rows if rows.count(r) > 1})
    assert sorted(set(shipped) - set(rows)) == [], "records without a README row"
    assert sorted(set(rows) - set(shipped)) == [], "README rows without their record"


def test_a_shipped_runs_compute_from_its_checkpoints_is_its_cost(tmp_path):
    """A shipped run whose records keep only its last resumed part shows the servers' compute
    that results/compute.yaml names for it; a malformed compute file is listed, not believed."""
    _shipped(tmp_path, [_rec("dense", 49.0)])
    compute = tmp_path / "results" / "compute.yaml"
    compute.write_text("zzz: {server_seconds: 12345, source: checkpoints}\n")
    soup = BeautifulSoup(build_report(tmp_path / "out", results=tmp_path / "results")
                         .read_text(), "html.parser")
    assert "servers 12345 s in all" in soup.find(id="run-zzz").text
    compute.write_text("zzz: {server_seconds: -1}\n")
    soup = BeautifulSoup(build_report(tmp_path / "out2", results=tmp_path / "results")
                         .read_text(), "html.parser")
    assert "servers 12345" not in soup.find(id="run-zzz").text
    assert "compute.yaml" in soup.find(id="problems").find_next("ul").text
