"""The report's "beyond the papers" table: the later methods beside the others on the very same
clients, a second model's accuracy and a deployed model's size from the records' notes."""

from __future__ import annotations

import json

import nbformat
from bs4 import BeautifulSoup

from ofl_core.batch.beyond import beyond_table, later_methods
from ofl_core.batch.report import build_report
from ofl_core.batch.scale import Scale
from ofl_core.batch.tasks import Task, effective_parameters
from ofl_core.registry import METHODS
from ofl_core.results import paper_results


def _rec(method: str, last: float, seed: int = 1, ensemble: float = 70.0, preset: str = "paper",
         notes: dict | None = None) -> dict:
    r = {"experiment": "main_tables", "paper": "dense", "table": "T1", "dataset": "fmnist",
         "partition": "dirichlet", "alpha": 0.5, "num_clients": 5, "seed": seed,
         "method": method, "preset": preset, "last_acc": last, "best_acc": last,
         "ensemble_acc": ensemble, "wall_time_s": 1.0, "config_hash": "h", "version": "0",
         "setting": "", "data_source": "fmnist", "client_code": "c1"}
    return {**r, "notes": notes} if notes else r


def _run(out, run_id: str, records: list[dict], **params) -> None:
    d = out / "runs" / "main_tables"
    d.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), d / f"{run_id}.ipynb")
    (d / f"{run_id}.json").write_text(json.dumps({
        "status": "done", "notebook": "main_tables", "run_id": run_id, "parameters": params,
        "effective_parameters": {**effective_parameters(Task("main_tables")), **params},
        "seconds": 3.0, "records": records}))


def test_the_later_methods_are_those_no_paper_prints() -> None:
    printed = set(paper_results()["method"])
    assert later_methods() and all(m in METHODS and m not in printed for m in later_methods())
    assert "ensemble" not in later_methods()  # a reference, no server work of its own


def test_only_the_clients_a_later_method_used_and_its_notes_reach_the_table(tmp_path) -> None:
    cost = {"params": 5 * 1000 + 50, "params_one_expert": 1000, "flops_per_image": 5 * 9000,
            "flops_one_expert": 9000}
    # two seeds of one setting: DENSE and the later methods on the same clients ...
    _run(tmp_path, "r1", [_rec("dense", 60.0), _rec("coboosting", 64.0),
                          _rec("fedlpa", 50.0, notes={"acc_newton": 50.0, "acc_biased": 40.0}),
                          _rec("intactofl", 71.0, notes=cost)], local_epochs=2)
    _run(tmp_path, "r2", [_rec("dense", 62.0, seed=2, ensemble=72.0),
                          _rec("coboosting", 66.0, seed=2, ensemble=72.0)], local_epochs=2)
    # ... a DENSE run on other clients of the same setting (another ensemble) stays out, and a
    # setting where no later method ran is no column
    _run(tmp_path, "r3", [_rec("dense", 99.0, ensemble=71.5)], local_epochs=2)
    _run(tmp_path, "r4", [_rec("dense", 98.0)], local_epochs=3)
    # a later method on clients no paper-cell record used: in its own client set here, but
    # not "also on these clients" beside DENSE Table 1
    _run(tmp_path, "r5", [_rec("intactofl", 55.0, seed=3, ensemble=60.0)], local_epochs=2)
    index = build_report(tmp_path, results=None)
    soup = BeautifulSoup(index.read_text(), "html.parser")
    table = soup.find(id="beyond").find_next("table")
    head = [th.text for th in table.find("tr").find_all("th")]
    assert len(head) == 2 and "2 local ep." in head[1] and "α=0.5" in head[1]
    rows = {tr.find("th").text: tr.find("td").text for tr in table.find_all("tr")[1:]}
    # not 99: other clients; the seeds are named, as they are not all of the column's (1-3)
    assert rows["dense"] == "61.00 ± 1.41 (n=2: seeds 1, 2)"
    assert rows["coboosting"] == "65.00 ± 1.41 (n=2: seeds 1, 2)"
    # every client set a later method used: seeds 1 and 2, and seed 3's (IntactOFL only)
    assert rows["ensemble (the clients' mean logits)"] == "67.33 ± 6.43 (n=3)"
    assert rows["fedlpa"] == "50.00 (n=1: seed 1)"
    assert rows["fedlpa: biased model"] == "40.00 (n=1: seed 1)"
    assert "fedlpa: newton model" not in rows  # the method's own number is not repeated
    order = list(rows)
    assert order.index("dense") < order.index("coboosting")  # the papers' methods first
    assert rows["intactofl"] == "63.00 ± 11.31 (n=2: seeds 1, 3)"
    extras = soup.find(id="dense-T1").find_next("table", class_="extras")
    also = {tr.find("th").text: tr.find("td").text for tr in extras.find_all("tr")[1:]}
    # beside DENSE Table 1 only the clients DENSE used: seed 3's IntactOFL stays out
    assert also["intactofl"].startswith("71.00 (n=1") and also["coboosting"].startswith("65.00")
    costs = soup.find("ul", class_="costs").text
    assert "intactofl" in costs and "5,050 parameters" in costs and "45,000 FLOPs" in costs
    assert soup.find("a", href="#beyond") is not None


def test_no_table_without_a_later_method() -> None:
    assert beyond_table([]) is None


def _prepared(run_id: str, records: list[dict], grid: str | None, **params) -> dict:
    """A run as the report prepares it: its records, effective parameters, scale and the
    shipped grid file that holds its task (None: not a shipped grid's task)."""
    return {"run_id": run_id, "notebook": "main_tables", "href": None, "records": records,
            "effective": {**effective_parameters(Task("main_tables")), **params},
            "scale": Scale(True), "reproduce": {"grid": grid}}


def test_two_shipped_grids_on_the_same_clients_share_a_column() -> None:
    # the paper's methods shipped by one grid file, a later method by another, on the same
    # clients (same setting, seed and ensemble); the older records name no clients' code
    old = {k: v for k, v in _rec("dense", 60.0).items() if k != "client_code"}
    runs = [_prepared("a", [old], "results/grids/t1.yaml", local_epochs=2),
            _prepared("b", [_rec("fedlpa", 50.0)], "results/grids/later.yaml", local_epochs=2),
            # the same setting at quick scale, from no shipped grid: a column of its own
            _prepared("c", [_rec("dense", 30.0), _rec("fedlpa", 20.0)], None, local_epochs=2)]
    runs[2]["scale"] = Scale(False, "server epochs")
    table = beyond_table(runs)
    assert table is not None and len(table.columns) == 2
    shipped = next(i for i, c in enumerate(table.columns) if "t1.yaml" in c)
    assert "results/grids/later.yaml" in table.columns[shipped]
    rows = dict(table.rows)
    assert rows["dense"][shipped] == "60.00 (n=1)" and rows["fedlpa"][shipped] == "50.00 (n=1)"
    assert rows["dense"][1 - shipped] == "30.00 (n=1)"
    assert table.columns[1 - shipped].endswith("· reduced scale, not a shipped grid's task")


def test_an_older_record_joins_only_clients_it_matches() -> None:
    # no clients' code and another clients' ensemble: other clients, not this column's
    other = {k: v for k, v in _rec("dense", 99.0, ensemble=71.5).items() if k != "client_code"}
    runs = [_prepared("a", [other], "results/grids/t1.yaml", local_epochs=2),
            _prepared("b", [_rec("fedlpa", 50.0)], "results/grids/later.yaml", local_epochs=2)]
    rows = dict(beyond_table(runs).rows)
    assert "dense" not in rows and rows["fedlpa"] == ["50.00 (n=1)"]
